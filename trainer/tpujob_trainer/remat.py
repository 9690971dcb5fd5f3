"""Resolving `model.remat: auto`: the least recomputation that fits the device's memory, by the
planner's HBM estimate. Where the device reports no memory size (CPU), nothing is recomputed."""

from __future__ import annotations

from collections.abc import Mapping

from tpujob_plan.memory import choose_remat
from tpujob_trainer.config.root import TrainerConfig


def device_memory_bytes(device) -> float | None:
    """The device's memory size, from the catalog by device kind, or what the device reports."""
    from tpujob_plan.generations import hbm_bytes_for_device_kind

    hbm = hbm_bytes_for_device_kind(getattr(device, "device_kind", ""))
    if hbm:
        return hbm
    try:
        stats = device.memory_stats()
    except Exception:  # not every backend implements it
        stats = None
    return float(stats["bytes_limit"]) if stats and stats.get("bytes_limit") else None


def resolve_remat(cfg: TrainerConfig, mesh_axes: Mapping[str, int], hbm_bytes: float | None) -> str:
    if cfg.model.remat != "auto":
        return cfg.model.remat
    if hbm_bytes is None:
        return "none"
    return choose_remat(cfg.model.to_shape(), global_batch=cfg.train.global_batch,
                        seq_len=cfg.train.seq_len, mesh=dict(mesh_axes), hbm_bytes=hbm_bytes,
                        param_bytes=4 if cfg.model.param_dtype == "float32" else 2,
                        compute_bytes=4 if cfg.model.dtype == "float32" else 2,
                        optimizer=cfg.optimizer.kind, grad_accum=cfg.train.grad_accum)
