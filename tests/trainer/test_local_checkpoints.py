"""The node-local checkpoint tier: a local checkpoint newer than the persistent one is the one
restored, bit for bit; a missing, damaged or foreign local tier on any process falls back, on
every process together, to the persistent tier without losing more than its interval."""

from __future__ import annotations

import json
import shutil
import signal
import threading
import time
from pathlib import Path

import fsspec
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.support.apiserver import wait_for
from tests.trainer.helpers import (
    TINY_YAML,
    LiveRun,
    parse_events,
    run_cli,
    run_two_processes,
)
from tpujob_trainer.checkpoint import StepDirs
from tpujob_trainer.checkpoint.local import MANIFEST, SHARDS, LocalTier, LocalTierError
from tpujob_trainer.checkpoint.tiered import common_steps
from tpujob_trainer.config.checkpoint import LocalCheckpointConfig

COMMON = ["--config", str(TINY_YAML), "metrics.port=null", "metrics.measure_peak=false",
          "metrics.memory_every=1000000"]


# -- the agreement rule -----------------------------------------------------------------------

@pytest.mark.parametrize(("per_process", "want"), [
    ([], []),
    ([[3, 6]], [3, 6]),
    ([[3, 6], [3, 6]], [3, 6]),
    ([[3, 6], [3]], [3]),            # process 1 lost its newest: the older one is common
    ([[3, 6], []], []),              # process 1 on a new node: nothing is common
    ([[6, 3], [6, 9, 3]], [3, 6]),
    ([[9], [6]], []),
])
def test_common_steps_are_those_every_process_has(per_process, want):
    assert common_steps(per_process) == want


# -- one process's tier, in process ---------------------------------------------------------------

def _state():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    rep = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return {"params": {"w": jax.device_put(jnp.arange(24, dtype=jnp.bfloat16).reshape(4, 6), rep),
                       "b": jax.device_put(jnp.linspace(-1, 1, 5, dtype=jnp.float32), rep)},
            "step": jax.device_put(jnp.array(7, jnp.int32), rep)}


def _abstract(state):
    return jax.tree_util.tree_map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state)


def _tier(tmp_path: Path, *, output="gs://b/run", index=0, count=1, keep=2) -> LocalTier:
    return LocalTier(LocalCheckpointConfig(directory=str(tmp_path / "local"), every=5, keep=keep),
                     output=output, process_index=index, process_count=count)


def test_a_saved_step_loads_back_bit_for_bit_with_its_data_position(tmp_path):
    tier, state = _tier(tmp_path), _state()
    tier.save(10, state, {"position": 80}, base_step=None)
    tier.wait()
    assert tier.usable_steps(None) == [10]
    loaded, data = tier.load(10, _abstract(state))
    assert data == {"position": 80}
    for want, got in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(loaded),
                         strict=True):
        assert got.dtype == want.dtype and got.sharding == want.sharding
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def _other_state():
    """`_state()`'s tree with another shape, another dtype and new values."""
    state = _state()
    rep = state["params"]["w"].sharding
    state["params"]["w"] = jax.device_put(jnp.full((3, 5), 2.5, jnp.float32), rep)
    state["params"]["b"] = jax.device_put(jnp.arange(7, dtype=jnp.bfloat16), rep)
    return state


def test_each_save_writes_its_own_states_values_and_layout(tmp_path):
    # The layout of `shards.bin` is kept from save to save of the same state; a state of
    # other shapes or dtypes gets its own, and every step loads back as it was saved.
    tier, running = _tier(tmp_path, keep=4), set(threading.enumerate())
    saved = {5: _state(), 10: _other_state(), 15: _other_state(), 20: _state()}
    saved[15]["params"]["w"] = saved[15]["params"]["w"] * 3      # same layout, new values
    for step, state in saved.items():
        before = time.perf_counter()
        tier.save(step, state, {"position": step}, base_step=None)
        assert 0 <= tier.last_save_blocking_s <= time.perf_counter() - before
    tier.close()
    # One writer thread served every save, and closing the tier ended it.
    assert not [t for t in set(threading.enumerate()) - running
                if t.name.startswith("tpujob-local-checkpoint")]
    for step, state in saved.items():
        loaded, data = tier.load(step, _abstract(state))
        assert data == {"position": step}
        for want, got in zip(jax.tree_util.tree_leaves(state),
                             jax.tree_util.tree_leaves(loaded), strict=True):
            assert (got.shape, got.dtype) == (want.shape, want.dtype)
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize(("every", "step", "due"), [
    (5, 0, False), (5, 4, False), (5, 5, True), (5, 10, True), (5, 11, False), (1, 1, True),
])
def test_a_local_save_is_due_every_n_steps_after_the_first(tmp_path, every, step, due):
    tier = LocalTier(LocalCheckpointConfig(directory=str(tmp_path), every=every),
                     output="gs://b/run", process_index=0, process_count=1)
    assert tier.should_save(step) is due


def test_a_failed_write_is_logged_once_and_the_next_save_writes(tmp_path, caplog):
    tier, state = _tier(tmp_path), _state()
    (tmp_path / "local").write_text("a file where the folder should be")
    tier.save(5, state, {}, base_step=None)
    with caplog.at_level("WARNING"):
        tier.wait()
        tier.wait()
    failed = [r.getMessage() for r in caplog.records
              if "local checkpoint write failed" in r.getMessage()]
    assert len(failed) == 1 and "Not a directory" in failed[0], failed
    (tmp_path / "local").unlink()
    tier.save(10, state, {}, base_step=None)
    tier.close()
    assert tier.steps() == [10]


def test_keep_prunes_old_steps_and_a_save_drops_newer_ones_from_an_abandoned_timeline(tmp_path):
    tier, state = _tier(tmp_path, keep=2), _state()
    for step in (5, 10, 15):
        tier.save(step, state, {}, base_step=None)
    tier.wait()
    assert tier.steps() == [10, 15]
    (tier.root / ".20.tmp").mkdir()          # a write killed half way
    assert tier.steps() == [10, 15]
    tier.save(10, state, {}, base_step=None)  # resumed from 10 elsewhere: 15 is stale
    tier.wait()
    assert tier.steps() == [10]
    assert not (tier.root / ".20.tmp").exists()
    tier.save(15, state, {}, base_step=None)
    tier.discard_after(10)
    assert tier.steps() == [10]


@pytest.mark.parametrize(("change", "persistent_latest", "why"), [
    ({}, None, None),
    ({}, 9, None),
    ({}, 10, "not newer than the persistent checkpoint 10"),
    ({"output": "gs://b/other"}, None, "output='gs://b/other'"),
    ({"process_index": 1}, None, "process_index=1"),
    ({"process_count": 4}, None, "process_count=4"),
    ({"format": 99}, None, "format=99"),
    ({"base_step": 5}, None, "builds on persistent checkpoint 5"),   # the output was wiped
    ({"base_step": 5}, 4, "builds on persistent checkpoint 5"),
    ({"base_step": 5}, 5, None),
])
def test_a_manifest_from_another_run_process_or_timeline_is_not_used(tmp_path, change,
                                                                     persistent_latest, why):
    tier = _tier(tmp_path)
    tier.save(10, _state(), {}, base_step=None)
    tier.wait()
    path = tier.root / "10" / MANIFEST
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    got = tier.why_unusable(10, persistent_latest)
    if why is None:
        assert got is None and tier.usable_steps(persistent_latest) == [10]
    else:
        assert why in got and tier.usable_steps(persistent_latest) == []


@pytest.mark.parametrize("damage", ["flip", "truncate", "manifest", "no-shards"])
def test_damaged_bytes_are_refused_on_load(tmp_path, damage):
    tier, state = _tier(tmp_path), _state()
    tier.save(10, state, {}, base_step=None)
    tier.wait()
    shards = tier.root / "10" / SHARDS
    data = bytearray(shards.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x40
        shards.write_bytes(bytes(data))
    elif damage == "truncate":
        shards.write_bytes(bytes(data[:-3]))
    elif damage == "manifest":
        (tier.root / "10" / MANIFEST).write_text("{not json")
    else:
        shards.unlink()
    with pytest.raises(LocalTierError, match="damaged|unreadable"):
        tier.load(10, _abstract(state))


def test_a_different_layout_is_refused_on_load(tmp_path):
    tier, state = _tier(tmp_path), _state()
    tier.save(10, state, {}, base_step=None)
    tier.wait()
    other = dict(state, params={**state["params"], "w": state["params"]["w"].astype(jnp.float32)})
    with pytest.raises(LocalTierError, match="expected"):
        tier.load(10, _abstract(other))
    with pytest.raises(LocalTierError, match="structure"):
        tier.load(10, _abstract({"params": state["params"]}))


# -- the real trainer --------------------------------------------------------------------------

def _losses(events: list[dict]) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in events if e.get("event") == "step"}


def _restore(events: list[dict]) -> dict:
    [restore] = [e for e in events if e.get("event") == "restore"]
    return restore


def _reference(tmp_path: Path, steps: int, *extra: str) -> dict[int, float]:
    ref = run_cli([*COMMON, f"train.steps={steps}", "checkpoint.enabled=false", *extra,
                   f"output={tmp_path}/reference"], tmp_path, timeout=300)
    assert ref.returncode == 0, ref.stderr[-3000:]
    return _losses(ref.events)


@pytest.mark.slow
def test_killed_between_persistent_saves_resumes_from_the_newest_local_step(tmp_path, gcs):
    total = 400
    local = tmp_path / "node-local"
    out = gcs.fresh_prefix("local-tier")
    # No persistent save before the end: only the local tier (every 7) can save the progress.
    args = [*COMMON, f"train.steps={total}", "checkpoint.every=1000",
            f"checkpoint.local.directory={local}", "checkpoint.local.every=7", f"output={out}"]
    with LiveRun(args, tmp_path, name="killed") as first:
        first.wait_for(lambda e: e["event"] == "local_checkpoint" and e["step"] == 14,
                       timeout=180)
        first.pause_reading()  # at most a pipe's worth of steps further, far short of the end
        tier = LocalTier(LocalCheckpointConfig(directory=str(local)), output=out,
                         process_index=0, process_count=1)
        wait_for(lambda: [s for s in tier.steps() if s >= 14], timeout=60,
                 message="local checkpoint 14 renamed into place")
        assert first.proc.poll() is None, "the run ended before it could be killed"
        first.proc.send_signal(signal.SIGKILL)
        killed = first.finish(timeout=60)
    assert killed.returncode == -signal.SIGKILL
    newest = tier.steps()[-1]
    assert newest >= 14 and newest % 7 == 0
    assert StepDirs(f"{out}/checkpoints").complete_steps(quiet=True) == []

    resumed = run_cli(args, tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _restore(resumed.events) == {**_restore(resumed.events), "step": newest,
                                        "tier": "local"}
    want = _reference(tmp_path, total)
    got = _losses(resumed.events)
    assert sorted(got) == list(range(newest + 1, total + 1))
    assert got == {s: want[s] for s in got}  # bit for bit: same state, same batches


def _two_process_run(tmp_path: Path, out: str, local: Path, steps: int):
    results = run_two_processes(
        [*COMMON, "mesh.ici={data: 2, fsdp: 2, tensor: 2}", f"train.steps={steps}",
         "checkpoint.every=10", f"checkpoint.local.directory={local}", "checkpoint.local.every=3",
         f"output={out}"], tmp_path)
    assert [r[0] for r in results] == [0, 0], results[0][2][-2000:] + results[1][2][-2000:]
    return parse_events(results[0][1])


@pytest.fixture(scope="module")
def first_two_process_run(gcs, tmp_path_factory):
    """The run every variant below starts from, made once: 30 steps of two processes, local
    checkpoints every 3 and persistent ones every 10, then "died" after local step 27 and before
    its persistent save of step 30. Its objects on `gs://` and its node-local folder are kept,
    for each variant to put back where they were (the local manifests name the output, so the
    run cannot be copied to another prefix)."""
    tmp_path = tmp_path_factory.mktemp("local-mp")
    out, local = gcs.fresh_prefix("local-mp"), tmp_path / "node-local"
    first = _two_process_run(tmp_path, out, local, 30)
    assert [e["step"] for e in first if e["event"] == "local_checkpoint"] == \
        [3, 6, 9, 12, 15, 18, 21, 24, 27]
    StepDirs(f"{out}/checkpoints").remove(30)
    fs, root = fsspec.core.url_to_fs(out)
    fs.invalidate_cache()
    objects = {path: fs.cat_file(path) for path in fs.find(root)}
    kept = tmp_path / "node-local-as-left"
    shutil.copytree(local, kept)
    return out, local, objects, kept, first


def _put_back(out: str, local: Path, objects: dict[str, bytes], kept: Path) -> None:
    fs, root = fsspec.core.url_to_fs(out)
    fs.invalidate_cache()
    if fs.find(root):
        fs.rm(root, recursive=True)
    for path, data in objects.items():
        fs.pipe_file(path, data)
    fs.invalidate_cache()
    shutil.rmtree(local, ignore_errors=True)
    shutil.copytree(kept, local)


@pytest.mark.slow
@pytest.mark.parametrize("local_tier", ["whole", "process-1-lost", "process-0-damaged"])
def test_two_processes_restore_the_newest_tier_every_process_can_read(tmp_path,
                                                                       first_two_process_run,
                                                                       local_tier):
    out, local, objects, kept, first = first_two_process_run
    _put_back(out, local, objects, kept)
    assert StepDirs(f"{out}/checkpoints").complete_steps() == [20]
    for p in (0, 1):
        assert LocalTier(LocalCheckpointConfig(directory=str(local)), output=out,
                         process_index=p, process_count=2).steps() == [24, 27]
    if local_tier == "process-1-lost":       # its pod came back on another node
        shutil.rmtree(local / "process-1")
    elif local_tier == "process-0-damaged":  # every local step of process 0 unreadable
        for step in (24, 27):
            shards = local / "process-0" / str(step) / SHARDS
            shards.write_bytes(shards.read_bytes()[:-8])

    second = _two_process_run(tmp_path, out, local, 30)  # same steps: same LR schedule
    resumed_from = 27 if local_tier == "whole" else 20
    assert _restore(second)["step"] == resumed_from
    assert _restore(second)["tier"] == ("local" if local_tier == "whole" else "persistent")
    # Never more lost than the persistent interval (10 steps) behind the newest local step.
    assert 27 - resumed_from < 10
    # The steps both runs made are the same, bit for bit (same processes, program, batches).
    got, want = _losses(second), _losses(first)
    assert sorted(got) == list(range(resumed_from + 1, 31))
    assert got == {s: want[s] for s in want if s > resumed_from}
