"""The Compute client at its edge, against the local stand-in: retries and their bounds,
timeouts, request ids, operation waits, credentials, and what it must never log."""

from __future__ import annotations

import logging
import socket

import pytest
from google.auth.exceptions import RefreshError, TransportError

from tests.gcp.conftest import NAME, PROJECT, REGION, TOPOLOGY, make_client
from tpujob.gcp import (
    AdcAuth,
    AlreadyExists,
    ApiDisabled,
    ComputeClient,
    ComputeUnavailable,
    CredentialsRefreshFailed,
    CredentialsUnavailable,
    InvalidRequest,
    OperationTimeout,
    PermissionDenied,
    RetryPolicy,
    build_workload_policy,
    ensure_workload_policy,
)
from tpujob.local.compute_standin import ComputeStandIn

pytestmark = pytest.mark.integration


def test_503s_are_retried_then_succeed(compute, client):
    compute.fail_next(2, 503)
    assert client.get_resource_policy(PROJECT, REGION, NAME) is None
    assert [r.status for r in compute.requests] == [503, 503, 404]


def test_429_honours_retry_after(compute, client):
    compute.fail_next(1, 429, retry_after=0.001)
    assert client.get_resource_policy(PROJECT, REGION, NAME) is None
    assert [r.status for r in compute.requests] == [429, 404]


def test_retries_are_bounded_and_then_reported_as_retryable(compute, client):
    compute.fail_next(10, 503)
    with pytest.raises(ComputeUnavailable) as info:
        ensure_workload_policy(client, PROJECT, REGION, NAME, TOPOLOGY)
    e = info.value
    assert compute.count() == 3        # FAST_RETRY.max_attempts
    assert "answered 503 3 times" in e.message and "The service is currently unavailable" \
        in e.message
    assert e.reason == "ComputeUnavailable" and e.retryable and e.retry_after


def test_an_unreachable_endpoint_is_retried_then_reported():
    with socket.socket() as s:       # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = ComputeClient(f"http://127.0.0.1:{port}/compute/v1", timeout_s=1.0,
                           retry=RetryPolicy(max_attempts=2, backoff_s=0.001))
    with pytest.raises(ComputeUnavailable, match="unreachable after 2 attempts") as info:
        client.get_resource_policy(PROJECT, REGION, NAME)
    assert info.value.retryable


def test_every_call_has_a_timeout(compute):
    # The first answer comes too late; the client gives up on it and retries.
    client = make_client(compute, timeout_s=0.2)
    compute.stall_next(1, 1.0)
    assert client.get_resource_policy(PROJECT, REGION, NAME) is None
    assert compute.count("get") == 2


def test_a_retried_insert_reuses_its_request_id(compute, client):
    body = build_workload_policy(NAME, TOPOLOGY)
    first = client.insert_resource_policy(PROJECT, REGION, body, request_id="rid-1")
    again = client.insert_resource_policy(PROJECT, REGION, body, request_id="rid-1")
    assert again["name"] == first["name"]
    with pytest.raises(AlreadyExists):
        client.insert_resource_policy(PROJECT, REGION, body, request_id="rid-2")
    assert len(compute.policies()) == 1


def test_an_operation_that_does_not_finish_times_out_retryably():
    with ComputeStandIn(operation_polls=10_000) as compute:
        client = make_client(compute)
        with pytest.raises(OperationTimeout) as info:
            ensure_workload_policy(client, PROJECT, REGION, NAME, TOPOLOGY,
                                   operation_timeout_s=0.2)
        assert info.value.retryable and "may still finish" in info.value.message


def test_a_body_compute_refuses_is_a_400(compute, client):
    body = {**build_workload_policy(NAME, TOPOLOGY), "labels": {"managed-by": "tpujob"}}
    with pytest.raises(InvalidRequest, match='Unknown name "labels"') as info:
        client.insert_resource_policy(PROJECT, REGION, body, request_id="rid")
    assert info.value.status == 400 and not info.value.retryable


def test_disabled_api(compute, client):
    compute.disable_api()
    with pytest.raises(ApiDisabled, match="enable compute.googleapis.com") as info:
        client.get_resource_policy(PROJECT, REGION, NAME)
    assert info.value.reason == "ComputeApiDisabled"


# --- credentials ---------------------------------------------------------------------------

class FakeCredentials:
    """google-auth credentials that hand out `tokens` one refresh at a time."""

    def __init__(self, *tokens: str, fail: Exception | None = None):
        self._tokens = list(tokens)
        self._fail = fail
        self.token: str | None = None
        self.refreshes = 0

    @property
    def valid(self) -> bool:
        return self.token is not None

    def refresh(self, request) -> None:
        self.refreshes += 1
        if self._fail is not None:
            raise self._fail
        self.token = self._tokens.pop(0)


def test_tokens_are_refreshed_after_a_401_and_never_logged(compute, caplog):
    caplog.set_level(logging.DEBUG)
    credentials = FakeCredentials("stale-secret-token", "fresh-secret-token")
    client = make_client(compute, auth=AdcAuth(credentials))
    compute.require_token("fresh-secret-token")
    result = ensure_workload_policy(client, PROJECT, REGION, NAME, TOPOLOGY)
    assert result.created and credentials.refreshes == 2
    assert [r.status for r in compute.requests][:2] == [401, 404]
    assert all(r.authorized for r in compute.requests)
    shown = caplog.text + repr(client) + repr(result)
    assert caplog.records and "secret-token" not in shown


def test_a_denied_call_does_not_leak_the_token(compute):
    client = make_client(compute, auth=AdcAuth(FakeCredentials("secret-token")))
    compute.deny("compute.resourcePolicies.get")
    with pytest.raises(PermissionDenied) as info:
        client.get_resource_policy(PROJECT, REGION, NAME)
    assert "secret-token" not in str(info.value)


@pytest.mark.parametrize(("failure", "error", "retryable"), [
    (TransportError("metadata server unreachable"), CredentialsRefreshFailed, True),
    (RefreshError("invalid_grant: account not found"), CredentialsUnavailable, False),
])
def test_refresh_failures(compute, failure, error, retryable):
    client = make_client(compute, auth=AdcAuth(FakeCredentials(fail=failure)))
    with pytest.raises(error) as info:
        client.get_resource_policy(PROJECT, REGION, NAME)
    assert info.value.reason == "GcpCredentialsUnavailable"
    assert info.value.retryable is retryable
    assert compute.requests == []


def test_tokens_never_go_over_plain_http_to_another_host():
    with pytest.raises(ValueError, match="refusing to send access tokens"):
        ComputeClient("http://compute.internal/compute/v1", auth=AdcAuth(FakeCredentials("t")))


def test_missing_application_default_credentials(monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(CredentialsUnavailable, match="Workload Identity"):
        AdcAuth.from_environment()
