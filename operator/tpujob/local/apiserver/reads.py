"""Reads: get, list (selectors, pages, Tables) and watch, and the OpenAPI documents."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import errors, openapi, table, watch
from .codec import check_accept, is_flag, respond
from .errors import ApiError
from .observe import SEEN
from .resources import ResourceType
from .selectors import (
    matches_fields,
    matches_labels,
    parse_field_selector,
    parse_label_selector,
    unsupported_field,
)

if TYPE_CHECKING:
    from .faults import FaultInjector
    from .resources import Registry
    from .server import Target
    from .store import Store


def versioned(rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as this version of its kind is served."""
    return {**obj, "apiVersion": rtype.api_version}


def request_matcher(request: web.Request, target: Target):
    """The request's label and field selectors (and the target's name) as one predicate."""
    rtype = target.rtype
    try:
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(
            request.query.get("fieldSelector"), rtype.field_selectors,
            lambda key: unsupported_field(rtype.group, rtype.plural, rtype.kind, key))
    except ValueError as err:
        raise errors.bad_request(str(err)) from err
    if target.name is not None:
        fields.append(parse_field_selector(f"metadata.name={target.name}",
                                           target.rtype.field_selectors)[0])

    def matches(obj: dict[str, Any]) -> bool:
        return matches_labels(labels, obj["metadata"].get("labels")) and \
            matches_fields(fields, obj)
    return matches


class ReadHandlers:
    """The ApiHandler's read verbs."""

    store: Store
    registry: Registry
    faults: FaultInjector
    bookmark_interval_s: float

    def _get(self, request: web.Request, target: Target) -> web.Response:
        check_accept(request)
        obj = versioned(target.rtype, self.store.get(target.rtype, target.namespace,
                                                           target.name))
        if table.wants_table(request.headers.get("Accept", "")):
            return respond(table.build_table(target.rtype, [obj],
                                             obj["metadata"]["resourceVersion"],
                                             request.query.get("includeObject", "Metadata")))
        return respond(obj)

    def _list(self, request: web.Request, target: Target) -> web.Response:
        check_accept(request)
        matches = request_matcher(request, target)
        items = [versioned(target.rtype, o) for o in
                 self.store.list(target.rtype, target.namespace) if matches(o)]
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        items, meta = paginate(items, request.query, meta)
        if table.wants_table(request.headers.get("Accept", "")):
            document = table.build_table(target.rtype, items, meta["resourceVersion"],
                                         request.query.get("includeObject", "Metadata"))
            document["metadata"].update(meta)
            return respond(document)
        return respond({"kind": target.rtype.list_kind, "apiVersion": target.rtype.api_version,
                        "metadata": meta, "items": list_items(target.rtype, items)})

    async def _watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        query = request.query
        timeout = query.get("timeoutSeconds")
        try:
            timeout_s = float(timeout) if timeout else None
            resource_version = query.get("resourceVersion", "")
            if resource_version not in ("", "0") and not resource_version.isdigit():
                raise ValueError("resourceVersion")
        except ValueError as err:
            if "resourceVersion" in str(err):
                # kube-apiserver: a 500 without a reason, in strconv's words.
                raise ApiError(500, "", f'resourceVersion: Invalid value: "{resource_version}": '
                               f'strconv.ParseUint: parsing "{resource_version}": invalid '
                               "syntax") from err
            raise errors.bad_request(f"invalid watch parameter: {err}") from err
        self.store.ensure_kind(target.rtype)
        seen = request.get(SEEN)
        drop_after_s = seen.watch_drop_after_s if seen is not None else None
        reset = None
        if drop_after_s is not None:
            if self.faults.faults.watch_drop_mode == "end":  # as a server-side timeout
                timeout_s = drop_after_s if timeout_s is None else min(timeout_s, drop_after_s)
            else:  # the connection goes away mid-stream
                reset = asyncio.get_running_loop().call_later(
                    drop_after_s, lambda: request.transport and request.transport.abort())
        spec = watch.WatchRequest(
            rtype=target.rtype, namespace=target.namespace,
            matches=request_matcher(request, target), resource_version=resource_version,
            timeout_s=timeout_s, bookmarks=is_flag(query.get("allowWatchBookmarks")),
            send_initial_events=is_flag(query.get("sendInitialEvents")),
            transform=self._watch_table(request, target))
        try:
            return await watch.stream(request, self.store, spec, self.bookmark_interval_s)
        finally:
            if reset is not None:
                reset.cancel()

    def _watch_table(self, request: web.Request, target: Target):
        """For a watch that asks for Tables (`kubectl get -w`): each event's object as a Table
        of one row, the column definitions in the first only (kube-apiserver's watch
        encoder)."""
        if not table.wants_table(request.headers.get("Accept", "")):
            return None
        include = request.query.get("includeObject", "Metadata")
        sent_headers = []

        def transform(obj: dict[str, Any]) -> dict[str, Any]:
            document = table.build_table(target.rtype, [obj], obj["metadata"].get(
                "resourceVersion", ""), include, headers=not sent_headers)
            sent_headers.append(True)
            return document
        return transform


    def _openapi(self, request: web.Request, rest: list[str]) -> web.Response:
        if rest == ["v2"]:
            accept = request.headers.get("Accept", "application/json")
            if "json" not in accept and "*/*" not in accept:
                raise ApiError(406, "NotAcceptable", "only the following media types are "
                               "accepted: application/json")
            return respond(openapi.swagger_document(self.registry))
        if rest == ["v3"]:
            return respond(openapi.root_document(self.registry))
        if len(rest) >= 3 and rest[0] == "v3":
            if rest[1] == "api" and len(rest) == 3:
                group, version = "", rest[2]
            elif rest[1] == "apis" and len(rest) == 4:
                group, version = rest[2], rest[3]
            else:
                raise errors.resource_not_found()
            if not self.registry.in_group_version(group, version):
                raise errors.resource_not_found()
            return respond(openapi.group_version_document(self.registry, group, version))
        raise errors.resource_not_found()


def list_items(rtype: ResourceType, items: list[dict]) -> list[dict]:
    """The items of a list as kube-apiserver encodes them: a built-in kind's items without
    `kind` and `apiVersion` (the typed list's items carry none), a custom resource's with."""
    if rtype.is_custom:
        return items
    return [{k: v for k, v in item.items() if k not in ("kind", "apiVersion")} for item in items]


def paginate(items: list[dict], query, meta: dict[str, Any]) -> tuple[list[dict], dict]:
    limit, token = query.get("limit"), query.get("continue")
    start = 0
    if token:
        try:
            start = int(json.loads(base64.urlsafe_b64decode(token.encode()))["start"])
        except (ValueError, KeyError, TypeError) as err:
            raise errors.bad_request("invalid continue token") from err
    items = items[start:]
    if limit and limit.isdigit() and int(limit) > 0 and len(items) > int(limit):
        end = int(limit)
        meta["continue"] = base64.urlsafe_b64encode(
            json.dumps({"start": start + end}).encode()).decode()
        if not query.get("labelSelector") and not query.get("fieldSelector"):
            # kube-apiserver counts the rest only when no selector filters it.
            meta["remainingItemCount"] = len(items) - end
        items = items[:end]
    return items, meta
