"""Checkpointer: round trips (local, gs://), keep-last-K, skipping incomplete or corrupt
checkpoints, async saves, params-only restore, sharded restore on a 4-device mesh."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import fsspec
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tpujob_trainer.checkpoint.checkpointer as checkpointer_module
from tpujob_trainer.checkpoint import (
    Checkpointer,
    CheckpointError,
    CheckpointReadError,
    restore_params,
)
from tpujob_trainer.config.checkpoint import CheckpointConfig

REPO = Path(__file__).resolve().parents[2]


def make_state(step: int, n: int = 64):
    return {
        "params": {"w": jnp.full((n, n), float(step)), "b": jnp.arange(n, dtype=jnp.float32) + step},
        "opt_state": {"mu": jnp.full((n, n), -float(step)), "count": jnp.array(step, jnp.int32)},
        "step": jnp.array(step, jnp.int32),
    }


def abstract(state):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)


def assert_state(got, step: int):
    want = make_state(step, got["params"]["w"].shape[0])
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def save_steps(directory: str, steps, *, every=1, keep=3, **kw) -> Checkpointer:
    ckpt = Checkpointer(CheckpointConfig(every=every, keep=keep, **kw), directory)
    for s in steps:
        ckpt.save(s, make_state(s), {"step": s, "note": "data position"})
    ckpt.wait()
    return ckpt


@pytest.mark.integration
def test_local_round_trip_every_and_force(tmp_path):
    d = str(tmp_path / "ckpt")
    ckpt = Checkpointer(CheckpointConfig(every=3, keep=5), d)
    assert ckpt.latest_step() is None
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        ckpt.restore(abstract(make_state(0)))
    saved = [s for s in range(1, 8) if ckpt.save(s, make_state(s), {"step": s})]
    assert saved == [3, 6]
    assert ckpt.save(7, make_state(7), {"step": 7}, force=True)  # the end of the run
    assert not ckpt.save(7, make_state(7), {"step": 7}, force=True)  # saved already
    ckpt.close()
    ckpt = Checkpointer(CheckpointConfig(every=3, keep=5), d)
    assert ckpt.latest_step() == 7 and ckpt.complete_steps() == [3, 6, 7]
    state, data, step = ckpt.restore(abstract(make_state(0)))
    assert step == 7 and data == {"step": 7}
    assert_state(state, 7)
    state, data, step = ckpt.restore(abstract(make_state(0)), step=3)
    assert step == 3 and data == {"step": 3}
    assert_state(state, 3)
    assert not ckpt.save(7, make_state(7), {"step": 7}, force=True)  # resumed at 7: nothing new
    ckpt.close()


@pytest.mark.integration
@pytest.mark.parametrize("async_save", [True, False])
def test_the_committed_step_is_a_save_finished_not_one_started(tmp_path, async_save):
    """What the status reports as the last checkpoint is one a restart can resume from: an
    async save counts only once its background part has finished."""
    import threading

    ckpt = Checkpointer(CheckpointConfig(every=1, keep=5, async_save=async_save),
                        str(tmp_path / "c"))
    assert ckpt.committed_step is None
    assert ckpt.save(1, make_state(1), {"step": 1})
    if async_save:
        ckpt.wait()
    assert ckpt.committed_step == 1
    if async_save:
        # A save whose background part is still running is not committed; check() sees it
        # finish, between steps.
        release = threading.Event()
        pending = checkpointer_module._PendingSave(2, time.monotonic() + 60)
        pending.waiter = threading.Thread(target=release.wait)
        pending.waiter.start()
        ckpt._pending = pending
        ckpt.check()
        assert ckpt.committed_step == 1
        release.set()
        pending.waiter.join()
        ckpt.check()
        assert ckpt.committed_step == 2
        ckpt._pending = None
    ckpt.close()


@pytest.mark.integration
def test_keeps_the_last_k(tmp_path):
    ckpt = save_steps(str(tmp_path), range(1, 11), every=2, keep=2)
    assert ckpt.complete_steps() == [8, 10]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["10", "8"]
    ckpt.close()


@pytest.mark.integration
def test_disabled_saves_nothing(tmp_path):
    ckpt = Checkpointer(CheckpointConfig(enabled=False), str(tmp_path / "c"))
    assert not ckpt.save(100, make_state(1), {}, force=True)
    ckpt.close()
    assert not (tmp_path / "c").exists()


@pytest.mark.integration
def test_incomplete_latest_is_skipped(tmp_path, caplog):
    d = tmp_path / "ckpt"
    save_steps(str(d), [2, 4]).close()
    # a save that died: orbax's temporary folder, and a step folder without its metadata
    (d / "6.orbax-checkpoint-tmp").mkdir()
    (d / "6.orbax-checkpoint-tmp" / "state").mkdir()
    (d / "8" / "state").mkdir(parents=True)
    (d / "8" / "state" / "_METADATA").write_text("{}")
    ckpt = Checkpointer(CheckpointConfig(every=2, keep=3), str(d))
    with caplog.at_level(logging.WARNING, logger="tpujob_trainer.checkpoint"):
        assert ckpt.latest_step() == 4
    assert "8 is incomplete: missing _CHECKPOINT_METADATA" in caplog.text
    state, data, step = ckpt.restore(abstract(make_state(0)))
    assert step == 4 and data["step"] == 4
    assert_state(state, 4)
    # the resumed run saves step 8 again over the leftover folder
    assert ckpt.save(6, make_state(6), {"step": 6}) and ckpt.save(8, make_state(8), {"step": 8})
    ckpt.wait()
    assert ckpt.latest_step() == 8
    assert_state(ckpt.restore(abstract(make_state(0)))[0], 8)
    ckpt.close()


@pytest.mark.integration
def test_saves_past_every_folder_there_at_the_first_save_look_for_no_leftover(tmp_path,
                                                                              monkeypatch):
    d = tmp_path / "ckpt"
    (d / "5" / "state").mkdir(parents=True)   # a save of an earlier start that died
    ckpt = Checkpointer(CheckpointConfig(every=1, keep=3), str(d))
    looked, real = [], ckpt._dirs.fs.exists

    def exists(path, **kw):
        name = str(path).rstrip("/").rsplit("/", 1)[-1]
        if name.isdigit():
            looked.append(int(name))
        return real(path, **kw)

    monkeypatch.setattr(ckpt._dirs.fs, "exists", exists)
    for s in range(2, 9):
        assert ckpt.save(s, make_state(s), {"step": s})
    ckpt.wait()
    # steps up to the leftover are looked for (5 found and replaced); none past it
    assert looked == [2, 3, 4, 5]
    assert ckpt.complete_steps() == [6, 7, 8]
    assert_state(ckpt.restore(abstract(make_state(0)), step=8)[0], 8)
    ckpt.close()


@pytest.fixture
def no_read_pauses(monkeypatch):
    monkeypatch.setattr(checkpointer_module, "READ_RETRY_DELAYS_S", (0.0, 0.0))


@pytest.mark.integration
def test_a_read_that_fails_once_is_tried_again_and_keeps_the_newest(tmp_path, no_read_pauses,
                                                                   caplog):
    d = str(tmp_path / "ckpt")
    save_steps(d, [2, 4]).close()
    ckpt = Checkpointer(CheckpointConfig(every=2, keep=3), d)
    real, calls = ckpt._manager.restore, []

    def flaky(step, *args, **kwargs):  # storage answering an error once
        calls.append(step)
        if len(calls) == 1:
            raise OSError("503 Service Unavailable")
        return real(step, *args, **kwargs)

    ckpt._manager.restore = flaky
    with caplog.at_level(logging.WARNING, logger="tpujob_trainer.checkpoint"):
        state, data, step = ckpt.restore(abstract(make_state(0)))
    assert (step, calls) == (4, [4, 4])
    assert_state(state, 4)
    assert "could not be read (503 Service Unavailable); trying again" in caplog.text
    assert ckpt.latest_step() == 4  # nothing dropped
    ckpt.close()


@pytest.mark.integration
def test_checkpoints_that_never_read_back_raise_a_read_error(tmp_path, no_read_pauses):
    d = str(tmp_path / "ckpt")
    save_steps(d, [2, 4]).close()
    ckpt = Checkpointer(CheckpointConfig(every=2, keep=3), d)
    calls = []

    def down(step, *args, **kwargs):
        calls.append(step)
        raise OSError("storage unavailable")

    ckpt._manager.restore = down
    with pytest.raises(CheckpointReadError, match="step 4: storage unavailable; step 2"):
        ckpt.restore(abstract(make_state(0)))
    assert calls == [4, 4, 4, 2, 2, 2]
    ckpt._manager.restore = None  # nothing was dropped while storage was down
    assert Checkpointer(CheckpointConfig(every=2, keep=3), d).latest_step() == 4
    ckpt.close()


@pytest.mark.integration
def test_corrupt_latest_falls_back_to_the_previous(tmp_path, caplog, no_read_pauses):
    d = tmp_path / "ckpt"
    save_steps(str(d), [2, 4]).close()
    data_files = [p for p in (d / "4" / "state").rglob("*") if p.is_file() and p.parent.name == "d"]
    assert data_files
    for p in data_files:
        p.write_bytes(os.urandom(p.stat().st_size))
    ckpt = Checkpointer(CheckpointConfig(every=2, keep=3), str(d))
    assert ckpt.latest_step() == 4  # looks complete until read
    with caplog.at_level(logging.WARNING, logger="tpujob_trainer.checkpoint"):
        state, data, step = ckpt.restore(abstract(make_state(0)))
    assert step == 2 and data["step"] == 2
    assert_state(state, 2)
    assert "4 could not be restored" in caplog.text
    assert ckpt.latest_step() == 2  # the unusable newer one is gone; the run writes 4 again
    assert ckpt.save(4, make_state(4), {"step": 4})
    ckpt.wait()
    assert_state(ckpt.restore(abstract(make_state(0)))[0], 4)
    with pytest.raises(CheckpointError, match="step 9"):
        ckpt.restore(abstract(make_state(0)), step=9)
    ckpt.close()


@pytest.mark.integration
def test_async_save_returns_before_the_write_completes(tmp_path):
    ckpt = Checkpointer(CheckpointConfig(every=1, keep=2), str(tmp_path))
    t0 = time.perf_counter()
    ckpt.wait()
    assert time.perf_counter() - t0 < 0.005  # nothing pending: free
    big = make_state(1, n=4096)  # 2 x 64 MiB
    jax.block_until_ready(big)
    t0 = time.perf_counter()
    assert ckpt.save(1, big, {"step": 1})
    blocked = time.perf_counter() - t0
    assert ckpt.last_save_blocking_s == pytest.approx(blocked, abs=0.05)
    assert ckpt.latest_step() is None  # still writing
    t1 = time.perf_counter()
    ckpt.wait()
    waited = time.perf_counter() - t1
    assert ckpt.latest_step() == 1
    print(f"async save of 128 MiB: save() blocked {blocked:.3f}s, the write took {waited:.3f}s more")
    ckpt.close()


@pytest.mark.integration
def test_synchronous_save_is_complete_on_return(tmp_path):
    ckpt = Checkpointer(CheckpointConfig(every=1, async_save=False), str(tmp_path))
    assert ckpt.save(1, make_state(1), {"step": 1})
    assert ckpt.latest_step() == 1
    ckpt.close()


@pytest.mark.integration
def test_rejects_leaves_that_are_not_global_arrays(tmp_path):
    ckpt = Checkpointer(CheckpointConfig(every=1), str(tmp_path))
    state = {**make_state(1), "step": 1, "rng": np.zeros(2)}
    with pytest.raises(CheckpointError, match=r"\['rng'\] \(ndarray\).*\['step'\] \(int\)"):
        ckpt.save(1, state, {})
    with pytest.raises(TypeError):
        ckpt.save(2, make_state(2), {"not json": object()}, force=True)
    ckpt.close()


@pytest.mark.integration
def test_params_only_from_another_run(tmp_path):
    save_steps(str(tmp_path / "pretrain"), [5, 10]).close()
    target = abstract(make_state(0)["params"])
    params, step = restore_params(str(tmp_path / "pretrain"), target)
    assert step == 10
    np.testing.assert_array_equal(np.asarray(params["w"]), np.full((64, 64), 10.0))
    params, step = restore_params(str(tmp_path / "pretrain"), target, step=5)
    np.testing.assert_array_equal(np.asarray(params["b"]), np.arange(64) + 5.0)
    with pytest.raises(CheckpointError, match="init_params_from: no complete checkpoint"):
        restore_params(str(tmp_path / "empty"), target)


@pytest.mark.integration
def test_gcs_round_trip_and_missing_commit_marker(gcs_emulator, caplog):
    d = gcs_emulator.fresh_prefix("ckpt")
    ckpt = save_steps(d, [1, 2, 3], keep=2)
    assert ckpt.complete_steps() == [2, 3]
    state, data, step = ckpt.restore(abstract(make_state(0)))
    assert step == 3 and data["step"] == 3
    assert_state(state, 3)
    ckpt.close()
    fs, _ = fsspec.core.url_to_fs(d)
    fs.rm(f"{d}/3/commit_success.txt")
    ckpt = Checkpointer(CheckpointConfig(every=1, keep=2), d)
    with caplog.at_level(logging.WARNING, logger="tpujob_trainer.checkpoint"):
        assert ckpt.latest_step() == 2
    assert "missing commit_success.txt" in caplog.text
    state, data, step = ckpt.restore(abstract(make_state(0)))
    assert step == 2
    assert_state(state, 2)
    params, _ = restore_params(d, abstract(make_state(0)["params"]))
    np.testing.assert_array_equal(np.asarray(params["w"]), np.full((64, 64), 2.0))
    ckpt.close()


def _run_worker(args: list[str], env: dict, timeout: float = 120) -> dict:
    proc = subprocess.run([sys.executable, "-m", "tests.trainer_io.ckpt_worker", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def _worker_env(devices: int) -> dict:
    return {**os.environ, "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}


@pytest.mark.integration
def test_restore_into_sharded_targets_on_a_4_device_mesh(tmp_path):
    out = _run_worker(["sharded", str(tmp_path / "ckpt")], _worker_env(4))
    # every device holds only its shard of each parameter, in the target layout
    assert out["same"]["['params']['w']"] == [[4, 8]] * 4
    assert out["resharded"]["['params']['w']"] == [[4, 16]] * 4
    assert out["params_only"]["['w']"] == [[8, 8]] * 4


@pytest.mark.integration
def test_only_large_replicated_arrays_are_cut_into_slices_per_replica(tmp_path):
    # A 4 MiB array held whole by 4 devices is written by its replicas 1 MiB each; one a little
    # smaller, and a small one, by one replica whole: no slicing program per array at each save.
    out = _run_worker(["replicated", str(tmp_path / "ckpt")], _worker_env(4))
    assert out["sliced"] == [[1024, 1024]] * 4


@pytest.mark.parametrize("stored,wanted,expected", [
    ({"a": (2, 3)}, {"a": (2, 3)}, None),
    ({}, {}, None),
    ({"a": (2, 3)}, {"a": (3, 3)}, "shapes differ: a (2, 3) in the checkpoint, (3, 3) in the model"),
    ({"a": (1,)}, {"a": (1,), "b": (2,)}, "the model has b, which the checkpoint lacks"),
    ({"blocks/0/w": (4,)}, {"layers/0/w": (2, 4)},
     "the model has layers/0/w, which the checkpoint lacks; the checkpoint has blocks/0/w, which "
     "the model lacks"),
    ({k: (1,) for k in "abcde"}, {k: (2,) for k in "abcde"},
     "shapes differ: a (1,) in the checkpoint, (2,) in the model; b (1,) in the checkpoint, (2,) "
     "in the model; c (1,) in the checkpoint, (2,) in the model and 2 more"),
    ({}, {k: (1,) for k in "wxyz"}, "the model has w, x, y and 1 more, which the checkpoint lacks"),
])
def test_params_mismatch_says_what_differs(stored, wanted, expected):
    from tpujob_trainer.checkpoint import describe_params_mismatch

    assert describe_params_mismatch(stored, wanted) == expected
