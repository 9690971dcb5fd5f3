"""The real trainer in local mode, as 2 JAX processes of a v6e-8 (one CPU device each),
checkpointing to the emulated `gs://`: a job trains to completion with its progress in the
status; a host SIGKILLed after a checkpoint is restarted by the JobSet's failure policy, the run
resumes from that checkpoint, and every step after the resume has the loss of an uninterrupted
run; with node-local checkpoints it resumes from the newest local step, from a hostPath with
Recreate and from the pods' emptyDir with InPlaceRestart (the containers start again in their
pods)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.e2e.conftest import RECOVERY_PARTS, TINY, json_lines, resumed_steps, steps, unique
from tests.support.apiserver import wait_for
from tpujob_trainer.checkpoint import StepDirs

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
# The kill-and-resume tests prove the trainer's checkpoints and the JobSet's restart of a killed
# host: on the real control plane (real JobSet and Job controllers); the embedded plane's restart
# mechanics are test_restart_strategies.py's, on both planes.
CONTROL_PLANES = ("embedded", "real")

TOTAL = TINY["train"]["steps"]


def trainer_job(output: str, max_restarts: int = 0) -> dict:
    return {"slice": "v6e-8", "image": "trainer:1", "output": output,
            "trainer": {"config": TINY}, "parallelism": {"ici": {"fsdp": -1}},
            "data": {"kind": "synthetic"}, "restartPolicy": {"maxRestarts": max_restarts}}


@pytest.fixture(scope="module")
def reference(local):
    """An uninterrupted run: its job as finished and its per-step losses."""
    name = unique("ref")
    local.apply(name, trainer_job(f"gs://tpujob-e2e/{name}"))
    running = local.wait(name, lambda s: (s.get("progress") or {}).get("step"), timeout=120,
                         message="the first step in the status")
    job = local.wait_phase(name, "Succeeded", "Failed", timeout=120)
    [log] = local.logs(name)
    return {"name": name, "running": running, "job": job, "losses": steps(log), "log": log}


def test_a_two_host_job_trains_to_completion(local, reference):
    status = reference["job"]["status"]
    assert status["phase"] == "Succeeded", status
    # Progress was visible while it ran, and is complete at the end.
    seen = reference["running"]["status"]
    assert seen["phase"] in ("Running", "Succeeded") and seen["progress"]["step"] >= 1
    progress = status["progress"]
    assert progress["step"] == TOTAL and progress["totalSteps"] == TOTAL
    assert progress["loss"] == pytest.approx(reference["losses"][TOTAL])
    assert progress["lastCheckpointStep"] == TOTAL
    assert status["restarts"] == 0 and status.get("completionTime")
    assert status["slice"]["hosts"] == 2
    # Both hosts ran, as one 2-device job (the slice's 8 devices scaled down to 1 each).
    events = json_lines(reference["log"])
    start = next(e for e in events if e["event"] == "start")
    assert (start["processes"], start["devices"]) == (2, 2)
    assert sorted(reference["losses"]) == list(range(1, TOTAL + 1))
    assert reference["losses"][TOTAL] < reference["losses"][1] - 1.0, "the loss did not fall"
    pods = local.pods(reference["name"])
    assert [p["status"]["phase"] for p in pods] == ["Succeeded", "Succeeded"]
    local.wait_events(reference["name"], "Running", "Goodput", "Succeeded")
    reasons = [e["reason"] for e in local.events(reference["name"])]
    assert reasons[-1] == "Succeeded" and "Running" in reasons
    # Goodput: one start, nothing lost, the trainer's categories measured and adding up.
    goodput = status["goodput"]
    assert goodput["attempts"] == 1 and goodput["lostSteps"] == 0
    assert goodput["current"]["step"] == TOTAL and goodput["notMeasured"] == []
    assert 0 < goodput["percent"] < 100 and goodput["productiveSeconds"] > 0
    assert goodput["badput"]["trainingPrep"] > 0 and goodput["badput"]["tpuInitialization"] > 0
    # The step compiles on process 0 while process 1 compiles the initial state (step_share.py):
    # a step ready before the state costs no program startup of its own.
    assert goodput["badput"]["programStartup"] >= 0
    parts = goodput["productiveSeconds"] + sum(goodput["badput"].values())
    assert parts == pytest.approx(goodput["wallSeconds"], abs=0.01)
    assert "Goodput" in reasons


@pytest.mark.control_planes("real")
def test_a_killed_host_is_restarted_and_resumes_from_its_checkpoint(local, reference, gcs_env):
    name = unique("kill")
    output = f"gs://tpujob-e2e/{name}"
    local.apply(name, trainer_job(output, max_restarts=2))

    # Wait for the first checkpoint to be complete on GCS, then SIGKILL host 1's process.
    every = TINY["checkpoint"]["every"]
    checkpoints = StepDirs(f"{output}/checkpoints")
    wait_for(lambda: checkpoints.complete_steps(quiet=True), timeout=120, interval=0.2,
             message="a complete checkpoint")
    [host1] = [p for p in local.processes(name) if "-slice-0-1-" in p["pod"]]
    os.kill(host1["pid"], signal.SIGKILL)
    killed_at = time.monotonic()
    at_kill = checkpoints.complete_steps(quiet=True)
    assert at_kill[-1] < TOTAL, "the run finished before it could be killed"

    job = local.wait_phase(name, "Succeeded", "Failed", timeout=150)
    status = job["status"]
    assert status["phase"] == "Succeeded", status
    assert status["restarts"] == 1
    assert status["progress"]["step"] == TOTAL
    local.wait_events(name, "Restarting")

    # Host 0 ran twice: the first run up to the kill, the second from a checkpoint.
    # A save host 1 had finished its part of can still be committed by host 0 after the kill,
    # so the resume step is the newest complete checkpoint, read now, not at the kill.
    before, after, resume_from = resumed_steps(local, name)
    assert resume_from in checkpoints.complete_steps(quiet=True) and resume_from % every == 0
    assert resume_from >= at_kill[-1] >= every
    assert max(before) > resume_from >= min(before)
    # The step counter continues from the checkpoint, and the losses are an uninterrupted run's.
    assert sorted(after) == list(range(resume_from + 1, TOTAL + 1))
    assert after == {s: reference["losses"][s] for s in after}
    assert {s: before[s] for s in before} == {s: reference["losses"][s] for s in before}
    assert time.monotonic() - killed_at < 150

    # Goodput: the steps host 0 completed past the checkpoint the second start resumed from
    # are lost, exactly (host 0's exit record, read back by the second start, has its last one).
    goodput = status["goodput"]
    assert goodput["attempts"] == 2
    assert goodput["lostSteps"] == max(before) - resume_from, goodput
    assert goodput["badput"]["wastedProgressFromDisruption"] > 0
    assert goodput["badput"]["unproductiveCheckpointRestoreTime"] > 0

    # The recovery broken down: every part measured, one after the other from the kill to the
    # first step of the second start, so they add up to the total (docs/goodput.md).
    [recovery] = status["recoveries"]
    parts = [recovery.get(f"{p}Seconds") for p in RECOVERY_PARTS]
    assert None not in parts, recovery
    assert recovery["restart"] == 1 and recovery["cause"], recovery
    assert recovery["resumedFromStep"] == resume_from
    assert recovery["compileCache"] in ("miss", "hit", "executable")
    assert sum(parts) == pytest.approx(recovery["totalSeconds"], abs=0.01), recovery
    assert recovery["totalSeconds"] < time.monotonic() - killed_at
    local.wait_events(name, "Recovered")
    [recovered] = [e for e in local.events(name) if e["reason"] == "Recovered"]
    assert recovered["message"].startswith("restart 1: training again ")


@pytest.mark.control_planes("real")
def test_with_local_checkpoints_a_killed_host_resumes_from_the_newest_local_step(
        local, reference, gcs_env, tmp_path):
    name = unique("localckpt")
    output = f"gs://tpujob-e2e/{name}"
    every_local = 5
    spec = trainer_job(output, max_restarts=2)
    # No persistent checkpoint before the end: only the node-local tier can keep the progress.
    spec["trainer"] = {"config": {**TINY, "checkpoint": {"every": 1000, "keep": 2}}}
    spec["localCheckpoints"] = {"everySteps": every_local, "medium": "Node",
                                "hostPath": str(tmp_path / "node")}
    local.apply(name, spec)
    tiers = [tmp_path / "node" / local.namespace / name / f"process-{i}" for i in (0, 1)]

    def common() -> list[int]:
        have = [{int(p.name) for p in t.glob("*") if p.name.isdigit()} if t.is_dir() else set()
                for t in tiers]
        return sorted(have[0] & have[1])

    wait_for(lambda: [s for s in common() if s >= 2 * every_local], timeout=120, interval=0.1,
             message="a local checkpoint on both hosts")
    [host1] = [p for p in local.processes(name) if "-slice-0-1-" in p["pod"]]
    os.kill(host1["pid"], signal.SIGKILL)
    assert common()[-1] < TOTAL, "the run finished before it could be killed"

    job = local.wait_phase(name, "Succeeded", "Failed", timeout=150)
    status = job["status"]
    assert status["phase"] == "Succeeded", status
    assert status["restarts"] == 1
    # The pods were recreated (Recreate) on the same "node": the hostPath folder outlived them.
    first, second = local.logs(name)
    before, after = steps(first), steps(second)
    [restore] = [e for e in json_lines(second) if e["event"] == "restore"]
    assert restore["tier"] == "local" and restore["step"] % every_local == 0
    assert 2 * every_local <= restore["step"] <= max(before)
    assert sorted(after) == list(range(restore["step"] + 1, TOTAL + 1))
    assert after == {s: reference["losses"][s] for s in after}
    # Lost steps: what host 0 did past the local checkpoint it came back to, counted exactly.
    goodput = status["goodput"]
    assert goodput["lostSteps"] == max(before) - restore["step"], goodput


@pytest.mark.control_planes("real")
def test_in_place_a_killed_host_starts_again_in_its_pod_and_resumes_from_its_emptydir(
        local, reference, gcs_env):
    """InPlaceRestart: the killed container starts again in its pod (the other host's process
    ends PeerLost and starts again the same way); the pods stay, so the local tier in their
    emptyDir (medium Disk) is there to resume from."""
    name = unique("inplace")
    every_local = 5
    spec = trainer_job(f"gs://tpujob-e2e/{name}", max_restarts=5)
    spec["restartPolicy"]["strategy"] = "InPlaceRestart"
    spec["trainer"] = {"config": {**TINY, "checkpoint": {"every": 1000, "keep": 2}}}
    spec["localCheckpoints"] = {"everySteps": every_local, "medium": "Disk"}
    local.apply(name, spec)
    pods = local.cluster.workdir / "pods" / local.namespace

    def common() -> list[int]:
        have = []
        for i in (0, 1):
            tiers = list(pods.glob(f"{name}-slice-0-*/volumes/local-checkpoints/process-{i}"))
            have.append({int(p.name) for t in tiers for p in t.glob("*") if p.name.isdigit()})
        return sorted(have[0] & have[1])

    wait_for(lambda: [s for s in common() if s >= 2 * every_local], timeout=120, interval=0.1,
             message="a local checkpoint on both hosts")
    uids = {p["metadata"]["uid"] for p in local.pods(name)}
    [host1] = [p for p in local.processes(name) if "-slice-0-1-" in p["pod"]]
    os.kill(host1["pid"], signal.SIGKILL)
    assert common()[-1] < TOTAL, "the run finished before it could be killed"

    job = local.wait_phase(name, "Succeeded", "Failed", timeout=150)
    assert job["status"]["phase"] == "Succeeded", job["status"]
    # The same pods throughout; their containers started again in place.
    final = local.pods(name)
    assert {p["metadata"]["uid"] for p in final} == uids
    restarts = {p["metadata"]["name"]: p["status"]["containerStatuses"][0]["restartCount"]
                for p in final}
    assert all(n >= 1 for n in restarts.values()), restarts
    # The run came back from the local tier in the pods' emptyDirs (process 0 logs the steps),
    # and every step after the resume has the loss of an uninterrupted run.
    logs = local.logs(name)
    assert len(logs) >= 2 and all(p.parent == logs[0].parent for p in logs), logs
    last = logs[-1]
    [restore] = [e for e in json_lines(last) if e["event"] == "restore"]
    assert restore["tier"] == "local" and restore["step"] % every_local == 0, restore
    assert restore["step"] >= 2 * every_local
    after = steps(last)
    assert sorted(after) == list(range(restore["step"] + 1, TOTAL + 1))
    assert after == {s: reference["losses"][s] for s in after}
