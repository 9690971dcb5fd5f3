"""tpujob's trainer beside MaxText on one NVIDIA GPU, in the same window, on the same model.

    python3 benchmarks/gpu_vs_maxtext.py --bundle .gpu
    python3 benchmarks/gpu_vs_maxtext.py --site DIR [--deadline-s 500] [--steps 12]
        [--side NAME ...] [--out DIR]
    python3 benchmarks/gpu_vs_maxtext.py --report RESULTS.json
    python3 benchmarks/gpu_vs_maxtext.py --site DIR --smoke     # the harness on a CPU, tiny model

`--bundle DIR` (on a machine with PyPI): downloads the wheels a GPU machine whose Python already
has JAX with CUDA, flax, optax and orbax-checkpoint lacks for MaxText 0.2.4's pre-training entry
point (the packages `tools/maxtext_env.py` pins, less those such an image holds) and for tpujob's
trainer (pydantic), for Python 3.12 on x86-64: about 25 MB. Not xprof (32 MB): tokamax, which
MaxText's GPU attention kernel comes from, imports one tool from it at import time for its
autotuning benchmarks, which training never runs; `--site` writes a module of that one name
in its place.

`--site DIR` (on the GPU machine): installs nothing; DIR is where the bundle's wheels were
unpacked (`pip install --no-index --no-deps --target DIR .gpu/*.whl`). Each side runs as a user
would run it, in a fresh process, one after the other, round after round, until the deadline:
MaxText as `python -m maxtext.trainers.pre_train.train base.yml hardware=gpu ...
dataset_type=synthetic`, tpujob as `python -m tpujob_trainer.cli --config FILE` (synthetic
data). Both sides use the machine's one JAX and XLA. Results: benchmarks/results/gpu_vs_maxtext.md.

The model: the 1.14B dense decoder of `benchmarks/tpu_compile.py` (d_model 2048, 16 layers,
16/8 heads of 128, SwiGLU 8192, vocab 32000, untied output), seq 2048, global batch 32, bf16
compute, f32 weights, AdamW, remat full, layers scanned (both sides' default).

Sides: `maxtext-flash` (its default on GPU: `attention=autoselected`, tokamax's Pallas/Triton
flash attention), `maxtext-cudnn` (`attention=cudnn_flash_jax`, cuDNN's fused attention through
`jax.nn.dot_product_attention`), `tpujob` (`model.attention: auto`: cuDNN's fused attention on a
GPU), `tpujob-xla` (`model.attention: xla`), and `tpujob@NAME=DIR`: tpujob's trainer from the
source tree DIR (another version of the code, for an A/B).

Figures per run, from the driver's clock: compile = process start -> first step line (each run
with fresh compilation caches); s/step = median interval between step lines after the first
`WARMUP` steps; tokens/s = batch x seq / s/step; TFLOP/s = MaxText's own FLOP count per step
(its log's "Total TFLOPs", per device) / s/step, the same count for both sides; MFU = that
against the matmul peak measured at the start of the window (a bf16 8192^3 matmul); peak
memory = the most `nvidia-smi` reported in use during the run (XLA's preallocation off, so the
allocator holds what the run needed). Equal work: each side's own parameter count and FLOPs per
step, printed beside each other.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WARMUP = 2
GLOBAL_BATCH, SEQ = 32, 2048
MODEL = dict(vocab_size=32000, d_model=2048, n_layers=16, n_heads=16, n_kv_heads=8, head_dim=128,
             mlp_dim=8192)
HARDWARE = "gpu"
# `--smoke`: the harness checked on a machine without a GPU (a tiny model on its CPU).
SMOKE_MODEL = dict(vocab_size=512, d_model=128, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32,
                   mlp_dim=256)

# MaxText 0.2.4's pre-training imports that a JAX+CUDA image (flax, optax, orbax-checkpoint,
# transformers, fastapi's own needs...) may lack, at the versions tools/maxtext_env.py pins.
BUNDLE = ["maxtext==0.2.4", "annotated-types==0.8.0", "aqtp==0.9.0", "array-record==0.8.6",
          "drjax==0.2.1", "einshape==1.0", "fastapi==0.165.0", "fire==0.7.1", "grain==0.2.18",
          "httpcore2==2.16.2", "httpx2==2.16.2", "immutabledict==4.3.1", "ml-collections==1.1.0",
          "omegaconf==2.4.0", "opentelemetry-api==1.45.2", "pathwaysutils==0.1.13",
          "portpicker==1.6.0", "pydantic==2.14.3", "pydantic-core==2.50.4", "qwix==0.1.8",
          "starlette==1.10.0", "termcolor==3.3.0", "tokamax==0.0.17", "truststore==0.10.5",
          "typing-inspection==0.4.5", "uvicorn==0.54.0"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64", "any"]

MAXTEXT_STEP = re.compile(r"completed step: (\d+), seconds: ([\d.]+), TFLOP/s/device: ([\d.]+)")
MAXTEXT_TFLOPS = re.compile(r"Total TFLOPs: ([\d.]+)")
MAXTEXT_PARAMS = re.compile(r"number parameters: ([\d.]+) billion")
MAXTEXT_LOSS = re.compile(r"completed step: \d+, .*? loss: ([\d.]+)")


def bundle(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
            "--python-version", "3.12", "--implementation", "cp", "-d", str(dest)]
    for p in PLATFORMS:
        argv += ["--platform", p]
    subprocess.run([*argv, *BUNDLE], check=True)
    size = sum(f.stat().st_size for f in dest.glob("*.whl"))
    print(f"{len(list(dest.glob('*.whl')))} wheels, {size / 1e6:.1f} MB in {dest}")


def stand_in_for_xprof(site: Path) -> None:
    tools = site / "xprof" / "cli"
    if (site / "xprof").exists():
        return
    tools.mkdir(parents=True)
    (site / "xprof" / "__init__.py").write_text("")
    (tools / "__init__.py").write_text("")
    # tokamax._src.benchmarking imports this at import time; training never calls it.
    (tools / "tools.py").write_text("get_kernel_stats_tool = None\n")


def matmul_peak() -> float:
    n = 8192 if HARDWARE == "gpu" else 512
    code = ("import jax, jax.numpy as jnp, time\n"
            f"n = {n}; a = jnp.ones((n, n), jnp.bfloat16); f = jax.jit(lambda a: a @ a)\n"
            "f(a).block_until_ready(); t = time.perf_counter()\n"
            "for _ in range(20): r = f(a)\n"
            "r.block_until_ready(); print(2 * n**3 * 20 / (time.perf_counter() - t) / 1e12)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


class MemoryWatch:
    """The most GPU memory nvidia-smi reports in use while the run lasts (MiB)."""

    def __init__(self):
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self._stop.wait(0.5):
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                                      "--format=csv,noheader,nounits"], capture_output=True,
                                     text=True, timeout=5).stdout
                self.peak = max(self.peak, int(out.split()[0]))
            except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
                pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def run_stamped(argv: list[str], env: dict, cwd: str, is_step, timeout: float) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env={**env, "PYTHONUNBUFFERED": "1"}, cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    lines, steps = [], []
    with MemoryWatch() as mem:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if is_step(line):
                steps.append(time.perf_counter() - t0)
        rc = proc.wait()
    timer.cancel()
    return {"rc": rc, "lines": lines, "steps": steps, "wall_s": time.perf_counter() - t0,
            "peak_mib": mem.peak}


def side_env(site: Path, trainer_src: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
    path = [str(site)] + ([str(trainer_src / "trainer")] if trainer_src else [])
    env.update(PYTHONPATH=os.pathsep.join(path), XLA_PYTHON_CLIENT_PREALLOCATE="false",
               DECOUPLE_GCLOUD="TRUE")
    return env


def maxtext_run(site: Path, attention: str, steps: int, work: str, timeout: float) -> dict:
    base = site / "maxtext" / "configs" / "base.yml"
    m = MODEL
    args = [f"base_emb_dim={m['d_model']}", f"base_num_decoder_layers={m['n_layers']}",
            f"base_num_query_heads={m['n_heads']}", f"base_num_kv_heads={m['n_kv_heads']}",
            f"head_dim={m['head_dim']}", f"base_mlp_dim={m['mlp_dim']}",
            f"vocab_size={m['vocab_size']}", f"max_target_length={SEQ}",
            f"per_device_batch_size={GLOBAL_BATCH}", "remat_policy=full", "dtype=bfloat16",
            "weight_dtype=float32", "scan_layers=true", f"attention={attention}",
            f"hardware={HARDWARE}", "skip_jax_distributed_system=true", "enable_goodput_recording=false",
            "dataset_type=synthetic", "enable_checkpointing=false", f"steps={steps}",
            f"run_name=r{time.monotonic_ns()}", f"base_output_directory={work}/out",
            f"jax_cache_dir={work}/jax_cache"]
    run = run_stamped([sys.executable, "-m", "maxtext.trainers.pre_train.train", str(base),
                       *args], side_env(site), work, lambda ln: MAXTEXT_STEP.search(ln), timeout)
    text = "\n".join(run["lines"])
    tflops = MAXTEXT_TFLOPS.search(text)
    params = MAXTEXT_PARAMS.search(text)
    losses = MAXTEXT_LOSS.findall(text)
    run.update(flops_per_step=float(tflops.group(1)) * 1e12 if tflops else None,
               params=float(params.group(1)) * 1e9 if params else None,
               final_loss=float(losses[-1]) if losses else None)
    return run


def tpujob_run(site: Path, src: Path, attention: str, steps: int, work: str,
               timeout: float) -> dict:
    config = {"model": {**MODEL, "tie_embeddings": False, "param_dtype": "float32",
                        "dtype": "bfloat16", "remat": "full", "scan_layers": True,
                        **({"attention": attention} if attention else {})},
              "train": {"steps": steps, "global_batch": GLOBAL_BATCH, "seq_len": SEQ, "seed": 0},
              "optimizer": {"kind": "adamw"}, "mesh": {"ici": {"data": -1}},
              "data": {"kind": "synthetic", "synthetic_pattern": "random"},
              "checkpoint": {"enabled": False},
              "metrics": {"log_every": 1, "memory_every": 1000000, "port": None,
                          "measure_peak": False},
              "output": f"{work}/out"}
    path = Path(work) / "tpujob.json"
    path.write_text(json.dumps(config))
    env = side_env(site, src)
    env["JAX_COMPILATION_CACHE_DIR"] = f"{work}/jax_cache"
    run = run_stamped([sys.executable, "-m", "tpujob_trainer.cli", "--config", str(path)], env,
                      work, lambda ln: '"event": "step"' in ln, timeout)
    events = [json.loads(ln) for ln in run["lines"] if ln.startswith("{")]
    start = next((e for e in events if "flops_per_step" in e), {})
    steps_ = [e for e in events if e.get("event") == "step"]
    run.update(flops_per_step=start.get("flops_per_step"), params=start.get("params"),
               final_loss=steps_[-1]["loss"] if steps_ else None)
    return run


def run_side(side: str, site: Path, steps: int, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="gpu-vs-maxtext-") as work:
        if side == "maxtext-flash":
            return maxtext_run(site, "autoselected", steps, work, timeout)
        if side == "maxtext-cudnn":
            return maxtext_run(site, "cudnn_flash_jax", steps, work, timeout)
        if side in ("tpujob", "tpujob-xla"):
            return tpujob_run(site, REPO, "xla" if side == "tpujob-xla" else None, steps, work,
                              timeout)
        if side.startswith("tpujob@"):
            _, src = side.split("=", 1)
            return tpujob_run(site, Path(src).resolve(), None, steps, work, timeout)
        raise SystemExit(f"unknown side {side!r}")


def figures(run: dict, peak_tflops: float, maxtext_flops: float | None) -> dict:
    s = run["steps"]
    out = {"rc": run["rc"], "wall_s": round(run["wall_s"], 1), "peak_mib": run["peak_mib"],
           "params": run.get("params"), "flops_per_step": run.get("flops_per_step"),
           "final_loss": run.get("final_loss"), "steps_seen": len(s)}
    if len(s) > WARMUP + 1:
        dt = [b - a for a, b in zip(s[WARMUP - 1:-1], s[WARMUP:], strict=True)]
        step_s = statistics.median(dt)
        flops = maxtext_flops or run.get("flops_per_step")
        out.update(compile_s=round(s[0], 1), step_s=round(step_s, 4),
                   step_s_all=[round(x, 4) for x in dt],
                   tokens_per_s=round(GLOBAL_BATCH * SEQ / step_s),
                   tflops=round(flops / step_s / 1e12, 1) if flops else None)
        if out["tflops"]:
            out["mfu"] = round(out["tflops"] / peak_tflops, 4)
    else:
        out["tail"] = run["lines"][-40:]
    return out


def window(site: Path, sides: list[str], steps: int, deadline_s: float, out: Path) -> dict:
    t_end = time.monotonic() + deadline_s
    stand_in_for_xprof(site)
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                              "--format=csv,noheader"], capture_output=True,
                             text=True).stdout.strip()
    except OSError:
        gpu = "none (no nvidia-smi)"
    import jax

    result = {"gpu": gpu, "jax": jax.__version__, "peak_tflops": round(matmul_peak(), 1),
              "model": MODEL, "global_batch": GLOBAL_BATCH, "seq": SEQ, "steps": steps,
              "runs": []}
    print(f"GPU {gpu}; jax {jax.__version__}; bf16 matmul peak {result['peak_tflops']} TFLOP/s",
          flush=True)
    longest: dict[str, float] = {}
    maxtext_flops = None
    rnd = 0
    while True:
        order = sides[rnd % len(sides):] + sides[:rnd % len(sides)]
        for side in order:
            left = t_end - time.monotonic()
            if left < longest.get(side, 90.0) * 1.1:
                result["stopped"] = f"deadline: {left:.0f} s left before {side}, round {rnd + 1}"
                out.write_text(json.dumps(result, indent=1))
                return result
            load = os.getloadavg()[0]
            run = run_side(side, site, steps, timeout=left)
            longest[side] = max(longest.get(side, 0.0), run["wall_s"])
            if side.startswith("maxtext") and run.get("flops_per_step"):
                maxtext_flops = run["flops_per_step"]
            fig = figures(run, result["peak_tflops"], maxtext_flops)
            fig.update(side=side, round=rnd + 1, load1=round(load, 2))
            result["runs"].append(fig)
            print(json.dumps({k: v for k, v in fig.items() if k != "tail"}), flush=True)
            if "tail" in fig:
                print("\n".join(fig["tail"]), flush=True)
            out.write_text(json.dumps(result, indent=1))
        rnd += 1


def report(result: dict) -> str:
    runs = [r for r in result["runs"] if r.get("step_s")]
    sides = list(dict.fromkeys(r["side"] for r in runs))
    lines = [f"GPU: {result['gpu']}; JAX {result['jax']}; bf16 matmul peak measured at the "
             f"start: {result['peak_tflops']} TFLOP/s. Model: 1.14B dense, seq {result['seq']}, "
             f"global batch {result['global_batch']}, bf16, f32 weights, remat full, scanned; "
             f"{result['steps']} steps a run, the first {WARMUP} not timed.", "",
             "| side | runs | s/step (median of runs) | tokens/s | TFLOP/s | MFU | compile s | "
             "peak GPU memory | params | FLOPs/step (own count) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for side in sides:
        rs = [r for r in runs if r["side"] == side]
        med = statistics.median(r["step_s"] for r in rs)
        tf = [r["tflops"] for r in rs if r.get("tflops")]
        each = ", ".join(f"{r['step_s']:.3f}" for r in rs)
        lines.append(
            f"| {side} | {len(rs)} | {med:.3f} ({each}) "
            f"| {GLOBAL_BATCH * SEQ / med:,.0f} | {statistics.median(tf):.1f} | "
            f"{statistics.median(tf) / result['peak_tflops']:.1%} | "
            f"{', '.join(str(r['compile_s']) for r in rs)} | "
            f"{max(r['peak_mib'] for r in rs) / 1024:.1f} GiB | "
            f"{(rs[0]['params'] or 0) / 1e9:.3f}B | {(rs[0]['flops_per_step'] or 0) / 1e12:.1f} T |"
            if tf else f"| {side} | {len(rs)} | {med:.3f} | | | | | | | |")
    mt = [s for s in sides if s.startswith("maxtext")]
    if mt and "tpujob" in sides:
        best = min(statistics.median(r["step_s"] for r in runs if r["side"] == s) for s in mt)
        ours = statistics.median(r["step_s"] for r in runs if r["side"] == "tpujob")
        lines += ["", f"tpujob's s/step against MaxText's faster side: {best / ours:.2f}x "
                      f"(above 1: tpujob faster)."]
    lines += ["", "Order and load of each run: " + "; ".join(
        f"{r['round']}.{r['side']} (load {r['load1']})" for r in result["runs"])]
    if result.get("stopped"):
        lines.append(f"Window ended by its {result['stopped']}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", type=Path)
    ap.add_argument("--site", type=Path)
    ap.add_argument("--side", action="append")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--deadline-s", type=float, default=500)
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--report", type=Path)
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args(argv)
    if a.smoke:
        global MODEL, GLOBAL_BATCH, SEQ, HARDWARE
        MODEL, GLOBAL_BATCH, SEQ, HARDWARE = SMOKE_MODEL, 4, 128, "cpu"
    if a.bundle:
        bundle(a.bundle)
        return 0
    if a.report:
        print(report(json.loads(a.report.read_text())))
        return 0
    if not a.site:
        ap.error("one of --bundle, --site, --report")
    a.out.mkdir(parents=True, exist_ok=True)
    sides = a.side or ["tpujob", "maxtext-flash", "tpujob-xla", "maxtext-cudnn"]
    result = window(a.site.resolve(), sides, a.steps, a.deadline_s, a.out / "gpu_vs_maxtext.json")
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
