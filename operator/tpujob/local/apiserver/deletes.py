"""Deletes: one object or a collection, with DeleteOptions (propagation policy,
preconditions) and dry runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import errors
from .codec import decode, dry_run_of, read_body, respond
from .resources import ResourceType

if TYPE_CHECKING:
    from .server import Target
    from .store import Store


class DeleteHandlers:
    """The ApiHandler's delete verbs."""

    store: Store

    def _versioned(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError  # ReadHandlers has it

    def _matcher(self, request: web.Request, target: Target):
        raise NotImplementedError  # ReadHandlers has it

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        raw = await read_body(request)
        options = decode(raw, "application/json") if raw.strip() else {}
        if not isinstance(options, dict):
            raise errors.bad_request("DeleteOptions must be a JSON object")
        propagation = request.query.get("propagationPolicy") or \
            options.get("propagationPolicy") or "Background"
        if propagation not in ("Background", "Foreground", "Orphan"):
            raise errors.bad_request(f'Unsupported value: "{propagation}": supported values: '
                                     '"Foreground", "Background", "Orphan"')
        if options.get("orphanDependents") is True:
            propagation = "Orphan"
        return {"propagation": propagation, "preconditions": options.get("preconditions")}

    async def _delete(self, request: web.Request, target: Target) -> web.Response:
        options = await self._delete_options(request)
        if target.subresource:
            raise errors.method_not_allowed("DELETE")
        if dry_run_of(request):
            obj = self.store.get(target.rtype, target.namespace, target.name)
        else:
            obj = self.store.delete(target.rtype, target.namespace, target.name,
                                    options["propagation"], options["preconditions"])
        return respond(self._versioned(target.rtype, obj))

    async def _delete_collection(self, request: web.Request, target: Target) -> web.Response:
        options = await self._delete_options(request)
        matches = self._matcher(request, target)
        deleted = []
        for obj in self.store.list(target.rtype, target.namespace):
            if matches(obj):
                meta = obj["metadata"]
                deleted.append(self._versioned(target.rtype, self.store.delete(
                    target.rtype, meta.get("namespace"), meta["name"], options["propagation"])))
        return respond({"kind": target.rtype.list_kind, "apiVersion": target.rtype.api_version,
                      "metadata": {"resourceVersion": str(self.store.rv)}, "items": deleted})
