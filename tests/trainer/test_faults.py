"""Faults through the real CLI, each ending with the contract's exit code and reason: checkpoint
storage failing mid-save."""

from __future__ import annotations

import time

import pytest

from tests.support.http_faults import faulty_proxy
from tests.trainer.helpers import TINY_YAML, LiveRun
from tpujob_trainer.checkpoint import StepDirs
from tpujob_trainer.gcs_env import build_gcs_emulator_env

pytestmark = pytest.mark.integration

COMMON = ["--config", str(TINY_YAML), "metrics.port=null", "metrics.measure_peak=false",
          "metrics.memory_every=1000000"]


@pytest.mark.parametrize("fault", ["503", "stall"])
def test_storage_failing_mid_save_exits_42_and_the_rerun_resumes_from_the_last_good_checkpoint(
        tmp_path, gcs, fault):
    out = gcs.fresh_prefix("save-fails")
    ckpts = f"{out}/checkpoints"
    args = [*COMMON, "train.steps=1000000", "checkpoint.every=5", "checkpoint.save_timeout_s=3",
            f"output={out}"]
    with faulty_proxy(gcs.url) as storage:
        env = build_gcs_emulator_env(storage.url)
        with LiveRun(args, tmp_path, env=env, name="first") as first:
            # Save 10 starts only once 5 is complete; its background writes are still in flight
            # when the storage starts answering 503 to everything, or stops answering.
            first.wait_for(lambda e: e["event"] == "checkpoint" and e["step"] == 10, timeout=120)
            storage.fail(fault)
            t0 = time.monotonic()
            failed = first.finish(timeout=60)
        waited = time.monotonic() - t0
        assert storage.faulted > 0
        assert failed.returncode == 42, failed.stderr[-3000:]
        assert failed.termination["reason"] == "CheckpointError"
        message = failed.termination["message"]
        assert f"checkpoint {ckpts}/" in message and "checkpoint.save_timeout_s=3s" in message
        failed_step = int(message.split(f"checkpoint {ckpts}/")[1].split()[0])
        assert failed_step >= 10 and waited < 30, (message, waited)
        assert not failed.of("end")

        storage.heal()
        complete = StepDirs(ckpts).complete_steps(quiet=True)
        assert 5 in complete and failed_step not in complete
        with LiveRun(args, tmp_path, env=env, name="rerun") as rerun:
            restored = rerun.wait_for(lambda e: e.get("phase") == "after_restore")
            first_step = rerun.wait_for(lambda e: e["event"] == "step")
    assert restored["step"] == complete[-1] and first_step["step"] == complete[-1] + 1
