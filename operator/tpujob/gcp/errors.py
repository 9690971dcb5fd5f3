"""The errors the Compute Engine client raises: one hierarchy, each with a CamelCase `reason`
that becomes a job condition's reason, a `message` a person can act on, and whether retrying
later without anyone changing anything is likely to help (`retryable`, `retry_after`)."""

from __future__ import annotations

from enum import StrEnum


class ComputeErrorReason(StrEnum):
    """Why talking to Compute Engine failed; the values are used as condition reasons."""

    PERMISSION_DENIED = "WorkloadPolicyPermissionDenied"
    API_DISABLED = "ComputeApiDisabled"
    LOCATION_NOT_FOUND = "WorkloadPolicyLocationNotFound"
    QUOTA_EXCEEDED = "WorkloadPolicyQuotaExceeded"
    MISMATCH = "WorkloadPolicyMismatch"
    ALREADY_EXISTS = "WorkloadPolicyAlreadyExists"
    INVALID = "WorkloadPolicyInvalid"
    OPERATION_FAILED = "WorkloadPolicyOperationFailed"
    OPERATION_TIMEOUT = "WorkloadPolicyOperationTimeout"
    BEING_DELETED = "WorkloadPolicyBeingDeleted"
    UNAVAILABLE = "ComputeUnavailable"
    CREDENTIALS = "GcpCredentialsUnavailable"
    REQUEST_FAILED = "ComputeRequestFailed"


class ComputeError(Exception):
    """Base of every error the Compute client and `ensure_workload_policy` raise.

    `reason`: a ComputeErrorReason (CamelCase). `message`: what went wrong and what to do.
    `retryable`: True when the same call is likely to succeed later with nothing changed
    (an outage, a slow operation); False when a person has to act (IAM, quota, a clash).
    `retry_after`: suggested seconds before retrying, for retryable errors.
    `status`: the HTTP status that caused it, when there was one.
    """

    reason: ComputeErrorReason = ComputeErrorReason.REQUEST_FAILED
    retryable: bool = False
    retry_after: float | None = None

    def __init__(self, message: str, *, status: int | None = None,
                 retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        if retry_after is not None:
            self.retry_after = retry_after

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class PermissionDenied(ComputeError):
    """403: the operator's identity lacks an IAM permission (named in the message)."""

    reason = ComputeErrorReason.PERMISSION_DENIED

    def __init__(self, message: str, *, permission: str, project: str, region: str,
                 status: int | None = 403):
        super().__init__(message, status=status)
        self.permission = permission
        self.project = project
        self.region = region


class ApiDisabled(ComputeError):
    """403 accessNotConfigured: the Compute Engine API is not enabled in the project."""

    reason = ComputeErrorReason.API_DISABLED


class LocationNotFound(ComputeError):
    """404 on the collection: the project or the region does not exist (or is not visible)."""

    reason = ComputeErrorReason.LOCATION_NOT_FOUND


class QuotaExceeded(ComputeError):
    """A Compute Engine quota (e.g. resource policies per region) is used up."""

    reason = ComputeErrorReason.QUOTA_EXCEEDED


class PolicyMismatch(ComputeError):
    """A resource policy with the conventional name exists but is not the one the slice needs.
    tpujob never modifies or deletes it."""

    reason = ComputeErrorReason.MISMATCH


class AlreadyExists(ComputeError):
    """409 on insert: someone else created a resource with that name first.
    `ensure_workload_policy` handles it (reads the policy and checks it); it only escapes
    from direct calls to the client."""

    reason = ComputeErrorReason.ALREADY_EXISTS


class InvalidRequest(ComputeError):
    """400, or a name/topology tpujob refuses before sending: the request itself is wrong."""

    reason = ComputeErrorReason.INVALID


class OperationFailed(ComputeError):
    """The insert operation finished with an error (its messages are in `message`)."""

    reason = ComputeErrorReason.OPERATION_FAILED

    def __init__(self, message: str, *, codes: tuple[str, ...] = (), status: int | None = None):
        super().__init__(message, status=status)
        self.codes = codes


class OperationTimeout(ComputeError):
    """The insert operation did not finish in time; it may still finish on its own."""

    reason = ComputeErrorReason.OPERATION_TIMEOUT
    retryable = True
    retry_after = 30.0


class BeingDeleted(ComputeError):
    """The policy exists but is being deleted; it can be created again once it is gone."""

    reason = ComputeErrorReason.BEING_DELETED
    retryable = True
    retry_after = 30.0


class ComputeUnavailable(ComputeError):
    """Compute Engine kept answering 429/5xx, or could not be reached, after all retries."""

    reason = ComputeErrorReason.UNAVAILABLE
    retryable = True
    retry_after = 60.0


class CredentialsUnavailable(ComputeError):
    """No Application Default Credentials, or they could not be refreshed."""

    reason = ComputeErrorReason.CREDENTIALS


class CredentialsRefreshFailed(CredentialsUnavailable):
    """Refreshing the access token failed in transit (e.g. the metadata server hiccuped)."""

    retryable = True
    retry_after = 30.0
