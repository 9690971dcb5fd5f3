"""Interrupted runs through the real CLI: SIGKILL after a `gs://` checkpoint, then resume, gives
the losses of an uninterrupted run; SIGTERM checkpoints, exits 42 with a reason, and the next run
continues from that checkpoint."""

from __future__ import annotations

import signal

import pytest

from tests.trainer.helpers import TINY_YAML, LiveRun, run_cli, wait_until_complete
from tpujob_trainer.checkpoint import StepDirs

pytestmark = pytest.mark.integration

COMMON = ["--config", str(TINY_YAML), "metrics.port=null", "metrics.measure_peak=false",
          "metrics.memory_every=1000000"]


def losses(run) -> dict[int, float]:
    return {s["step"]: s["loss"] for s in run.steps}


@pytest.mark.slow
def test_sigkill_after_a_gcs_checkpoint_then_resume_matches_an_uninterrupted_run(
        tmp_path, gcs):
    total = 400
    args = [*COMMON, f"train.steps={total}", "checkpoint.every=50"]
    out = gcs.fresh_prefix("sigkill")
    ckpts = f"{out}/checkpoints"

    with LiveRun([*args, f"output={out}"], tmp_path, name="killed") as first:
        first.wait_for(lambda e: e["event"] == "checkpoint" and e["step"] == 50, timeout=180)
        # The trainer can now get at most a pipe's worth of lines (~200 steps) further, so it
        # is still mid-run when the save of step 50 has landed on GCS and it is killed.
        first.pause_reading()
        wait_until_complete(ckpts, 50)
        assert first.proc.poll() is None, "the run ended before it could be killed"
        first.proc.send_signal(signal.SIGKILL)
        killed = first.finish(timeout=60)
    assert killed.returncode == -signal.SIGKILL
    assert not killed.of("end")
    resume_from = StepDirs(ckpts).complete_steps(quiet=True)[-1]
    assert 50 <= resume_from < total and resume_from % 50 == 0

    resumed = run_cli([*args, f"output={out}"], tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [m["step"] for m in resumed.of("memory") if m["phase"] == "after_restore"] == [resume_from]
    assert sorted(losses(resumed)) == list(range(resume_from + 1, total + 1))
    assert resumed.termination["reason"] == "Completed"

    reference = run_cli([*args, "checkpoint.enabled=false", f"output={tmp_path}/reference"],
                        tmp_path, timeout=300)
    assert reference.returncode == 0, reference.stderr[-3000:]
    want = losses(reference)
    assert sorted(want) == list(range(1, total + 1))
    # Bit-for-bit: the same compiled step from the same state and the same batches.
    assert losses(resumed) == {s: want[s] for s in losses(resumed)}
    assert losses(killed) == {s: want[s] for s in losses(killed)}
    assert max(losses(killed)) >= resume_from


def test_sigterm_checkpoints_exits_42_and_the_next_run_continues_there(tmp_path):
    # No periodic saves: the only checkpoint is the one SIGTERM makes.
    args = [*COMMON, "train.steps=1000000", "checkpoint.every=1000000", f"output={tmp_path}/out"]
    with LiveRun(args, tmp_path, name="first") as first:
        first.wait_for(lambda e: e["event"] == "step" and e["step"] >= 20)
        first.proc.send_signal(signal.SIGTERM)
        stopped = first.finish(timeout=120)
    assert stopped.returncode == 42, stopped.stderr[-3000:]
    assert stopped.termination["reason"] == "Preempted"
    assert "SIGTERM" in stopped.termination["message"]
    end = stopped.of("end")[0]
    saved = end["last_checkpoint_step"]
    assert end["reason"] == "Preempted" and end["step"] == saved >= 20
    assert stopped.of("checkpoint")[-1]["step"] == saved and stopped.of("checkpoint_wait")
    assert stopped.steps[-1]["step"] == saved  # every step it trained was reported
    assert StepDirs(f"{tmp_path}/out/checkpoints").complete_steps() == [saved]

    with LiveRun(args, tmp_path, name="second") as second:
        restored = second.wait_for(lambda e: e.get("phase") == "after_restore")
        first_step = second.wait_for(lambda e: e["event"] == "step")
        second.proc.send_signal(signal.SIGTERM)
        again = second.finish(timeout=120)
    assert restored["step"] == saved and first_step["step"] == saved + 1
    assert again.returncode == 42 and again.of("end")[0]["last_checkpoint_step"] > saved
