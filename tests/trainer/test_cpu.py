"""What the CPU can do (tpujob_trainer.cpu): its flags read from /proc/cpuinfo's text, and
whether it multiplies bf16 into float32 natively, which picks the form of a bf16 model's matmuls
on XLA:CPU (`layers.dot`)."""

from __future__ import annotations

import pytest

from tpujob_trainer import cpu

pytestmark = pytest.mark.unit

XEON = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_bf16 avx512_fp16 amx_bf16 amx_tile
bogomips\t: 4800.00

processor\t: 1
flags\t\t: fpu
"""
EPYC_AVX2 = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma\n"
EPYC_AVX512 = "model name\t: AMD EPYC\nflags\t\t: avx avx2 fma avx512f avx512_bf16\n"
SAPPHIRE_AMX_ONLY = "flags\t\t: avx2 amx_bf16 amx_tile\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes bf16 i8mm\nCPU implementer\t: 0x41\n"


@pytest.mark.parametrize("text,flags,bf16", [
    (XEON, {"fpu", "sse2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_bf16",
            "avx512_fp16", "amx_bf16", "amx_tile"}, True),
    (EPYC_AVX2, {"fpu", "sse2", "avx", "avx2", "fma"}, False),
    (EPYC_AVX512, {"avx", "avx2", "fma", "avx512f", "avx512_bf16"}, True),
    (SAPPHIRE_AMX_ONLY, {"avx2", "amx_bf16", "amx_tile"}, True),
    (ARM, {"fp", "asimd", "evtstrm", "aes", "bf16", "i8mm"}, False),  # not measured: plain
    ("", set(), False),
    ("model name\t: something\n", set(), False),
], ids=["xeon", "epyc-avx2", "epyc-avx512", "amx-only", "arm", "empty", "no-flags-line"])
def test_the_flags_and_whether_bf16_is_multiplied_natively(text, flags, bf16):
    assert cpu.cpu_flags(text) == flags
    assert cpu.has_bf16_matmul(cpu.cpu_flags(text)) is bf16


def test_this_machines_answer_follows_its_flags(monkeypatch):
    monkeypatch.setattr(cpu, "this_cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
    assert cpu.bf16_matmul_here() is True
    monkeypatch.setattr(cpu, "this_cpu_flags", lambda: frozenset({"avx2"}))
    assert cpu.bf16_matmul_here() is False
