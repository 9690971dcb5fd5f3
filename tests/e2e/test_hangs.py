"""A hung host on a real run: the trainer as 2 JAX processes of a v6e-8 in local mode; once a
checkpoint is on the emulated gs://, host 1's process is stopped (SIGSTOP), so host 0 waits in
the step's collective. The job stalls; the Stalled condition and Event name host 1 as the one
behind (its heartbeat stopped while host 0's did not); before the restart the operator asks
every process for its stacks: host 0 answers and saves them under the job's output, host 1 (stopped)
cannot, and the HangStacks Event says both; then every host restarts and the run resumes from
its checkpoint to the end."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.e2e.conftest import RECOVERY_PARTS, TINY, unique
from tests.support.apiserver import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
# The stall, its host and stacks are the operator's and the trainer's, the same on either plane:
# on the real one (its Job controller's foreground deletion of the hung pods too). The embedded
# plane's restart mechanics are test_restart_strategies.py's, on both planes.
CONTROL_PLANES = ("real",)
STALL_S = 8
PROGRAMS = Path(__file__).resolve().parent / "programs"


def hang_job(output: str) -> dict:
    config = TINY | {"train": TINY["train"] | {"steps": 80}}
    return {"slice": "v6e-8", "image": "trainer:1", "output": output,
            "trainer": {"config": config}, "parallelism": {"ici": {"fsdp": -1}},
            "data": {"kind": "synthetic"}, "restartPolicy": {"maxRestarts": 2},
            "stallTimeoutSeconds": STALL_S,
            "env": [{"name": "TPUJOB_HOST_REPORT_INTERVAL_S", "value": "0.5"}]}


def test_a_stopped_host_is_named_stacks_are_taken_and_the_job_resumes(local, gcs_env):
    import gcsfs

    name = unique("hang")
    output = f"gs://tpujob-e2e/{name}"
    local.apply(name, hang_job(output))
    local.wait(name, lambda s: ((s.get("progress") or {}).get("lastCheckpointStep") or 0) >= 20,
               timeout=180, message="the first checkpoint")
    [host1] = [p for p in local.processes(name) if "-slice-0-1-" in p["pod"]]
    os.kill(host1["pid"], signal.SIGSTOP)
    try:
        stalled = local.wait(name, lambda s: s.get("restarts", 0) >= 1, timeout=120,
                             message="the stall's restart")
    finally:
        try:
            os.kill(host1["pid"], signal.SIGCONT)   # gone already, if the restart killed it
        except ProcessLookupError:
            pass
    assert stalled["status"]["hosts"]["behind"] == ["slice-0/host-1"]
    events = local.wait_events(name, "Stalled", "HangStacks")
    assert "behind: slice-0/host-1" in events["Stalled"]
    stacks = events["HangStacks"]
    assert stacks.startswith("stacks of 1 of 2 processes, label hang-"), stacks
    assert "No stacks from slice-0/host-1: no answer in" in stacks
    label = stacks.split("label ", 1)[1].split(":", 1)[0]
    saved = f"{output}/stacks/{label}/slice-0-host-0.txt"
    assert saved in stacks
    fs = gcsfs.GCSFileSystem()

    def saved_text() -> str | None:
        # Host 0 writes the file after it answered (a thread of its own): wait for it.
        fs.invalidate_cache()
        try:
            return fs.cat(saved).decode()
        except FileNotFoundError:
            return None

    text = wait_for(saved_text, timeout=60, interval=0.2, message=f"{saved} to be written")
    assert text.startswith('Thread "MainThread"') and "tpujob-host-report" in text
    # The restart resumes from the checkpoint and finishes.
    final = local.wait_phase(name, "Succeeded", "Failed", timeout=240)["status"]
    assert final["phase"] == "Succeeded", final
    assert final["restarts"] == 1 and final["stallRestarts"] == 1
    assert final["restartCheckpoints"][0] >= 20
    assert final["hosts"]["behind"] == ["slice-0/host-1"]
    # Its recovery, from the last step before the hang to the first step after the restart.
    [recovery] = final["recoveries"]
    assert recovery["cause"].startswith("stalled: "), recovery
    parts = [recovery.get(f"{p}Seconds") for p in RECOVERY_PARTS]
    assert None not in parts and recovery["detectSeconds"] > 0, recovery
    assert sum(parts) == pytest.approx(recovery["totalSeconds"], abs=0.01), recovery
    wait_for(lambda: not local.processes(name), timeout=30, interval=0.1,
             message="no process of the job left")


def test_a_hang_in_a_program_of_ones_own_is_found_and_its_host_named(local, tmp_path):
    # A plain JAX program that prints host report lines: its process 1 stuck at step 25.
    name = unique("byo-hang")
    local.apply(name, {
        "slice": "v6e-8", "image": "jax:1", "output": f"gs://tpujob-e2e/{name}",
        "trainer": {"command": ["python3", str(PROGRAMS / "hang_jax_train.py")],
                    "args": [str(tmp_path)], "progress": {"source": "log", "format": "jsonl"}},
        "stallTimeoutSeconds": STALL_S, "restartPolicy": {"maxRestarts": 1}})
    final = local.wait_phase(name, "Succeeded", "Failed", timeout=240)["status"]
    assert final["phase"] == "Succeeded" and final["stallRestarts"] == 1, final
    events = local.wait_events(name, "Stalled", "HangStacks")
    assert ("behind: slice-0/host-1 at step 24, busy in its own work while the others wait "
            "for the step's result") in events["Stalled"], events["Stalled"]
    # Without the trainer's timeline, the recovery has the pods' parts and the total to the
    # first step the operator read.
    [recovery] = final["recoveries"]
    assert recovery["totalSeconds"] > 0 and recovery["startSeconds"] is not None, recovery
    assert recovery.get("initSeconds") is None and "compileCache" not in recovery, recovery
    # It serves no stacks: the Event says so for every process.
    assert events["HangStacks"].startswith("stacks of 0 of 2 processes"), events["HangStacks"]
    assert "No stacks from slice-0/host-0: unreachable" in events["HangStacks"]
