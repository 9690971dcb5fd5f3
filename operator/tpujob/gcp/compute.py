"""A small synchronous client for the Compute Engine REST API: regional resource policies and
the regional operations their inserts return. Every call has a timeout; 429/5xx answers and
connection errors are retried with bounded exponential backoff; failures become ComputeError
subclasses whose messages say what to fix.

Endpoints (Compute Engine API v1):
  GET  {base}/projects/{project}/regions/{region}/resourcePolicies/{name}
  POST {base}/projects/{project}/regions/{region}/resourcePolicies?requestId={uuid}
  POST {base}/projects/{project}/regions/{region}/operations/{operation}/wait
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import requests

from tpujob.gcp.auth import Auth, NoAuth
from tpujob.gcp.errors import (
    AlreadyExists,
    ApiDisabled,
    ComputeError,
    ComputeUnavailable,
    InvalidRequest,
    LocationNotFound,
    OperationFailed,
    OperationTimeout,
    PermissionDenied,
    QuotaExceeded,
)

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://compute.googleapis.com/compute/v1"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# errors[].reason values Compute Engine uses for rate limits (sometimes with a 403).
RATE_LIMIT_REASONS = frozenset({"rateLimitExceeded", "userRateLimitExceeded"})
QUOTA_REASONS = frozenset({"quotaExceeded", "QUOTA_EXCEEDED"})
PERMISSION_GET = "compute.resourcePolicies.get"
PERMISSION_CREATE = "compute.resourcePolicies.create"
PERMISSION_OPERATION = "compute.regionOperations.get"
_REQUIRED_PERMISSION = re.compile(r"Required '([A-Za-z0-9_.]+)' permission")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a call is retried on 429/5xx and connection errors."""

    max_attempts: int = 5
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to sleep after failed attempt number `attempt` (1-based)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_backoff_s)
        ceiling = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)


@dataclass(frozen=True)
class _Call:
    """What one request is for: enough to word its errors."""

    action: str          # "read", "create", "wait for"
    permission: str
    project: str
    region: str
    what: str            # e.g. "resource policy tpu7x-64-2x4x4-placement-policy"


class ComputeClient:
    """Regional resource policies and operations over the Compute Engine REST API."""

    def __init__(self, base_url: str = DEFAULT_BASE_URL, *, auth: Auth | None = None,
                 timeout_s: float = 30.0, connect_timeout_s: float = 10.0,
                 wait_timeout_s: float = 130.0, poll_interval_s: float = 1.0,
                 retry: RetryPolicy = RetryPolicy(), user_agent: str = "tpujob"):
        self.base_url = base_url.rstrip("/")
        self.auth: Auth = auth if auth is not None else NoAuth()
        if not isinstance(self.auth, NoAuth) and not _may_carry_tokens(self.base_url):
            raise ValueError(f"refusing to send access tokens to {self.base_url}: use https:// "
                             "(plain http:// only reaches a local stand-in, without auth)")
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        # operations.wait holds the request up to ~2 minutes server-side.
        self.wait_timeout_s = wait_timeout_s
        self.poll_interval_s = poll_interval_s
        self.retry = retry
        self.user_agent = user_agent
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"ComputeClient({self.base_url!r}, auth={self.auth!r})"

    # --- resource policies -------------------------------------------------------------------

    def get_resource_policy(self, project: str, region: str, name: str) -> dict | None:
        """The resource policy, or None when it does not exist."""
        call = _Call("read", PERMISSION_GET, project, region, f"resource policy {name}")
        resp = self._request("GET", self.resource_policy_url(project, region, name), call)
        if resp.status_code == 404:
            return None
        self._raise_for_status(resp, call)
        return _json(resp)

    def insert_resource_policy(self, project: str, region: str, body: dict, *,
                               request_id: str) -> dict:
        """Start creating a resource policy; returns the regional Operation.

        `request_id` (a UUID) makes retries of this insert safe: Compute Engine ignores a
        repeated request with the same id. Raises AlreadyExists on 409.
        """
        name = body.get("name", "")
        call = _Call("create", PERMISSION_CREATE, project, region, f"resource policy {name}")
        resp = self._request("POST", self.resource_policy_url(project, region), call,
                             json=body, params={"requestId": request_id})
        if resp.status_code == 409:
            raise AlreadyExists(_error_message(resp), status=409)
        if resp.status_code == 404:
            raise LocationNotFound(
                f"Compute Engine has no project {project!r} with region {region!r} (404 "
                f"creating {call.what}: {_error_message(resp)}); check the operator's "
                "--gcp-project and --gcp-region", status=404)
        self._raise_for_status(resp, call)
        return _json(resp)

    # --- operations --------------------------------------------------------------------------

    def wait_region_operation(self, project: str, region: str, operation: dict, *,
                              timeout_s: float = 300.0) -> dict:
        """Wait until a regional operation is DONE and return it; raise if it failed.

        Raises OperationTimeout after `timeout_s`, AlreadyExists / QuotaExceeded /
        OperationFailed when the operation ended with an error.
        """
        name = operation.get("name", "")
        call = _Call("wait for", PERMISSION_OPERATION, project, region, f"operation {name}")
        deadline = time.monotonic() + timeout_s
        while operation.get("status") != "DONE":
            if time.monotonic() >= deadline:
                raise OperationTimeout(
                    f"operation {name} in {project}/{region} was not done after {timeout_s:g}"
                    f" s (status {operation.get('status')}); it may still finish")
            url = f"{self._region_url(project, region)}/operations/{_seg(name)}/wait"
            resp = self._request("POST", url, call, timeout=self.wait_timeout_s)
            self._raise_for_status(resp, call)
            operation = _json(resp)
            if operation.get("status") != "DONE":
                time.sleep(min(self.poll_interval_s, max(deadline - time.monotonic(), 0.0)))
        _raise_for_operation_error(operation)
        return operation

    # --- plumbing ----------------------------------------------------------------------------

    def _region_url(self, project: str, region: str) -> str:
        return f"{self.base_url}/projects/{_seg(project)}/regions/{_seg(region)}"

    def resource_policy_url(self, project: str, region: str, name: str | None = None) -> str:
        """The URL of a resource policy (or of the collection, without `name`)."""
        url = f"{self._region_url(project, region)}/resourcePolicies"
        return f"{url}/{_seg(name)}" if name is not None else url

    def _http(self) -> requests.Session:
        # One connection pool per thread: kopf's sync handlers share this client across threads.
        pool = getattr(self._local, "pool", None)
        if pool is None:
            pool = requests.Session()
            pool.headers["User-Agent"] = self.user_agent
            self._local.pool = pool
        return pool

    def _request(self, method: str, url: str, call: _Call, *, json: Any = None,
                 params: dict | None = None, timeout: float | None = None) -> requests.Response:
        """Send with retries on connection errors, 401 (once, after a token refresh), 429 and
        5xx. Returns the last response for the caller to interpret."""
        path = url[len(self.base_url):]
        reauthorized = False
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = self._http().request(
                    method, url, json=json, params=params, headers=self.auth.headers(),
                    timeout=(self.connect_timeout_s, timeout or self.timeout_s))
            except (requests.ConnectionError, requests.Timeout) as e:
                if attempt >= self.retry.max_attempts:
                    raise ComputeUnavailable(
                        f"could not {call.action} {call.what} in {call.project}/{call.region}: "
                        f"{self.base_url} unreachable after {attempt} attempts "
                        f"({type(e).__name__})") from None
                delay = self.retry.delay(attempt)
                log.warning("%s %s failed (%s), retrying in %.1f s", method, path,
                            type(e).__name__, delay)
                time.sleep(delay)
                continue
            log.debug("%s %s -> %d", method, path, resp.status_code)
            if resp.status_code == 401 and not reauthorized:
                reauthorized = True
                self.auth.invalidate()
                continue
            if _is_retryable(resp):
                if attempt >= self.retry.max_attempts:
                    raise ComputeUnavailable(
                        f"could not {call.action} {call.what} in {call.project}/{call.region}: "
                        f"Compute Engine answered {resp.status_code} {attempt} times "
                        f"({_error_message(resp)})", status=resp.status_code)
                delay = self.retry.delay(attempt, _retry_after(resp))
                log.warning("%s %s -> %d, retrying in %.1f s", method, path,
                            resp.status_code, delay)
                time.sleep(delay)
                continue
            return resp

    def _raise_for_status(self, resp: requests.Response, call: _Call) -> None:
        if resp.status_code < 400:
            return
        raise _error_for(resp, call)


def _error_for(resp: requests.Response, call: _Call) -> ComputeError:
    """The ComputeError for a non-2xx answer that retrying did not (or would not) fix."""
    status = resp.status_code
    message = _error_message(resp)
    reasons = _error_reasons(resp)
    where = f"project {call.project!r}, region {call.region!r}"
    if status == 403 and "accessNotConfigured" in reasons | {_status_field(resp)}:
        return ApiDisabled(
            f"the Compute Engine API is not enabled in project {call.project!r}: enable "
            f"compute.googleapis.com ({message})", status=status)
    if reasons & QUOTA_REASONS or (status == 403 and "quota" in message.lower()):
        return QuotaExceeded(
            f"a Compute Engine quota is used up while trying to {call.action} {call.what} in "
            f"{where}: {message}", status=status)
    if status == 403:
        found = _REQUIRED_PERMISSION.search(message)
        permission = found.group(1) if found else call.permission
        return PermissionDenied(
            f"the operator's Google service account lacks IAM permission {permission} in "
            f"{where} (needed to {call.action} {call.what}); grant it, e.g. with a role "
            f"holding {PERMISSION_GET}, {PERMISSION_CREATE} and {PERMISSION_OPERATION} "
            f"(Compute Engine said: {message})",
            permission=permission, project=call.project, region=call.region)
    if status == 404:
        return LocationNotFound(
            f"Compute Engine found nothing at {call.what} in {where} (404: {message})",
            status=status)
    if status == 400:
        return InvalidRequest(
            f"Compute Engine refused to {call.action} {call.what} in {where}: {message}",
            status=status)
    return ComputeError(
        f"could not {call.action} {call.what} in {where}: HTTP {status}: {message}",
        status=status)


def _raise_for_operation_error(operation: dict) -> None:
    errors = (operation.get("error") or {}).get("errors") or []
    if not errors:
        return
    codes = tuple(str(e.get("code", "")) for e in errors)
    text = "; ".join(f"{e.get('code', 'ERROR')}: {e.get('message', '')}".strip() for e in errors)
    name = operation.get("name", "")
    target = operation.get("targetLink", "").rsplit("/", 1)[-1]
    status = operation.get("httpErrorStatusCode")
    if "RESOURCE_ALREADY_EXISTS" in codes or status == 409:
        raise AlreadyExists(f"operation {name}: {text}", status=409)
    if any(c in QUOTA_REASONS for c in codes):
        raise QuotaExceeded(f"creating {target or 'the resource policy'} failed on a quota "
                            f"(operation {name}): {text}", status=status)
    raise OperationFailed(f"creating {target or 'the resource policy'} failed (operation "
                          f"{name}): {text}", codes=codes, status=status)


def _is_retryable(resp: requests.Response) -> bool:
    if resp.status_code in RETRY_STATUSES:
        return True
    return resp.status_code == 403 and bool(_error_reasons(resp) & RATE_LIMIT_REASONS)


def _retry_after(resp: requests.Response) -> float | None:
    value = resp.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


def _error_body(resp: requests.Response) -> dict:
    try:
        body = resp.json()
    except ValueError:
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def _error_message(resp: requests.Response) -> str:
    error = _error_body(resp)
    if error.get("message"):
        return str(error["message"])
    text = " ".join(resp.text.split())
    return text[:200] if text else resp.reason or f"HTTP {resp.status_code}"


def _error_reasons(resp: requests.Response) -> set[str]:
    return {str(e.get("reason")) for e in _error_body(resp).get("errors") or []
            if isinstance(e, dict) and e.get("reason")}


def _status_field(resp: requests.Response) -> str:
    # Newer Google error bodies carry details[].reason, e.g. SERVICE_DISABLED.
    details = _error_body(resp).get("details") or []
    for d in details:
        if isinstance(d, dict) and d.get("reason") == "SERVICE_DISABLED":
            return "accessNotConfigured"
    return ""


def _json(resp: requests.Response) -> dict:
    try:
        body = resp.json()
    except ValueError:
        raise ComputeError(f"Compute Engine answered {resp.status_code} with a body that is "
                           "not JSON", status=resp.status_code) from None
    if not isinstance(body, dict):
        raise ComputeError("Compute Engine answered with JSON that is not an object",
                           status=resp.status_code)
    return body


def _may_carry_tokens(base_url: str) -> bool:
    parts = urlsplit(base_url)
    return parts.scheme == "https" or (parts.scheme == "http"
                                       and parts.hostname in ("127.0.0.1", "::1", "localhost"))


def _seg(value: str) -> str:
    return quote(value, safe="")
