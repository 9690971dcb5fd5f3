"""What the part of the Compute Engine API (v1) the operator uses accepts, and how it refuses:
the routes of regional resource policies and operations, the IAM permission each needs, the
checks an insert's body must pass (known fields only, an RFC 1035 name, exactly one policy type,
a coherent workload policy), and the error bodies `{"error": {"code", "message", "errors":
[{"reason", ...}]}}` with the reasons Compute Engine uses. `compute_standin` serves it."""

from __future__ import annotations

import json
import re

API_ROOT = "/compute/v1"
PERMISSION_GET = "compute.resourcePolicies.get"
PERMISSION_CREATE = "compute.resourcePolicies.create"
PERMISSION_OPERATION = "compute.regionOperations.get"

_REGION_PATH = r"/projects/(?P<project>[^/]+)/regions/(?P<region>[^/]+)"
# (method, path below API_ROOT, kind): what the stand-in serves.
ROUTES = [
    ("POST", re.compile(rf"^{_REGION_PATH}/resourcePolicies$"), "insert"),
    ("GET", re.compile(rf"^{_REGION_PATH}/resourcePolicies/(?P<name>[^/]+)$"), "get"),
    ("GET", re.compile(rf"^{_REGION_PATH}/operations/(?P<operation>[^/]+)$"), "operation"),
    ("POST", re.compile(rf"^{_REGION_PATH}/operations/(?P<operation>[^/]+)/wait$"), "wait"),
]
# Route kind -> the IAM permission a request of that kind needs.
PERMISSIONS = {"get": PERMISSION_GET, "insert": PERMISSION_CREATE,
               "operation": PERMISSION_OPERATION, "wait": PERMISSION_OPERATION}
_NAME = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
_POLICY_FIELDS = {"name", "description", "region", "workloadPolicy", "groupPlacementPolicy",
                  "snapshotSchedulePolicy", "instanceSchedulePolicy",
                  "diskConsistencyGroupPolicy"}
_POLICY_KINDS = _POLICY_FIELDS - {"name", "description", "region"}
_WORKLOAD_FIELDS = {"type", "acceleratorTopology", "maxTopologyDistance",
                    "acceleratorTopologyMode"}
_WORKLOAD_TYPES = {"HIGH_AVAILABILITY", "HIGH_THROUGHPUT"}


class ComputeApiError(Exception):
    """A refusal, as Compute Engine answers it: HTTP status, message, reason, headers."""

    def __init__(self, status: int, message: str, reason: str,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason
        self.headers = headers or {}


def parse_policy(raw: bytes) -> dict:
    """An insert's resource-policy body, checked as Compute Engine checks it."""
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        raise ComputeApiError(400, "Invalid JSON payload received.", "parseError") from None
    if not isinstance(body, dict):
        raise ComputeApiError(400, "Invalid JSON payload received. Expected an object.", "parseError")
    unknown = sorted(set(body) - _POLICY_FIELDS)
    if unknown:
        raise ComputeApiError(400, f"Invalid JSON payload received. Unknown name \"{unknown[0]}\" at "
                        "'resource': Cannot find field.", "invalid")
    name = body.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ComputeApiError(400, f"Invalid value for field 'resource.name': {name!r}. Must be a "
                        "match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", "invalid")
    kinds = [k for k in _POLICY_KINDS if body.get(k) is not None]
    if len(kinds) != 1:
        raise ComputeApiError(400, "Exactly one resource policy type must be specified.", "invalid")
    workload = body.get("workloadPolicy")
    if workload is not None:
        unknown = sorted(set(workload) - _WORKLOAD_FIELDS)
        if unknown:
            raise ComputeApiError(400, f"Invalid JSON payload received. Unknown name "
                            f"\"{unknown[0]}\" at 'resource.workload_policy': Cannot find "
                            "field.", "invalid")
        if workload.get("type") not in _WORKLOAD_TYPES:
            raise ComputeApiError(400, "Invalid value for field 'resource.workloadPolicy.type': "
                            f"{workload.get('type')!r}.", "invalid")
        topo, distance = workload.get("acceleratorTopology"), workload.get("maxTopologyDistance")
        if (topo or distance) and workload["type"] != "HIGH_THROUGHPUT":
            raise ComputeApiError(400, "acceleratorTopology and maxTopologyDistance can only be set "
                            "for HIGH_THROUGHPUT workload policies.", "invalid")
        if topo and distance:
            raise ComputeApiError(400, "acceleratorTopology and maxTopologyDistance cannot both be "
                            "set.", "invalid")
    return body


def injected_error(status: int, retry_after: float | None) -> ComputeApiError:
    """The error Compute Engine answers with a passing failure of this status."""
    reason, message = {
        429: ("rateLimitExceeded", "Rate Limit Exceeded"),
        500: ("backendError", "Internal error. Please try again."),
        503: ("backendError", "The service is currently unavailable."),
    }.get(status, ("backendError", f"Injected failure {status}"))
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
    return ComputeApiError(status, message, reason, headers)


def error_body(e: ComputeApiError) -> dict:
    """The JSON body of a refusal."""
    return {"error": {"code": e.status, "message": e.message,
                      "errors": [{"message": e.message, "domain": "global",
                                  "reason": e.reason}]}}


def json_name(raw: bytes) -> str:
    """The `name` of a JSON body, or "" when it has none (for a refusal's message)."""
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        return ""
    return str(body.get("name", "")) if isinstance(body, dict) else ""
