"""RBAC proven by use: an operator is driven down every path it has (create, every phase,
progress (from process 0's endpoint, and from its log through pods/log), failure, stall restart, suspend and resume, re-creation after a change made while
suspended, deletion, relists, retries after server errors, adoption after a JobSet create that
timed out after the server stored it, and a ConfigMap create answered 409), every request it
sends is recorded by the API server, and the rules the Helm chart renders are compared with
those recordings both ways: every request is granted, and every granted (group, resource, verb)
was used. Cluster-wide against the chart's ClusterRole, and namespaced against its Role.

Each run drives its own paths on its own API server, so the check holds when run alone."""

from __future__ import annotations

import json
import secrets

import pytest

from tests.chart.support import render
from tests.operator.conftest import JOBS, JOBSETS, Cluster, create_trainer_pod, start_operator
from tests.support.apiserver import wait_for

pytestmark = pytest.mark.integration
OPERATOR_AGENTS = ("OpenAPI-Generator", "kopf")
RUNNING = [{"name": "slice", "ready": 1, "succeeded": 0, "failed": 0, "active": 1,
            "suspended": 0}]


def _granted(role: dict) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def _operator_requests(cluster: Cluster) -> list:
    return [r for r in cluster.server.requests()
            if r.is_resource and any(a in r.user_agent for a in OPERATOR_AGENTS)]


def _events(cluster: Cluster, job: str, reason: str) -> list[dict]:
    return [e for e in cluster.events(job) if e["reason"] == reason]


def _drive_every_path(c: Cluster) -> None:
    jobs = JOBS.format(ns=c.namespace)

    # Created, then every phase: Running (progress: process 0 is looked up among the pods),
    # Restarting, Failed with the trainer's reason (the pods' exits), Succeeded.
    ok = "ok-" + secrets.token_hex(2)
    c.create_job(ok)
    c.wait_phase(ok, "Starting")
    c.set_jobset_status(ok, replicatedJobsStatus=RUNNING)
    c.wait_phase(ok, "Running")
    c.set_jobset_status(ok, restarts=1, replicatedJobsStatus=[RUNNING[0] | {"ready": 0}])
    c.wait_phase(ok, "Restarting")
    c.set_jobset_status(ok, conditions=[{
        "type": "Failed", "status": "True", "reason": "PodFailurePolicy",
        "message": "job failed", "lastTransitionTime": "2026-11-21T00:00:00Z"}])
    c.wait_phase(ok, "Failed")
    done = "done-" + secrets.token_hex(2)
    c.create_job(done)
    c.wait_phase(done, "Starting")
    c.set_jobset_status(done, conditions=[{
        "type": "Completed", "status": "True", "reason": "AllJobsCompleted",
        "message": "done", "lastTransitionTime": "2026-11-21T00:00:00Z"}])
    c.wait_phase(done, "Succeeded")

    # Progress from process 0's log (a trainer of one's own): read through pods/log.
    own = "own-" + secrets.token_hex(2)
    c.create_job(own, trainer={"command": ["python3", "train.py"],
                               "progress": {"source": "log", "format": "maxtext"}})
    c.wait_phase(own, "Starting")
    create_trainer_pod(c, own, 0, 9431, phase="Running", podIP="127.0.0.1")
    c.set_jobset_status(own, replicatedJobsStatus=RUNNING)
    wait_for(lambda: [r for r in c.server.requests() if r.resource == "pods/log"
                      and r.name == f"{own}-slice-0-0-x"], message="a pods/log read")

    # Refused.
    bad = "bad-" + secrets.token_hex(2)
    c.create_job(bad, slice="v6e-12")
    c.wait_phase(bad, "Invalid")

    # A stall: every host restarted by deleting the JobSet's Jobs.
    stall = "stall-" + secrets.token_hex(2)
    c.create_job(stall, firstStepTimeoutSeconds=1, restartPolicy={"maxRestarts": 50})
    c.wait_phase(stall, "Starting")
    c.create("/apis/batch/v1/namespaces/{ns}/jobs", {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": f"{stall}-slice-0",
                     "labels": {"jobset.sigs.k8s.io/jobset-name": stall}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "trainer", "image": "trainer:1"}]}}}})
    c.set_jobset_status(stall, replicatedJobsStatus=RUNNING)
    wait_for(lambda: c.job(stall)["status"].get("stallRestarts", 0) >= 1, timeout=20,
             message="a restart after the stall")

    # Suspend, resume; a change made while suspended re-creates the JobSet.
    sus = "sus-" + secrets.token_hex(2)
    c.create_job(sus)
    c.wait_phase(sus, "Starting")
    c.patch(f"{jobs}/{sus}", {"spec": {"suspend": True}})
    c.wait_phase(sus, "Suspended")
    c.patch(f"{jobs}/{sus}", {"spec": {"suspend": False}})
    c.wait_phase(sus, "Starting")
    c.patch(f"{jobs}/{sus}", {"spec": {"suspend": True}})
    c.wait_phase(sus, "Suspended")
    old_uid = c.jobset(sus)["metadata"]["uid"]
    c.patch(f"{jobs}/{sus}", {"spec": {"image": "trainer:2"}})
    wait_for(lambda: (c.jobset(sus) or {}).get("metadata", {}).get("uid") not in (None, old_uid),
             timeout=20, message="the JobSet re-created from the changed spec")

    # Queued: Kueue's Workload for the JobSet is listed, and watched (its change is news).
    queued = "queued-" + secrets.token_hex(2)
    c.create_job(queued, scheduling={"queueName": "tpus", "priority": "low"})
    c.wait_phase(queued, "Queued")
    jobset = c.jobset(queued)
    c.create("/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": f"jobset-{queued}-1", "labels": {
            "kueue.x-k8s.io/job-uid": jobset["metadata"]["uid"]}, "ownerReferences": [{
                "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": queued,
                "uid": jobset["metadata"]["uid"], "controller": True}]},
        "spec": {"queueName": "tpus", "active": True}})
    c.patch(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{{ns}}/workloads/jobset-{queued}-1/status",
            {"status": {"conditions": [{
            "type": "QuotaReserved", "status": "False", "reason": "Pending",
            "lastTransitionTime": "2026-11-21T00:00:00Z",
            "message": "couldn't assign flavors to pod set slice: insufficient unused quota "
                       "for google.com/tpu in flavor v6e-4x4, 16 more needed"}]}})
    wait_for(lambda: (c.job(queued)["status"].get("queue") or {}).get("reason")
             == "WaitingForQuota", timeout=20, message="status.queue from the Workload")
    c.patch(f"{jobs}/{queued}", {"spec": {"scheduling": {"priority": "high"}}})
    wait_for(lambda: c.jobset(queued)["metadata"]["labels"].get(
        "kueue.x-k8s.io/priority-class") == "high", timeout=20, message="the label patched")

    # Retries: the status write fails with server errors until the faults are lifted.
    retried = "retry-" + secrets.token_hex(2)
    c.server.set_faults(error_rate=1.0, error_codes=(500, 503), verbs={"patch"},
                        resources={"tputrainingjobs/status"}, user_agent="OpenAPI-Generator")
    c.create_job(retried)
    wait_for(lambda: [r for r in c.server.requests()
                      if r.fault == "error" and r.resource == "tputrainingjobs/status"],
             timeout=20, message="a status write answered with an injected error")
    c.server.set_faults()
    c.wait_phase(retried, "Starting")

    # Adoption: the JobSet create is stored, but its answer is lost (the connection closes);
    # the operator finds the JobSet with a get and takes it as its own, with no Created Event.
    adopted = "adopt-" + secrets.token_hex(2)
    c.server.set_faults(timeout_rate=1.0, timeout_after_commit=True, timeout_hold_s=0.2,
                        verbs={"create"}, resources={"jobsets"}, user_agent="OpenAPI-Generator")
    try:
        c.create_job(adopted)
        c.wait_phase(adopted, "Starting", timeout=30)
    finally:
        c.server.set_faults()
    lost = [r for r in c.server.requests() if r.verb == "create" and r.resource == "jobsets"
            and r.fault == "timeout" and r.status == 0]
    assert lost, "no JobSet create lost its answer"
    assert [r for r in c.server.requests() if r.verb == "get" and r.resource == "jobsets"
            and r.name == adopted]
    assert not _events(c, adopted, "Created")
    listed = c.request("GET", JOBSETS).json()["items"]
    assert [js["metadata"]["name"] for js in listed].count(adopted) == 1

    # A ConfigMap create answered 409 (left by something else, with other data): read, patched.
    stale = "stale-" + secrets.token_hex(2)
    c.create("/api/v1/namespaces/{ns}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{stale}-trainer"},
        "data": {"trainer.yaml": "old: true\n"}})
    c.create_job(stale)
    c.wait_phase(stale, "Starting")
    assert [r for r in c.server.requests() if r.verb == "create" and
            r.resource == "configmaps" and r.status == 409]
    config = c.request("GET", f"/api/v1/namespaces/{{ns}}/configmaps/{stale}-trainer").json()
    assert "old: true" not in json.dumps(config["data"])

    # Deleted: its children go; the relists (lists of jobs and JobSets) keep running.
    before = len(c.server.requests())
    r = c.request("DELETE", f"{jobs}/{ok}")
    assert r.status_code in (200, 202)
    wait_for(lambda: c.job(ok) is None and c.jobset(ok) is None, message="the job and JobSet gone")
    wait_for(lambda: [r for r in c.server.requests()[before:] if r.verb == "list" and
                      r.resource == "jobsets" and "OpenAPI-Generator" in r.user_agent],
             timeout=30, message="a relist after the deletion")


@pytest.mark.parametrize("scope", ["cluster-wide", "namespaced"])
def test_the_charts_rules_are_exactly_the_requests_the_operator_sends(fresh, scope):
    if scope == "cluster-wide":
        operator = start_operator(fresh, relist_interval_s=0.5)
        role = render().one("ClusterRole")
    else:
        operator = start_operator(fresh, namespaces=(fresh.namespace,), relist_interval_s=0.5)
        [role] = [r for r in render({"watchNamespaces": [fresh.namespace]}).of_kind("Role")]
    try:
        _drive_every_path(fresh)
    finally:
        operator.stop()
    requests = _operator_requests(fresh)
    used = {r.rule for r in requests}
    granted = _granted(role)
    assert sorted(used - granted) == [], "requests the chart's rules do not grant"
    assert sorted(granted - used) == [], "rules the chart grants that no path used"
    if scope == "namespaced":
        outside = sorted({r.path for r in requests
                          if f"/namespaces/{fresh.namespace}/" not in r.path})
        assert outside == []
