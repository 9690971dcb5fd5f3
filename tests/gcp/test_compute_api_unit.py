"""What the Compute stand-in accepts and how it refuses, without a server: an insert's body
checked as Compute Engine checks it, the routes and the permission each needs, and the shapes of
its error bodies and injected failures."""

from __future__ import annotations

import json

import pytest

from tpujob.local.compute_api import (
    PERMISSION_CREATE,
    PERMISSION_GET,
    PERMISSION_OPERATION,
    PERMISSIONS,
    ROUTES,
    ComputeApiError,
    error_body,
    injected_error,
    json_name,
    parse_policy,
)

pytestmark = pytest.mark.unit

WORKLOAD = {"name": "p", "workloadPolicy": {"type": "HIGH_THROUGHPUT",
                                            "acceleratorTopology": "4x4x4"}}


def _body(**fields) -> bytes:
    return json.dumps(fields).encode()


@pytest.mark.parametrize("body", [
    WORKLOAD,
    {"name": "a" * 63, "description": "d", "region": "r",
     "workloadPolicy": {"type": "HIGH_THROUGHPUT", "maxTopologyDistance": "BLOCK"}},
    {"name": "p-1", "workloadPolicy": {"type": "HIGH_AVAILABILITY"}},
    {"name": "p", "groupPlacementPolicy": {"collocation": "COLLOCATED"}},
])
def test_a_valid_insert_is_taken_as_written(body):
    assert parse_policy(json.dumps(body).encode()) == body


@pytest.mark.parametrize("raw, reason, message", [
    (b"{", "parseError", "Invalid JSON payload received."),
    (b"", "parseError", "Expected an object"),
    (b"[1]", "parseError", "Expected an object"),
    (_body(name="p", labels={}, workloadPolicy={"type": "HIGH_THROUGHPUT"}), "invalid",
     'Unknown name "labels" at \'resource\''),
    (_body(workloadPolicy={"type": "HIGH_THROUGHPUT"}), "invalid", "'resource.name': None"),
    (_body(name="P", workloadPolicy={"type": "HIGH_THROUGHPUT"}), "invalid", "'P'"),
    (_body(name="1p", workloadPolicy={"type": "HIGH_THROUGHPUT"}), "invalid", "'1p'"),
    (_body(name="p-", workloadPolicy={"type": "HIGH_THROUGHPUT"}), "invalid", "'p-'"),
    (_body(name="a" * 64, workloadPolicy={"type": "HIGH_THROUGHPUT"}), "invalid", "a" * 64),
    (_body(name="p"), "invalid", "Exactly one resource policy type"),
    (_body(name="p", workloadPolicy=None), "invalid", "Exactly one resource policy type"),
    (_body(name="p", workloadPolicy={"type": "HIGH_THROUGHPUT"},
           groupPlacementPolicy={"collocation": "COLLOCATED"}), "invalid",
     "Exactly one resource policy type"),
    (_body(name="p", workloadPolicy={"type": "HIGH_THROUGHPUT", "size": 1}), "invalid",
     'Unknown name "size" at \'resource.workload_policy\''),
    (_body(name="p", workloadPolicy={"type": "FAST"}), "invalid",
     "'resource.workloadPolicy.type': 'FAST'"),
    (_body(name="p", workloadPolicy={}), "invalid", "'resource.workloadPolicy.type': None"),
    (_body(name="p", workloadPolicy={"type": "HIGH_AVAILABILITY", "acceleratorTopology": "4x4x4"}),
     "invalid", "can only be set for HIGH_THROUGHPUT"),
    (_body(name="p", workloadPolicy={"type": "HIGH_AVAILABILITY", "maxTopologyDistance": "BLOCK"}),
     "invalid", "can only be set for HIGH_THROUGHPUT"),
    (_body(name="p", workloadPolicy={"type": "HIGH_THROUGHPUT", "acceleratorTopology": "4x4x4",
                                     "maxTopologyDistance": "BLOCK"}),
     "invalid", "cannot both be set"),
])
def test_a_bad_insert_is_refused_with_compute_engines_reason(raw, reason, message):
    with pytest.raises(ComputeApiError) as refused:
        parse_policy(raw)
    assert (refused.value.status, refused.value.reason) == (400, reason)
    assert message in refused.value.message


@pytest.mark.parametrize("method, path, kind, params", [
    ("POST", "/projects/p/regions/r/resourcePolicies", "insert",
     {"project": "p", "region": "r"}),
    ("GET", "/projects/p/regions/r/resourcePolicies/x", "get",
     {"project": "p", "region": "r", "name": "x"}),
    ("GET", "/projects/p/regions/r/operations/o", "operation",
     {"project": "p", "region": "r", "operation": "o"}),
    ("POST", "/projects/p/regions/r/operations/o/wait", "wait",
     {"project": "p", "region": "r", "operation": "o"}),
])
def test_each_route_and_the_permission_it_needs(method, path, kind, params):
    found = [(k, m.groupdict()) for meth, pattern, k in ROUTES
             if meth == method and (m := pattern.match(path))]
    assert found == [(kind, params)]
    assert PERMISSIONS[kind] == {"insert": PERMISSION_CREATE, "get": PERMISSION_GET}.get(
        kind, PERMISSION_OPERATION)


@pytest.mark.parametrize("path", ["/projects/p/regions/r/resourcePolicies/x/y",
                                  "/projects/p/zones/z/resourcePolicies",
                                  "/projects/p/regions/r/operations/o/cancel"])
def test_other_paths_match_no_route(path):
    assert not any(pattern.match(path) for _, pattern, _ in ROUTES)


@pytest.mark.parametrize("status, retry_after, reason, message, headers", [
    (429, None, "rateLimitExceeded", "Rate Limit Exceeded", {}),
    (500, None, "backendError", "Internal error. Please try again.", {}),
    (503, 2.5, "backendError", "The service is currently unavailable.", {"Retry-After": "2.5"}),
    (502, 0, "backendError", "Injected failure 502", {"Retry-After": "0"}),
])
def test_injected_failures_answer_as_compute_engine_does(status, retry_after, reason, message,
                                                         headers):
    e = injected_error(status, retry_after)
    assert (e.status, e.reason, e.message, e.headers) == (status, reason, message, headers)
    assert error_body(e) == {"error": {"code": status, "message": message, "errors": [
        {"message": message, "domain": "global", "reason": reason}]}}


@pytest.mark.parametrize("raw, name", [(_body(name="p"), "p"), (b"{", ""), (b"", ""),
                                       (b"[]", ""), (_body(other=1), "")])
def test_the_name_a_refusal_quotes(raw, name):
    assert json_name(raw) == name
