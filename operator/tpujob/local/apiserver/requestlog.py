"""The request log: every request the server answers, described as Kubernetes authorization
sees it (RBAC verb, API group, resource[/subresource], namespace, name), with its response
status and user agent, and counters per verb and resource. Tests read it from another thread
to check a client's RBAC rules and to count API calls.

`request_info` parses a path the way kube-apiserver's RequestInfoFactory does, so a record's
verb and resource are exactly what an RBAC rule has to grant."""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass

# Verbs that replace the resource's own verb when they lead the path (`/api/v1/watch/pods`).
_SPECIAL_VERBS = ("watch", "proxy")
# Path segments after `namespaces/<name>` that are subresources of the Namespace itself.
_NAMESPACE_SUBRESOURCES = ("status", "finalize")
_METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update",
                 "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class RequestInfo:
    """What a request asks for, in authorization terms. For a non-resource request (discovery,
    /version, /openapi, /healthz) `verb` is the lower-case HTTP method and `resource` is empty."""

    is_resource: bool
    verb: str
    group: str = ""
    version: str = ""
    resource: str = ""  # plural, or plural/subresource
    namespace: str | None = None
    name: str | None = None


def request_info(method: str, path: str, query: Mapping[str, str]) -> RequestInfo:
    """`method path?query` as kube-apiserver's authorizer sees it."""
    parts = [p for p in path.split("/") if p]
    non_resource = RequestInfo(is_resource=False, verb=method.lower())
    if parts[:1] == ["api"]:
        group, rest = "", parts[1:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[2:]
    else:
        return non_resource
    if len(rest) < 2:  # a group version's resource list is discovery
        return non_resource
    version, rest = rest[0], rest[1:]
    verb = _METHOD_VERBS.get(method.upper(), method.lower())
    if rest[0] in _SPECIAL_VERBS:
        if method.upper() not in ("GET", "HEAD") and rest[0] == "watch":
            return non_resource  # kube-apiserver answers these as unknown paths
        verb, rest = rest[0], rest[1:]
        if not rest:
            return non_resource
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    if name is None and verb == "get":
        verb = "watch" if (query.get("watch") or "").lower() in ("1", "true") else "list"
    if name is None and verb in ("list", "watch"):
        # A list or watch of one name is authorized as that name (as kube-apiserver does).
        selector = query.get("fieldSelector") or ""
        terms = [t.strip() for t in selector.split(",") if t.strip()]
        for term in terms:
            key, op, value = _split_term(term)
            if key == "metadata.name" and op in ("=", "==") and value and "/" not in value:
                name = value
    if name is None and verb == "delete":
        verb = "deletecollection"
    return RequestInfo(is_resource=True, verb=verb, group=group, version=version,
                       resource=resource, namespace=namespace, name=name)


def _split_term(term: str) -> tuple[str, str, str]:
    for op in ("!=", "==", "="):
        if op in term:
            key, value = term.split(op, 1)
            return key.strip(), op, value.strip()
    return term, "", ""


@dataclass(frozen=True)
class RequestRecord:
    """One answered request. `status` is the HTTP status sent, or 0 when the connection was
    closed before any response (an injected timeout, or a client that went away); `fault` names
    the injected fault that shaped the answer (`error`, `timeout`, `watch-drop`), if any."""

    verb: str
    group: str
    resource: str
    namespace: str | None
    name: str | None
    status: int
    user_agent: str
    method: str
    path: str
    is_resource: bool = True
    fault: str | None = None
    at: float = 0.0  # time.monotonic() when the request arrived

    @property
    def rule(self) -> tuple[str, str, str]:
        """(group, resource, verb): what an RBAC rule must grant for this request."""
        return (self.group, self.resource, self.verb)


class RequestLog:
    """Thread-safe: the server appends from its loop thread, tests read from theirs. Keeps the
    newest `capacity` records; the counters cover every request since the last reset."""

    def __init__(self, capacity: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._records: deque[RequestRecord] = deque(maxlen=max(0, capacity))
        self._counts: Counter[tuple[str, str, str]] = Counter()
        self._total = 0

    def add(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)
            self._counts[(record.verb, record.group, record.resource)] += 1
            self._total += 1

    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def counts(self) -> Counter[tuple[str, str, str]]:
        """Requests per (verb, group, resource) since the last reset."""
        with self._lock:
            return Counter(self._counts)

    @property
    def total(self) -> int:
        with self._lock:
            return self._total

    def reset(self) -> None:
        with self._lock:
            self._records.clear()
            self._counts.clear()
            self._total = 0


def build_record(info: RequestInfo, status: int, user_agent: str, method: str, path: str,
                 fault: str | None = None, at: float | None = None) -> RequestRecord:
    return RequestRecord(verb=info.verb, group=info.group, resource=info.resource,
                         namespace=info.namespace, name=info.name, status=status,
                         user_agent=user_agent, method=method, path=path,
                         is_resource=info.is_resource, fault=fault,
                         at=time.monotonic() if at is None else at)
