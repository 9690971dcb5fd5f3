"""The HBM benchmark reads XLA's dumps of the compiled step: the largest allocations of the
memory-usage report, and the moment of the peak from the live-range dump (the bytes live then,
by the JAX operation or state leaf that made them). The texts below are cut from libtpu
0.0.42.1's dumps of the trainer's step."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LIVE_RANGE = """HloLiveRange (max 2786):
  InstructionSequence:
    0:constant.372.clone
  Live ranges at 1037 (peak):
    fusion.388{}: 262144000 bytes (cumulative: 262144000 bytes)
  Stack trace breakdown for peak usage: 711 012 134 bytes
    main.41_spmd (100.0%, total: 711 012 134 bytes, current: 0 bytes, remaining: 711 012 134 bytes)
      ├── jit(train_step)/transpose(jvp(bld,dc->blc))/dot_general (36.9%, total: 262 144 000 bytes, current: 262 144 000 bytes, remaining: 448 868 134 bytes)
      ├── state (4.6%, total: 32 772 096 bytes, current: 0 bytes, remaining: 282 668 838 bytes)
      │   └── params (4.6%, total: 32 772 096 bytes, current: 0 bytes, remaining: 282 668 838 bytes)
      │       ├── embed_VxD (2.3%, total: 16 384 000 bytes, current: 16 384 000 bytes, remaining: 266 284 838 bytes)
      ├── jit(train_step)/jvp()/while{3} (9.4%, total: 67 108 864 bytes, current: 67 108 864 bytes, remaining: 381 759 270 bytes)
      ├── state['params']['layers'][0]['mlp']['w_in_Dx2xF'] (3.5%, total: 25 165 824 bytes, current: 25 165 824 bytes, remaining: 191 962 918 bytes)
      └── reduce (0.0%, total: 4 096 bytes, current: 4 096 bytes, remaining: 0 bytes)
"""

REPORT = """Memory Space: default (color=0)
Total bytes: 765298720 (729.85MiB)
  cumulative_size;       size;       offset; used_by_n_values; shapes_list
  ------------------------------------------------------------
  250.00MiB( 15%);  250.00MiB;    190726144;                3; bf16[8192,16000], 2×f32[1,8192,1024]
  814.00MiB( 49%);   64.00MiB;    295829504;                2; bf16[1,8192,4096], bf16[8192,4096]

Memory Space: alternate (color=1)
  1.00MiB( 100%);    1.00MiB;            0;                1; f32[512,512]
"""


def _benchmark():
    spec = importlib.util.spec_from_file_location("hbm_estimate",
                                                  ROOT / "benchmarks" / "hbm_estimate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_peak_is_read_with_its_top_level_sources_largest_first():
    got = _benchmark().peak_sources(LIVE_RANGE, top=3)
    assert got["peak_live_bytes"] == 711_012_134
    # Only the top level of the breakdown (the state's children are inside its total).
    assert got["peak_sources"] == [
        [262_144_000, "jit(train_step)/transpose(jvp(bld,dc->blc))/dot_general"],
        [67_108_864, "jit(train_step)/jvp()/while{3}"],
        [32_772_096, "state"]]


def test_without_a_peak_nothing_is_kept():
    assert _benchmark().peak_sources("HloLiveRange (max 9):\n  InstructionSequence:\n") == {}


def test_the_report_gives_the_default_memory_spaces_allocations():
    got = _benchmark().report_allocations(REPORT)
    assert got == [[250 * 2**20, "bf16[8192,16000], 2×f32[1,8192,1024]"],
                   [64 * 2**20, "bf16[1,8192,4096], bf16[8192,4096]"]]
