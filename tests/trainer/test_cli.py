"""The real `tpujob-train` entry point: a pulse run, bad config, NaN loss, topology mismatch,
data running out (stop or repeat)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from tests.trainer.helpers import TINY_YAML, run_cli
from tpujob_trainer.exits import EXIT_CODES, Reason

pytestmark = pytest.mark.integration

FAST = ["metrics.measure_peak=false", "metrics.port=null"]


def test_pulse_trains_a_few_steps_and_reports(tmp_path):
    run = run_cli(["--config", str(TINY_YAML), "train.steps=3", "checkpoint.every=2",
                   f"output={tmp_path}/out", *FAST], tmp_path)
    assert run.returncode == 0, run.stderr
    steps = run.steps
    assert [s["step"] for s in steps] == [1, 2, 3]
    for s in steps:
        for key in ("loss", "grad_norm", "lr", "step_time_s", "tokens_per_s_per_device",
                    "tflops_per_device", "mfu"):
            assert key in s
        assert s["step_time_s"] > 0 and s["tokens_per_s_per_device"] > 0
    assert {m["phase"] for m in run.of("memory")} >= {"after_init", "after_compile"}
    assert run.of("end")[0]["reason"] == "Completed"
    assert run.termination["reason"] == "Completed"
    assert run.termination["message"] == "trained 3 steps"
    assert run.termination["goodput"]["step"] == 3
    # Process 0's last figures: where the run ended, for an operator that read it earlier.
    final = run.termination["progress"]
    assert (final["phase"], final["step"], final["total_steps"]) == ("done", 3, 3)
    assert final["loss"] == pytest.approx(steps[-1]["loss"], rel=1e-6)
    assert final["last_checkpoint_step"] == 3
    assert final["step_time_s"] == pytest.approx(steps[-1]["step_time_s"])
    assert (tmp_path / "out" / "checkpoints" / "3").exists()
    # The host report: every phase as it begins, each step split into busy and wait (their sum
    # is the step time), the checkpointed step and the one its save slowed marked, a last line.
    reports = run.of("host_report")
    assert list(dict.fromkeys(r["phase"] for r in reports)) == [
        "startup", "compile", "step", "checkpoint_save"]
    assert (reports[-1]["step"], reports[-1]["process"], reports[-1]["host"]) == (3, 0, 0)
    split = {s[0]: s for r in reports for s in r.get("steps", [])}
    assert [split[n][3] for n in sorted(split)] == [0, 1, 1]
    for s in steps:
        _, busy, wait, _ = split[s["step"]]
        assert busy + wait == pytest.approx(s["step_time_s"], abs=3e-6)


def test_bad_config_exits_with_the_field_named(tmp_path):
    run = run_cli(["--config", str(TINY_YAML), "train.stepz=3", "optimizer.lr=-1"], tmp_path)
    assert run.returncode == 3
    assert run.termination["reason"] == "ConfigError"
    assert "train.stepz: unknown key" in run.termination["message"]
    assert "optimizer.lr" in run.termination["message"]


def test_nan_loss_stops_the_run_without_checkpointing_it(tmp_path):
    run = run_cli(["--config", str(TINY_YAML), "train.steps=6", "checkpoint.every=2",
                   "optimizer.lr=1e30", "optimizer.clip_norm=null", "optimizer.warmup_steps=0",
                   f"output={tmp_path}/out", *FAST], tmp_path)
    assert run.returncode == EXIT_CODES[Reason.NAN_LOSS] == 6
    assert run.termination["reason"] == "NaNLoss"
    assert re.match(r"loss is (nan|inf|-inf) at step \d+ ", run.termination["message"])
    bad_step = int(run.termination["message"].split("at step ")[1].split()[0])
    assert [s["step"] for s in run.steps] == list(range(1, bad_step))  # never a non-finite row
    assert all(math.isfinite(s["loss"]) for s in run.steps)
    assert not run.of("end") and not run.of("checkpoint")
    assert not (tmp_path / "out" / "checkpoints" / "2").exists()


def test_fewer_devices_than_expected_fails_fast(tmp_path):
    run = run_cli(["--config", str(TINY_YAML), *FAST], tmp_path,
                  env={"TPUJOB_CPU_DEVICES": "4", "TPUJOB_EXPECTED_DEVICES": "8"})
    assert run.returncode == 7
    assert run.termination["reason"] == "MeshMismatch"
    assert "only worker 0 started" in run.termination["message"]


def test_missing_peer_process_fails_with_mesh_mismatch(tmp_path):
    run = run_cli(["--config", str(TINY_YAML), *FAST], tmp_path, timeout=60,
                  env={"TPUJOB_CPU_DEVICES": "2", "TPUJOB_PROCESS_COUNT": "2",
                       "TPUJOB_PROCESS_ID": "0", "TPUJOB_COORDINATOR_ADDRESS": "127.0.0.1:23611",
                       "TPUJOB_INIT_TIMEOUT_S": "3"})
    assert run.returncode == 7
    assert run.termination["reason"] == "MeshMismatch"
    assert "could not join" in run.termination["message"]


def three_batch_corpus(tmp_path) -> str:
    """Token ids for exactly 3 batches of the tiny config (8 rows x 64+1 tokens, windows
    sharing one token): 24 windows."""
    path = tmp_path / "tokens.npy"
    np.save(path, (np.arange(24 * 64 + 1) % 251).astype(np.int32))
    return str(path)


def test_data_exhausted_stops_cleanly_and_a_restart_does_not_train_again(tmp_path):
    args = ["--config", str(TINY_YAML), "train.steps=10", "checkpoint.every=100",
            "data.kind=tokens", f"data.path={three_batch_corpus(tmp_path)}",
            "data.on_exhausted=stop", f"output={tmp_path}/out", *FAST]
    run = run_cli(args, tmp_path)
    assert run.returncode == EXIT_CODES[Reason.DATA_EXHAUSTED] == 0, run.stderr[-3000:]
    assert run.termination["reason"] == "DataExhausted"
    assert run.termination["message"].startswith("data ran out after step 3")
    assert [s["step"] for s in run.steps] == [1, 2, 3]
    assert run.of("end")[0]["reason"] == "DataExhausted"
    assert run.of("end")[0]["last_checkpoint_step"] == 3  # the final save
    # A restart resumes at the end of the data: it stops again without training a step.
    again = run_cli(args, tmp_path)
    assert again.returncode == 0 and again.termination["reason"] == "DataExhausted"
    assert again.steps == [] and again.of("end")[0]["step"] == 3


def test_data_exhausted_with_repeat_trains_on_into_the_next_epoch(tmp_path):
    run = run_cli(["--config", str(TINY_YAML), "train.steps=7", "checkpoint.every=100",
                   "data.kind=tokens", f"data.path={three_batch_corpus(tmp_path)}",
                   "data.on_exhausted=repeat", f"output={tmp_path}/out", *FAST], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.termination["reason"] == "Completed"
    assert run.termination["message"] == "trained 7 steps"
    assert run.termination["goodput"]["step"] == 7
    assert [s["step"] for s in run.steps] == list(range(1, 8))  # epochs of 3: 3 + 3 + 1
    position = json.loads((tmp_path / "out" / "checkpoints" / "7" / "data" / "metadata").read_text())
    assert position["step"] == 7 and position["windows"] == 24


def test_a_checkpoint_of_another_model_is_a_config_error_not_a_restart(tmp_path):
    """Resuming into an output whose checkpoint another model wrote (a config or version
    change) fails at once as ConfigError (exit 3, no restart), naming what differs; before, the
    read failed as storage trouble (CheckpointError, exit 42) and the job restarted to its
    limit."""
    out = f"output={tmp_path}/out"
    first = run_cli(["--config", str(TINY_YAML), "train.steps=2", "checkpoint.every=2", out,
                     *FAST], tmp_path)
    assert first.returncode == 0, first.stderr
    other = run_cli(["--config", str(TINY_YAML), "train.steps=4", "model.n_layers=3", out,
                     *FAST], tmp_path)
    assert other.returncode == EXIT_CODES[Reason.CONFIG_ERROR] == 3, other.stderr
    assert other.termination["reason"] == "ConfigError"
    message = other.termination["message"]
    assert "the checkpoint of step 2" in message and "holds another model" in message
    assert "layers/0/attn/wq_DxNxH (2, 64, 4, 16) in the checkpoint, (3, 64, 4, 16) in the model" \
        in message
    assert not other.steps
    same = run_cli(["--config", str(TINY_YAML), "train.steps=4", out, *FAST], tmp_path)
    assert same.returncode == 0, same.stderr
    assert [s["step"] for s in same.steps] == [3, 4]
