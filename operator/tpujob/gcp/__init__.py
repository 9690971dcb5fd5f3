"""Google Cloud APIs the operator calls itself: today the Compute Engine workload policy that
tpu7x multi-host slices need (see docs/workload-policies.md)."""

from tpujob.gcp.auth import AdcAuth, NoAuth
from tpujob.gcp.compute import DEFAULT_BASE_URL, ComputeClient, RetryPolicy
from tpujob.gcp.errors import (
    AlreadyExists,
    ApiDisabled,
    BeingDeleted,
    ComputeError,
    ComputeErrorReason,
    ComputeUnavailable,
    CredentialsRefreshFailed,
    CredentialsUnavailable,
    InvalidRequest,
    LocationNotFound,
    OperationFailed,
    OperationTimeout,
    PermissionDenied,
    PolicyMismatch,
    QuotaExceeded,
)
from tpujob.gcp.settings import WorkloadPolicySettings, WorkloadPolicySettingsError
from tpujob.gcp.workload_policy import (
    EnsureOutcome,
    WorkloadPolicyResult,
    WorkloadPolicySpec,
    build_workload_policy,
    ensure_workload_policy,
    ensure_workload_policy_for_plan,
    plan_workload_policy,
)

__all__ = [
    "DEFAULT_BASE_URL", "AdcAuth", "AlreadyExists", "ApiDisabled", "BeingDeleted",
    "ComputeClient", "ComputeError", "ComputeErrorReason", "ComputeUnavailable",
    "CredentialsRefreshFailed", "CredentialsUnavailable", "EnsureOutcome", "InvalidRequest",
    "LocationNotFound", "NoAuth", "OperationFailed", "OperationTimeout", "PermissionDenied",
    "PolicyMismatch", "QuotaExceeded", "RetryPolicy", "WorkloadPolicyResult",
    "WorkloadPolicySettings", "WorkloadPolicySettingsError", "WorkloadPolicySpec",
    "build_workload_policy", "ensure_workload_policy", "ensure_workload_policy_for_plan",
    "plan_workload_policy",
]
