"""The persistent compilation cache through the real CLI: on by default under the job's output
(here on the emulated `gs://`), a second start of the same job loads its training step whole
(no tracing, lowering or compile) and every other program from JAX's cache, compiling nothing;
another config, or a damaged entry, compiles again; with the cache off, nothing is loaded."""

from __future__ import annotations

import json

import fsspec
import pytest

from tests.trainer.helpers import TINY_YAML, run_cli

pytestmark = pytest.mark.integration

ARGS = ["--config", str(TINY_YAML), "metrics.port=null", "metrics.measure_peak=false",
        "train.steps=3", "checkpoint.enabled=false"]


@pytest.fixture(autouse=True)
def own_cache(monkeypatch):
    """The cache under each run's output, as a job has it, not the test run's shared one."""
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)


def compiled(run) -> dict:
    assert run.returncode == 0, run.stderr[-3000:]
    [event] = run.of("compiled")
    return event


def test_a_restart_loads_its_programs_from_the_cache_on_gcs(tmp_path, gcs):
    out = gcs.fresh_prefix("cache")
    first = compiled(run_cli([*ARGS, f"output={out}"], tmp_path, timeout=300))
    assert first["compile_cache"]["misses"] >= 1 and first["compile_cache"]["hits"] == 0
    assert first["executable"] == "compiled"
    second = compiled(run_cli([*ARGS, f"output={out}"], tmp_path, timeout=300))
    # The step comes whole from the executable cache; the other programs from JAX's cache.
    assert second["executable"] == "loaded"
    assert second["compile_cache"] == {"hits": first["compile_cache"]["misses"] - 1, "misses": 0}
    fs, root = fsspec.core.url_to_fs(f"{out}/compile-cache")
    fs.invalidate_cache()
    assert any("jit_train_step" in p for p in fs.ls(root, detail=False))
    assert len(fs.ls(f"{root}/executables", detail=False)) == 1
    assert start_records(out) == ["miss", "executable"]


def test_without_the_executable_cache_jax_s_cache_serves_every_program(tmp_path):
    args = [*ARGS, f"output={tmp_path}/out", "compile_cache.executables=false"]
    first = compiled(run_cli(args, tmp_path, timeout=300))
    second = compiled(run_cli(args, tmp_path, timeout=300))
    assert (first["executable"], second["executable"]) == ("compiled", "compiled")
    assert second["compile_cache"] == {"hits": first["compile_cache"]["misses"], "misses": 0}
    assert not (tmp_path / "out" / "compile-cache" / "executables").exists()
    # What each start's timeline says of it (a restart's recovery in status.recoveries).
    assert start_records(tmp_path / "out") == ["miss", "hit"]


def start_records(output) -> list[str]:
    """compile_cache of each start's exit record, oldest first."""
    fs, root = fsspec.core.url_to_fs(f"{output}/goodput")
    fs.invalidate_cache()
    folders = sorted(fs.ls(root, detail=False), key=lambda p: int(p.rstrip("/").rsplit("/")[-1], 16))
    return [json.loads(fs.cat_file(f"{f}/process-0.json"))["compile_cache"] for f in folders]


def test_another_config_or_a_damaged_entry_compiles_the_step_again(tmp_path):
    args = [*ARGS, f"output={tmp_path}/out"]
    assert compiled(run_cli(args, tmp_path, timeout=300))["executable"] == "compiled"
    other = compiled(run_cli([*args, "optimizer.lr=1e-3"], tmp_path, timeout=300))
    assert other["executable"] == "compiled"  # the LR is compiled into the step
    entries = sorted((tmp_path / "out" / "compile-cache" / "executables").glob("*.pkl"))
    assert len(entries) == 2
    for entry in entries:
        entry.write_bytes(entry.read_bytes()[:100])
    run = run_cli(args, tmp_path, timeout=300)
    assert compiled(run)["executable"] == "compiled"
    assert "could not be loaded" in run.stderr
    # That compile was served by JAX's cache: such an executable is not saved again (on
    # XLA:CPU it would load and then fail at its first run), so the next start compiles
    # through JAX's cache and trains.
    assert "not saved whole" in run.stderr
    assert sum(e.exists() for e in entries) == 1  # this config's damaged entry was removed
    again = run_cli(args, tmp_path, timeout=300)
    assert compiled(again)["executable"] == "compiled"
    assert [s["step"] for s in again.steps] == [1, 2, 3]
    assert sum(e.exists() for e in entries) == 1


def test_a_step_served_by_jax_s_cache_is_not_saved_whole(tmp_path):
    out = f"output={tmp_path}/out"
    first = compiled(run_cli([*ARGS, out, "compile_cache.executables=false"], tmp_path,
                             timeout=300))
    assert first["compile_cache"]["hits"] == 0
    run = run_cli([*ARGS, out], tmp_path, timeout=300)
    assert compiled(run)["executable"] == "compiled"
    assert [s["step"] for s in run.steps] == [1, 2, 3]
    assert not list((tmp_path / "out" / "compile-cache" / "executables").glob("*.pkl"))


def test_with_the_cache_off_every_start_compiles(tmp_path):
    args = [*ARGS, f"output={tmp_path}/out", "compile_cache.enabled=false"]
    for _ in range(2):
        assert compiled(run_cli(args, tmp_path, timeout=300))["compile_cache"] == \
            {"hits": 0, "misses": 0}
    assert not (tmp_path / "out" / "compile-cache").exists()
