"""How local mode ends jobs that cannot or must not go on: a fatal trainer exit (out of memory)
fails the job with the trainer's reason and no restart; an invalid job never starts a process;
a job deleted mid-run stops its processes."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import is_alive, stand_in, unique
from tests.support.apiserver import wait_for
from tpujob.local.executor.client import Resource
from tpujob.local.session.cluster import TPUJOBS

pytestmark = pytest.mark.e2e
CONTROL_PLANES = ("embedded", "real")

# What the trainer does when XLA cannot allocate: the contract's one-line JSON reason in the
# termination-message file, exit code 4.
OUT_OF_MEMORY = (
    "import json, os, sys\n"
    "with open(os.environ['TPUJOB_TERMINATION_LOG'], 'w') as f:\n"
    "    json.dump({'reason': 'OutOfMemory', 'message': 'RESOURCE_EXHAUSTED: Out of memory "
    "while trying to allocate 17179869184 bytes'}, f)\n"
    "sys.exit(4)\n")
SLEEP = "import time; time.sleep(300)"
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets")


def _jobset(local, name: str) -> dict:
    return local.cluster.api.get(JOBSETS, local.namespace, name) or {}


def _running_sleeper(local, name: str) -> list[dict]:
    """A 2-host job of sleeping processes, once both processes run."""
    local.apply(name, stand_in(SLEEP))
    local.wait_phase(name, "Running", timeout=90)
    return wait_for(lambda: len(local.processes(name)) == 2 and local.processes(name),
                    timeout=30, message="both hosts' processes")


def test_an_out_of_memory_exit_fails_the_job_with_its_reason_and_no_restart(local):
    name = unique("oom")
    local.apply(name, stand_in(OUT_OF_MEMORY, restartPolicy={"maxRestarts": 3}))
    job = local.wait_phase(name, "Failed", "Succeeded", timeout=60)
    status = job["status"]
    assert status["phase"] == "Failed", status
    assert status["failure"]["reason"] == "OutOfMemory", status
    assert "exited 4" in status["failure"]["message"], status
    assert "allocate 17179869184 bytes" in status["failure"]["message"], status
    assert status["restarts"] == 0, status
    # The JobSet controller has decided for good: the JobSet is Failed, not restarted (after
    # a terminal state it makes no new Jobs), and the host that had not exited is stopped.
    jobset = wait_for(lambda: (_jobset(local, name).get("status") or {}).get(
        "terminalState") and _jobset(local, name), timeout=30, message="the JobSet to end")
    assert jobset["status"]["terminalState"] == "Failed", jobset["status"]
    assert jobset["status"].get("restarts", 0) == 0, jobset["status"]
    wait_for(lambda: not local.processes(name), timeout=30, message="no process left")
    # Only the first attempt's pods ever existed (the failed JobSet may already have deleted
    # the one that had not exited yet).
    pods = local.pods(name)
    assert 1 <= len(pods) <= 2, pods
    assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for p in pods} == {"0"}
    assert local.status(name)["restarts"] == 0
    local.wait_events(name, "Failed")
    warnings = [e for e in local.events(name) if e["type"] == "Warning"]
    assert [e["reason"] for e in warnings] == ["Failed"], warnings
    assert "OutOfMemory" in warnings[0]["message"]


def test_an_invalid_job_never_starts_a_process(local):
    name = unique("invalid")
    spec = stand_in(SLEEP, parallelism={"ici": {"tensor": 3}})
    local.apply(name, spec)
    job = local.wait_phase(name, "Invalid", "Running", "Starting", timeout=30)
    status = job["status"]
    assert status["phase"] == "Invalid"
    assert "spec.parallelism.ici" in status["failure"]["message"]
    assert "8 devices" in status["failure"]["message"]
    # Proof that the operator looked at the job again after refusing it: a spec change is
    # refused anew (a later status write, for the new generation), and still nothing runs.
    local.cluster.api.patch(TPUJOBS, local.namespace, name,
                            {"spec": {"parallelism": {"ici": {"tensor": 5}}}})
    job = local.wait(name, lambda s: s.get("observedGeneration") == 2, timeout=30,
                     message=f"{name}'s second generation to be looked at")
    assert job["status"]["phase"] == "Invalid", job["status"]
    assert "multiply to 5" in job["status"]["failure"]["message"], job["status"]
    assert _jobset(local, name) == {}
    assert local.pods(name) == [] and local.processes(name) == []


def test_a_job_deleted_mid_run_stops_its_processes(local):
    name = unique("deleted")
    pids = [p["pid"] for p in _running_sleeper(local, name)]
    assert all(is_alive(pid) for pid in pids)

    assert local.cluster.delete_job(local.namespace, name)
    wait_for(lambda: not any(is_alive(pid) for pid in pids), timeout=30, interval=0.1,
             message="the processes to stop")
    wait_for(lambda: local.pods(name) == [], timeout=30, message="the pods to go")
    assert local.processes(name) == []
    assert local.job(name) is None


def test_a_suspended_job_stops_its_processes_and_runs_again_when_resumed(local):
    name = unique("suspend")
    first = _running_sleeper(local, name)
    local.cluster.api.patch(TPUJOBS, local.namespace, name, {"spec": {"suspend": True}})
    local.wait_phase(name, "Suspended", timeout=60)
    assert _jobset(local, name)["spec"]["suspend"] is True
    wait_for(lambda: not any(is_alive(p["pid"]) for p in first), timeout=60,
             message="the suspended job's processes to stop")
    wait_for(lambda: local.pods(name) == [], timeout=60, message="its pods to go")
    local.cluster.api.patch(TPUJOBS, local.namespace, name, {"spec": {"suspend": False}})
    local.wait_phase(name, "Running", timeout=90)
    assert _jobset(local, name)["spec"]["suspend"] is False
    again = wait_for(lambda: len(local.processes(name)) == 2 and local.processes(name),
                     timeout=60, message="both hosts running again")
    assert {p["pid"] for p in again}.isdisjoint({p["pid"] for p in first})
    assert local.cluster.delete_job(local.namespace, name)
