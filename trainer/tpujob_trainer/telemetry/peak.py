"""Peak TFLOP/s of one device, for MFU: the operator's env (on a TPU), else the catalog by device
kind, else (a CPU run alone) a measured large jitted matmul shared by this process's devices,
else unknown."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from tpujob_plan.generations import peak_tflops_for_device_kind


def measure_matmul_tflops(n: int = 2048, repeats: int = 5, dtype=jnp.float32) -> float:
    """The best TFLOP/s of an n x n x n jitted matmul on the default device."""
    a = jnp.ones((n, n), dtype)
    b = jnp.ones((n, n), dtype)
    f = jax.jit(lambda x, y: x @ y)
    f(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        f(a, b).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e12


def peak_tflops_per_device(env_value: float | None, device, *, local_devices: int,
                           measure: bool) -> tuple[float | None, str]:
    """(peak, where it came from)."""
    if env_value and device.platform == "cpu":
        # The operator's figure is the slice's TPU peak; a CPU standing in for the slice (local
        # mode) has nothing to hold it against, and an MFU against a TPU's peak is noise.
        return None, "unknown"
    if env_value:
        return env_value, "env"
    catalog = peak_tflops_for_device_kind(getattr(device, "device_kind", ""))
    if catalog:
        return catalog, "catalog"
    if measure and device.platform == "cpu":
        # All CPU devices of a process share the same cores.
        return measure_matmul_tflops() / local_devices, "measured"
    return None, "unknown"
