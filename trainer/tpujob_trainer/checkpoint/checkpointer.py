"""The checkpointer: Orbax, async, every N steps and at the end, keep last K, local or `gs://`.

Layout of `<directory>/<step>/`: `state/` (the train-state pytree, OCDBT/tensorstore, every
process writing its own shards), `data/metadata` (the data position, JSON), `_CHECKPOINT_METADATA`,
and on GCS `commit_success.txt`. A step is *complete* when all of those exist and the JSON parses;
`latest_step()` and `restore()` skip anything else, and `restore()` also falls back past a
complete-looking step whose arrays cannot be read.

Writing is bounded: a save must be complete on storage within `checkpoint.save_timeout_s` of its
start, or it raises `CheckpointSaveError` (storage that answers errors or nothing at all would
otherwise hold the run in Orbax's retries, or forever in a wait).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import jax
import orbax.checkpoint as ocp

from tpujob_trainer.checkpoint.collectives import agree_all, broadcast_int, sync
from tpujob_trainer.checkpoint.errors import (
    CheckpointError,
    CheckpointMismatchError,
    CheckpointReadError,
    CheckpointSaveError,
)
from tpujob_trainer.checkpoint.steps import DATA, STATE, StepDirs
from tpujob_trainer.config.checkpoint import CheckpointConfig

log = logging.getLogger(__name__)


def _param_shapes(tree) -> dict[str, tuple[int, ...]]:
    """`params/...` path -> shape, for the leaves of a state (or of its stored metadata)."""
    params = tree.get("params", {}) if hasattr(tree, "get") else {}
    return {jax.tree_util.keystr(path, simple=True, separator="/"): tuple(leaf.shape)
            for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]}


def describe_params_mismatch(stored: dict[str, tuple[int, ...]],
                             wanted: dict[str, tuple[int, ...]], most: int = 3) -> str | None:
    """What differs between a checkpoint's parameters and the model's (None when they agree):
    parameters only one side has, and shapes that differ, a few of each."""
    def some(items: list[str], sep: str = ", ") -> str:
        more = f" and {len(items) - most} more" if len(items) > most else ""
        return sep.join(items[:most]) + more

    parts = []
    if missing := sorted(set(wanted) - set(stored)):
        parts.append(f"the model has {some(missing)}, which the checkpoint lacks")
    if extra := sorted(set(stored) - set(wanted)):
        parts.append(f"the checkpoint has {some(extra)}, which the model lacks")
    if shapes := [f"{n} {stored[n]} in the checkpoint, {wanted[n]} in the model"
                  for n in sorted(set(stored) & set(wanted)) if stored[n] != wanted[n]]:
        parts.append("shapes differ: " + some(shapes, "; "))
    return "; ".join(parts) or None


# A checkpoint that fails to read is tried again after these pauses before the one before it
# is used: falling back drops the newer checkpoint, which a passing storage error must not cost.
READ_RETRY_DELAYS_S = (2.0, 8.0)


def _non_global_leaves(tree) -> list[str]:
    bad = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if not isinstance(leaf, jax.Array):
            bad.append(f"{jax.tree_util.keystr(path)} ({type(leaf).__name__})")
    return bad



# Orbax saves an array held whole by several devices (replicated) "replica-parallel": each
# replica writes a slice of it, cut on the device by a small compiled program per array shape.
# Worth it for a large replicated array; for a small one (norm scales, biases, the step) the
# cutting (a compile per shape at the first save, a dispatch at every save) costs more than the
# write it shares. Below this many bytes per slice one replica writes the array whole.
MIN_REPLICA_SLICE_BYTES = 1 << 20


def _array_handler_for_saves() -> None:
    """Orbax's handler for jax.Array with MIN_REPLICA_SLICE_BYTES (idempotent; reads are the
    same either way: the stored layout does not depend on who wrote which part)."""
    current = ocp.type_handlers.get_type_handler(jax.Array)
    if getattr(current, "_min_slice_bytes_for_replica_parallel", None) == MIN_REPLICA_SLICE_BYTES:
        return
    from orbax.checkpoint._src.metadata import array_metadata_store  # as Orbax's default has

    ocp.type_handlers.register_type_handler(jax.Array, ocp.type_handlers.ArrayHandler(
        array_metadata_store=array_metadata_store.Store(),
        min_slice_bytes_for_replica_parallel=MIN_REPLICA_SLICE_BYTES), override=True)


class Checkpointer:
    """Saves and restores (train state, data position) with Orbax's CheckpointManager.

    `save()` starts an async save and returns once the arrays are copied off the device;
    `last_save_blocking_s` says how long that took. All processes must call every method.
    """

    def __init__(self, cfg: CheckpointConfig, directory: str):
        self.cfg, self.directory = cfg, directory.rstrip("/")
        self._dirs = StepDirs(self.directory)
        self._pending: _PendingSave | None = None
        self._broken = False
        self._last_saved: int | None = None
        self.last_save_blocking_s: float | None = None
        # The newest save known complete on storage (an async save only once its background
        # part finished): what a restart can resume from, unlike a save just started.
        self.committed_step: int | None = None
        # The newest `<directory>/<step>` folder when this run first saved (-1: none): no
        # folder left by an earlier start can collide with a save past it.
        self._newest_folder_at_first_save: int | None = None
        _array_handler_for_saves()
        options = ocp.CheckpointManagerOptions(
            max_to_keep=cfg.keep, save_interval_steps=1 if cfg.enabled else 0, create=cfg.enabled,
            enable_async_checkpointing=cfg.async_save, read_only=not cfg.enabled,
            async_options=ocp.AsyncOptions(timeout_secs=cfg.save_timeout_s))
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=(STATE, DATA))

    # -- reading ---------------------------------------------------------------------------

    def complete_steps(self) -> list[int]:
        """Steps of every complete checkpoint, oldest first."""
        return self._dirs.complete_steps(quiet=True)

    def latest_step(self) -> int | None:
        """The newest complete checkpoint's step (the same on every process), or None."""
        steps = self._dirs.complete_steps() if jax.process_index() == 0 else []
        step = broadcast_int(steps[-1] if steps else -1)
        return None if step < 0 else step

    def restore(self, abstract_state, step: int | None = None) -> tuple[Any, dict, int]:
        """(state, data position, step) from `step`, or else the newest checkpoint that reads back.

        `abstract_state` holds jax.ShapeDtypeStruct leaves with shardings: arrays are read
        straight into their shards, never into a second full copy. Without `step`, a newest
        checkpoint that is incomplete or unreadable is skipped (logged) for the one before it.
        """
        self.wait()
        if step is not None:
            candidates = [step]
        else:
            candidates = self._dirs.complete_steps() if jax.process_index() == 0 else []
            n = broadcast_int(len(candidates))
            candidates = [broadcast_int(candidates[-1 - i] if i < len(candidates) else -1)
                          for i in range(n)]
        if not candidates:
            raise CheckpointError(f"no complete checkpoint in {self.directory}")
        if mismatch := self._params_mismatch(candidates[0], abstract_state):
            raise CheckpointMismatchError(
                f"the checkpoint of step {candidates[0]} in {self.directory} holds another model "
                f"than this config builds ({mismatch}): resume with the config that wrote it, "
                "or write to a new output")
        args = ocp.args.Composite(**{STATE: ocp.args.StandardRestore(abstract_state),
                                     DATA: ocp.args.JsonRestore()})
        errors = []
        for s in candidates:
            restored, why = self._read(s, args)
            if why is None:
                if s != candidates[0]:
                    self._drop_newer_than(s)
                return restored[STATE], dict(restored[DATA] or {}), s
            errors.append(f"step {s}: {why}")
            if step is not None:
                break
            log.warning("checkpoint %s/%d could not be restored (%s); trying the previous one",
                        self.directory, s, why)
        raise CheckpointReadError(f"no checkpoint in {self.directory} could be restored: "
                                  + "; ".join(errors))

    def _params_mismatch(self, step: int, abstract_state) -> str | None:
        """How the stored parameters of `step` differ from the state's (from the checkpoint's
        metadata, no array read); None when they agree or the metadata cannot be read (the read
        itself then says what is wrong)."""
        try:
            manager = ocp.CheckpointManager(
                self.directory, options=ocp.CheckpointManagerOptions(read_only=True, create=False),
                item_handlers={STATE: ocp.StandardCheckpointHandler(),
                               DATA: ocp.JsonCheckpointHandler()})
            try:
                stored = manager.item_metadata(step)[STATE]
            finally:
                manager.close()
        except Exception as e:  # unreadable metadata is the read's to report
            log.warning("checkpoint %s/%d: metadata not read (%s)", self.directory, step, e)
            return None
        if stored is None:
            return None
        return describe_params_mismatch(_param_shapes(stored), _param_shapes(abstract_state))

    def _read(self, step: int, args) -> tuple[Any, str | None]:
        """(restored, None), or (None, why) once every attempt failed on some process. Every
        process makes the same attempts: each ends in an agreement."""
        why = None
        for delay in (*READ_RETRY_DELAYS_S, None):
            restored, err = None, None
            try:
                restored = self._manager.restore(step, args=args)
            except Exception as e:  # any failure to read: try again, then the previous one
                err = e
            if agree_all(err is None):
                return restored, None
            why = str(err) if err is not None else "unreadable on another process"
            if delay is not None:
                log.warning("checkpoint %s/%d could not be read (%s); trying again in %g s",
                            self.directory, step, why, delay)
                time.sleep(delay)
        return None, why

    def _drop_newer_than(self, step: int) -> None:
        """Remove unusable checkpoints newer than the one resumed from: the run rewrites them."""
        if jax.process_index() == 0:
            for s in self._dirs.all_steps():
                if s > step:
                    log.warning("removing unusable checkpoint %s/%d (the resumed run from step "
                                "%d will write it again)", self.directory, s, step)
                    self._dirs.remove(s)
        sync("tpujob_checkpoint_drop_newer")
        self._manager.reload()

    # -- writing ---------------------------------------------------------------------------

    def should_save(self, step: int, *, force: bool = False) -> bool:
        return (self.cfg.enabled and not self._broken and step != self._last_saved
                and (force or step % self.cfg.every == 0))

    def save(self, step: int, state, data_state: dict, *, force: bool = False) -> bool:
        """Save at multiples of `every` (or any step with force); False if nothing was saved.

        Every leaf of `state` must be a global jax.Array (put scalars on the mesh first). Raises
        CheckpointSaveError when this save, or the previous one still pending, fails or runs
        past `checkpoint.save_timeout_s`.
        """
        if not self.should_save(step, force=force):
            return False
        bad = _non_global_leaves(state)
        if bad:
            raise CheckpointError(
                "every leaf of the saved state must be a jax.Array placed on the mesh; these are "
                f"not: {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}")
        data_json = json.loads(json.dumps(data_state))  # fail here, not in the background
        t0 = time.perf_counter()
        self.wait()
        pending = _PendingSave(step, time.monotonic() + self.cfg.save_timeout_s)
        started = self._bounded(pending, "starting the save",
                                lambda: self._start_save(step, state, data_json))
        self.last_save_blocking_s = time.perf_counter() - t0
        self._last_saved = step
        if not started:
            return False  # already saved (e.g. resumed from it and saving again at the end)
        log.info("checkpoint step %d: save started, blocked %.3fs", step, self.last_save_blocking_s)
        if self.cfg.async_save:
            # A thread of our own waits for Orbax's background part, so that check() can tell
            # between steps, without blocking, whether the save failed or is late.
            pending.waiter = threading.Thread(
                target=pending.capture, args=(self._manager.wait_until_finished,),
                name=f"tpujob-checkpoint-wait-{step}", daemon=True)
            pending.waiter.start()
            self._pending = pending
        else:
            self.committed_step = step
        return True

    def _start_save(self, step: int, state, data_json: dict) -> bool:
        if step in self._manager.all_steps() and self._dirs.why_incomplete(step) is None:
            return False
        self._clear_leftover(step)
        return bool(self._manager.save(step, args=ocp.args.Composite(**{
            STATE: ocp.args.StandardSave(state), DATA: ocp.args.JsonSave(data_json)}), force=True))

    def _bounded(self, pending: _PendingSave, what: str, fn: Callable[[], Any]) -> Any:
        """fn() in a helper thread, given until the save's deadline (storage calls can block in
        retries far longer, or for good)."""
        worker = threading.Thread(target=pending.capture, args=(fn,), daemon=True,
                                  name=f"tpujob-checkpoint-save-{pending.step}")
        worker.start()
        worker.join(max(pending.deadline - time.monotonic(), 0.0))
        if worker.is_alive() or pending.error is not None:
            self._fail(pending, what, late=worker.is_alive())
        return pending.value

    def _fail(self, pending: _PendingSave, what: str, *, late: bool) -> None:
        self._broken, self._pending = True, None
        where = f"{self.directory}/{pending.step}"
        if late:
            why = (f"{what} did not finish within checkpoint.save_timeout_s="
                   f"{self.cfg.save_timeout_s}s (storage unreachable, failing, or too slow)")
        else:
            e = pending.error
            why = f"{what} failed: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:500]}"
        raise CheckpointSaveError(
            f"checkpoint {where} could not be saved: {why}; a restart resumes from the last "
            "complete checkpoint") from pending.error

    def check(self) -> None:
        """Raise CheckpointSaveError if the pending save has failed or is past its deadline;
        never blocks (called between steps)."""
        p = self._pending
        if p is None or p.waiter is None:
            return
        if p.waiter.is_alive():
            if time.monotonic() > p.deadline:
                self._fail(p, "writing it in the background", late=True)
        elif p.error is not None:
            self._fail(p, "writing it in the background", late=False)
        else:
            self.committed_step = p.step

    def _clear_leftover(self, step: int) -> None:
        """A folder for `step` left by an interrupted save would collide with the new one.

        Such a folder comes from an earlier start (a save that fails here ends the run), so
        storage is listed once, at the first save, and only steps up to the newest folder found
        then are looked for again: a save past it costs no listing and no agreement."""
        if self._newest_folder_at_first_save is None:
            newest = -1
            if jax.process_index() == 0:
                steps = self._dirs.all_steps()
                newest = steps[-1] if steps else -1
            self._newest_folder_at_first_save = broadcast_int(newest)
        if step > self._newest_folder_at_first_save:
            return
        d = f"{self._dirs.root}/{step}"
        exists = 0
        if jax.process_index() == 0:
            self._dirs.refresh()
            exists = int(self._dirs.fs.exists(d))
        if not broadcast_int(exists):
            return
        if jax.process_index() == 0:
            log.warning("removing incomplete checkpoint %s/%d before saving it again",
                        self.directory, step)
            self._dirs.remove(step)
        sync("tpujob_checkpoint_clear_leftover")
        self._manager.reload()

    def wait(self) -> None:
        """Block until the pending save (if any) is complete on storage, at most until its
        deadline; free when none is."""
        p = self._pending
        if p is None:
            return
        t0 = time.perf_counter()
        p.waiter.join(max(p.deadline - time.monotonic(), 0.0))
        self.check()
        if p.waiter.is_alive():  # check() saw the deadline a moment too early
            self._fail(p, "writing it in the background", late=True)
        self.committed_step = p.step
        self._pending = None
        log.info("checkpoint: pending save finished after waiting %.3fs",
                 time.perf_counter() - t0)

    def close(self) -> None:
        if self._broken:
            return  # Orbax's threads may be stuck on storage: waiting for them would hang
        self.wait()
        self._manager.close()


class _PendingSave:
    """One save: its step, deadline, and the outcome of the call run for it in a thread."""

    def __init__(self, step: int, deadline: float):
        self.step, self.deadline = step, deadline
        self.waiter: threading.Thread | None = None
        self.value: Any = None
        self.error: BaseException | None = None

    def capture(self, fn: Callable[[], Any]) -> None:
        try:
            self.value = fn()
        except BaseException as e:  # handed to the caller's thread
            self.error = e


def restore_params(directory: str, abstract_params, *, step: int | None = None,
                   key: str = "params") -> tuple[Any, int]:
    """Only `state[key]` (the parameters) of a checkpoint, e.g. another run's, into sharded targets.

    The optimizer state and data position in that checkpoint are not read. Returns (params, step).
    """
    dirs = StepDirs(directory)
    if step is None:
        steps = dirs.complete_steps() if jax.process_index() == 0 else []
        step = broadcast_int(steps[-1] if steps else -1)
        if step < 0:
            raise CheckpointError(
                f"checkpoint.init_params_from: no complete checkpoint in {directory}")
    manager = ocp.CheckpointManager(
        directory, options=ocp.CheckpointManagerOptions(read_only=True, create=False, save_interval_steps=0),
        item_names=(STATE, DATA))
    target = {key: abstract_params}
    try:
        restored = manager.restore(step, args=ocp.args.Composite(**{STATE: ocp.args.PyTreeRestore(
            item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
            partial_restore=True)}))
    except Exception as e:
        raise CheckpointError(
            f"checkpoint.init_params_from: cannot read {key!r} of step {step} in {directory}: {e}"
        ) from e
    finally:
        manager.close()
    return restored[STATE][key], step
