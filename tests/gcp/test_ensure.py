"""ensure_workload_policy against the local Compute stand-in: get-or-create, idempotence,
sharing between jobs, racing creators, and the cases it must refuse."""

from __future__ import annotations

import threading
import time

import pytest

from tests.gcp.conftest import NAME, PROJECT, REGION, TOPOLOGY, make_client
from tpujob.gcp import (
    BeingDeleted,
    EnsureOutcome,
    LocationNotFound,
    OperationFailed,
    PermissionDenied,
    PolicyMismatch,
    QuotaExceeded,
    WorkloadPolicySettings,
    ensure_workload_policy,
    ensure_workload_policy_for_plan,
)
from tpujob.local.compute_api import PERMISSION_CREATE, PERMISSION_GET, PERMISSION_OPERATION
from tpujob.local.compute_standin import ComputeStandIn
from tpujob_plan.slice_plan import plan_slice

pytestmark = pytest.mark.integration


def test_creates_a_missing_policy_and_waits_for_the_operation():
    with ComputeStandIn(operation_polls=3) as compute:
        result = ensure_workload_policy(make_client(compute), PROJECT, REGION, NAME, TOPOLOGY)
        assert result.outcome is EnsureOutcome.CREATED and result.created
        assert result.managed_by_tpujob
        assert result.self_link.endswith(f"/projects/{PROJECT}/regions/{REGION}"
                                         f"/resourcePolicies/{NAME}")
        policy = compute.policy(PROJECT, REGION, NAME)
        assert policy["workloadPolicy"] == {"type": "HIGH_THROUGHPUT",
                                            "acceleratorTopology": TOPOLOGY}
        assert policy["status"] == "READY"   # the operation was followed to DONE
        assert [r.kind for r in compute.requests] == ["get", "insert", "wait", "wait", "wait"]


def test_second_call_reads_and_does_not_insert(compute, client):
    first = ensure_workload_policy(client, PROJECT, REGION, NAME, TOPOLOGY)
    second = ensure_workload_policy(client, PROJECT, REGION, NAME, TOPOLOGY)
    assert first.outcome is EnsureOutcome.CREATED
    assert second.outcome is EnsureOutcome.FOUND
    assert second.self_link == first.self_link
    assert compute.count("insert") == 1
    assert compute.count("get") == 2


def test_two_jobs_on_one_slice_shape_share_one_policy(compute, client):
    settings = WorkloadPolicySettings(enabled=True, project=PROJECT, region=REGION,
                                      base_url=compute.url, auth="none")
    job_a = ensure_workload_policy_for_plan(client, settings, plan_slice("tpu7x-128"))
    job_b = ensure_workload_policy_for_plan(client, settings, plan_slice("tpu7x-4x4x4"))
    job_c = ensure_workload_policy_for_plan(client, settings, plan_slice("tpu7x-64"))
    assert job_a.name == job_b.name == "tpu7x-128-4x4x4-placement-policy"
    assert (job_a.outcome, job_b.outcome) == (EnsureOutcome.CREATED, EnsureOutcome.FOUND)
    assert job_c.name == NAME and job_c.created
    assert sorted(k[2] for k in compute.policies()) == [
        "tpu7x-128-4x4x4-placement-policy", NAME]
    assert compute.count("insert") == 2


def test_nothing_is_sent_when_switched_off_or_not_needed(compute, client):
    off = WorkloadPolicySettings()
    on = WorkloadPolicySettings(enabled=True, project=PROJECT, region=REGION)
    assert ensure_workload_policy_for_plan(client, off, plan_slice("tpu7x-64")) is None
    assert ensure_workload_policy_for_plan(client, on, plan_slice("tpu7x-8")) is None
    assert ensure_workload_policy_for_plan(client, on, plan_slice("v6e-16")) is None
    assert compute.requests == []


# How long held GETs wait for every caller: only a guard against a broken test hanging.
HOLD_S = 120.0


def _patient_client(compute):
    """A client whose GETs outwait `hold_gets`: the hold, not the client's read timeout,
    decides when a held GET is answered."""
    return make_client(compute, timeout_s=HOLD_S + 10.0)


@pytest.mark.parametrize("shared_client", [True, False], ids=["one-client", "two-replicas"])
def test_concurrent_ensures_create_once(compute, shared_client):
    # Both callers read "missing" before either inserts; one insert wins, the other gets 409
    # and adopts the winner's policy after reading it. The second caller's arrival is what ends
    # the hold, however late a busy machine starts its thread: a client that gave up on its
    # held GET first would send the GET again, and that retry would pass the hold as the
    # second caller. So the clients wait on a GET for longer than the hold can last.
    compute.hold_gets(2, timeout_s=HOLD_S)
    clients = ([_patient_client(compute)] * 2 if shared_client
               else [_patient_client(compute), _patient_client(compute)])
    results, errors = [None, None], []

    def run(i):
        try:
            results[i] = ensure_workload_policy(clients[i], PROJECT, REGION, NAME, TOPOLOGY)
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()   # each ends: the barrier lets both GETs through once both have arrived
    assert errors == []
    assert sorted(r.outcome for r in results) == sorted([EnsureOutcome.CREATED,
                                                          EnsureOutcome.ADOPTED])
    assert len(compute.policies()) == 1
    assert compute.count("insert") == 2 and compute.count("insert", status=409) == 1


def test_a_held_get_answers_what_it_read_before_the_hold(compute):
    # The hold lets the answers go together, but each GET has read the state on arrival: a
    # policy made while the first GET was held is not in that GET's answer, so a caller let go
    # first cannot create the policy under the feet of one let go with it.
    compute.hold_gets(2, timeout_s=HOLD_S)
    client = _patient_client(compute)
    first = []
    held = threading.Thread(
        target=lambda: first.append(client.get_resource_policy(PROJECT, REGION, NAME)))
    held.start()
    deadline = time.monotonic() + HOLD_S
    while compute.held_gets() < 1:
        assert time.monotonic() < deadline, "the first GET never reached the hold"
        time.sleep(0.01)
    compute.add_policy(PROJECT, REGION, {
        "name": NAME, "workloadPolicy": {"type": "HIGH_THROUGHPUT",
                                         "acceleratorTopology": TOPOLOGY}})
    second = client.get_resource_policy(PROJECT, REGION, NAME)   # completes the hold
    held.join()
    assert first == [None]
    assert second is not None and second["name"] == NAME
    assert compute.count("get", status=404) == 1 and compute.count("get", status=200) == 1


def test_existing_policy_from_a_node_pool_is_used_as_is(compute, client):
    compute.add_policy(PROJECT, REGION, {
        "name": NAME, "description": "made with gcloud",
        "workloadPolicy": {"type": "HIGH_THROUGHPUT", "acceleratorTopology": TOPOLOGY}})
    result = ensure_workload_policy(client, PROJECT, REGION, NAME, TOPOLOGY)
    assert result.outcome is EnsureOutcome.FOUND and not result.managed_by_tpujob
    assert compute.count("insert") == 0


@pytest.mark.parametrize(("existing", "fragment"), [
    ({"workloadPolicy": {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "4x4x4"}},
     "acceleratorTopology=4x4x4, but this slice needs type=HIGH_THROUGHPUT and "
     "acceleratorTopology=2x4x4"),
    ({"workloadPolicy": {"type": "HIGH_AVAILABILITY"}}, "type=HIGH_AVAILABILITY"),
    ({"workloadPolicy": {"type": "HIGH_THROUGHPUT", "maxTopologyDistance": "BLOCK"}},
     "acceleratorTopology=None"),
    ({"groupPlacementPolicy": {"collocation": "COLLOCATED", "vmCount": 2}},
     "is a groupPlacementPolicy resource policy, not a workload policy"),
])
def test_a_different_policy_with_the_name_is_refused_and_left_alone(compute, client,
                                                                     existing, fragment):
    compute.add_policy(PROJECT, REGION, {"name": NAME, **existing})
    before = compute.policy(PROJECT, REGION, NAME)
    with pytest.raises(PolicyMismatch) as info:
        ensure_workload_policy(client, PROJECT, REGION, NAME, TOPOLOGY)
    assert fragment in info.value.message
    assert "never modifies or deletes" in info.value.message
    assert info.value.reason == "WorkloadPolicyMismatch" and not info.value.retryable
    assert compute.policy(PROJECT, REGION, NAME) == before
    assert compute.count("insert") == 0


def test_a_policy_being_deleted_is_retryable(compute, client):
    compute.add_policy(PROJECT, REGION, {
        "name": NAME, "workloadPolicy": {"type": "HIGH_THROUGHPUT",
                                         "acceleratorTopology": TOPOLOGY}},
        status="DELETING")
    with pytest.raises(BeingDeleted) as info:
        ensure_workload_policy(client, PROJECT, REGION, NAME, TOPOLOGY)
    assert info.value.retryable and info.value.retry_after


@pytest.mark.parametrize(("permission", "action"), [
    (PERMISSION_GET, "to read resource policy"),
    (PERMISSION_CREATE, "to create resource policy"),
    (PERMISSION_OPERATION, "to wait for operation"),
])
def test_permission_denied_names_the_permission_project_and_region(compute, client,
                                                                   permission, action):
    compute.deny(permission)
    with pytest.raises(PermissionDenied) as info:
        ensure_workload_policy(client, PROJECT, REGION, NAME, TOPOLOGY)
    e = info.value
    assert (e.permission, e.project, e.region) == (permission, PROJECT, REGION)
    assert f"lacks IAM permission {permission} in project '{PROJECT}', region '{REGION}'" \
        in e.message
    assert action in e.message
    assert e.reason == "WorkloadPolicyPermissionDenied" and e.status == 403
    assert not e.retryable


def test_unknown_project_or_region_is_reported_with_the_flags_to_check():
    with ComputeStandIn(projects={PROJECT}, regions={REGION}) as compute:
        client = make_client(compute)
        with pytest.raises(LocationNotFound) as info:
            ensure_workload_policy(client, PROJECT, "europe-west4", NAME, TOPOLOGY)
        assert "region 'europe-west4'" in info.value.message
        assert "--gcp-project and --gcp-region" in info.value.message
        assert not info.value.retryable


def test_a_failed_operation_surfaces_its_message_and_creates_nothing(compute, client):
    compute.fail_next_operation("Accelerator topology 2x4x4 is not supported in us-central1",
                                code="INVALID_USAGE")
    with pytest.raises(OperationFailed) as info:
        ensure_workload_policy(client, PROJECT, REGION, NAME, TOPOLOGY)
    assert "INVALID_USAGE: Accelerator topology 2x4x4 is not supported in us-central1" \
        in info.value.message
    assert info.value.codes == ("INVALID_USAGE",)
    assert info.value.reason == "WorkloadPolicyOperationFailed"
    assert compute.policy(PROJECT, REGION, NAME) is None


def test_quota_exceeded(compute, client):
    compute.set_quota(0)
    with pytest.raises(QuotaExceeded) as info:
        ensure_workload_policy(client, PROJECT, REGION, NAME, TOPOLOGY)
    assert "RESOURCE_POLICIES" in info.value.message
    assert info.value.reason == "WorkloadPolicyQuotaExceeded" and not info.value.retryable


def test_a_transient_outage_is_ridden_out(compute, client):
    compute.fail_next(2, 503)
    result = ensure_workload_policy(client, PROJECT, REGION, NAME, TOPOLOGY)
    assert result.created
    assert compute.count("get", status=503) == 2 and compute.count("insert") == 1
