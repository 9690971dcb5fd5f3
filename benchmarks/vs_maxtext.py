"""tpujob's trainer beside MaxText, in the same window, on the same model and the same work.

    .venv/bin/python benchmarks/vs_maxtext.py [--rounds 3] [--steps 20] [--config NAME ...]
        [--xla-max-isa AVX2] [--write [--out FILE]]

MaxText runs from its own environment, built once outside the repository by
`tools/maxtext_env.py` (Python 3.12, maxtext from PyPI with only what its pre-training entry
point needs on CPU, the trainer's jax/jaxlib/flax/optax). Both sides run as a user would run
them, each in a fresh process: MaxText as `python -m maxtext.trainers.pre_train.train base.yml
hardware=cpu ... dataset_type=synthetic` (with `DECOUPLE_GCLOUD=TRUE`), tpujob as
`tpujob-train --config FILE`, on the anchor model (emb 256, 8 layers, 4/4 heads of 64, SwiGLU
1024, vocab 8192, untied output, f32 weights, seq 256, global batch 8, AdamW, remat full).

Configurations: 1 device bf16, 1 device f32, 8 fake CPU devices (XLA's host device count)
FSDP bf16. Each round runs, per configuration, MaxText with its default scanned layers, MaxText
unrolled (`scan_layers=false`) and tpujob, one after the other (A A' B, A A' B, ...), the
1-minute load average recorded before each run, and the matmul peak of both dtypes measured at
the start of the round. The faster MaxText variant (median tokens/s) is the anchor.

Figures per run, all from the driver's clock: compile = process start -> first step line (cold:
MaxText gets a fresh `jax_cache_dir` per run, since its default ~/jax_cache would serve repeats);
s/step = median interval between consecutive step lines after the first `WARMUP` steps;
tokens/s (global) = batch x seq / s/step; TFLOP/s = MaxText's FLOP count per step / s/step;
MFU = that against the machine's matmul peak (all devices share the same cores), both against the
activation dtype's peak and against the best of the two dtypes' peaks; CPU s/step = the run's
process CPU time (all threads) between step lines, from /proc.

Equal work (once per configuration, before the rounds, with an XLA dump): the parameter count
each side reports (MaxText's exact count read from its own `calculate_num_params_from_pytree`),
MaxText's FLOP count per step (its `calculate_tflops_training_per_device`) against tpujob's
(`tpujob_plan.flops`), and XLA's cost analysis of both compiled train steps (both unrolled for
it, MaxText with `scan_layers=false` and tpujob with `model.scan_layers=false`: a scanned step's
loop body is counted once). `--write` writes benchmarks/results/vs_maxtext.md.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "benchmarks" / "results" / "vs_maxtext.md"
WARMUP = 2
TARGET = 1.2
GLOBAL_BATCH, SEQ = 8, 256

CONFIGS = {
    "1dev-bf16": {"title": "1 device, bf16", "devices": 1, "dtype": "bfloat16"},
    "1dev-f32": {"title": "1 device, f32", "devices": 1, "dtype": "float32"},
    "8dev-fsdp-bf16": {"title": "8 fake devices, FSDP, bf16 (global)", "devices": 8,
                       "dtype": "bfloat16"},
}
SIDES = ("maxtext-scanned", "maxtext-unrolled", "tpujob")

MAXTEXT_MODEL = {
    "base_emb_dim": 256, "base_num_query_heads": 4, "base_num_kv_heads": 4, "head_dim": 64,
    "base_mlp_dim": 1024, "base_num_decoder_layers": 8, "vocab_size": 8192,
    "max_target_length": SEQ, "weight_dtype": "float32", "remat_policy": "full",
}
MAXTEXT_CPU = {"hardware": "cpu", "skip_jax_distributed_system": "true",
               "enable_goodput_recording": "false", "dataset_type": "synthetic",
               "enable_checkpointing": "false"}
MAXTEXT_STEP = re.compile(r"completed step: (\d+), seconds: ([\d.]+), TFLOP/s/device: ([\d.]+)")

# Run under MaxText's python for the equal-work run only: prints the exact parameter count and
# FLOP count from MaxText's own functions, then runs the same entry point.
MAXTEXT_COUNTS = """
import runpy, sys
from maxtext.utils import max_utils, maxtext_utils
_params, _tflops = max_utils.calculate_num_params_from_pytree, \
    maxtext_utils.calculate_tflops_training_per_device
def params(p):
    n = _params(p); print("EXACT_PARAMS", n, flush=True); return n
def tflops(config, log=True):
    r = _tflops(config, log=log); print("EXACT_TFLOPS_PER_DEVICE", r[0], flush=True); return r
max_utils.calculate_num_params_from_pytree = params
maxtext_utils.calculate_tflops_training_per_device = tflops
sys.argv = ["train", *sys.argv[1:]]
runpy.run_module("maxtext.trainers.pre_train.train", run_name="__main__")
"""


def _load_throughput():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "trainer_throughput", REPO / "benchmarks" / "trainer_throughput.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load1() -> float:
    return os.getloadavg()[0]


def _proc_cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_stamped(argv: list[str], env: dict[str, str], is_step, timeout: float = 1200) -> dict:
    """Runs argv; every output line with the driver's clock and the process's CPU seconds."""
    env = {**env, "PYTHONUNBUFFERED": "1"}
    cwd = env.pop("_CWD", None)
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1, cwd=cwd)
    lines, steps = [], []
    for line in proc.stdout:
        now = time.perf_counter() - t0
        lines.append(line.rstrip("\n"))
        if is_step(line):
            steps.append((now, _proc_cpu_s(proc.pid), line))
        if now > timeout:
            proc.kill()
    rc = proc.wait()
    if rc or not steps:
        tail = "\n".join(lines[-30:])
        raise SystemExit(f"{argv[:4]} ... failed (exit {rc}, {len(steps)} steps):\n{tail}")
    return {"lines": lines, "steps": steps, "wall_s": time.perf_counter() - t0}


def figures(run: dict, flops: float, peaks: dict, dtype: str) -> dict:
    steps = run["steps"]
    dt = [b[0] - a[0] for a, b in zip(steps[WARMUP - 1:-1], steps[WARMUP:], strict=True)]
    cpu = [b[1] - a[1] for a, b in zip(steps[WARMUP - 1:-1], steps[WARMUP:], strict=True)
           if a[1] is not None and b[1] is not None]
    step_s = statistics.median(dt)
    tflops = flops / step_s / 1e12
    return {"compile_s": steps[0][0], "step_s": step_s, "step_s_all": [round(x, 3) for x in dt],
            "tokens_per_s": GLOBAL_BATCH * SEQ / step_s, "tflops": tflops,
            "mfu_dtype": tflops / peaks[dtype], "mfu_best": tflops / max(peaks["float32"],
                                                                          peaks["bfloat16"]),
            "cpu_s_per_step": statistics.median(cpu) if cpu else None}


# -- the two sides -----------------------------------------------------------------------------

# `--xla-max-isa`: XLA:CPU told to use no instruction newer than this (its --xla_cpu_max_isa),
# on both sides and for the matmul peak alike.
MAX_ISA: str | None = None


def _isa_flags() -> str:
    return f" --xla_cpu_max_isa={MAX_ISA}" if MAX_ISA else ""


def base_env(devices: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
    env["JAX_PLATFORMS"] = "cpu"
    flags = (f"--xla_force_host_platform_device_count={devices}" if devices > 1 else "") \
        + _isa_flags()
    if flags.strip():
        env["XLA_FLAGS"] = flags.strip()
    return env


def _dump_flags(env: dict[str, str], dump: str | None) -> dict[str, str]:
    if dump:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + f" --xla_dump_to={dump} "
                            "--xla_dump_hlo_as_proto --xla_dump_hlo_as_text=false").strip()
    return env


def maxtext_run(cfg: dict, scanned: bool, steps: int, workdir: str, dump: str | None = None):
    from tools.maxtext_env import ensure, run_env

    marker = ensure()
    overrides = {**MAXTEXT_CPU, **MAXTEXT_MODEL, "steps": steps, "dtype": cfg["dtype"],
                 "per_device_batch_size": GLOBAL_BATCH // cfg["devices"],
                 "scan_layers": "true" if scanned else "false",
                 "run_name": f"r{time.monotonic_ns()}", "base_output_directory": workdir,
                 # MaxText keeps a persistent compilation cache (~/jax_cache by default): a
                 # fresh one per run, so its compile time is a cold compile, as tpujob's is.
                 "jax_cache_dir": os.path.join(workdir, "jax_cache")}
    args = [marker["base_yml"], *(f"{k}={v}" for k, v in overrides.items())]
    argv = ([marker["python"], "-c", MAXTEXT_COUNTS, *args] if dump else
            [marker["python"], "-m", marker["train_module"], *args])
    env = _dump_flags(run_env(base_env(cfg["devices"])), dump)
    env["_CWD"] = workdir
    return run_stamped(argv, env, lambda line: MAXTEXT_STEP.search(line) is not None)


def tpujob_config(cfg: dict, steps: int, workdir: str, scanned: bool = True) -> dict:
    d = json.loads(json.dumps(_load_throughput().ANCHOR))
    d["model"].update(dtype=cfg["dtype"], remat="full", scan_layers=scanned)
    d["train"].update(steps=steps, global_batch=GLOBAL_BATCH, seq_len=SEQ)
    d["mesh"] = {"ici": {"fsdp": -1}} if cfg["devices"] > 1 else {"ici": {"data": -1}}
    d["checkpoint"] = {"enabled": False}
    d["output"] = os.path.join(workdir, "out")
    return d


def tpujob_run(cfg: dict, steps: int, workdir: str, dump: str | None = None):
    path = os.path.join(workdir, "tpujob.yaml")
    # The equal-work run (with a dump) is unrolled: XLA's cost analysis counts a scanned
    # step's loop body once, as it does for MaxText's.
    Path(path).write_text(json.dumps(tpujob_config(cfg, steps, workdir, scanned=dump is None)))
    exe = Path(sys.executable).with_name("tpujob-train")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "tpujob_trainer.cli"]
    env = _dump_flags(base_env(cfg["devices"]), dump)
    env["_CWD"] = workdir
    return run_stamped([*argv, "--config", path], env, lambda line: '"event": "step"' in line)


def run_side(side: str, cfg: dict, steps: int, dump: str | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="vs-maxtext-") as workdir:
        if side == "tpujob":
            return tpujob_run(cfg, steps, workdir, dump)
        return maxtext_run(cfg, side == "maxtext-scanned", steps, workdir, dump)


def peaks_now() -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "trainer"), str(REPO)])}
    env.pop("XLA_FLAGS", None)
    if MAX_ISA:
        env["XLA_FLAGS"] = _isa_flags().strip()
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "trainer_throughput.py"),
                           "--worker", "peak"], env=env, text=True, capture_output=True,
                          timeout=600)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not line:
        raise SystemExit(f"peak measurement failed:\n{proc.stderr[-3000:]}")
    return json.loads(line[-1][len("RESULT "):])


# -- equal work --------------------------------------------------------------------------------

def _hlo_module(path: str):
    """The HloModuleProto inside a dumped HloProto (its field 1)."""
    data = Path(path).read_bytes()
    if data[0] != 0x0A:
        raise ValueError(f"{path}: not an HloProto")
    n, shift, i = 0, 0, 1
    while True:
        c = data[i]
        n |= (c & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not c & 0x80:
            break
    return data[i:i + n]


def step_cost_flops(dump: str) -> tuple[float, str]:
    """XLA's cost analysis (FLOPs, per device) of the costliest optimized module in a dump."""
    import jax
    from jax._src.lib import xla_client as xc

    client = jax.devices("cpu")[0].client
    best = (0.0, "")
    for path in glob.glob(os.path.join(dump, "*after_optimizations.hlo.pb")):
        try:
            module = xc.XlaComputation(_hlo_module(path)).get_hlo_module()
            flops = xc._xla.hlo_module_cost_analysis(client, module).get("flops", 0.0)
        except Exception:  # noqa: BLE001 - a module that does not parse is not the step
            continue
        if flops > best[0]:
            best = (flops, Path(path).name.split(".")[1])
    return best


def equal_work(cfg: dict) -> dict:
    from tpujob_plan.flops import train_flops_per_step

    out = {}
    for side in ("maxtext-unrolled", "tpujob"):
        dump = tempfile.mkdtemp(prefix="vs-maxtext-dump-")
        try:
            run = run_side(side, cfg, 2, dump=dump)
            flops, module = step_cost_flops(dump)
        finally:
            shutil.rmtree(dump, ignore_errors=True)
        text = "\n".join(run["lines"])
        if side == "tpujob":
            start = next(json.loads(ln) for ln in run["lines"] if '"event": "start"' in ln)
            params, formula = start["params"], train_flops_per_step(
                _tpujob_shape(cfg), GLOBAL_BATCH, SEQ)
        else:
            params = int(re.findall(r"EXACT_PARAMS (\d+)", text)[-1])
            formula = float(re.findall(r"EXACT_TFLOPS_PER_DEVICE ([\d.e+-]+)", text)[-1]) \
                * 1e12 * cfg["devices"]
        out[side] = {"params": params, "formula_flops": formula,
                     "xla_flops": flops * cfg["devices"], "xla_module": module}
    return out


def _tpujob_shape(cfg: dict):
    from tpujob_trainer.config import TrainerConfig

    with tempfile.TemporaryDirectory() as workdir:
        return TrainerConfig.from_dict(tpujob_config(cfg, 1, workdir)).model.to_shape()


# -- driver ------------------------------------------------------------------------------------

def flops_per_step(cfg: dict) -> float:
    from tpujob_plan.flops import train_flops_per_step

    return train_flops_per_step(_tpujob_shape(cfg), GLOBAL_BATCH, SEQ)


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def report(args, results: dict, work: dict, peaks: list[dict], command: str) -> str:
    from tools.maxtext_env import ensure

    marker = ensure()
    throughput = _load_throughput()
    lines = [
        "# tpujob's trainer beside MaxText (same window, same model, same work)",
        "",
        "Command (repository root):",
        "",
        "```",
        command,
        "```",
        "",
        f"Machine: {throughput.machine()}. MaxText {marker['pins']['maxtext']} on Python "
        f"{marker['python_version']} with jax {marker['pins']['jax']}, jaxlib "
        f"{marker['pins']['jaxlib']}, flax {marker['pins']['flax']}, optax "
        f"{marker['pins']['optax']} (the trainer's), from `tools/maxtext_env.py`.",
        "",
        *([f"**XLA:CPU limited to {MAX_ISA}** (`--xla_cpu_max_isa={MAX_ISA}` on both sides and "
           "for the matmul peak): the code XLA generates (fusions, converts, reductions) uses no "
           "newer instruction, so no AVX-512. The matmul library's kernels pick their "
           "instructions at run time and need not follow the limit: compare the matmul peak with "
           "an unlimited run's. This is not another CPU kind (same caches, clocks, memory and "
           "matmul kernels).", ""] if MAX_ISA else []),
        "Model (both sides): emb 256, 8 layers, 4 query / 4 KV heads of 64, SwiGLU 1024, vocab "
        "8192, untied output layer, f32 weights, seq 256, global batch 8, AdamW, synthetic data, "
        "remat full. Each run is a fresh process as a user starts it; rounds alternate the sides "
        f"(MaxText scanned, MaxText unrolled, tpujob), {args.steps} steps each; s/step is the median "
        f"interval between step lines after the first {WARMUP} steps, by the driver's clock.",
        "",
        "Matmul peak per round (best of 5 jitted 4096^3 matmuls, measured at the start of the "
        "round): " + "; ".join(f"round {i + 1}: f32 {p['float32'] * 1e3:.0f}, bf16 "
                              f"{p['bfloat16'] * 1e3:.0f} GFLOP/s" for i, p in enumerate(peaks))
        + ". MFU is against the machine's peak (fake devices share the same cores): `MFU dtype` "
        "against the activation dtype's matmul, `MFU best` against the better of the two dtypes "
        "(where a CPU's bf16 matmul is slower than its f32 one, the dtype's own peak flatters "
        "bf16). A peak measured while other work holds the cores comes out low, and MFU with it "
        "high: compare MFU only within a round.",
        "",
    ]
    for name, per_side in results.items():
        cfg = CONFIGS[name]
        med = {s: {k: statistics.median(r[k] for r in per_side[s])
                   for k in ("tokens_per_s", "step_s", "compile_s", "tflops", "mfu_dtype",
                             "mfu_best")} for s in SIDES}
        for s in SIDES:
            cpu = [r["cpu_s_per_step"] for r in per_side[s] if r["cpu_s_per_step"] is not None]
            med[s]["cpu_s_per_step"] = statistics.median(cpu) if cpu else None
        cpu_anchor = min(("maxtext-scanned", "maxtext-unrolled"),
                         key=lambda s: med[s]["cpu_s_per_step"] or float("inf"))
        anchor = max(("maxtext-scanned", "maxtext-unrolled"), key=lambda s: med[s]["tokens_per_s"])
        ratio = med["tpujob"]["tokens_per_s"] / med[anchor]["tokens_per_s"]
        per_round = [t["tokens_per_s"] / a["tokens_per_s"] for t, a in
                     zip(per_side["tpujob"], per_side[anchor], strict=True)]
        lines += [
            f"## {cfg['title']}",
            "",
            "| round | side | load (1 min) | compile s | s/step | tokens/s | TFLOP/s | MFU dtype "
            "| MFU best | CPU s/step |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for i in range(args.rounds):
            for s in SIDES:
                r = per_side[s][i]
                lines.append(
                    f"| {i + 1} | {s} | {r['load']:.2f} | {r['compile_s']:.1f} | "
                    f"{r['step_s']:.3f} | {r['tokens_per_s']:,.0f} | {r['tflops']:.3f} | "
                    f"{r['mfu_dtype']:.2f} | {r['mfu_best']:.2f} | "
                    f"{_fmt(r['cpu_s_per_step'], '.2f')} |")
        lines += [
            "",
            "| median | compile s | s/step | tokens/s | TFLOP/s | MFU dtype | MFU best "
            "| CPU s/step |",
            "|---|---|---|---|---|---|---|---|",
            *[f"| {s}{' (anchor)' if s == anchor else ''} | {m['compile_s']:.1f} | "
              f"{m['step_s']:.3f} | {m['tokens_per_s']:,.0f} | {m['tflops']:.3f} | "
              f"{m['mfu_dtype']:.2f} | {m['mfu_best']:.2f} | "
              f"{_fmt(m['cpu_s_per_step'], '.2f')} |" for s, m in med.items()],
            "",
            f"tpujob / MaxText ({anchor}) tokens/s: **{ratio:.2f}x** median (target {TARGET}x); "
            "per round " + ", ".join(f"{x:.2f}x" for x in per_round) + ". Compile: tpujob "
            f"{med['tpujob']['compile_s']:.1f} s vs {med[anchor]['compile_s']:.1f} s.",
            "",
            "By CPU time per step (which other work on the machine moves much less than wall "
            f"time), MaxText ({cpu_anchor}) / tpujob: "
            + (f"**{med[cpu_anchor]['cpu_s_per_step'] / med['tpujob']['cpu_s_per_step']:.2f}x**"
               if med[cpu_anchor]["cpu_s_per_step"] and med["tpujob"]["cpu_s_per_step"]
               else "-") + " (above 1: tpujob needs less CPU for the same step).",
            "",
        ]
        if name in work:
            w = work[name]
            m, t = w["maxtext-unrolled"], w["tpujob"]
            same = (m["params"] == t["params"]
                    and abs(m["formula_flops"] / t["formula_flops"] - 1) < 0.01
                    and abs(m["xla_flops"] / t["xla_flops"] - 1) < 0.05)
            lines += [
                "Equal work (one extra 2-step run per side with an XLA dump; both sides unrolled, since XLA counts a scanned loop body once):",
                "",
                "| | parameters | FLOP/step, MaxText's formula | FLOP/step, XLA cost analysis "
                "of the compiled step (all devices) |",
                "|---|---|---|---|",
                f"| MaxText | {m['params']:,} | {m['formula_flops'] / 1e9:.1f} G | "
                f"{m['xla_flops'] / 1e9:.1f} G (`{m['xla_module']}`) |",
                f"| tpujob | {t['params']:,} | {t['formula_flops'] / 1e9:.1f} G | "
                f"{t['xla_flops'] / 1e9:.1f} G (`{t['xla_module']}`) |",
                "",
                "Same work: " + ("yes (same parameters, formula within 1%, XLA within 5%)." if same
                                 else "**NO: the work differs; the ratio above is not "
                                      "like for like.**"),
                "",
            ]
        lines += ["Per-step intervals (s), for the noise: "
                  + "; ".join(f"{s} r{i + 1} {per_side[s][i]['step_s_all']}"
                              for s in SIDES for i in range(args.rounds)), ""]
    return "\n".join(lines) + "\n"


def _shown(path: Path) -> str:
    """A path as the command line would name it: relative to the repository when inside it."""
    path = path.resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--config", action="append", choices=sorted(CONFIGS),
                    help="configurations to run (default: all three)")
    ap.add_argument("--no-equal-work", action="store_true", help="skip the equal-work runs")
    ap.add_argument("--xla-max-isa", choices=("SSE4_2", "AVX", "AVX2", "AVX512"),
                    help="tell XLA:CPU to use no instruction newer than this (both sides)")
    ap.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(REPO)}")
    ap.add_argument("--out", type=Path, default=RESULTS, help="the file --write writes")
    args = ap.parse_args()
    global MAX_ISA
    MAX_ISA = args.xla_max_isa
    if args.steps <= WARMUP + 1:
        raise SystemExit(f"--steps must be above {WARMUP + 1}")
    names = args.config or list(CONFIGS)

    from tools.maxtext_env import ensure
    ensure()
    work = {}
    if not args.no_equal_work:
        for name in names:
            work[name] = equal_work(CONFIGS[name])
            print(f"equal work {name}: {json.dumps(work[name])}", file=sys.stderr, flush=True)

    results = {name: {s: [] for s in SIDES} for name in names}
    peaks = []
    for rnd in range(args.rounds):
        peaks.append(peaks_now())
        for name in names:
            cfg = CONFIGS[name]
            for side in SIDES:
                load = load1()
                run = run_side(side, cfg, args.steps)
                fig = figures(run, flops_per_step(cfg), peaks[-1], cfg["dtype"])
                fig["load"] = load
                results[name][side].append(fig)
                print(f"round {rnd + 1} {name} {side}: load {load:.2f} "
                      f"{fig['tokens_per_s']:,.0f} tokens/s, {fig['step_s']:.3f} s/step, "
                      f"compile {fig['compile_s']:.1f} s", file=sys.stderr, flush=True)

    command = ".venv/bin/python benchmarks/vs_maxtext.py" + "".join(
        [f" --rounds {args.rounds}" if args.rounds != 3 else "",
         f" --steps {args.steps}" if args.steps != 20 else "",
         *(f" --config {n}" for n in args.config or []),
         " --no-equal-work" if args.no_equal_work else "",
         f" --xla-max-isa {args.xla_max_isa}" if args.xla_max_isa else "",
         f" --out {_shown(args.out)}" if args.out.resolve() != RESULTS else "", " --write"])
    text = report(args, results, work, peaks, command)
    if args.write:
        args.out.write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    print(text)


if __name__ == "__main__":
    main()
