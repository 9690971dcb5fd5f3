"""The Compute Engine workload policy a tpu7x multi-host slice needs: its name and request body
(pure), and making sure it exists (read it; if missing, create it and wait).

A workload policy is shared: every job on the same slice shape and every node pool built for
it use the one policy of that name. So tpujob only ever reads and creates policies. It never
modifies one (a policy that differs is reported, not changed) and never deletes one, not even
when the last job using it ends."""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from tpujob.gcp.compute import ComputeClient
from tpujob.gcp.errors import (
    AlreadyExists,
    BeingDeleted,
    ComputeUnavailable,
    InvalidRequest,
    PolicyMismatch,
)

if TYPE_CHECKING:
    from tpujob.gcp.settings import WorkloadPolicySettings
    from tpujob_plan.slice_plan import SlicePlan

log = logging.getLogger(__name__)

HIGH_THROUGHPUT = "HIGH_THROUGHPUT"
# ResourcePolicy has no labels field in the Compute API (v1), so the marker lives in the
# description; an insert carrying `labels` would be refused as an unknown field.
MANAGED_BY_MARKER = "managed-by=tpujob"
# RFC 1035, as Compute Engine requires for resource names.
_NAME = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
_TOPOLOGY = re.compile(r"^[1-9][0-9]*(?:x[1-9][0-9]*){1,2}$")
_POLICY_KINDS = ("groupPlacementPolicy", "snapshotSchedulePolicy", "instanceSchedulePolicy",
                 "diskConsistencyGroupPolicy")


@dataclass(frozen=True)
class WorkloadPolicySpec:
    """The workload policy a slice shape needs: its conventional name and topology."""

    name: str
    accelerator_topology: str
    type: str = HIGH_THROUGHPUT


class EnsureOutcome(StrEnum):
    """What `ensure_workload_policy` found or did."""

    FOUND = "Found"          # it existed already (another job or a node pool made it)
    CREATED = "Created"      # this call created it
    ADOPTED = "Adopted"      # someone created it between our read and our insert (409)


@dataclass(frozen=True)
class WorkloadPolicyResult:
    """The policy that now exists, and how it came to."""

    name: str
    project: str
    region: str
    accelerator_topology: str
    outcome: EnsureOutcome
    self_link: str
    managed_by_tpujob: bool

    @property
    def created(self) -> bool:
        return self.outcome is EnsureOutcome.CREATED


def plan_workload_policy(plan: SlicePlan) -> WorkloadPolicySpec | None:
    """The workload policy a planned slice needs, or None (only tpu7x with more than one host
    needs one; the name is the one its pods select with cloud.google.com/placement-policy-name)."""
    name = plan.workload_policy
    if name is None:
        return None
    return WorkloadPolicySpec(name=name, accelerator_topology=plan.slice_type.topology)


def build_workload_policy(name: str, topology: str) -> dict:
    """The ResourcePolicy body to insert. Raises InvalidRequest for a name Compute Engine would
    refuse or a topology that is not `AxBxC`/`AxB`, before anything is sent."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidRequest(
            f"workload policy name {name!r} is not a valid Compute Engine name (1-63 "
            "characters: a lowercase letter, then lowercase letters, digits or '-', not "
            "ending in '-')")
    if not isinstance(topology, str) or not _TOPOLOGY.match(topology):
        raise InvalidRequest(
            f"accelerator topology {topology!r} is not a TPU topology like 2x4x4")
    return {
        "name": name,
        "description": (f"Placement of TPU slices with topology {topology}; "
                        f"{MANAGED_BY_MARKER}; shared by jobs and node pools, "
                        "never deleted by tpujob"),
        "workloadPolicy": {"type": HIGH_THROUGHPUT, "acceleratorTopology": topology},
    }


def ensure_workload_policy(client: ComputeClient, project: str, region: str, name: str,
                           topology: str, *,
                           operation_timeout_s: float = 300.0) -> WorkloadPolicyResult:
    """Make sure the HIGH_THROUGHPUT workload policy `name` for `topology` exists in
    `project`/`region`. Idempotent and safe to call from several jobs or replicas at once.

    Raises a ComputeError subclass: PolicyMismatch when a policy of that name exists but
    differs (it is left alone), PermissionDenied, LocationNotFound, QuotaExceeded,
    OperationFailed, ComputeUnavailable, ...
    """
    body = build_workload_policy(name, topology)
    # Most calls end here: the policy is shared, so usually some job already created it.
    existing = client.get_resource_policy(project, region, name)
    if existing is not None:
        return _accept_existing(existing, project, region, name, topology, EnsureOutcome.FOUND)

    # Create it. One request id for all retries of this insert, so a retried POST whose first
    # attempt did reach Compute Engine does not count as a second request.
    try:
        operation = client.insert_resource_policy(project, region, body,
                                                  request_id=str(uuid.uuid4()))
        operation = client.wait_region_operation(project, region, operation,
                                                 timeout_s=operation_timeout_s)
    except AlreadyExists:
        # Someone (another job, another operator replica, a node pool tool) won the race:
        # theirs is fine if it is the same policy.
        existing = client.get_resource_policy(project, region, name)
        if existing is None:
            raise ComputeUnavailable(
                f"Compute Engine reported workload policy {name} in {project}/{region} as "
                "already existing but cannot read it yet", status=409) from None
        return _accept_existing(existing, project, region, name, topology,
                                EnsureOutcome.ADOPTED)

    log.info("created workload policy %s (topology %s) in %s/%s", name, topology, project,
             region)
    return WorkloadPolicyResult(
        name=name, project=project, region=region, accelerator_topology=topology,
        outcome=EnsureOutcome.CREATED,
        self_link=operation.get("targetLink") or client.resource_policy_url(project, region, name),
        managed_by_tpujob=True)


def ensure_workload_policy_for_plan(client: ComputeClient, settings: WorkloadPolicySettings,
                                    plan: SlicePlan) -> WorkloadPolicyResult | None:
    """The operator's entry point: ensure the policy a job's slice needs, when workload
    policies are switched on and the slice needs one; otherwise None and no request."""
    spec = plan_workload_policy(plan)
    if spec is None or not settings.enabled:
        return None
    return ensure_workload_policy(client, settings.project, settings.region, spec.name,
                                  spec.accelerator_topology,
                                  operation_timeout_s=settings.operation_timeout_s)


def _accept_existing(policy: dict, project: str, region: str, name: str, topology: str,
                     outcome: EnsureOutcome) -> WorkloadPolicyResult:
    """Use an existing policy if it is the one the slice needs; never change it."""
    where = f"resource policy {name} in {project}/{region}"
    leave_alone = ("tpujob never modifies or deletes resource policies: delete or rename it "
                   "yourself if nothing uses it, or run the job where the policy fits")
    workload = policy.get("workloadPolicy")
    if not isinstance(workload, dict):
        kind = next((k for k in _POLICY_KINDS if policy.get(k)), "different")
        raise PolicyMismatch(f"{where} is a {kind} resource policy, not a workload policy; "
                             f"{leave_alone}")
    found_type = workload.get("type")
    found_topology = workload.get("acceleratorTopology")
    if found_type != HIGH_THROUGHPUT or found_topology != topology:
        raise PolicyMismatch(
            f"{where} has workloadPolicy.type={found_type} and "
            f"workloadPolicy.acceleratorTopology={found_topology}, but this slice needs "
            f"type={HIGH_THROUGHPUT} and acceleratorTopology={topology}; {leave_alone}")
    if policy.get("status") == "DELETING":
        raise BeingDeleted(f"{where} is being deleted; it will be created again once it is "
                           "gone")
    return WorkloadPolicyResult(
        name=name, project=project, region=region, accelerator_topology=topology,
        outcome=outcome, self_link=policy.get("selfLink", ""),
        managed_by_tpujob=MANAGED_BY_MARKER in (policy.get("description") or ""))
