"""status.queue follows the job's Kueue Workload through the operator's watch of Workloads (the
periodic resync is an hour here, so nothing else could bring the change), with the Events a
person needs; pods the scheduler leaves unplaced are flagged with its words. The Workload is
written here as Kueue v0.17 writes it; tests/e2e/test_kueue_queues.py runs the real Kueue."""

from __future__ import annotations

import secrets

import pytest

from tests.operator.conftest import create_trainer_pod, start_operator
from tests.support.apiserver import wait_for

pytestmark = pytest.mark.integration

WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads"
NO_QUOTA = ("couldn't assign flavors to pod set slice: insufficient unused quota for "
            "google.com/tpu in flavor v6e-4x4, 16 more needed")
PREEMPTION = ("Preempted to accommodate a workload (UID: ba4e, JobUID: 2c5c) due to "
              "prioritization in the ClusterQueue")


def cond(type_: str, status: bool, reason: str, message: str) -> dict:
    return {"type": type_, "status": "True" if status else "False", "reason": reason,
            "message": message, "lastTransitionTime": "2026-11-26T19:59:14Z"}


def make_workload(c, job: str) -> str:
    jobset = c.jobset(job)
    name = f"jobset-{job}-1a2b3"
    c.create(WORKLOADS, {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/job-uid": jobset["metadata"]["uid"]},
                     "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                          "kind": "JobSet", "name": job, "controller": True,
                                          "uid": jobset["metadata"]["uid"]}]},
        "spec": {"queueName": "tpus", "active": True, "priority": 250}})
    return name


def set_workload_status(c, name: str, **status) -> None:
    c.patch(f"{WORKLOADS}/{name}/status", {"status": status})


def queue_of(c, job: str) -> dict:
    return (c.job(job).get("status") or {}).get("queue") or {}


def queued_with_workload(c, prefix: str, message: str) -> tuple[str, str]:
    """A queued job and a Workload for its JobSet, Pending with Kueue's `message`."""
    job = prefix + secrets.token_hex(2)
    c.create_job(job, scheduling={"queueName": "tpus"})
    c.wait_phase(job, "Queued")
    wl = make_workload(c, job)
    set_workload_status(c, wl, conditions=[cond("QuotaReserved", False, "Pending", message)])
    return job, wl


def test_the_queue_status_follows_the_workload_through_admission_and_preemption(fresh):
    operator = start_operator(fresh, resync_interval_s=3600.0)
    try:
        job, wl = queued_with_workload(fresh, "q-", NO_QUOTA)
        wait_for(lambda: queue_of(fresh, job).get("reason") == "WaitingForQuota", timeout=20,
                 message="the waiting reason from the Workload")
        status = fresh.job(job)["status"]
        assert status["reason"] == "WaitingForQuota"
        [running] = [c for c in status["conditions"] if c["type"] == "Running"]
        assert running["message"] == ("waiting in LocalQueue tpus: insufficient unused quota "
                                      "for google.com/tpu in flavor v6e-4x4, 16 more needed")
        assert queue_of(fresh, job)["workload"] == wl

        admission = {"clusterQueue": "cluster-queue", "podSetAssignments": [
            {"name": "slice", "count": 4, "flavors": {"google.com/tpu": "v6e-4x4"}}]}
        set_workload_status(fresh, wl, admission=admission, conditions=[
            cond("QuotaReserved", True, "QuotaReserved", "Quota reserved"),
            cond("Admitted", True, "Admitted", "The workload is admitted")])
        wait_for(lambda: queue_of(fresh, job).get("state") == "Admitted", timeout=20,
                 message="the admission")
        assert queue_of(fresh, job)["flavors"] == {"google.com/tpu": "v6e-4x4"}
        wait_for(lambda: "Admitted" in fresh.event_reasons(job), timeout=20,
                 message="an Admitted Event")

        set_workload_status(fresh, wl, admission=None, conditions=[
            cond("QuotaReserved", False, "Pending", NO_QUOTA),
            cond("Evicted", True, "Preempted", PREEMPTION),
            cond("Preempted", True, "InClusterQueue", PREEMPTION)],
            schedulingStats={"evictions": [{"reason": "Preempted", "count": 1}]})
        wait_for(lambda: queue_of(fresh, job).get("state") == "Preempted", timeout=20,
                 message="the preemption")
        assert queue_of(fresh, job)["evictions"] == 1
        wait_for(lambda: "Preempted" in fresh.event_reasons(job), timeout=20,
                 message="a Preempted Event")
        [event] = [e for e in fresh.events(job) if e["reason"] == "Preempted"]
        assert event["type"] == "Warning" and "resumes from its newest checkpoint" in \
            event["message"], event
    finally:
        operator.stop()


def test_a_job_kueue_can_never_admit_says_so_at_once(fresh):
    operator = start_operator(fresh, resync_interval_s=3600.0)
    try:
        job, _ = queued_with_workload(
            fresh, "big-", "couldn't assign flavors to pod set slice: insufficient quota for "
            "google.com/tpu in flavor v6e-4x4, request > maximum capacity (16 > 8)")
        wait_for(lambda: fresh.job(job)["status"].get("reason") == "ExceedsMaxQuota",
                 timeout=20, message="the never-admitted reason")
        wait_for(lambda: "ExceedsMaxQuota" in fresh.event_reasons(job), timeout=20,
                 message="a Warning Event")
        [event] = [e for e in fresh.events(job) if e["reason"] == "ExceedsMaxQuota"]
        assert event["type"] == "Warning"
        assert "never admitted as LocalQueue tpus stands" in event["message"]
        assert "(16 > 8); ask for a smaller slice" in event["message"]
    finally:
        operator.stop()


def test_pods_the_scheduler_leaves_unplaced_are_flagged_with_its_words(fresh):
    operator = start_operator(fresh)
    try:
        job = "pend-" + secrets.token_hex(2)
        fresh.create_job(job, scheduling={"unscheduledWarningSeconds": 1})
        fresh.wait_phase(job, "Starting")
        words = ("0/8 nodes are available: 8 node(s) didn't match Pod's node "
                 "affinity/selector.")
        create_trainer_pod(fresh, job, 0, 9431, phase="Pending", conditions=[{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": words, "lastTransitionTime": "2026-11-26T19:59:14Z"}])
        wait_for(lambda: fresh.job(job)["status"].get("reason") == "Unschedulable",
                 timeout=20, message="the Unschedulable reason")
        status = fresh.job(job)["status"]
        [scheduled] = [c for c in status["conditions"] if c["type"] == "PodsScheduled"]
        assert scheduled["status"] == "False"
        # v6e-16: 4 hosts; one pod made and unplaced, three not made yet.
        assert scheduled["message"].startswith("4 of 4 pods not scheduled for ")
        assert scheduled["message"].endswith(f"(pod {job}-slice-0-0-x): {words}")
        assert status["phase"] == "Starting"
        wait_for(lambda: "Unschedulable" in fresh.event_reasons(job), timeout=20,
                 message="an Unschedulable Event")
    finally:
        operator.stop()
