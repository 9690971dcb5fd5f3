"""The HTTP layer: routes Kubernetes API paths to the store, decodes bodies, negotiates
JSON/Table responses, and answers every failure with a `Status` body. Every request passes
through `_observe` first, which records it in the request log and injects configured faults."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web

from . import discovery, errors, openapi, patch, podlogs, schema, table, watch
from .errors import ApiError
from .faults import FaultInjector, Faults, fault_error, retry_after_header
from .requestlog import RequestInfo, RequestLog, build_record, request_info
from .resources import BUILTINS, CRD_TYPE, Registry, ResourceType
from .selectors import matches_fields, matches_labels, parse_field_selector, parse_label_selector
from .store import Store, now_rfc3339
from .strategy import prepare_create, prepare_update, strict_error

log = logging.getLogger(__name__)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_BODY_BYTES = 3 * 1024 * 1024  # kube-apiserver's limit on a request body
MAX_DEPTH = 200  # levels of nesting in a body (deep enough for any real object)
MAX_NODES = 1_000_000  # values in a decoded body, YAML aliases expanded
SERVER_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-tpujob-local",
                  "gitCommit": "", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                  "goVersion": "", "compiler": "", "platform": "linux/amd64"}
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_BODY_TYPES = ("application/json", "application/yaml")
_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json",
                "application/strategic-merge-patch+json", "application/apply-patch+yaml")


@dataclass
class Target:
    """The resource a request path names."""

    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    watch: bool


@dataclass
class _Seen:
    """What the request log and the fault injector know about a request being served."""

    info: RequestInfo
    arrived: float
    fault: str | None = None
    watch_drop_after_s: float | None = None
    recorded: bool = False


_SEEN = web.RequestKey("tpujob_seen", _Seen)


class ApiHandler:
    """Serves the Kubernetes API from one Store; `app()` gives the aiohttp application."""

    def __init__(self, crds: list[dict[str, Any]] = (), bookmark_interval_s: float = 60.0,
                 history: int = 2000, request_log: RequestLog | None = None,
                 faults: Faults | None = None) -> None:
        self.request_log = request_log if request_log is not None else RequestLog()
        self.faults = FaultInjector(faults or Faults())
        self.in_flight: dict[int, web.Request] = {}  # id -> request being served
        self.pod_logs: podlogs.PodLogSource | None = None  # the kubelet's part of pods/log
        self.registry = Registry()
        for rtype in BUILTINS:
            self.registry.add(rtype)
        self.store = Store(self.registry, history=history, schedule=_call_soon)
        self.bookmark_interval_s = bookmark_interval_s
        self.address = "127.0.0.1:0"
        ns_type = self.registry.get("", "v1", "namespaces")
        for name in DEFAULT_NAMESPACES:
            self.store.create(ns_type, None, {"metadata": {"name": name}})
        for crd in crds:
            self.store.create(CRD_TYPE, None, copy.deepcopy(crd))

    def app(self) -> web.Application:
        application = web.Application(client_max_size=4 * MAX_BODY_BYTES,
                                      middlewares=[self._observe, self._status_errors])
        application.router.add_route("*", "/{tail:.*}", self.dispatch)
        application.on_response_prepare.append(self._on_response_prepare)
        return application

    def drop_connections(self) -> None:
        """Close the connection of every request being served (open watches included), without
        an answer, as a server going away does."""
        for request in list(self.in_flight.values()):
            if request.transport is not None:
                request.transport.abort()

    # -- request log and faults ----------------------------------------------------------------

    @web.middleware
    async def _observe(self, request: web.Request, handler) -> web.StreamResponse:
        arrived = time.monotonic()
        info = request_info(request.method, request.path, request.query)
        decision = self.faults.decide(info, request.headers.get("User-Agent", ""))
        seen = _Seen(info, arrived, decision.kind or
                     ("watch-drop" if decision.watch_drop_after_s is not None else None),
                     decision.watch_drop_after_s)
        request[_SEEN] = seen
        self.in_flight[id(request)] = request
        response: web.StreamResponse | None = None
        try:
            if decision.kind == "error":
                err = fault_error(decision.code, self.faults.faults.retry_after_s, info)
                response = _json(err.status(), err.code, retry_after_header(err))
            elif decision.kind == "timeout":
                response = await self._time_out(request, handler, info.verb == "watch")
            else:
                response = await handler(request)
            return response
        finally:
            self.in_flight.pop(id(request), None)
            # Streamed answers (watches) are recorded when their headers go out; 0: the
            # connection closed before any answer.
            if not seen.recorded:
                self._record(request, response.status if response is not None else 0)

    async def _on_response_prepare(self, request: web.Request,
                                   response: web.StreamResponse) -> None:
        seen = request.get(_SEEN)
        if seen is None or not seen.recorded:
            self._record(request, response.status)

    def _record(self, request: web.Request, status: int) -> None:
        seen = request.get(_SEEN)
        if seen is None:  # answered before the middleware ran (e.g. a malformed request)
            seen = _Seen(request_info(request.method, request.path, request.query),
                         time.monotonic())
            request[_SEEN] = seen
        seen.recorded = True
        self.request_log.add(build_record(
            seen.info, status, request.headers.get("User-Agent", ""), request.method,
            request.path_qs, seen.fault, seen.arrived))

    async def _time_out(self, request: web.Request, handler, is_watch: bool
                        ) -> web.StreamResponse:
        faults = self.faults.faults
        if faults.timeout_after_commit and not is_watch:
            try:
                await handler(request)  # carried out; only the answer is lost
            except Exception:  # noqa: BLE001 - the answer, error or not, is never sent
                pass
        await asyncio.sleep(faults.timeout_hold_s)
        if request.transport is not None:
            request.transport.abort()
        # Losing the connection cancels this handler (handler_cancellation); wait for it.
        await asyncio.sleep(30)
        raise ConnectionResetError("connection dropped by an injected timeout")

    @web.middleware
    async def _status_errors(self, request: web.Request, handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as err:
            return _json(err.status(), err.code, retry_after_header(err))
        except web.HTTPRequestEntityTooLarge:
            return _json(errors.too_large(MAX_BODY_BYTES).status(), 413)
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as err:  # a bug must answer 500, never take the server down
            log.exception("internal error serving %s %s", request.method, request.path)
            return _json(ApiError(500, "InternalError", f"Internal error occurred: {err}")
                         .status(), 500)

    # -- routing -------------------------------------------------------------------------------

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if request.method not in ("GET", "HEAD") and parts[:1] != ["api"] and \
                parts[:1] != ["apis"]:
            raise errors.method_not_allowed(request.method)
        if not parts:
            return _json({"paths": ["/api", "/api/v1", "/apis", "/openapi/v2", "/openapi/v3",
                                    "/version", "/healthz", "/livez", "/readyz"]})
        if parts[0] in ("healthz", "livez", "readyz") and len(parts) == 1:
            return web.Response(text="ok")
        if parts == ["version"]:
            return _json(SERVER_VERSION)
        if parts[0] == "openapi":
            return self._openapi(request, parts[1:])
        if parts[0] == "api" and len(parts) == 1:
            return self._discovery_only(request, discovery.api_versions(self.address))
        if parts[0] == "apis" and len(parts) == 1:
            return self._discovery_only(request, discovery.api_group_list(self.registry))
        if parts[0] == "apis" and discovery.api_group(self.registry, parts[1]) is None:
            # No API group of that name: kube-apiserver's mux answers in plain text, not with
            # a Status (a group it serves with a version it does not gets a Status).
            return web.Response(status=404, text="404 page not found\n")
        if parts[0] == "apis" and len(parts) == 2:
            return self._discovery_only(request, discovery.api_group(self.registry, parts[1]))
        group, version, rest = ("", parts[1], parts[2:]) if parts[0] == "api" else \
            (parts[1], parts[2], parts[3:]) if parts[0] == "apis" else (None, None, None)
        if group is None:
            raise errors.resource_not_found()
        if not rest:
            document = discovery.api_resource_list(self.registry, group, version)
            if document is None:
                raise errors.resource_not_found()
            return self._discovery_only(request, document)
        target = self._target(group, version, rest)
        return await self._serve(request, target)

    def _discovery_only(self, request: web.Request, document: dict) -> web.Response:
        if request.method not in ("GET", "HEAD"):
            raise errors.method_not_allowed(request.method)
        return _json(document)

    def _target(self, group: str, version: str, rest: list[str]) -> Target:
        is_watch = rest[0] == "watch"
        if is_watch:
            rest = rest[1:]
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            candidate = self.registry.get(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise errors.resource_not_found()
        rtype = self.registry.get(group, version, rest[0])
        if rtype is None:
            raise errors.resource_not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if (rtype.namespaced and name is not None and namespace is None) or \
                (not rtype.namespaced and namespace is not None) or \
                (sub is not None and not (sub == "status" and rtype.status_subresource)
                 and not (sub == "log" and rtype.plural == "pods" and not rtype.group)):
            raise errors.resource_not_found()
        return Target(rtype, namespace, name, sub, is_watch)

    async def _serve(self, request: web.Request, target: Target) -> web.StreamResponse:
        method = request.method
        query = request.query
        if target.subresource == "log":
            if method not in ("GET", "HEAD") or target.watch:
                raise errors.method_not_allowed(method)
            pod = self.store.get(target.rtype, target.namespace, target.name)
            return await podlogs.serve(request, pod, self.pod_logs)
        if method in ("GET", "HEAD") and (target.watch or _flag(query.get("watch"))):
            return await self._watch(request, target)
        if method in ("GET", "HEAD"):
            return self._get(request, target) if target.name else self._list(request, target)
        if method == "POST" and target.name is None:
            return await self._create(request, target)
        if method == "PUT" and target.name is not None:
            return await self._update(request, target)
        if method == "PATCH" and target.name is not None:
            return await self._patch(request, target)
        if method == "DELETE":
            return await (self._delete(request, target) if target.name else
                          self._delete_collection(request, target))
        raise errors.method_not_allowed(method)

    # -- reads ---------------------------------------------------------------------------------

    def _versioned(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        return {**obj, "apiVersion": rtype.api_version}

    def _get(self, request: web.Request, target: Target) -> web.Response:
        _check_accept(request)
        obj = self._versioned(target.rtype, self.store.get(target.rtype, target.namespace,
                                                           target.name))
        if table.wants_table(request.headers.get("Accept", "")):
            return _json(table.build_table(target.rtype, [obj], obj["metadata"]["resourceVersion"],
                                           request.query.get("includeObject", "Metadata")))
        return _json(obj)

    def _matcher(self, request: web.Request, target: Target):
        try:
            labels = parse_label_selector(request.query.get("labelSelector"))
            fields = parse_field_selector(request.query.get("fieldSelector"),
                                          target.rtype.field_selectors)
        except ValueError as err:
            raise errors.bad_request(str(err)) from err
        if target.name is not None:
            fields.append(parse_field_selector(f"metadata.name={target.name}",
                                               target.rtype.field_selectors)[0])

        def matches(obj: dict[str, Any]) -> bool:
            return matches_labels(labels, obj["metadata"].get("labels")) and \
                matches_fields(fields, obj)
        return matches

    def _list(self, request: web.Request, target: Target) -> web.Response:
        _check_accept(request)
        matches = self._matcher(request, target)
        items = [self._versioned(target.rtype, o) for o in
                 self.store.list(target.rtype, target.namespace) if matches(o)]
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        items, meta = _paginate(items, request.query, meta)
        if table.wants_table(request.headers.get("Accept", "")):
            document = table.build_table(target.rtype, items, meta["resourceVersion"],
                                         request.query.get("includeObject", "Metadata"))
            document["metadata"].update(meta)
            return _json(document)
        return _json({"kind": target.rtype.list_kind, "apiVersion": target.rtype.api_version,
                      "metadata": meta, "items": items})

    async def _watch(self, request: web.Request, target: Target) -> web.StreamResponse:
        query = request.query
        timeout = query.get("timeoutSeconds")
        try:
            timeout_s = float(timeout) if timeout else None
            resource_version = query.get("resourceVersion", "")
            if resource_version not in ("", "0"):
                int(resource_version)
        except ValueError as err:
            raise errors.bad_request(f"invalid watch parameter: {err}") from err
        self.store.ensure_kind(target.rtype)
        seen = request.get(_SEEN)
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
            matches=self._matcher(request, target), resource_version=resource_version,
            timeout_s=timeout_s, bookmarks=_flag(query.get("allowWatchBookmarks")),
            send_initial_events=_flag(query.get("sendInitialEvents")),
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

    # -- writes --------------------------------------------------------------------------------

    async def _create(self, request: web.Request, target: Target) -> web.Response:
        body = _decode(await _read_body(request), _content_type(request, _BODY_TYPES))
        validation = _field_validation(request)
        result = self._create_checked(target, body, validation, _dry_run(request))
        return self._write_response(target.rtype, result, validation, 201)

    def _create_checked(self, target: Target, body: Any, validation: str, dry_run: bool):
        if validation == "Strict" and target.rtype.schema is not None:
            # Strict must refuse before anything is stored.
            _refuse_unknown_fields(target.rtype, body)
            probe = self._dry_run_create(target, copy.deepcopy(body))
            if probe.unknown_fields:
                raise strict_error(target.rtype, probe.unknown_fields)
        if dry_run:
            return self._dry_run_create(target, body)
        return self.store.create(target.rtype, target.namespace, body)

    def _dry_run_create(self, target: Target, body: Any):
        self.store.ensure_kind(target.rtype)
        result = prepare_create(target.rtype, body, target.namespace, now_rfc3339(),
                                self.store.rv)
        if self.store.find(target.rtype, target.namespace, result.obj["metadata"]["name"]):
            raise errors.already_exists(target.rtype.plural, target.rtype.group,
                                        result.obj["metadata"]["name"])
        return result

    def _write_response(self, rtype: ResourceType, result, validation: str,
                        code: int = 200) -> web.Response:
        headers = {}
        if result.unknown_fields:
            if validation == "Strict":
                raise strict_error(rtype, result.unknown_fields)
            if validation == "Warn":
                headers["Warning"] = ", ".join(
                    '299 - "unknown field \\"' + f + '\\""' for f in result.unknown_fields)
        return _json(self._versioned(rtype, result.obj), code, headers)

    async def _update(self, request: web.Request, target: Target) -> web.Response:
        body = _decode(await _read_body(request), _content_type(request, _BODY_TYPES))
        validation = _field_validation(request)
        result = self._write(target, body, require_version=True, dry_run=_dry_run(request),
                             validation=validation)
        return self._write_response(target.rtype, result, validation)

    def _write(self, target: Target, body: Any, require_version: bool, dry_run: bool,
               validation: str):
        if validation == "Strict" and target.rtype.schema is not None:
            # Strict must refuse before anything is stored.
            _refuse_unknown_fields(target.rtype, body)
            old = self.store.get(target.rtype, target.namespace, target.name)
            probe = prepare_update(target.rtype, copy.deepcopy(body), old, target.subresource,
                                   self.store.rv + 1, require_version)
            if probe.unknown_fields:
                raise strict_error(target.rtype, probe.unknown_fields)
        if dry_run:
            old = self.store.get(target.rtype, target.namespace, target.name)
            return prepare_update(target.rtype, body, old, target.subresource, self.store.rv,
                                  require_version)
        return self.store.update(target.rtype, target.namespace, target.name, body,
                                 target.subresource, require_version=require_version)

    async def _patch(self, request: web.Request, target: Target) -> web.Response:
        content_type = _content_type(request, _PATCH_TYPES)
        raw = await _read_body(request)
        validation = _field_validation(request)
        if content_type == "application/apply-patch+yaml":
            return self._apply(request, target, _decode(raw, "application/yaml"), validation)
        # kube-apiserver reads the object before it decodes the patch: a patch of a missing
        # object is 404 even when the patch is malformed.
        old = self.store.get(target.rtype, target.namespace, target.name)
        body = _decode(raw, "application/json")
        current = self._versioned(target.rtype, old)
        try:
            if content_type == "application/json-patch+json":
                patched = patch.apply_json_patch(current, body)
            elif not isinstance(body, dict):
                raise errors.bad_request("the patch must be a JSON object")
            elif content_type == "application/strategic-merge-patch+json" and \
                    not target.rtype.is_custom:
                patched = patch.apply_strategic_merge_patch(current, body)
            else:
                patched = patch.apply_merge_patch(current, body)
        except patch.PatchError as err:
            reason = "Invalid" if err.code == 422 else "BadRequest"
            raise ApiError(err.code, reason, str(err)) from err
        if not isinstance(patched, dict):
            raise errors.bad_request("the patched object must be a JSON object")
        patched.setdefault("metadata", {}).setdefault("resourceVersion",
                                                      old["metadata"]["resourceVersion"])
        result = self._write(target, patched, require_version=False, dry_run=_dry_run(request),
                             validation=validation)
        return self._write_response(target.rtype, result, validation)

    def _apply(self, request: web.Request, target: Target, applied: Any,
               validation: str) -> web.Response:
        manager = request.query.get("fieldManager")
        if not manager:   # kube-apiserver: PatchOptions validation, 422 naming the field
            raise ApiError(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: '
                           "fieldManager: Required value: is required for apply patch",
                           {"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [
                               {"reason": "FieldValueRequired", "field": "fieldManager",
                                "message": "Required value: is required for apply patch"}]})
        if not isinstance(applied, dict) or not applied.get("apiVersion") or \
                not applied.get("kind"):
            raise errors.bad_request("invalid object type: apply requires apiVersion and kind")
        applied_meta = applied.setdefault("metadata", {})
        if applied_meta.get("name") not in (None, target.name):
            raise errors.bad_request(f"the name of the object ({applied_meta.get('name')}) does "
                                     f"not match the name on the URL ({target.name})")
        applied_meta["name"] = target.name
        rtype = target.rtype
        memory_key = (rtype.key, target.namespace or "", target.name, manager,
                      target.subresource)
        existing = self.store.find(rtype, target.namespace, target.name)
        entry = {"manager": manager, "operation": "Apply", "apiVersion": rtype.api_version,
                 "time": now_rfc3339(), "fieldsType": "FieldsV1",
                 "fieldsV1": patch.fields_v1(applied)}
        if target.subresource:
            entry["subresource"] = target.subresource
        if existing is None:
            if target.subresource:
                raise errors.not_found(rtype.plural, rtype.group, target.name)
            body = copy.deepcopy(applied)
            body["metadata"]["managedFields"] = [entry]
            result = self._create_checked(target, body, validation, _dry_run(request))
            code = 201
        else:
            merged = patch.apply_server_side(self._versioned(rtype, existing), applied,
                                             self.store.applied.get(memory_key))
            others = [m for m in existing["metadata"].get("managedFields") or []
                      if not (m.get("manager") == manager and m.get("operation") == "Apply"
                              and m.get("subresource") == entry.get("subresource"))]
            merged["metadata"]["managedFields"] = others + [entry]
            merged["metadata"].setdefault("resourceVersion",
                                          existing["metadata"]["resourceVersion"])
            if "resourceVersion" not in applied_meta:
                merged["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            result = self._write(target, merged, require_version=False,
                                 dry_run=_dry_run(request), validation=validation)
            code = 200
        if not _dry_run(request):
            self.store.applied[memory_key] = copy.deepcopy(applied)
        return self._write_response(rtype, result, validation, code)

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        raw = await _read_body(request)
        options = _decode(raw, "application/json") if raw.strip() else {}
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
        if _dry_run(request):
            obj = self.store.get(target.rtype, target.namespace, target.name)
        else:
            obj = self.store.delete(target.rtype, target.namespace, target.name,
                                    options["propagation"], options["preconditions"])
        return _json(self._versioned(target.rtype, obj))

    async def _delete_collection(self, request: web.Request, target: Target) -> web.Response:
        options = await self._delete_options(request)
        matches = self._matcher(request, target)
        deleted = []
        for obj in self.store.list(target.rtype, target.namespace):
            if matches(obj):
                meta = obj["metadata"]
                deleted.append(self._versioned(target.rtype, self.store.delete(
                    target.rtype, meta.get("namespace"), meta["name"], options["propagation"])))
        return _json({"kind": target.rtype.list_kind, "apiVersion": target.rtype.api_version,
                      "metadata": {"resourceVersion": str(self.store.rv)}, "items": deleted})

    # -- OpenAPI -------------------------------------------------------------------------------

    def _openapi(self, request: web.Request, rest: list[str]) -> web.Response:
        if rest == ["v2"]:
            accept = request.headers.get("Accept", "application/json")
            if "json" not in accept and "*/*" not in accept:
                raise ApiError(406, "NotAcceptable", "only the following media types are "
                               "accepted: application/json")
            return _json(openapi.swagger_document(self.registry))
        if rest == ["v3"]:
            return _json(openapi.root_document(self.registry))
        if len(rest) >= 3 and rest[0] == "v3":
            if rest[1] == "api" and len(rest) == 3:
                group, version = "", rest[2]
            elif rest[1] == "apis" and len(rest) == 4:
                group, version = rest[2], rest[3]
            else:
                raise errors.resource_not_found()
            if not self.registry.in_group_version(group, version):
                raise errors.resource_not_found()
            return _json(openapi.group_version_document(self.registry, group, version))
        raise errors.resource_not_found()


def _refuse_unknown_fields(rtype: ResourceType, body: Any) -> None:
    """Strict field validation happens while the body is decoded, so kube-apiserver names an
    unknown field before it looks at any value: refuse with it before validating."""
    if isinstance(body, dict):
        unknown = schema.prune(copy.deepcopy(body), rtype.schema)
        if unknown:
            raise strict_error(rtype, unknown)


def _call_soon(fn) -> None:
    try:
        asyncio.get_running_loop().call_soon(fn)
    except RuntimeError:
        fn()


def _json(document: Any, status: int = 200, headers: dict[str, str] | None = None
          ) -> web.Response:
    return web.Response(body=json.dumps(document, separators=(",", ":")).encode(),
                        status=status, content_type="application/json", headers=headers)


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true")


def _dry_run(request: web.Request) -> bool:
    values = request.query.getall("dryRun", [])
    for value in values:
        if value != "All":
            raise errors.bad_request(f'Unsupported value: "{value}": supported values: "All"')
    return bool(values)


def _field_validation(request: web.Request) -> str:
    value = request.query.get("fieldValidation", "Warn") or "Warn"
    if value not in ("Ignore", "Warn", "Strict"):
        raise errors.bad_request(f"fieldValidation parameter unsupported: {value}; valid "
                                 "values are Ignore, Warn and Strict")
    return value


def _check_accept(request: web.Request) -> None:
    accept = request.headers.get("Accept", "")
    if not accept:
        return
    options = [o.split(";")[0].strip() for o in accept.split(",")]
    if not any(o in ("application/json", "*/*", "application/*", "application/yaml")
               for o in options):
        raise ApiError(406, "NotAcceptable",
                       "only the following media types are accepted: application/json, "
                       "application/yaml")


def _content_type(request: web.Request, accepted: tuple[str, ...]) -> str:
    content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if not content_type and accepted == _BODY_TYPES:
        content_type = "application/json"  # as kube-apiserver: the first supported type
    if content_type not in accepted:
        raise errors.unsupported_media_type(content_type, list(accepted))
    return content_type


async def _read_body(request: web.Request) -> bytes:
    if (request.content_length or 0) > 4 * MAX_BODY_BYTES:
        raise errors.too_large(MAX_BODY_BYTES)
    data = await request.read()
    if len(data) > MAX_BODY_BYTES:
        raise errors.too_large(MAX_BODY_BYTES)
    return data


def _decode(raw: bytes, content_type: str) -> Any:
    try:
        if content_type.endswith("yaml"):
            text = raw.decode()
            _check_yaml_depth(text, content_type)
            value = yaml.load(text, Loader=_YAML_LOADER)
        else:
            value = json.loads(raw.decode())
    except (ValueError, yaml.YAMLError, UnicodeDecodeError, RecursionError) as err:
        raise errors.bad_request(f"couldn't decode the request body ({content_type}): "
                                 f"{err}") from err
    _check_size(value, content_type)
    return value


def _check_yaml_depth(text: str, content_type: str) -> None:
    # libyaml builds nodes recursively in C and crashes the process on deep nesting; its event
    # parser does not, so measure the depth with it first.
    depth = 0
    for event in yaml.parse(text, Loader=_YAML_LOADER):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise errors.bad_request(f"couldn't decode the request body ({content_type}): "
                                         f"nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _check_size(value: Any, content_type: str) -> None:
    """Refuse what Go's decoder refuses, NaN and infinite numbers, and bodies the server could
    not walk: nested deeper than MAX_DEPTH (every step of the server walks objects
    recursively) or, through YAML aliases, expanding to more than MAX_NODES values."""
    stack, nodes = [(value, 1)], 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if depth > MAX_DEPTH:
            raise errors.bad_request(f"couldn't decode the request body ({content_type}): "
                                     f"nested more than {MAX_DEPTH} levels deep")
        if nodes > MAX_NODES:
            raise errors.too_large(MAX_BODY_BYTES)
        if isinstance(node, float) and not math.isfinite(node):
            raise errors.bad_request(f"couldn't decode the request body ({content_type}): "
                                     f"{node} is not a valid JSON number")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def _paginate(items: list[dict], query, meta: dict[str, Any]) -> tuple[list[dict], dict]:
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
        meta["remainingItemCount"] = len(items) - end
        items = items[:end]
    return items, meta
