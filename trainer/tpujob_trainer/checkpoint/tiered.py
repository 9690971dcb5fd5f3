"""Two checkpoint tiers as one: the persistent one (Orbax, every `checkpoint.every` steps, on
`gs://` or a shared path) and, when `checkpoint.local.directory` is set, the node-local one
(`local.py`, every `checkpoint.local.every` steps). A restart resumes from the newest checkpoint
of either tier that every process can read; a local tier that is missing, damaged or another
node's on any process is passed over by all of them together, for the persistent one.
"""

from __future__ import annotations

import logging
from typing import Any

import jax
import numpy as np

from tpujob_trainer.checkpoint.checkpointer import Checkpointer
from tpujob_trainer.checkpoint.collectives import agree_all, from_halves, to_halves
from tpujob_trainer.checkpoint.local import LocalTier, LocalTierError
from tpujob_trainer.config.checkpoint import CheckpointConfig

log = logging.getLogger(__name__)

PERSISTENT, LOCAL = "persistent", "local"
_AGREED_MAX = 16  # newest local steps compared across processes


def common_steps(per_process: list[list[int]]) -> list[int]:
    """Steps every process has, oldest first (pure: the agreement rule)."""
    if not per_process:
        return []
    common = set(per_process[0])
    for steps in per_process[1:]:
        common &= set(steps)
    return sorted(common)


def _gather_steps(steps: list[int]) -> list[list[int]]:
    """Every process's newest `_AGREED_MAX` steps (collective)."""
    mine = sorted(steps)[-_AGREED_MAX:]
    if jax.process_count() == 1:
        return [mine]
    from jax.experimental import multihost_utils
    padded = np.full((_AGREED_MAX,), -1, np.int64)
    padded[:len(mine)] = mine
    gathered = from_halves(multihost_utils.process_allgather(to_halves(padded)))
    gathered = gathered.reshape(-1, _AGREED_MAX)
    return [[int(s) for s in row if s >= 0] for row in gathered]


class TieredCheckpointer:
    """The Checkpointer's interface over both tiers. All processes must call every method."""

    def __init__(self, cfg: CheckpointConfig, output: str):
        self.cfg = cfg
        self.persistent = Checkpointer(cfg, f"{output.rstrip('/')}/checkpoints")
        self.local = (LocalTier(cfg.local, output=output, process_index=jax.process_index(),
                                process_count=jax.process_count())
                      if cfg.enabled and cfg.local.directory else None)
        self._base: int | None = None          # newest persistent save started
        self._local_candidates: list[int] = []
        self._last_local: int | None = None
        self.restored_tier: str | None = None
        self.last_save_blocking_s: float | None = None

    # -- reading ---------------------------------------------------------------------------

    def latest_step(self) -> int | None:
        """The newest step either tier can resume from, as every process sees it (collective)."""
        persistent = self.persistent.latest_step()
        self._base = persistent
        self._local_candidates = []
        if self.local is not None:
            self._local_candidates = [
                s for s in common_steps(_gather_steps(self.local.usable_steps(persistent)))
                if persistent is None or s > persistent]
        newest = [s for s in (persistent, *self._local_candidates) if s is not None]
        return max(newest) if newest else None

    def restore(self, abstract_state) -> tuple[Any, dict, int] | None:
        """(state, data position, step) from the newest local checkpoint every process reads
        back whole, else from the persistent tier; None when neither has one."""
        for step in reversed(self._local_candidates):
            restored, why = None, None
            try:
                restored = self.local.load(step, abstract_state)
            except LocalTierError as e:
                why = str(e)
            if agree_all(restored is not None):
                self.local.discard_after(step)
                self.restored_tier = LOCAL
                log.info("resuming from local checkpoint %s/%d", self.local.root, step)
                return (*restored, step)
            log.warning("local checkpoint %d not used (%s); trying the next one",
                        step, why or "unreadable on another process")
        if self._base is None:
            return None
        state, data_state, step = self.persistent.restore(abstract_state)
        if self.local is not None:
            self.local.discard_after(step)
        self.restored_tier = PERSISTENT
        return state, data_state, step

    # -- writing ---------------------------------------------------------------------------

    def should_save(self, step: int, *, force: bool = False) -> bool:
        return self.persistent.should_save(step, force=force) or (
            self.local is not None and step != self._last_local and self.local.should_save(step))

    def save(self, step: int, state, data_state: dict, *, force: bool = False) -> str | None:
        """Save to the persistent tier when it is due (or forced), else to the local one when
        that is due; the tier written, or None."""
        if force or self.persistent.should_save(step):  # a forced save is never local
            saved = self.persistent.save(step, state, data_state, force=force)
            self.last_save_blocking_s = self.persistent.last_save_blocking_s
            if saved:
                self._base = step
                return PERSISTENT
            return None
        if self.local is not None and step != self._last_local and self.local.should_save(step):
            self.local.save(step, state, data_state, base_step=self._base)
            self._last_local = step
            self.last_save_blocking_s = self.local.last_save_blocking_s
            return LOCAL
        return None

    @property
    def committed_step(self) -> int | None:
        """The newest persistent checkpoint complete on storage."""
        return self.persistent.committed_step

    def check(self) -> None:
        self.persistent.check()

    def wait(self) -> None:
        self.persistent.wait()
        if self.local is not None:
            self.local.wait()

    def close(self) -> None:
        try:
            self.persistent.close()
        finally:
            if self.local is not None:
                self.local.close()
