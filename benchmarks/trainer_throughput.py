"""Trainer throughput on the anchor config, on 1 CPU device (beside MaxText: vs_maxtext.py).

    .venv/bin/python benchmarks/trainer_throughput.py [--steps 10] [--write]

For bf16 and f32 activations and remat none/full it runs the real training loop
(`tpujob_trainer.loop.train`, as `tpujob-train` does) and reports from the loop's own per-step
figures: seconds per step, tokens/s/device, TFLOP/s/device (FLOPs counted as MaxText counts them,
`tpujob_plan.flops`), and MFU against the best of a large jitted matmul measured on this machine
just before: against the activation dtype's matmul and against the better of the two dtypes'
(on a CPU whose bf16 matmul is slower than its f32 one, the dtype's own peak flatters bf16).
The comparison with MaxText is `benchmarks/vs_maxtext.py`: both run in the same window there. It then times the same compiled step back to back on a
batch already on the device; `1 - compiled / loop`, in this process's CPU seconds per step (which
other work on the machine hardly changes) and in wall seconds, is the share of step time spent
outside the compiled step (data, dispatch, metrics, logging). Last, a run that
saves an async checkpoint every 3 steps (local disk) gives how long `save()` blocks the loop.

Each measurement runs in its own process (fresh JAX, one at a time). `--write` writes
benchmarks/results/trainer_throughput.md; without it the table is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "trainer_throughput.md"

ANCHOR = {
    "model": {"vocab_size": 8192, "d_model": 256, "n_layers": 8, "n_heads": 4, "n_kv_heads": 4,
              "head_dim": 64, "mlp_dim": 1024, "tie_embeddings": False, "param_dtype": "float32"},
    "train": {"global_batch": 8, "seq_len": 256, "seed": 0},
    "optimizer": {"kind": "adamw"},
    "mesh": {"ici": {"data": -1}},
    "data": {"kind": "synthetic", "synthetic_pattern": "random"},
    "metrics": {"log_every": 1, "memory_every": 1000000, "port": None, "measure_peak": False},
}
VARIANTS = [("bfloat16", "none"), ("float32", "none"), ("bfloat16", "full"), ("float32", "full")]
WARMUP_STEPS = 2     # step 1 includes the first execution's one-off costs


def anchor_config(dtype: str, remat: str, steps: int, **extra):
    from tpujob_trainer.config import TrainerConfig

    d = json.loads(json.dumps(ANCHOR))
    d["model"].update(dtype=dtype, remat=remat)
    d["train"]["steps"] = steps
    for key, value in extra.items():
        if isinstance(value, dict):
            d.setdefault(key, {}).update(value)
        else:
            d[key] = value
    return TrainerConfig.from_dict(d)


class _StampedLines(io.StringIO):
    """Collects the loop's JSON lines with this process's CPU time when each was written."""

    def __init__(self):
        super().__init__()
        self.cpu_at: list[float] = []

    def write(self, text: str) -> int:
        self.cpu_at.extend(time.process_time() for _ in range(text.count("\n")))
        return super().write(text)


def run_loop(cfg) -> list[dict]:
    """The real loop; its JSON lines, parsed, each with `_cpu` (process CPU seconds)."""
    from tpujob_trainer.env import ProcessEnv
    from tpujob_trainer.loop import train
    from tpujob_trainer.telemetry.jsonlog import JsonLog

    out = _StampedLines()
    train(cfg, ProcessEnv(), log=JsonLog(True, out=out))
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    for e, cpu in zip(events, out.cpu_at, strict=True):
        e["_cpu"] = cpu
    return events


# -- workers (each in its own process) ---------------------------------------------------------

def worker_peak() -> dict:
    import jax.numpy as jnp

    from tpujob_trainer.telemetry.peak import measure_matmul_tflops

    return {"n": 4096, "float32": measure_matmul_tflops(4096, repeats=5, dtype=jnp.float32),
            "bfloat16": measure_matmul_tflops(4096, repeats=5, dtype=jnp.bfloat16)}


@contextlib.contextmanager
def compiled_anchor_step(cfg):
    """Inside the config's mesh: (compiled train step, fresh state, a synthetic batch already on
    the devices), built as the loop builds them."""
    import jax
    import numpy as np

    from tpujob_trainer.data.sources import SyntheticSource
    from tpujob_trainer.mesh import build_mesh
    from tpujob_trainer.optim import build_optimizer
    from tpujob_trainer.sharding import activate, named_sharding
    from tpujob_trainer.step import build_step_fns

    B, L = cfg.train.global_batch, cfg.train.seq_len
    mesh, _ = build_mesh(cfg.mesh)
    tx, schedule = build_optimizer(cfg.optimizer, cfg.train.steps)
    tokens_s = named_sharding(("batch", None), (B, L + 1), mesh)
    stop_s = named_sharding(("batch",), (B,), mesh)
    with activate(mesh):
        fns = build_step_fns(cfg.model, tx, schedule, seed=0, grad_accum=1, mesh=mesh,
                             batch_shardings={"tokens": tokens_s, "stop": stop_s})
        abstract_batch = {"tokens": jax.ShapeDtypeStruct((B, L + 1), np.int32, sharding=tokens_s),
                          "stop": jax.ShapeDtypeStruct((B,), np.int32, sharding=stop_s)}
        compiled = fns.step.lower(fns.abstract_state, abstract_batch).compile()
        local = SyntheticSource(vocab_size=cfg.model.vocab_size, seq_len=L, global_batch=B,
                                process_index=0, process_count=1, seed=0).next_batch()
        batch = {"tokens": jax.device_put(local, tokens_s),
                 "stop": jax.device_put(np.zeros((B,), np.int32), stop_s)}
        yield compiled, fns.init(), batch


def scratch_output() -> str:
    """A fresh output directory, removed at exit: the run's compilation cache lands there, not
    in the working directory, and no earlier run's cache serves this one."""
    import atexit
    import shutil

    path = tempfile.mkdtemp(prefix="tpujob-bench-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def worker_variant(dtype: str, remat: str, steps: int) -> dict:
    import jax

    from tpujob_plan.flops import train_flops_per_step

    cfg = anchor_config(dtype, remat, steps, checkpoint={"enabled": False},
                        output=scratch_output())
    events = run_loop(cfg)
    steps_ = [e for e in events if e["event"] == "step"]
    rows = steps_[WARMUP_STEPS:]
    loop_s = statistics.median(r["step_time_s"] for r in rows)
    # CPU seconds of this process per step (host work plus XLA's threads): unlike wall time,
    # hardly changed by other work on the machine.
    loop_cpu = statistics.median(b["_cpu"] - a["_cpu"] for a, b in zip(
        steps_[WARMUP_STEPS - 1:-1], steps_[WARMUP_STEPS:], strict=True))

    # The same compiled step alone, back to back, on a batch already on the device.
    B, L = cfg.train.global_batch, cfg.train.seq_len
    with compiled_anchor_step(cfg) as (compiled, state, batch):
        for _ in range(WARMUP_STEPS):
            state, metrics = compiled(state, batch)
        jax.block_until_ready(state)
        reps = max(3, steps - WARMUP_STEPS)
        dispatch = []
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(reps):
            t = time.perf_counter()
            state, metrics = compiled(state, batch)
            dispatch.append(time.perf_counter() - t)
        jax.block_until_ready((state, metrics))
        compiled_s = (time.perf_counter() - t0) / reps
        compiled_cpu = (time.process_time() - c0) / reps

    flops = train_flops_per_step(cfg.model.to_shape(), B, L)
    start = next(e for e in events if e["event"] == "start")
    return {"dtype": dtype, "remat": start["remat"], "params": start["params"],
            "flops_per_step": flops, "loop_step_s": loop_s,
            "loop_step_s_all": [round(r["step_time_s"], 4) for r in rows],
            "compiled_step_s": compiled_s, "dispatch_s_median": statistics.median(dispatch),
            "loop_cpu_s": loop_cpu, "compiled_cpu_s": compiled_cpu,
            "compile_s": next(e for e in events if e["event"] == "compiled")["compile_s"],
            "tokens_per_s_per_device": B * L / loop_s,
            "tflops_per_device": flops / loop_s / 1e12}


def worker_checkpoint(steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = anchor_config("bfloat16", "none", steps, checkpoint={"every": 3, "keep": 2},
                            output=tmp)
        events = run_loop(cfg)
        params_bytes = sum(p.stat().st_size for p in Path(tmp).rglob("*") if p.is_file()) / 2
    saves = [e for e in events if e["event"] == "checkpoint"]
    steps_by = {e["step"]: e["step_time_s"] for e in events if e["event"] == "step"}
    periodic = [s["step"] for s in saves if s["step"] < steps]
    plain = [t for s, t in steps_by.items() if s > WARMUP_STEPS and s - 1 not in periodic
             and s not in periodic]
    after = [steps_by[s + 1] for s in periodic if s + 1 in steps_by]
    return {"blocking_s": [s["blocking_s"] for s in saves],
            "saved_steps": [s["step"] for s in saves],
            "median_step_s": statistics.median(plain),
            "step_after_save_s": after,
            "final_wait_s": next(e for e in events if e["event"] == "checkpoint_wait")["seconds"],
            "checkpoint_bytes_approx": params_bytes}


# -- driver ------------------------------------------------------------------------------------

def in_subprocess(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "trainer"), str(REPO)])}
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, __file__, "--worker", *args], env=env, text=True,
                          capture_output=True, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise SystemExit(f"worker {args} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def load() -> str:
    return os.popen("uptime").read().strip()


def _load1(uptime: str) -> float:
    """The 1-minute load average in an `uptime` line."""
    try:
        return float(uptime.split("load average:")[1].split(",")[0])
    except (IndexError, ValueError):
        return 0.0


# The CPU features that decide XLA:CPU's matmul speed (bf16 and AMX units), named with each run.
FLAGS_OF_INTEREST = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu_kind() -> str:
    """The CPU's model name, how many CPUs this process sees, which FLAGS_OF_INTEREST it has and
    the form the trainer's bf16 matmuls take on it (`tpujob_trainer.cpu`)."""
    from tpujob_trainer.cpu import has_bf16_matmul, this_cpu_flags

    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
                break
    except OSError:
        pass
    flags = this_cpu_flags()
    have = [f for f in FLAGS_OF_INTEREST if f in flags]
    form = "float32 result" if has_bf16_matmul(flags) else "bf16 result"
    return (f"{model} ({os.cpu_count()} CPUs; flags: "
            f"{' '.join(have) or 'none of ' + ', '.join(FLAGS_OF_INTEREST)}; "
            f"the trainer's bf16 matmuls: {form})")


def machine() -> str:
    import jax
    return (f"{cpu_kind()}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, jax {jax.__version__}")


def report(steps: int, peak: dict, variants: list[dict], ckpt: dict, loads: list[str],
           command: str) -> str:
    lines = [
        "# Trainer throughput on the anchor config (1 CPU device)",
        "",
        "Anchor config (facts, section 7): emb 256, 8 layers, 4 query / 4 KV heads, head_dim 64,",
        "MLP 1024 (SwiGLU), vocab 8192, untied output layer, seq 256, global batch 8, f32 parameters,",
        f"AdamW, synthetic data; {variants[0]['params']:,} parameters; "
        f"{variants[0]['flops_per_step'] / 1e12:.4f} TFLOP per step (MaxText's count).",
        "",
        "Command (repository root):",
        "",
        "```",
        command,
        "```",
        "",
        f"Machine: {machine()}.",
        "",
        "Load while measuring (`uptime` before each measurement; other work shares these cores):",
        "",
        *[f"- {x}" for x in loads],
        "",
        *([f"The 1-minute load average reached {busiest:.2f} (above 1.5 on 2 cores): other work "
           "took part of the CPU, so these figures are noisy and likely pessimistic; compare "
           "runs made at low load.", ""] if (busiest := max(_load1(x) for x in loads)) > 1.5
          else []),
        f"Peak for MFU: the best of 5 jitted {peak['n']}x{peak['n']}x{peak['n']} matmuls on this "
        f"machine, measured just before: {peak['float32'] * 1e3:.0f} GFLOP/s in f32, "
        f"{peak['bfloat16'] * 1e3:.0f} GFLOP/s in bf16. `MFU` is against the matmul of the "
        "activation dtype, `MFU best` against the better of the two.",
        "",
        f"Loop figures: median over steps {WARMUP_STEPS + 1}-{steps} of the training loop's own "
        "step time (interval between step completions, so everything the host does is in it).",
        "",
        "| activations | remat | s/step | tokens/s/device | TFLOP/s/device | MFU | MFU best "
        "| CPU s/step: loop / compiled step alone | outside the compiled step (CPU) "
        "| same by wall time |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in variants:
        mfu = v["tflops_per_device"] / peak[v["dtype"]]
        mfu_best = v["tflops_per_device"] / max(peak["float32"], peak["bfloat16"])
        outside_wall = 1 - v["compiled_step_s"] / v["loop_step_s"]
        outside_cpu = 1 - v["compiled_cpu_s"] / v["loop_cpu_s"]
        lines.append(
            f"| {'bf16' if v['dtype'] == 'bfloat16' else 'f32'} | {v['remat']} | "
            f"{v['loop_step_s']:.3f} | {v['tokens_per_s_per_device']:,.0f} | "
            f"{v['tflops_per_device']:.3f} | {mfu:.2f} | {mfu_best:.2f} | {v['loop_cpu_s']:.3f} / "
            f"{v['compiled_cpu_s']:.3f} | {outside_cpu * 100:.1f}% | {outside_wall * 100:.1f}% "
            f"({v['compiled_step_s']:.3f} s alone) |")
    lines += [
        "",
        "Beside MaxText, in the same window and on the same work: "
        "[vs_maxtext.md](vs_maxtext.md) (`benchmarks/vs_maxtext.py`).",
        "\"Outside the compiled step\" (target < 3%) is `1 - compiled / loop`: the same compiled",
        "step run alone, back to back on a batch already on the device, against the training loop.",
        "The CPU column compares this process's CPU seconds per step (host work plus XLA's threads),",
        "which depends less on other work on the machine than the wall-time column does; a negative",
        "value is noise between the two measurements. The loop dispatches step N before reading",
        "step N-1's metrics, so host work overlaps the device. Dispatching one step returned in "
        + ", ".join(f"{v['dispatch_s_median'] * 1e3:.1f} ms" for v in variants)
        + " (median, same order as the table).",
        "",
        "Per-step loop times (s), for the noise:",
        "",
        *[f"- {v['dtype']}/{v['remat']}: {v['loop_step_s_all']}" for v in variants],
        "",
        "## Async checkpoint save (bf16, remat none, local disk, every 3 steps)",
        "",
        f"Checkpoint size about {ckpt['checkpoint_bytes_approx'] / 2**20:.0f} MiB "
        "(parameters and AdamW state).",
        "",
        "| | seconds |",
        "|---|---|",
        f"| `save()` blocking the loop (steps {ckpt['saved_steps']}) | "
        + ", ".join(f"{b:.3f}" for b in ckpt["blocking_s"]) + " |",
        f"| median step without a save | {ckpt['median_step_s']:.3f} |",
        "| step right after a periodic save (includes the blocking and the background write "
        "sharing the cores) | " + ", ".join(f"{t:.3f}" for t in ckpt["step_after_save_s"]) + " |",
        f"| waiting for the last save at the end of the run | {ckpt['final_wait_s']:.3f} |",
        "",
        f"Target: a save blocks the loop for less than one step "
        f"({max(ckpt['blocking_s']):.3f} s worst vs {ckpt['median_step_s']:.3f} s per step).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10, help="training steps per variant (default 10)")
    ap.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(REPO)}")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        kind, *rest = args.worker
        result = {"peak": lambda: worker_peak(),
                  "variant": lambda: worker_variant(rest[0], rest[1], int(rest[2])),
                  "checkpoint": lambda: worker_checkpoint(int(rest[0]))}[kind]()
        print("RESULT " + json.dumps(result), flush=True)
        return

    loads = [f"before the peak: {load()}"]
    peak = in_subprocess("peak")
    variants = []
    for dtype, remat in VARIANTS:
        loads.append(f"before {dtype}/{remat}: {load()}")
        variants.append(in_subprocess("variant", dtype, remat, str(args.steps)))
        print(json.dumps(variants[-1]), file=sys.stderr, flush=True)
    loads.append(f"before the checkpoint run: {load()}")
    ckpt = in_subprocess("checkpoint", str(args.steps))
    loads.append(f"at the end: {load()}")
    command = ".venv/bin/python benchmarks/trainer_throughput.py" + (
        f" --steps {args.steps}" if args.steps != 10 else "") + " --write"
    text = report(args.steps, peak, variants, ckpt, loads, command)
    if args.write:
        RESULTS.write_text(text)
        print(f"wrote {RESULTS}", file=sys.stderr)
    print(text)


if __name__ == "__main__":
    main()
