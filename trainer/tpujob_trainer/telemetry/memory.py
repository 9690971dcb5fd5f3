"""Memory phases: process RSS and, where the device reports them, bytes in use / peak / limit."""

from __future__ import annotations

from typing import Any

import jax
import psutil


def memory_snapshot(devices: list | None = None) -> dict[str, Any]:
    """RSS of this process, and the largest per-device figures over this process's devices."""
    snap: dict[str, Any] = {"rss_bytes": psutil.Process().memory_info().rss}
    in_use, peak, limit = [], [], []
    for d in devices if devices is not None else jax.local_devices():
        try:
            stats = d.memory_stats()
        except Exception:  # backends without memory stats
            stats = None
        if not stats:
            continue
        in_use.append(stats.get("bytes_in_use", 0))
        peak.append(stats.get("peak_bytes_in_use", 0))
        if stats.get("bytes_limit"):
            limit.append(stats["bytes_limit"])
    if in_use:
        snap.update(device_bytes_in_use=max(in_use), device_peak_bytes=max(peak),
                    device_bytes_limit=min(limit) if limit else None)
    return snap
