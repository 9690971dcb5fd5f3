"""The few integers and flags every process must agree on while checkpointing (the step to
resume from, whether a read worked everywhere), passed through JAX's collectives so that no two
processes ever take different paths. On one process each is the identity."""

from __future__ import annotations

import jax
import numpy as np


def agree_all(ok: bool) -> bool:
    """True only if `ok` on every process (so processes never take different fallback paths)."""
    if jax.process_count() == 1:
        return ok
    from jax.experimental import multihost_utils
    return bool(np.all(multihost_utils.process_allgather(np.array([ok]))))


def to_halves(values) -> np.ndarray:
    """int64s as (high, low) pairs of uint32: without jax_enable_x64, JAX turns an int64 into
    an int32 on its way through a collective, keeping only the low 32 bits."""
    bits = np.asarray(values, np.int64).view(np.uint64)
    return np.stack([(bits >> np.uint64(32)).astype(np.uint32),
                     (bits & np.uint64(0xFFFFFFFF)).astype(np.uint32)], axis=-1)


def from_halves(halves) -> np.ndarray:
    """The int64s that `to_halves` split."""
    pairs = np.asarray(halves).astype(np.uint64)
    return ((pairs[..., 0] << np.uint64(32)) | pairs[..., 1]).view(np.int64)


def broadcast_int(value: int) -> int:
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils
    return int(from_halves(multihost_utils.broadcast_one_to_all(to_halves(value))))


def sync(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)
