"""What the machine's CPU can do, where the program the trainer builds for XLA:CPU depends on it.

A bf16 model's matmuls on XLA:CPU take one of two forms (`models.layers.dot`): bf16 x bf16 with
a float32 result, which a CPU with bf16 dot-product instructions (x86 `avx512_bf16`,
`amx_bf16`) runs natively, or the plain bf16 einsum, which XLA:CPU widens to a float32 matmul
and rounds back. Measured on the anchor model of `benchmarks/vs_maxtext.py` (train step, 1
device): on a CPU with `avx512_bf16` the float32-result form made the trainer's bf16 step 1.4x
MaxText's; on an AMD EPYC with AVX2 and no bf16 instructions it was 2.94 s a step against 2.27 s
for the plain form (MaxText: 2.83 s).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

# Instructions that compute bf16 x bf16 products into float32 sums.
BF16_MATMUL_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first processor in /proc/cpuinfo's text (pure): x86's `flags`,
    ARM's `Features`; none where neither is there."""
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def has_bf16_matmul(flags: Iterable[str]) -> bool:
    """Whether a CPU with these flags multiplies bf16 into float32 natively (pure)."""
    return not set(BF16_MATMUL_FLAGS).isdisjoint(flags)


@functools.cache
def this_cpu_flags() -> frozenset[str]:
    """This machine's CPU flags (read once; none where /proc/cpuinfo cannot be read)."""
    try:
        return cpu_flags(Path("/proc/cpuinfo").read_text())
    except OSError:
        return frozenset()


def bf16_matmul_here() -> bool:
    """Whether this machine's CPU multiplies bf16 into float32 natively."""
    return has_bf16_matmul(this_cpu_flags())
