"""Kueue Workloads as Kueue v0.17 writes them (conditions and messages recorded from the real
Kueue of local mode's control plane) read as one state, reason and sentence."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tpujob.controller.kueue_workload import (
    QueueReason,
    QueueState,
    classify_pending,
    describe_wait,
    read_workload,
)

T0, T1 = "2026-11-26T19:58:45Z", "2026-11-26T19:59:14Z"
NO_QUOTA = ("couldn't assign flavors to pod set slice: insufficient unused quota for "
            "google.com/tpu in flavor v6e-2x4, 8 more needed")
NO_FLAVOR = "couldn't assign flavors to pod set slice: flavor v6e-2x4 doesn't match node affinity"
TOO_BIG = ("couldn't assign flavors to pod set slice: insufficient quota for google.com/tpu in "
           "flavor v6e-4x4, previously considered podsets requests (0) + current podset "
           "request (32) > maximum capacity (16)")
PREEMPTION = ("Preempted to accommodate a workload (UID: ba4e, JobUID: 2c5c) due to "
              "prioritization in the ClusterQueue; preemptor path: /cluster-queue; preemptee "
              "path: /cluster-queue")


def cond(type_: str, status: bool, reason: str, message: str = "", at: str = T0) -> dict:
    return {"type": type_, "status": "True" if status else "False", "reason": reason,
            "message": message, "lastTransitionTime": at}


def workload(*conditions: dict, queue: str = "tpus", active: bool = True, **status) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "jobset-j-1a2b3", "creationTimestamp": T0},
            "spec": {"active": active, "queueName": queue, "priority": 100,
                     "priorityClassRef": {"group": "kueue.x-k8s.io",
                                          "kind": "WorkloadPriorityClass", "name": "low"}},
            "status": {"conditions": list(conditions), **status}}


ADMISSION = {"clusterQueue": "cluster-queue", "podSetAssignments": [
    {"name": "slice", "count": 2, "flavors": {"google.com/tpu": "v6e-2x4"},
     "resourceUsage": {"google.com/tpu": "8"}}]}
RESERVED = cond("QuotaReserved", True, "QuotaReserved",
                "Quota reserved in ClusterQueue cluster-queue")

CASES = [
    # (id, workload, state, reason, words the sentence must hold)
    ("no-status-yet", workload(), QueueState.PENDING, QueueReason.PENDING,
     "waiting for Kueue LocalQueue tpus to admit it"),
    ("queue-missing", workload(cond("QuotaReserved", False, "Inadmissible",
                                    "LocalQueue nope doesn't exist"), queue="nope"),
     QueueState.INADMISSIBLE, QueueReason.QUEUE_NOT_FOUND,
     "LocalQueue nope doesn't exist; create the LocalQueue"),
    ("cluster-queue-stopped", workload(cond("QuotaReserved", False, "Inadmissible",
                                            "ClusterQueue cq is inactive")),
     QueueState.INADMISSIBLE, QueueReason.QUEUE_INACTIVE, "not admitted: ClusterQueue cq is"),
    ("waiting-for-quota", workload(cond("QuotaReserved", False, "Pending", NO_QUOTA)),
     QueueState.PENDING, QueueReason.WAITING_FOR_QUOTA,
     "waiting in LocalQueue tpus: insufficient unused quota for google.com/tpu in flavor "
     "v6e-2x4, 8 more needed"),
    ("no-flavor-for-the-shape", workload(cond("QuotaReserved", False, "Pending", NO_FLAVOR)),
     QueueState.PENDING, QueueReason.NO_MATCHING_FLAVOR,
     "never admitted as LocalQueue tpus stands: no flavor of its ClusterQueue offers"),
    ("bigger-than-quota", workload(cond("QuotaReserved", False, "Pending", TOO_BIG)),
     QueueState.PENDING, QueueReason.EXCEEDS_MAX_QUOTA,
     "> maximum capacity (16); ask for a smaller slice"),
    ("one-flavor-full-one-wrong", workload(cond(
        "QuotaReserved", False, "Pending", NO_FLAVOR + ", " + NO_QUOTA.split(": ", 1)[1])),
     QueueState.PENDING, QueueReason.WAITING_FOR_QUOTA, "8 more needed"),
    ("preemption-under-way", workload(cond(
        "QuotaReserved", False, "Pending", NO_QUOTA + ". Pending the preemption of 1 "
                                                      "workload(s)")),
     QueueState.PENDING, QueueReason.WAITING_FOR_PREEMPTED, "Pending the preemption of 1"),
    ("topology-level-on-no-node", workload(cond(
        "QuotaReserved", False, "Pending", "couldn't assign flavors to pod set slice: no "
        "topology domains at level: cloud.google.com/gce-topology-block")),
     QueueState.PENDING, QueueReason.TOPOLOGY_PLACEMENT_FAILED,
     "Kueue cannot place the slice: no topology domains at level: "
     "cloud.google.com/gce-topology-block"),
    ("topology-level-not-in-the-topology", workload(cond(
        "QuotaReserved", False, "Pending", "couldn't assign flavors to pod set slice: no "
        "requested topology level: cloud.google.com/gke-nodepool")),
     QueueState.PENDING, QueueReason.NO_MATCHING_FLAVOR, "no requested topology level"),
    ("a-later-kueue-names-the-reason", workload(cond(
        "QuotaReserved", False, "NoMatchingFlavor", "couldn't assign flavors to pod set slice: "
        "no flavor fits")),
     QueueState.PENDING, QueueReason.NO_MATCHING_FLAVOR, "no flavor fits"),
    ("topology", workload(cond(
        "QuotaReserved", False, "Pending", "couldn't assign flavors to pod set slice: topology "
        "\"default\" doesn't allow to fit any of 2 pod(s)")),
     QueueState.PENDING, QueueReason.TOPOLOGY_PLACEMENT_FAILED, "Kueue cannot place the slice"),
    ("admitted", workload(RESERVED, cond("Admitted", True, "Admitted", "The workload is admitted",
                                         T1), admission=ADMISSION),
     # Seen by a Queued job only when read before Kueue wrote the eviction: no stale words.
     QueueState.ADMITTED, QueueReason.ADMITTED, "waiting for Kueue LocalQueue tpus to admit it"),
    ("check-pending", workload(RESERVED, admission=ADMISSION, admissionChecks=[
        {"name": "dws-prov", "state": "Pending", "message": "Waiting for resources"}]),
     QueueState.QUOTA_RESERVED, QueueReason.ADMISSION_CHECKS,
     "quota reserved in ClusterQueue cluster-queue; admission check dws-prov is Pending: "
     "Waiting for resources"),
    ("check-rejected", workload(RESERVED, admission=ADMISSION, admissionChecks=[
        {"name": "dws-prov", "state": "Rejected", "message": "booking expired"}]),
     QueueState.QUOTA_RESERVED, QueueReason.ADMISSION_CHECK_REJECTED,
     "admission check dws-prov is Rejected: booking expired"),
    ("preempted-and-waiting", workload(
        cond("QuotaReserved", False, "Pending", NO_QUOTA, T1),
        cond("Evicted", True, "Preempted", PREEMPTION, T1),
        cond("Admitted", False, "NoReservation", "The workload has no reservation", T1),
        cond("Preempted", True, "InClusterQueue", PREEMPTION, T1),
        cond("Requeued", True, "Preempted", PREEMPTION, T1),
        schedulingStats={"evictions": [{"reason": "Preempted", "count": 1}]}),
     QueueState.PREEMPTED, QueueReason.WAITING_FOR_QUOTA,
     "preempted by a higher-priority workload; waiting in LocalQueue tpus: insufficient unused"),
    ("evicted-pods-not-ready", workload(
        cond("QuotaReserved", False, "Pending", "", T1),
        cond("Evicted", True, "PodsReadyTimeout", "Exceeded the PodsReady timeout", T1)),
     QueueState.EVICTED, QueueReason.EVICTED, "evicted by Kueue (PodsReadyTimeout)"),
    ("deactivated", workload(
        cond("Evicted", True, "Deactivated", "The workload is deactivated due to exceeding the "
             "maximum execution time", T1), active=False),
     QueueState.DEACTIVATED, QueueReason.DEACTIVATED, "exceeding the maximum execution time"),
    ("finished", workload(RESERVED, cond("Finished", True, "Succeeded", "Jobset finished"),
                          admission=ADMISSION),
     QueueState.FINISHED, QueueReason.ADMITTED, ""),
]


@pytest.mark.parametrize("obj,state,reason,words", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_a_workload_reads_as_one_state_reason_and_sentence(obj, state, reason, words):
    reading = read_workload(obj)
    assert (reading.state, reading.reason) == (state, reason)
    assert words in describe_wait(reading), describe_wait(reading)
    assert reading.name == "jobset-j-1a2b3" and reading.local_queue == obj["spec"]["queueName"]
    assert (reading.priority, reading.priority_class) == (100, "low")


def test_the_admitted_flavor_queue_and_time_are_kept():
    reading = read_workload(workload(RESERVED, cond("Admitted", True, "Admitted", "ok", T1),
                                     admission=ADMISSION))
    assert reading.cluster_queue == "cluster-queue"
    assert reading.flavors == (("google.com/tpu", "v6e-2x4"),)
    assert reading.admitted_since == datetime(2026, 11, 26, 19, 59, 14, tzinfo=UTC)
    assert not reading.waiting


def test_an_evicted_workload_is_queued_again_from_its_eviction():
    obj = next(c[1] for c in CASES if c[0] == "preempted-and-waiting")
    reading = read_workload(obj)
    assert reading.queued_since == datetime(2026, 11, 26, 19, 59, 14, tzinfo=UTC)
    assert reading.evictions == 1 and reading.last_eviction.startswith("Preempted: Preempted to")
    assert reading.waiting
    fresh = read_workload(workload(cond("QuotaReserved", False, "Pending", NO_QUOTA)))
    assert fresh.queued_since == datetime(2026, 11, 26, 19, 58, 45, tzinfo=UTC)
    assert fresh.evictions == 0 and fresh.last_eviction is None


@pytest.mark.parametrize("reason,never", [
    (QueueReason.QUEUE_NOT_FOUND, True), (QueueReason.EXCEEDS_MAX_QUOTA, True),
    (QueueReason.NO_MATCHING_FLAVOR, True), (QueueReason.WAITING_FOR_QUOTA, False),
    (QueueReason.TOPOLOGY_PLACEMENT_FAILED, False), (QueueReason.QUEUE_INACTIVE, False),
    (QueueReason.PREEMPTED, False)])
def test_only_what_waiting_cannot_fix_counts_as_never_admitted(reason, never):
    assert reason.never_admitted is never


def test_an_unknown_pending_message_is_plain_pending():
    assert classify_pending("something new in Kueue 0.30") == QueueReason.PENDING


def test_kueues_words_stand_in_for_an_empty_message():
    finished = read_workload(workload(cond("Finished", True, "Succeeded", "")))
    assert finished.message == "finished"
    reserved = read_workload(workload(cond("QuotaReserved", True, "QuotaReserved",
                                           "Quota reserved in ClusterQueue cq")))
    assert reserved.message == "Quota reserved in ClusterQueue cq"
    evicted = next(c[1] for c in CASES if c[0] == "evicted-pods-not-ready")
    assert read_workload(evicted).message == "Exceeded the PodsReady timeout"


def test_a_reading_is_a_value():
    import dataclasses

    reading = read_workload(workload())
    with pytest.raises(dataclasses.FrozenInstanceError):
        reading.state = QueueState.ADMITTED  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        reading_check = read_workload(workload(RESERVED, admissionChecks=[
            {"name": "c", "state": "Pending"}])).checks[0]
        reading_check.state = "Ready"  # type: ignore[misc]
