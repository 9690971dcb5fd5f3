"""A local stand-in for the part of the Compute Engine API (v1) the operator uses: regional
resource policies (get, insert) and the regional operations inserts return (get, wait).

It serves real HTTP on 127.0.0.1 (an ephemeral port by default) from a thread, keeps its state
in memory, and answers in Compute Engine's shapes: resources with selfLink/status, Operations
that are RUNNING until polled `operation_polls` times, and error bodies
`{"error": {"code", "message", "errors": [{"reason", ...}]}}` with the reasons Compute Engine
uses (notFound, alreadyExists, forbidden, invalid, rateLimitExceeded, ...). Inserts are checked
like the real API does (unknown fields are refused, names must follow RFC 1035: those rules and
shapes are `compute_api`'s), and a repeated requestId returns the first insert's operation.

Faults can be switched on to exercise a client: the next N requests failing with 503/429 or
answered late, a missing IAM permission (403), a failing operation, a quota, a disabled API.

    with ComputeStandIn(operation_polls=2) as compute:
        client = ComputeClient(compute.url)
        ...
        assert compute.count("insert") == 1

Also runs on its own: `python -m tpujob.local.compute_standin --port 8089`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tpujob.local.compute_api import (
    API_ROOT,
    PERMISSIONS,
    ROUTES,
    ComputeApiError,
    error_body,
    injected_error,
    json_name,
    parse_policy,
)


@dataclass(frozen=True)
class RecordedRequest:
    """One request the stand-in answered."""

    method: str
    path: str          # below /compute/v1, without the query
    kind: str          # insert, get, operation, wait, or unknown
    status: int
    authorized: bool   # whether an Authorization header came with it


@dataclass
class _Operation:
    body: dict
    polls_left: int
    key: tuple[str, str, str]                       # project, region, policy name
    error: tuple[str, str, int] | None = None       # code, message, http status


@dataclass
class _Faults:
    fail_next: list[tuple[int, float | None]] = field(default_factory=list)
    stall_next: list[float] = field(default_factory=list)
    denied: set[str] = field(default_factory=set)
    failing_operations: list[tuple[str, str, int]] = field(default_factory=list)
    api_disabled: bool = False
    quota: int | None = None
    token: str | None = None
    get_barrier: threading.Barrier | None = None
    gets_to_hold: int = 0


class ComputeStandIn:
    """Compute Engine resource policies and regional operations, in memory, over HTTP.

    `operation_polls`: how many operation polls (get or wait) an insert's operation answers
    RUNNING before it is DONE (0: inserts return DONE operations). `projects` / `regions`:
    when given, others answer 404 as unknown projects and regions do.
    """

    def __init__(self, *, operation_polls: int = 1, projects: Iterable[str] | None = None,
                 regions: Iterable[str] | None = None, host: str = "127.0.0.1", port: int = 0):
        self.operation_polls = operation_polls
        self.projects = set(projects) if projects is not None else None
        self.regions = set(regions) if regions is not None else None
        self._host, self._port = host, port
        self._lock = threading.Lock()
        self._policies: dict[tuple[str, str, str], dict] = {}
        self._operations: dict[tuple[str, str, str], _Operation] = {}
        self._request_ids: dict[str, tuple[str, str, str]] = {}
        self._requests: list[RecordedRequest] = []
        self._faults = _Faults()
        self._ids = itertools.count(int(time.time()) * 1000)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ComputeStandIn:
        handler = type("Handler", (_Handler,), {"standin": self})
        self._server = _Server((self._host, self._port), handler)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name="compute-standin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ComputeStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL to give a client in place of https://compute.googleapis.com/compute/v1."""
        if self._server is None:
            raise RuntimeError("the Compute stand-in is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{API_ROOT}"

    # --- inspection and seeding --------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def count(self, kind: str | None = None, *, status: int | None = None) -> int:
        """Requests answered, optionally only of one kind (insert, get, operation, wait) and
        with one status."""
        return sum(1 for r in self.requests
                   if (kind is None or r.kind == kind) and (status is None or r.status == status))

    def policy(self, project: str, region: str, name: str) -> dict | None:
        with self._lock:
            found = self._policies.get((project, region, name))
            return json.loads(json.dumps(found)) if found is not None else None

    def policies(self) -> dict[tuple[str, str, str], dict]:
        """Every policy, keyed by (project, region, name)."""
        with self._lock:
            return {k: json.loads(json.dumps(v)) for k, v in self._policies.items()}

    def add_policy(self, project: str, region: str, body: dict, *,
                   status: str = "READY") -> dict:
        """Put a policy in place as if someone else (a node pool tool, a person) made it."""
        with self._lock:
            return self._store_policy(project, region, body, status)

    # --- faults ------------------------------------------------------------------------------

    def fail_next(self, n: int, status: int = 503, *, retry_after: float | None = None) -> None:
        """Answer the next `n` requests with `status` (503, 429, 500, ...)."""
        with self._lock:
            self._faults.fail_next.extend([(status, retry_after)] * n)

    def stall_next(self, n: int, seconds: float) -> None:
        """Hold the answers to the next `n` requests for `seconds` (to trip client timeouts);
        the requests are still carried out."""
        with self._lock:
            self._faults.stall_next.extend([seconds] * n)

    def deny(self, *permissions: str) -> None:
        """Answer 403 to requests that need one of these IAM permissions."""
        with self._lock:
            self._faults.denied.update(permissions)

    def fail_next_operation(self, message: str, *, code: str = "INTERNAL_ERROR",
                            http_status: int = 400) -> None:
        """Make the next insert's operation end DONE with this error (nothing is created)."""
        with self._lock:
            self._faults.failing_operations.append((code, message, http_status))

    def set_quota(self, limit: int | None) -> None:
        """At most `limit` resource policies per region; more fail with QUOTA_EXCEEDED."""
        with self._lock:
            self._faults.quota = limit

    def disable_api(self, disabled: bool = True) -> None:
        """Answer every request as a project without the Compute Engine API enabled."""
        with self._lock:
            self._faults.api_disabled = disabled

    def require_token(self, token: str | None) -> None:
        """Answer 401 unless the request carries `Authorization: Bearer <token>`."""
        with self._lock:
            self._faults.token = token

    def hold_gets(self, n: int, *, timeout_s: float = 120.0) -> None:
        """Hold the answers to the next `n` policy GETs until all `n` have read the state, so
        that `n` concurrent callers all see the policy missing before any of them creates it
        (each GET reads, then waits for the others). `timeout_s` only keeps a broken test from
        hanging: the callers' arrival is the signal, and a busy machine can take seconds to
        start a thread (5 s was once too short at load 7 on 2 cores).
        Every GET that arrives counts, retries too: a caller whose client gives up on its held
        GET (a read timeout shorter than the others' lateness) and sends it again lets itself
        through as two callers. Give the callers a read timeout longer than `timeout_s`."""
        with self._lock:
            self._faults.gets_to_hold = n
            self._faults.get_barrier = threading.Barrier(n, timeout=timeout_s)

    def held_gets(self) -> int:
        """How many policy GETs `hold_gets` is holding now (read, waiting for the others)."""
        with self._lock:
            barrier = self._faults.get_barrier
        return barrier.n_waiting if barrier is not None else 0

    def reset_faults(self) -> None:
        with self._lock:
            self._faults = _Faults()

    # --- request handling --------------------------------------------------------------------

    def handle(self, method: str, raw_path: str, headers: dict[str, str],
               body: bytes) -> tuple[int, dict, dict[str, str]]:
        """Answer one request: (status, JSON body, extra headers)."""
        split = urlsplit(raw_path)
        path = split.path[len(API_ROOT):] if split.path.startswith(API_ROOT) else split.path
        query = parse_qs(split.query)
        kind, params = "unknown", {}
        for route_method, pattern, route_kind in ROUTES:
            m = pattern.match(path) if split.path.startswith(API_ROOT) else None
            if m and route_method == method:
                kind, params = route_kind, m.groupdict()
                break
        authorized = "authorization" in {k.lower() for k in headers}
        with self._lock:
            stall = self._faults.stall_next.pop(0) if self._faults.stall_next else 0.0
        try:
            status, payload = self._dispatch(method, path, kind, params, query, headers, body)
            extra: dict[str, str] = {}
        except ComputeApiError as e:
            status, payload, extra = e.status, error_body(e), e.headers
        # Held after the state is read, not before: once the hold lets a caller's answer go, it
        # may create the policy at once, and a GET let go with it but not yet read would see it.
        self._maybe_hold(kind)
        with self._lock:
            self._requests.append(RecordedRequest(method, path, kind, status, authorized))
        if stall:
            time.sleep(stall)
        return status, payload, extra

    def _maybe_hold(self, kind: str) -> None:
        with self._lock:
            barrier = self._faults.get_barrier if kind == "get" else None
            if barrier is not None:
                self._faults.gets_to_hold -= 1
                if self._faults.gets_to_hold <= 0:
                    self._faults.get_barrier = None
        if barrier is not None:
            barrier.wait()

    def _dispatch(self, method: str, path: str, kind: str, params: dict, query: dict,
                  headers: dict[str, str], body: bytes) -> tuple[int, dict]:
        with self._lock:
            faults = self._faults
            if faults.fail_next:
                status, retry_after = faults.fail_next.pop(0)
                raise injected_error(status, retry_after)
            if faults.token is not None:
                auth = {k.lower(): v for k, v in headers.items()}.get("authorization")
                if auth != f"Bearer {faults.token}":
                    raise ComputeApiError(401, "Request had invalid authentication credentials.",
                                    "authError")
            if faults.api_disabled:
                raise ComputeApiError(403, "Compute Engine API has not been used in project "
                                f"{params.get('project', '?')} before or it is disabled.",
                                "accessNotConfigured")
            if kind == "unknown":
                raise ComputeApiError(404, f"No route for {method} {path}", "notFound")
            project, region = params["project"], params["region"]
            if self.projects is not None and project not in self.projects:
                raise ComputeApiError(404, f"The resource 'projects/{project}' was not found",
                                "notFound")
            if self.regions is not None and region not in self.regions:
                raise ComputeApiError(404, f"The resource 'projects/{project}/regions/{region}' was "
                                "not found", "notFound")
            permission = PERMISSIONS[kind]
            if permission in faults.denied:
                target = (f"projects/{project}/regions/{region}/resourcePolicies/"
                          f"{params.get('name') or json_name(body)}"
                          if kind in ("get", "insert") else
                          f"projects/{project}/regions/{region}/operations/"
                          f"{params.get('operation')}")
                raise ComputeApiError(403, f"Required '{permission}' permission for '{target}'",
                                "forbidden")
            if kind == "get":
                return 200, self._get_policy(project, region, params["name"])
            if kind == "insert":
                request_id = (query.get("requestId") or [None])[0]
                return 200, self._insert(project, region, body, request_id)
            return 200, self._poll(project, region, params["operation"])

    def _get_policy(self, project: str, region: str, name: str) -> dict:
        found = self._policies.get((project, region, name))
        if found is None:
            raise ComputeApiError(404, f"The resource 'projects/{project}/regions/{region}/"
                            f"resourcePolicies/{name}' was not found", "notFound")
        return found

    def _insert(self, project: str, region: str, raw: bytes, request_id: str | None) -> dict:
        if request_id and request_id in self._request_ids:
            return self._operations[self._request_ids[request_id]].body
        body = parse_policy(raw)
        key = (project, region, body["name"])
        if key in self._policies:
            raise ComputeApiError(409, f"The resource 'projects/{project}/regions/{region}/"
                            f"resourcePolicies/{body['name']}' already exists", "alreadyExists")
        error = None
        in_region = sum(1 for p, r, _ in self._policies if (p, r) == (project, region))
        if self._faults.failing_operations:
            error = self._faults.failing_operations.pop(0)
        elif self._faults.quota is not None and in_region >= self._faults.quota:
            error = ("QUOTA_EXCEEDED", f"Quota 'RESOURCE_POLICIES' exceeded.  Limit: "
                     f"{float(self._faults.quota)} in region {region}.", 403)
        policy = self._store_policy(project, region, body, "CREATING")
        name = f"operation-{next(self._ids)}-{uuid.uuid4().hex[:12]}"
        op = {
            "kind": "compute#operation", "id": str(next(self._ids)), "name": name,
            "operationType": "insert", "targetLink": policy["selfLink"],
            "targetId": policy["id"], "status": "RUNNING", "progress": 0,
            "insertTime": _now(), "startTime": _now(), "user": "stand-in",
            "region": self._link(project, region),
            "selfLink": f"{self._link(project, region)}/operations/{name}",
        }
        operation = _Operation(op, self.operation_polls, key, error)
        self._operations[(project, region, name)] = operation
        if request_id:
            self._request_ids[request_id] = (project, region, name)
        if operation.polls_left <= 0:
            self._finish(operation)
        return op

    def _poll(self, project: str, region: str, name: str) -> dict:
        operation = self._operations.get((project, region, name))
        if operation is None:
            raise ComputeApiError(404, f"The resource 'projects/{project}/regions/{region}/"
                            f"operations/{name}' was not found", "notFound")
        if operation.body["status"] != "DONE":
            operation.polls_left -= 1
            if operation.polls_left <= 0:
                self._finish(operation)
        return operation.body

    def _finish(self, operation: _Operation) -> None:
        body = operation.body
        body.update(status="DONE", progress=100, endTime=_now())
        if operation.error is None:
            self._policies[operation.key]["status"] = "READY"
            return
        code, message, http_status = operation.error
        self._policies.pop(operation.key, None)
        body["error"] = {"errors": [{"code": code, "message": message}]}
        body["httpErrorStatusCode"] = http_status
        body["httpErrorMessage"] = {400: "BAD REQUEST", 403: "FORBIDDEN",
                                    409: "CONFLICT"}.get(http_status, "ERROR")

    def _store_policy(self, project: str, region: str, body: dict, status: str) -> dict:
        name = body["name"]
        policy = {
            "kind": "compute#resourcePolicy", "id": str(next(self._ids)),
            "creationTimestamp": _now(), **json.loads(json.dumps(body)),
            "region": self._link(project, region),
            "selfLink": f"{self._link(project, region)}/resourcePolicies/{name}",
            "status": status,
        }
        self._policies[(project, region, name)] = policy
        return policy

    def _link(self, project: str, region: str) -> str:
        base = self.url if self._server is not None else f"http://standin{API_ROOT}"
        return f"{base}/projects/{project}/regions/{region}"


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up on a stalled answer closed its socket: expected here


class _Handler(BaseHTTPRequestHandler):
    standin: ComputeStandIn
    server_version = "ComputeStandIn"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._answer("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._answer("POST")

    def _answer(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        status, payload, extra = self.standin.handle(method, self.path, dict(self.headers),
                                                     body)
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the recorded requests are the log




def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free)")
    parser.add_argument("--operation-polls", type=int, default=1)
    args = parser.parse_args(argv)
    with ComputeStandIn(operation_polls=args.operation_polls, port=args.port) as standin:
        print(standin.url, flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
