"""Restart compile time with and without the persistent compilation cache: the trainer CLI is
started twice on the same output (the second start is what a restart pays), with the cache on
(the default: the training step saved whole, other programs in JAX's cache), with JAX's cache
only (`compile_cache.executables=false`) and with the cache off (`compile_cache.enabled=false`);
the `compiled` line's `compile_s`
(ahead-of-time compile of the training step) and `startup_s` (process start to compiled) of each
start are reported.

    .venv/bin/python benchmarks/compile_cache.py [--gcs]
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

ROOT = Path(__file__).resolve().parents[1]

# A model big enough that compilation is most of a start on a CPU (about 60 M parameters).
MODEL = ["model.vocab_size=32000", "model.d_model=512", "model.n_layers=8", "model.n_heads=8",
         "model.n_kv_heads=8", "model.head_dim=64", "model.mlp_dim=2048", "model.remat=none",
         "model.dtype=float32", "train.global_batch=2", "train.seq_len=128"]


def start(output: str, extra: list[str], env: dict[str, str]) -> dict:
    cmd = [sys.executable, "-m", "tpujob_trainer.cli", *MODEL, "train.steps=2",
           "checkpoint.enabled=false", "metrics.port=null", "metrics.measure_peak=false",
           f"output={output}", *extra]
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
    if done.returncode != 0:
        raise SystemExit(f"trainer failed: {done.stderr[-2000:]}")
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    compiled = next(e for e in events if e["event"] == "compiled")
    return {"compile_s": compiled["compile_s"], "startup_s": compiled["startup_s"],
            "cache": compiled.get("compile_cache"), "executable": compiled.get("executable"),
            "process_s": time.monotonic() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gcs", action="store_true", help="output on the GCS emulator")
    load_before = os.getloadavg()[0]
    args = parser.parse_args()
    env = dict(os.environ)
    emulator = None
    with tempfile.TemporaryDirectory() as tmp:
        if args.gcs:
            from tpujob.local.session.gcs import GcsEmulator
            emulator = GcsEmulator(Path(tmp) / "gcs")
            emulator.start()
            emulator.ensure_bucket("bench")
            env.update(emulator.env)
            base = "gs://bench"
        else:
            base = tmp
        rows = []
        for label, extra in [("on (default)", []),
                             ("JAX cache only", ["compile_cache.executables=false"]),
                             ("off", ["compile_cache.enabled=false"])]:
            output = f"{base}/{label.replace(' ', '-')}"
            first, second = start(output, extra, env), start(output, extra, env)
            rows.append((label, first, second))
        if emulator is not None:
            emulator.stop()
    print(f"load average (1 min) before/after: {load_before:.2f}/{os.getloadavg()[0]:.2f}")
    print("| compile cache | first start compile_s | restart compile_s | restart startup_s | "
          "restart step | restart JAX cache hits/misses |")
    print("|---|---|---|---|---|---|")
    for label, first, second in rows:
        cache = second["cache"] or {}
        print(f"| {label} | {first['compile_s']:.2f} | {second['compile_s']:.2f} | "
              f"{second['startup_s']:.2f} | {second['executable']} | "
              f"{cache.get('hits', 0)}/{cache.get('misses', 0)} |")
    off = rows[-1][2]
    for label, _, second in rows[:-1]:
        print(f"\n{label}: restart compile_s cut by "
              f"{100 * (1 - second['compile_s'] / off['compile_s']):.0f}% "
              f"({off['compile_s']:.2f} s -> {second['compile_s']:.2f} s), startup_s by "
              f"{100 * (1 - second['startup_s'] / off['startup_s']):.0f}% "
              f"({off['startup_s']:.2f} s -> {second['startup_s']:.2f} s)")


if __name__ == "__main__":
    main()
