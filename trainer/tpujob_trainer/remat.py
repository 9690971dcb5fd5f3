"""Resolving `model.remat: auto`: the least recomputation that fits the device's memory, by the
planner's HBM estimate for the device's generation. Where the device reports no memory size
(CPU), nothing is recomputed."""

from __future__ import annotations

from collections.abc import Mapping

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


def device_generation(device) -> str | None:
    """The TPU generation (slice-name prefix: v5p, v6e, tpu7x) of a device, None for others."""
    from tpujob_plan.generations import generation_for_device_kind

    g = generation_for_device_kind(getattr(device, "device_kind", ""))
    return g.prefix if g else None


def resolve_remat(cfg: TrainerConfig, mesh_axes: Mapping[str, int], hbm_bytes: float | None,
                  generation: str | None = None) -> str:
    return cfg.memory_request().resolved_remat(mesh_axes, hbm_bytes, generation)
