"""The restart strategies of `spec.restartPolicy.strategy` as the JobSet controller and the
kubelet run them, on both control planes: `RestartJob` (JobSet v0.12's RestartJob rule action)
recreates only the slice whose Job failed, and the other slice's pods and processes go on
untouched; `InPlaceRestart` starts a container that exited with a retryable code again in its
pod, on its node, with its node-local (emptyDir) checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import is_alive, stand_in, unique
from tests.support.apiserver import wait_for
from tpujob.local.executor.client import Resource

pytestmark = pytest.mark.e2e
CONTROL_PLANES = ("embedded", "real")
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets")
JOB_RESTART_ATTEMPT = "jobset.sigs.k8s.io/job-restart-attempt"


def _two_slices(signals: Path, strategy: str) -> dict:
    """A 2-slice v6e-8 stand-in (2 hosts a slice) whose slice 1 host 0 exits 42 (retryable)
    once `fail` appears; every process ends 0 once `done` appears."""
    code = (
        "import os, pathlib, sys, time\n"
        f"d = pathlib.Path({str(signals)!r})\n"
        "me = os.environ['HOSTNAME']\n"
        "while not (d / 'done').exists():\n"
        "    if me.endswith('-slice-1-0') and (d / 'fail').exists() and "
        "not (d / 'failed').exists():\n"
        "        (d / 'failed').touch()\n"
        "        sys.exit(42)\n"
        "    time.sleep(0.05)\n")
    return stand_in(code, slices=2, restartPolicy={"maxRestarts": 2, "strategy": strategy})


def _jobset(local, name: str) -> dict:
    return local.cluster.api.get(JOBSETS, local.namespace, name) or {}


def _by_job(local, name: str) -> dict[str, list[dict]]:
    """The job's live pods per child Job name."""
    out: dict[str, list[dict]] = {}
    for pod in local.pods(name):
        if not pod["metadata"].get("deletionTimestamp"):
            out.setdefault(pod["metadata"]["labels"]["job-name"], []).append(pod)
    return out


def test_restart_job_recreates_only_the_failed_slice(local, tmp_path):
    name = unique("rjob")
    local.apply(name, _two_slices(tmp_path, "RestartJob"))
    local.wait_phase(name, "Running", timeout=120)
    first = wait_for(lambda: len(local.processes(name)) == 4 and local.processes(name),
                     timeout=60, message="the 4 hosts' processes")
    slice0 = {p["metadata"]["uid"] for p in _by_job(local, name)[f"{name}-slice-0"]}
    slice1 = {p["metadata"]["uid"] for p in _by_job(local, name)[f"{name}-slice-1"]}
    (tmp_path / "fail").touch()

    # The JobSet controller counts the restart on the Job, not the JobSet, and makes slice 1
    # again with its own restart attempt.
    def restarted():
        status = _jobset(local, name).get("status") or {}
        rjs = (status.get("replicatedJobsStatus") or [{}])[0]
        return rjs.get("jobRestarts") == [0, 1] and status
    status = wait_for(restarted, timeout=60, message="slice 1's Job to be restarted")
    assert status.get("restarts", 0) == 0, status
    assert status["replicatedJobsStatus"][0]["jobRestartsCountTowardsMax"] == [0, 1], status

    def slice1_back():
        pods = _by_job(local, name).get(f"{name}-slice-1") or []
        running = {p["pod"] for p in local.processes(name)}
        return len(pods) == 2 and all(
            p["metadata"]["labels"].get(JOB_RESTART_ATTEMPT) == "1" and
            p["metadata"]["name"] in running for p in pods) and pods
    again = wait_for(slice1_back, timeout=90, message="slice 1 running again")
    assert not {p["metadata"]["uid"] for p in again} & slice1
    # Slice 0 was never touched: the same pods, the same processes, still running.
    pods0 = _by_job(local, name)[f"{name}-slice-0"]
    assert {p["metadata"]["uid"] for p in pods0} == slice0
    assert all(p["metadata"]["labels"].get(JOB_RESTART_ATTEMPT) == "0" for p in pods0)
    kept = [p for p in first if p["pod"].startswith(f"{name}-slice-0-")]
    assert len(kept) == 2 and all(is_alive(p["pid"]) for p in kept)
    reasons = [e["reason"] for e in local.cluster.events(local.namespace, name)
               if e["involvedObject"].get("kind") == "JobSet" and e["type"] == "Warning"]
    assert reasons == ["RestartJobFailurePolicyAction"], reasons
    # The operator counts a slice's restart as a restart of the job.
    local.wait(name, lambda s: s.get("restarts") == 1, timeout=30, message="restarts 1")

    (tmp_path / "done").touch()
    job = local.wait_phase(name, "Succeeded", "Failed", timeout=90)
    assert job["status"]["phase"] == "Succeeded", job["status"]
    assert job["status"]["restarts"] == 1


def test_in_place_restart_starts_the_container_again_in_its_pod(local, tmp_path):
    name = unique("inplace")
    code = (
        "import os, pathlib, sys, time\n"
        f"d = pathlib.Path({str(tmp_path)!r})\n"
        "me = os.environ['HOSTNAME']\n"
        "kept = pathlib.Path(os.environ['TPUJOB_LOCAL_CHECKPOINT_DIR']) / 'step-10'\n"
        "if kept.exists():\n"
        "    (d / (me + '.kept')).touch()\n"
        "kept.write_text('10')\n"
        "while not (d / 'done').exists():\n"
        "    if me.endswith('-slice-0-0') and (d / 'fail').exists() and "
        "not (d / 'failed').exists():\n"
        "        (d / 'failed').touch()\n"
        "        sys.exit(42)\n"
        "    time.sleep(0.05)\n")
    local.apply(name, stand_in(code, restartPolicy={"maxRestarts": 2, "strategy": "InPlaceRestart"},
                               localCheckpoints={"medium": "Disk", "everySteps": 10}))
    local.wait_phase(name, "Running", timeout=120)
    first = wait_for(lambda: len(local.processes(name)) == 2 and local.processes(name),
                     timeout=60, message="both hosts' processes")
    before = {p["metadata"]["name"]: p for p in local.pods(name)}
    (tmp_path / "fail").touch()

    host0 = f"{name}-slice-0-0"

    def restarted():
        pods = [p for p in local.pods(name) if p["metadata"]["name"].startswith(host0)]
        statuses = [s for p in pods for s in (p.get("status") or {}).get("containerStatuses")
                    or []]
        return len(pods) == 1 and statuses and statuses[0]["restartCount"] == 1 and \
            "running" in statuses[0]["state"] and pods[0]
    pod = wait_for(restarted, timeout=60, message="host 0's container to start again")
    # The same pod (name, uid, node), its container started again in place, reported as the
    # kubelet reports a restart: restartCount, the last run's exit in lastState.
    old = before[pod["metadata"]["name"]]
    assert pod["metadata"]["uid"] == old["metadata"]["uid"]
    assert pod["spec"].get("nodeName") == old["spec"].get("nodeName")
    [status] = pod["status"]["containerStatuses"]
    assert status["lastState"]["terminated"]["exitCode"] == 42, status
    assert pod["status"]["phase"] == "Running"
    # The node-local (emptyDir) checkpoint outlived the restart; host 1 never stopped.
    wait_for(lambda: (tmp_path / f"{host0}.kept").exists(), timeout=30,
             message="the restarted process to find its local checkpoint")
    kept = [p for p in first if not p["pod"].startswith(host0)]
    assert len(kept) == 1 and is_alive(kept[0]["pid"])
    assert {p["metadata"]["uid"] for p in local.pods(name)} == \
        {p["metadata"]["uid"] for p in before.values()}
    # Nothing failed at the Job or JobSet level: no JobSet restart.
    assert (_jobset(local, name).get("status") or {}).get("restarts", 0) == 0

    (tmp_path / "done").touch()
    job = local.wait_phase(name, "Succeeded", "Failed", timeout=90)
    assert job["status"]["phase"] == "Succeeded", job["status"]
