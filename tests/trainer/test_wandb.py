"""Weights & Biases for real, offline: the run's figures reach W&B under their names, the API key
from the environment appears nowhere, and a run without the package or the key says why."""

from __future__ import annotations

import importlib.util
import math
import re

import pytest

from tests.trainer.helpers import TINY_YAML, run_cli

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(importlib.util.find_spec("wandb") is None,
                                 reason="the wandb extra is not installed")]

FAST = ["metrics.measure_peak=false", "metrics.port=null", "train.steps=3"]
KEY = "wandb-key-that-must-not-leak-4f2a9c"


def _summary(stderr: str) -> dict[str, float]:
    """W&B's own end-of-run summary (`wandb:  name value` lines after "Run summary:")."""
    block = stderr.split("Run summary:", 1)[1]
    found = {}
    for line in block.splitlines():
        m = re.match(r"wandb:\s+(\S+)\s+(-?[0-9.]+(?:e-?\d+)?)\s*$", line)
        if m:
            found[m.group(1)] = float(m.group(2))
    return found


def test_offline_run_logs_the_step_figures_and_never_the_key(tmp_path):
    run = run_cli(["--config", str(TINY_YAML), *FAST, f"output={tmp_path}/out",
                   "metrics.wandb.project=tpujob-test", "metrics.wandb.mode=offline",
                   "metrics.wandb.run_name=pulse"], tmp_path,
                  env={"WANDB_DIR": str(tmp_path / "wb"), "WANDB_API_KEY": KEY,
                       "WANDB_SILENT": "false"})
    assert run.returncode == 0, run.stderr[-3000:]
    (run_dir,) = (tmp_path / "wb" / "wandb").glob("offline-run-*")
    (data,) = run_dir.glob("run-*.wandb")
    assert data.stat().st_size > 0
    summary = _summary(run.stderr)
    last = run.steps[-1]
    assert math.isclose(summary["learning/loss"], last["loss"], rel_tol=1e-4)
    assert math.isclose(summary["learning/current_learning_rate"], last["lr"], rel_tol=1e-4)
    assert {"learning/grad_norm", "perf/step_time_seconds",
            "perf/per_device_tokens_per_sec"} <= set(summary)
    leaks = [p for p in tmp_path.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaks == [] and KEY not in run.stdout and KEY not in run.stderr


def test_online_without_a_key_trains_on_and_says_why_wandb_is_off(tmp_path):
    run = run_cli(["--config", str(TINY_YAML), *FAST, f"output={tmp_path}/out",
                   "metrics.wandb.project=tpujob-test"], tmp_path,
                  env={"WANDB_DIR": str(tmp_path / "wb")})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "WANDB_API_KEY" in run.stdout + run.stderr
    assert not (tmp_path / "wb" / "wandb").exists()
