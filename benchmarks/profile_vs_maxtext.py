"""Where a train step's time goes, tpujob beside MaxText: a jax.profiler trace of each, ops
grouped by kind.

    .venv/bin/python benchmarks/profile_vs_maxtext.py [--dtype bfloat16] [--devices 8] [--out DIR]

tpujob: the compiled step of the anchor config (remat full, 1 CPU device, or N fake CPU devices
with the batch and the weights split over an `fsdp` axis, global batch 8) run back to back in
this process, 3 steps traced after 2 warm-up steps, plus this process's CPU seconds per step.
MaxText: its own entry point with `profiler=xplane` (3 steps traced after 4), scanned layers,
from `tools/maxtext_env.py`'s environment. Each trace is read with xprof (installed in MaxText's
environment) and the XLA ops' time is grouped: matmuls (YNNPACK/oneDNN dot fusions), dtype
converts, copies/transposes/broadcasts/slices, softmax and reductions, gathers and scatters,
other elementwise fusions. Shares of op time, so other work on the machine shifts them less
than it shifts the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GROUP = r'''
import collections, glob, json, sys
import xprof.convert.raw_to_tool_data as r
path = glob.glob(sys.argv[1] + "/**/*.xplane.pb", recursive=True)[0]
data, _ = r.xspace_to_tool_data([path], "trace_viewer", {})
j = json.loads(data.decode() if isinstance(data, bytes) else data)
events = j["traceEvents"] if isinstance(j, dict) else j
def kind(n):
    if n.startswith("$") or "::" in n or "(" in n or " " in n: return None
    if any(k in n for k in ("all-", "collective", "reduce-scatter")): return "collectives"
    if n.startswith(("ynn_fusion", "onednn")) or "dot" in n or "convolution" in n:
        return "matmuls (dot fusions)"
    if any(k in n for k in ("exponential", "log", "reduce")): return "softmax and reductions"
    if "convert" in n: return "dtype converts"
    if any(k in n for k in ("copy", "transpose", "broadcast", "concatenate", "slice", "pad")):
        return "copies, transposes, broadcasts, slices"
    if any(k in n for k in ("scatter", "gather", "select", "iota", "compare")):
        return "gathers, scatters, selects"
    return "other elementwise fusions"
by_kind, by_op = collections.Counter(), collections.Counter()
for e in events:
    if e.get("ph") == "X" and (k := kind(e["name"])):
        by_kind[k] += e.get("dur", 0); by_op[e["name"]] += e.get("dur", 0)
total = sum(by_kind.values())
print(json.dumps({"kinds": {k: v / total for k, v in by_kind.most_common()},
                  "top_ops": [[n, v / total] for n, v in by_op.most_common(8)]}))
'''


def trace_tpujob(dtype: str, devices: int, out: str) -> dict:
    import jax

    sys.path.insert(0, str(REPO / "benchmarks"))
    import trainer_throughput as tt

    mesh = {"ici": {"fsdp": -1}} if devices > 1 else {"ici": {"data": -1}}
    cfg = tt.anchor_config(dtype, "full", 10, checkpoint={"enabled": False},
                           output=tt.scratch_output(), mesh=mesh,
                           train={"global_batch": 8, "seq_len": 256})
    if jax.device_count() != devices:
        raise SystemExit(f"JAX sees {jax.device_count()} devices, not {devices}")
    with tt.compiled_anchor_step(cfg) as (step, state, batch):
        for _ in range(2):
            state, _ = step(state, batch)
        jax.block_until_ready(state)
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(3):
            state, _ = step(state, batch)
        jax.block_until_ready(state)
        cpu, wall = (time.process_time() - c0) / 3, (time.perf_counter() - t0) / 3
        jax.profiler.start_trace(out)
        for _ in range(3):
            state, _ = step(state, batch)
        jax.block_until_ready(state)
        jax.profiler.stop_trace()
    return {"cpu_s_per_step": cpu, "wall_s_per_step": wall}


def trace_maxtext(dtype: str, devices: int, out: str) -> dict:
    from tools.maxtext_env import run_env, train_argv

    argv = train_argv(
        run_name="profile", base_output_directory=out, hardware="cpu",
        skip_jax_distributed_system="true", enable_goodput_recording="false",
        dataset_type="synthetic", enable_checkpointing="false", steps=9, base_emb_dim=256,
        base_num_query_heads=4, base_num_kv_heads=4, head_dim=64, base_mlp_dim=1024,
        base_num_decoder_layers=8, vocab_size=8192, max_target_length=256,
        weight_dtype="float32", remat_policy="full", per_device_batch_size=8 // devices, dtype=dtype,
        profiler="xplane", skip_first_n_steps_for_profiler=4, profiler_steps=3)
    env = run_env()
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("XLA_FLAGS", None)
    if devices > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=out)
    if proc.returncode:
        raise SystemExit(f"MaxText failed:\n{proc.stderr[-3000:]}")
    return {}


def group(trace_dir: str) -> dict:
    from tools.maxtext_env import maxtext_python

    proc = subprocess.run([maxtext_python(), "-c", GROUP, trace_dir], capture_output=True,
                          text=True)
    if proc.returncode:
        raise SystemExit(f"reading {trace_dir} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--devices", type=int, default=1, choices=[1, 2, 4, 8],
                    help="fake CPU devices; above 1, FSDP over all of them (global batch 8)")
    ap.add_argument("--out", help="keep the traces here (default: a temporary directory)")
    args = ap.parse_args()
    os.environ["JAX_PLATFORMS"] = "cpu"
    if args.devices > 1:  # before JAX is imported
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    out = args.out or tempfile.mkdtemp(prefix="profile-vs-maxtext-")
    result = {}
    for side, trace in (("tpujob", trace_tpujob), ("maxtext", trace_maxtext)):
        d = os.path.join(out, side)
        os.makedirs(d, exist_ok=True)
        info = trace(args.dtype, args.devices, d)
        result[side] = {**info, **group(d), "load_after": os.getloadavg()[0]}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
