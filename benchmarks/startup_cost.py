"""Where a first start's seconds go: the trainer's real CLI on the quickstart's config
(manifests/examples/quickstart.yaml: 60 steps, a checkpoint every 20), as local mode starts it
(1 or 2 processes x 4 CPU devices wired with jax.distributed on 127.0.0.1, output on the GCS
emulator's gs://, the peak TFLOP/s from the environment so nothing is measured), from an empty
output: no checkpoint and no compilation cache yet.

Each start is broken down from what the trainer itself reports (process 0): its goodput timeline
(`tpu_initialization`, `training_prep`, `program_startup`), the `start`/`memory`/`compiled`/
first `step` JSON lines' times, JAX's own compile log (`JAX_LOG_COMPILES=1`: tracing, lowering
and XLA compile of each program) and `python -X importtime` (the imports, grouped by package).

With `--rev REV`, the trainer of git revision REV (its `trainer/` folder) is started beside this
checkout's in the same run, the two alternating round by round (which goes first alternates too),
so that a change is measured against its anchor under the same load; `--trainer PATH` does the
same with another `trainer/` folder (a change not committed).

    .venv/bin/python benchmarks/startup_cost.py [--processes 1 2] [--rounds 3] [--rev REV | --trainer PATH]
    .venv/bin/python benchmarks/startup_cost.py --init-codegen [--rounds 3]

`--init-codegen` compiles the jitted initial state alone with XLA:CPU's default code generation
and with cheaper settings (LLVM -O0; no expensive LLVM passes), alternating, and says whether the
values stay bit-identical.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.trainer import helpers  # noqa: E402

QUICKSTART = {
    "model": {"vocab_size": 512, "d_model": 128, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4,
              "head_dim": 32, "mlp_dim": 512},
    "train": {"steps": 60, "global_batch": 16, "seq_len": 128},
    "optimizer": {"lr": 3.0e-3, "warmup_steps": 5},
    "data": {"kind": "synthetic", "synthetic_pattern": "ramp"},
    "checkpoint": {"every": 20},
    "mesh": {"ici": {"fsdp": -1}},
}
DEVICES_PER_PROCESS = 4
PEAK_TFLOPS = "918"   # v6e's, as the operator sets it: on CPU it means "do not measure"
# Packages whose import time is reported (cumulative: each includes what it imports first).
PACKAGES = ("tpujob_trainer.config", "jax", "numpy", "tpujob_trainer.loop", "flax", "optax",
            "tpujob_trainer.checkpoint", "orbax.checkpoint", "gcsfs")
_COMPILE_LOG = re.compile(
    r"Finished (tracing|jaxpr to MLIR module conversion|XLA compilation of) (?:jit\()?"
    r"([^ )]+)\)?(?: for jit)? in ([0-9.]+) sec")
_LOG_KIND = {"tracing": "trace", "jaxpr to MLIR module conversion": "lower",
             "XLA compilation of": "compile"}


def trainer_root(rev: str | None, tmp: Path) -> Path:
    """The `trainer/` folder to run: this checkout's, or revision `rev`'s extracted under tmp."""
    if rev is None:
        return ROOT / "trainer"
    target = tmp / f"rev-{rev.replace('/', '_')}"
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "trainer"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "trainer"


def import_times(stderr: str) -> dict[str, float]:
    """Seconds of each package's first import (its own line of -X importtime), and the total."""
    out: dict[str, float] = {}
    total = 0.0
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, cumulative, name = line[len("import time:"):].split("|")
        depth = (len(name) - len(name.lstrip())) // 2
        name = name.strip()
        seconds = int(cumulative) / 1e6
        if depth == 0:
            total += seconds
        if name in PACKAGES and name not in out:
            out[name] = seconds
    out["all imports"] = total
    return out


def compile_times(stderr: str) -> dict[str, float]:
    """JAX's trace / lower / compile seconds per program (`init`: the jitted initial state)."""
    out: dict[str, float] = defaultdict(float)
    for kind, name, seconds in _COMPILE_LOG.findall(stderr):
        kind = _LOG_KIND[kind]
        if name == "<lambda>":
            if kind == "trace":
                continue  # the eval_shape traces share the name; only init is lowered and compiled
            name = "init"
        elif name != "train_step":
            name = "other"
        out[f"{name} {kind}"] += float(seconds)
    return dict(out)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def start_once(root: Path, processes: int, output: str, config: Path, env_extra: dict[str, str],
               timeout: float = 900) -> dict[str, float]:
    """One first start of the job; process 0's breakdown in seconds."""
    port = helpers.free_port()
    term = [config.parent / f"term-{time.monotonic_ns()}-{i}" for i in range(processes)]
    procs = []
    # Files, not pipes: a process blocked on a full pipe would stall the other in a collective.
    logs = [(open(config.parent / f"out-{pid}", "w+"), open(config.parent / f"err-{pid}", "w+"))
            for pid in range(processes)]
    cpu0 = _children_cpu_s()
    t0 = time.time()
    for pid in range(processes):
        wiring = helpers.process_env(pid, port, processes=processes, devices=DEVICES_PER_PROCESS,
                                     init_timeout_s=300) if processes > 1 else \
            {"TPUJOB_CPU_DEVICES": str(DEVICES_PER_PROCESS)}
        env = helpers.clean_env(**wiring, **env_extra, TPUJOB_TERMINATION_LOG=str(term[pid]),
                                TPUJOB_PEAK_TFLOPS_PER_DEVICE=PEAK_TFLOPS, JAX_LOG_COMPILES="1")
        env["PYTHONPATH"] = str(root)
        procs.append(subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "tpujob_trainer.cli", "--config",
             str(config), f"output={output}", "metrics.port=0", "metrics.log_every=1"],
            env=env, cwd=config.parent, stdout=logs[pid][0], stderr=logs[pid][1]))
    try:
        for p in procs:
            p.wait(timeout=max(1.0, t0 + timeout - time.time()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    end = time.time()
    outs = []
    for out, err in logs:
        out.seek(0)
        err.seek(0)
        outs.append((out.read(), err.read()))
        out.close()
        err.close()
    for p, (_, err) in zip(procs, outs, strict=True):
        if p.returncode != 0:
            raise SystemExit(f"trainer failed ({p.returncode}): {err[-3000:]}")
    stdout, stderr = outs[0]
    events = helpers.parse_events(stdout)
    by = {e["event"]: e for e in reversed(events)}
    first_step = next(e for e in events if e["event"] == "step" and e["step"] == 1)
    init = next(e for e in events if e["event"] == "memory" and e["phase"] == "after_init")
    seconds = json.loads(term[0].read_text())["goodput"]["seconds"]
    row = {
        "tpu_initialization": seconds["tpu_initialization"],
        "training_prep": seconds["training_prep"],
        "program_startup": seconds["program_startup"],
        "start -> 'start' line": by["start"]["time"] - t0,
        "'start' line -> state initialized": init["time"] - by["start"]["time"],
        "state initialized -> step compiled": by["compiled"]["time"] - init["time"],
        "step compiled -> step 1 read": first_step["time"] - by["compiled"]["time"],
        "start -> step 1 read": first_step["time"] - t0,
        "productive": seconds["productive"],
        "whole run": end - t0,
        "goodput %": 100 * seconds["productive"] / (end - t0),
        "CPU seconds, all processes": _children_cpu_s() - cpu0,
    }
    row.update({f"import {k}": v for k, v in import_times(stderr).items()})
    row.update({f"jax: {k}": v for k, v in compile_times(stderr).items()})
    return row


INIT_OPTIONS = {"default": None, "LLVM -O0": {"xla_backend_optimization_level": 0},
                "no expensive LLVM passes": {"xla_llvm_disable_expensive_passes": True}}


def init_codegen(rounds: int) -> None:
    """The jitted initial state (quickstart config, 4 CPU devices, this process) compiled with
    XLA:CPU's default code generation and with cheaper settings, alternating: compile time, CPU
    time, and whether the values are bit-identical to the default's."""
    import jax
    jax.config.update("jax_num_cpu_devices", DEVICES_PER_PROCESS)
    import numpy as np

    from tpujob_trainer.config import TrainerConfig
    from tpujob_trainer.mesh import build_mesh
    from tpujob_trainer.sharding import activate
    from tpujob_trainer.step import step_program

    cfg = TrainerConfig.from_dict({**QUICKSTART, "model": {**QUICKSTART["model"],
                                                          "remat": "none"}})
    mesh, _ = build_mesh(cfg.mesh, num_slices=1, devices=jax.devices())
    reference = None
    rows: dict[str, list[tuple[float, float, bool]]] = defaultdict(list)
    with activate(mesh):
        fns, _ = step_program(cfg, mesh, cfg.model)
        for _ in range(rounds):
            for name, options in INIT_OPTIONS.items():
                jax.clear_caches()
                lowered = fns.init.lower()
                t0, c0 = time.perf_counter(), time.process_time()
                compiled = lowered.compile(options) if options else lowered.compile()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                values = [np.asarray(x) for x in jax.tree.leaves(compiled())]
                if reference is None:
                    reference = values
                same = all(np.array_equal(a, b) for a, b in zip(reference, values, strict=True))
                rows[name].append((wall, cpu, same))
                print(f"{name}: compile {wall:.2f} s, CPU {cpu:.2f} s, same values {same}, "
                      f"load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    print("| init compiled with | compile (median) | CPU (median) | values bit-identical |\n"
          "|---|---|---|---|")
    for name, got in rows.items():
        print(f"| {name} | {statistics.median(r[0] for r in got):.2f} s | "
              f"{statistics.median(r[1] for r in got):.2f} s | {all(r[2] for r in got)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rev", help="also run this git revision's trainer, alternating")
    parser.add_argument("--trainer", type=Path,
                        help="also run the trainer/ folder at this path (a change not committed)")
    parser.add_argument("--init-codegen", action="store_true",
                        help="instead: the initial state's compile with cheaper XLA:CPU code "
                             "generation, and whether its values stay the same")
    args = parser.parse_args()
    if args.init_codegen:
        init_codegen(args.rounds)
        return
    import yaml

    from tpujob.local.session.gcs import GcsEmulator

    other = f"rev {args.rev}" if args.rev else (str(args.trainer) if args.trainer else None)
    arms = ["this checkout"] + ([other] if other else [])
    results: dict[tuple[str, int], list[dict[str, float]]] = defaultdict(list)
    loads: list[tuple[float, ...]] = [os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        roots = {"this checkout": trainer_root(None, tmp)}
        if args.rev:
            roots[other] = trainer_root(args.rev, tmp)
        elif args.trainer:
            roots[other] = args.trainer.resolve()
        config = tmp / "quickstart.yaml"
        config.write_text(yaml.safe_dump(QUICKSTART))
        emulator = GcsEmulator(tmp / "gcs")
        emulator.start()
        try:
            emulator.ensure_bucket("bench")
            n = 0
            for r in range(args.rounds):
                order = arms if r % 2 == 0 else arms[::-1]
                for processes in args.processes:
                    for arm in order:
                        n += 1
                        output = f"gs://bench/run-{n}"
                        row = start_once(roots[arm], processes, output, config, emulator.env)
                        row["load (1 min)"] = os.getloadavg()[0]
                        results[(arm, processes)].append(row)
                        print(f"round {r + 1}, {arm}, {processes} process(es): "
                              f"start -> step 1 {row['start -> step 1 read']:.2f} s, "
                              f"compile {row.get('jax: train_step compile', 0):.2f} s, "
                              f"load {row['load (1 min)']:.1f}", file=sys.stderr, flush=True)
        finally:
            emulator.stop()
    loads.append(os.getloadavg())
    report(results, arms, args.processes, loads)


def report(results, arms, process_counts, loads) -> None:
    import platform

    from tpujob_trainer.cpu import this_cpu_flags

    isa = sorted(f for f in this_cpu_flags() if f.startswith(("avx512f", "amx")))
    print(f"machine: {os.cpu_count()} cores, {platform.machine()} "
          f"({', '.join(isa) or 'no AVX-512/AMX'}), Python {platform.python_version()}; "
          f"load average (1/5/15 min) before {'/'.join(f'{x:.1f}' for x in loads[0])}, "
          f"after {'/'.join(f'{x:.1f}' for x in loads[1])}\n")
    for processes in process_counts:
        keys: list[str] = []
        for arm in arms:
            for row in results[(arm, processes)]:
                keys += [k for k in row if k not in keys]
        print(f"### {processes} process(es) x {DEVICES_PER_PROCESS} CPU devices "
              f"(process 0; median over {len(results[(arms[0], processes)])} rounds, "
              "seconds unless marked)\n")
        print("| | " + " | ".join(arms) + " |\n|---|" + "---|" * len(arms))
        for key in keys:
            cells = []
            for arm in arms:
                values = [row[key] for row in results[(arm, processes)] if key in row]
                cells.append(f"{statistics.median(values):.2f}" if values else "-")
            print(f"| {key} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main()
