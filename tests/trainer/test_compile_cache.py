"""The persistent compilation cache through the real CLI: on by default under the job's output
(here on the emulated `gs://`), a second start of the same job loads every program from it and
compiles nothing; with the cache off, nothing is loaded."""

from __future__ import annotations

import fsspec
import pytest

from tests.trainer.helpers import TINY_YAML, run_cli

pytestmark = pytest.mark.integration

ARGS = ["--config", str(TINY_YAML), "metrics.port=null", "metrics.measure_peak=false",
        "train.steps=3", "checkpoint.enabled=false"]


def compiled(run) -> dict:
    assert run.returncode == 0, run.stderr[-3000:]
    [event] = run.of("compiled")
    return event


def test_a_restart_loads_its_programs_from_the_cache_on_gcs(tmp_path, gcs):
    out = gcs.fresh_prefix("cache")
    first = compiled(run_cli([*ARGS, f"output={out}"], tmp_path, timeout=300))
    assert first["compile_cache"]["misses"] >= 1 and first["compile_cache"]["hits"] == 0
    second = compiled(run_cli([*ARGS, f"output={out}"], tmp_path, timeout=300))
    assert second["compile_cache"] == {"hits": first["compile_cache"]["misses"], "misses": 0}
    fs, root = fsspec.core.url_to_fs(f"{out}/compile-cache")
    fs.invalidate_cache()
    assert any("jit_train_step" in p for p in fs.ls(root, detail=False))


def test_with_the_cache_off_every_start_compiles(tmp_path):
    args = [*ARGS, f"output={tmp_path}/out", "compile_cache.enabled=false"]
    for _ in range(2):
        assert compiled(run_cli(args, tmp_path, timeout=300))["compile_cache"] == \
            {"hits": 0, "misses": 0}
    assert not (tmp_path / "out" / "compile-cache").exists()
