"""The HTTP layer: routes Kubernetes API paths to the handlers of each verb (reads.py,
writes.py, deletes.py), and answers every failure with a `Status` body. Every request passes
through the request log and the fault injector first (observe.py)."""

from __future__ import annotations

import asyncio
import copy
import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from . import discovery, errors, podlogs
from .codec import MAX_BODY_BYTES, is_flag, respond
from .deletes import DeleteHandlers
from .errors import ApiError
from .faults import FaultInjector, Faults, retry_after_header
from .observe import ObserveMixin
from .reads import ReadHandlers
from .requestlog import RequestLog
from .resources import BUILTINS, CRD_TYPE, Registry, ResourceType
from .store import Store
from .writes import WriteHandlers

log = logging.getLogger(__name__)

SERVER_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-tpujob-local",
                  "gitCommit": "", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                  "goVersion": "", "compiler": "", "platform": "linux/amd64"}
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass
class Target:
    """The resource a request path names."""

    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    watch: bool


class ApiHandler(ObserveMixin, ReadHandlers, WriteHandlers, DeleteHandlers):
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
                                      middlewares=[self.observe, self._status_errors])
        application.router.add_route("*", "/{tail:.*}", self.dispatch)
        application.on_response_prepare.append(self._on_response_prepare)
        return application

    def drop_connections(self) -> None:
        """Close the connection of every request being served (open watches included), without
        an answer, as a server going away does."""
        for request in list(self.in_flight.values()):
            if request.transport is not None:
                request.transport.abort()

    @web.middleware
    async def _status_errors(self, request: web.Request, handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as err:
            return respond(err.status(), err.code, retry_after_header(err))
        except web.HTTPRequestEntityTooLarge:
            return respond(errors.too_large(MAX_BODY_BYTES).status(), 413)
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as err:  # a bug must answer 500, never take the server down
            log.exception("internal error serving %s %s", request.method, request.path)
            return respond(ApiError(500, "InternalError", f"Internal error occurred: {err}")
                         .status(), 500)

    # -- routing -------------------------------------------------------------------------------

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if request.method not in ("GET", "HEAD") and parts[:1] != ["api"] and \
                parts[:1] != ["apis"]:
            raise errors.method_not_allowed(request.method)
        if not parts:
            return respond({"paths": ["/api", "/api/v1", "/apis", "/openapi/v2", "/openapi/v3",
                                    "/version", "/healthz", "/livez", "/readyz"]})
        if parts[0] in ("healthz", "livez", "readyz") and len(parts) == 1:
            return web.Response(text="ok")
        if parts == ["version"]:
            return respond(SERVER_VERSION)
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
        return respond(document)

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
        if method in ("GET", "HEAD") and (target.watch or is_flag(query.get("watch"))):
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


def _call_soon(fn) -> None:
    try:
        asyncio.get_running_loop().call_soon(fn)
    except RuntimeError:
        fn()
