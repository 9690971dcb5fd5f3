"""Deletes: one object or a collection, with DeleteOptions (propagation policy,
preconditions) and dry runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import errors
from .codec import decode, dry_run_of, read_body, respond
from .reads import list_items, request_matcher, versioned
from .resources import ResourceType
from .store import now_rfc3339

if TYPE_CHECKING:
    from .server import Target
    from .store import Store


class DeleteHandlers:
    """The ApiHandler's delete verbs."""

    store: Store

    async def _delete_options(self, request: web.Request, target: Target) -> dict[str, Any]:
        raw = await read_body(request)
        options = decode(raw, "application/json") if raw.strip() else {}
        if not isinstance(options, dict):
            raise errors.bad_request("DeleteOptions must be a JSON object")
        propagation = request.query.get("propagationPolicy") or \
            options.get("propagationPolicy") or default_propagation(target.rtype)
        if propagation not in ("Background", "Foreground", "Orphan"):
            raise errors.unsupported_option("DeleteOptions", "propagationPolicy",
                                            f'"{propagation}"', '"Foreground", "Background", '
                                            '"Orphan", "nil"')
        if options.get("orphanDependents") is True:
            propagation = "Orphan"
        return {"propagation": propagation, "preconditions": options.get("preconditions")}

    async def _delete(self, request: web.Request, target: Target) -> web.Response:
        options = await self._delete_options(request, target)
        if target.subresource:
            raise errors.method_not_allowed("DELETE")
        rtype = target.rtype
        if dry_run_of(request):
            obj = self.store.get(rtype, target.namespace, target.name)
        else:
            obj = self.store.delete(rtype, target.namespace, target.name,
                                    options["propagation"], options["preconditions"])
        if self.store.find(rtype, target.namespace, target.name) is not None:
            return respond(versioned(rtype, obj))  # held: finalizers, propagation
        if (rtype.group, rtype.plural) in RETURNS_OBJECT:
            obj = versioned(rtype, obj)
            if rtype.plural == "pods":  # deleted at once: marked as a grace of 0 marks it
                obj["metadata"] = {**obj["metadata"], "deletionGracePeriodSeconds": 0,
                                   "deletionTimestamp": now_rfc3339()}
            return respond(obj)
        return respond({"kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Success", "details": {
                            k: v for k, v in (("name", target.name), ("group", rtype.group),
                                              ("kind", rtype.plural),
                                              ("uid", obj["metadata"]["uid"])) if v}})

    async def _delete_collection(self, request: web.Request, target: Target) -> web.Response:
        options = await self._delete_options(request, target)
        matches = request_matcher(request, target)
        deleted = []
        for obj in self.store.list(target.rtype, target.namespace):
            if matches(obj):
                meta = obj["metadata"]
                deleted.append(versioned(target.rtype, self.store.delete(
                    target.rtype, meta.get("namespace"), meta["name"], options["propagation"])))
        return respond({"kind": target.rtype.list_kind, "apiVersion": target.rtype.api_version,
                        "metadata": {"resourceVersion": str(self.store.rv)},
                        "items": list_items(target.rtype, deleted)})


# Kinds kube-apiserver answers a deletion of with the object itself, not a Status
# (ReturnDeletedObject in each kind's registry, pkg/registry/core/*/storage).
RETURNS_OBJECT = {("", "pods"), ("", "services"), ("", "serviceaccounts"), ("", "namespaces")}


def default_propagation(rtype: ResourceType) -> str:
    """The policy of a deletion that names none: Background. (kube-apiserver orphans a batch/v1
    Job's pods by default, the Job strategy's DefaultGarbageCollectionPolicy kept for old
    clients; here a Job's pods go with it, as local mode's callers expect: a difference listed
    in docs/local-apiserver.md.)"""
    return "Background"
