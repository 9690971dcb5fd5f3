"""The HBM estimate (`tpujob_plan.memory`, what `tpujob plan --model` and the operator's admission
check print) against what the TPU compiler allocates for the same step, over a grid of configs.

    .venv/bin/python benchmarks/hbm_estimate.py [--compile missing|all] [--only SUBSTR] [--write]

Each config is a trainer config; the estimate comes from `TrainerConfig.memory_request()` (the
one place the operator, `tpujob plan` and the trainer build it from) with the mesh and the device
HBM the compile used; the compiled figure is `memory_analysis()` of the trainer's real step
compiled by libtpu for the slice's topology (`tpujob_trainer.aot.compile_step`): arguments +
outputs - aliased + temporaries, per device.

Compiling takes one to two minutes per config on two cores, so the compiler's figures are kept
in benchmarks/results/hbm_compiled.json (with the largest allocations of XLA's memory-usage
report, `--xla_dump_to`, to read where the bytes go) and reused: by default only configs not yet
in that file are compiled (`--compile all` recompiles every one; `--compile none` compiles
nothing), and the estimate, which is arithmetic, is always recomputed from the current code.
Each compile runs in its own process (its own dump folder).

Configs are in three sets: `fit`, the grid the estimate's terms were read from; `held-out`,
configs not looked at while fitting (another depth, width, batch/sequence, mesh), reported
separately; `refit`, a held-out config whose compiled buffers were then used to correct a term. Goal: the estimate within 10% of the compiler on every config, and never
more than 5% below it (an estimate below the compiler lets through a job that runs out of memory
after its compile). `--write` writes benchmarks/results/hbm_estimate.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "hbm_estimate.md"
COMPILED = REPO / "benchmarks" / "results" / "hbm_compiled.json"
GIB = 2**30
AXES = ("data", "fsdp", "context", "tensor", "expert")

DENSE = {"vocab_size": 32000, "d_model": 1024, "n_layers": 4, "n_heads": 8, "n_kv_heads": 8,
         "head_dim": 128, "mlp_dim": 4096}
DENSE_WIDE = {"vocab_size": 32000, "d_model": 2048, "n_layers": 4, "n_heads": 16,
              "n_kv_heads": 8, "head_dim": 128, "mlp_dim": 8192}
MOE = {**DENSE, "mlp_dim": 2048,
       "moe": {"num_experts": 8, "experts_per_token": 2, "mlp_dim": 2048}}
# Held out: shapes not used while fitting.
DENSE_8L = {**DENSE, "n_layers": 8}
DENSE_1536 = {"vocab_size": 50304, "d_model": 1536, "n_layers": 6, "n_heads": 12, "n_kv_heads": 4,
              "head_dim": 128, "mlp_dim": 6144}


def configs() -> list[dict]:
    out = []

    def add(name, model, remat, seq, batch, slice_name, ici, split="fit"):
        out.append({"name": name, "model": model, "remat": remat, "seq": seq, "batch": batch,
                    "slice": slice_name, "ici": ici, "set": split})

    # Dense: remat x sequence on three generations, FSDP over every device.
    for (name, model), remat, (seq, batch), slice_name in itertools.product(
            [("dense-1024", DENSE), ("dense-2048", DENSE_WIDE)], ["none", "minimal", "full"],
            [(2048, 16), (8192, 8)], ["v6e-8", "v5p-8", "tpu7x-8"]):
        if name == "dense-2048" and slice_name != "v6e-8":
            continue
        add(name, model, remat, seq, batch, slice_name, {"fsdp": -1})
    # Tensor parallelism.
    for remat, slice_name in itertools.product(["minimal", "full"], ["v6e-8", "tpu7x-8"]):
        add("dense-2048", DENSE_WIDE, remat, 4096, 8, slice_name, {"fsdp": -1, "tensor": 2})
    # Mixture of experts: FSDP, and experts over `expert`.
    for remat, ici in itertools.product(["minimal", "full"],
                                        [{"fsdp": -1}, {"fsdp": -1, "expert": 2}]):
        add("moe-8x2", MOE, remat, 2048, 16, "v6e-8", ici)
    # Held out.
    add("dense-1024-8l", DENSE_8L, "minimal", 2048, 16, "v6e-8", {"fsdp": -1}, "held-out")
    add("dense-1024-8l", DENSE_8L, "full", 4096, 8, "tpu7x-8", {"fsdp": -1}, "held-out")
    add("dense-1536", DENSE_1536, "none", 4096, 8, "v6e-8", {"fsdp": -1}, "held-out")
    add("dense-1536", DENSE_1536, "full", 4096, 16, "v5p-8", {"fsdp": -1}, "held-out")
    add("dense-1024", DENSE, "full", 4096, 32, "v6e-8", {"fsdp": -1}, "held-out")
    # Held out, then used: its buffers showed two MoE residuals the count lacked.
    add("moe-8x2", MOE, "none", 2048, 16, "v6e-8", {"fsdp": -1}, "refit")
    add("moe-8x2", MOE, "full", 2048, 16, "tpu7x-8", {"fsdp": -1, "expert": 2}, "held-out")
    add("dense-2048", DENSE_WIDE, "none", 4096, 8, "v5p-8", {"fsdp": -1, "tensor": 2}, "held-out")
    return out


def key(c: dict) -> str:
    ici = ",".join(f"{k}={v}" for k, v in c["ici"].items())
    model = json.dumps(c["model"], sort_keys=True)
    return f"{c['name']}|{model}|{c['slice']}|{ici}|{c['remat']}|{c['batch']}x{c['seq']}"


def trainer_config(c: dict):
    from tpujob_trainer.config.root import TrainerConfig

    return TrainerConfig.from_dict({
        "model": {**c["model"], "remat": c["remat"]},
        "train": {"global_batch": c["batch"], "seq_len": c["seq"]},
        "mesh": {"ici": c["ici"]}})


_ROW = re.compile(r"^\s*[\d.]+\w+\(\s*\d+%\);\s*([\d.]+)(\w+);\s*\d+;\s*\d+;\s*(.*)$")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def report_allocations(text: str, top: int = 40) -> list[list]:
    """The largest allocations of the default memory space in XLA's memory-usage report, as
    [bytes, the values that share it]."""
    block = text.split("\n\n")[0]
    rows = []
    for line in block.splitlines():
        m = _ROW.match(line)
        if m:
            rows.append([int(float(m.group(1)) * _UNITS[m.group(2)]), m.group(3).strip()])
    return rows[:top]


_PEAK = re.compile(r"^\s*Stack trace breakdown for peak usage: ([\d ]+) bytes")
_SOURCE = re.compile(r"^ {6}[├└]── (.*) \([\d.]+%, total: ([\d ]+) bytes")


def peak_sources(text: str, top: int = 25) -> dict:
    """The moment of the step's peak from XLA's live-range dump: the bytes live then (arguments
    too) and, by the JAX operation or state leaf that made them, the largest of those values:
    what the estimate's terms are read against."""
    peak, sources = None, []
    for line in text.splitlines():
        m = _PEAK.match(line)
        if m:
            peak = int(m.group(1).replace(" ", ""))
        elif peak is not None:
            m = _SOURCE.match(line)
            if m:
                sources.append([int(m.group(2).replace(" ", "")), m.group(1)])
    sources.sort(key=lambda s: -s[0])
    return {"peak_live_bytes": peak, "peak_sources": sources[:top]} if peak else {}


def compile_here(c: dict) -> dict:
    """Compile one config in this process (XLA_FLAGS set by the caller) and read its figures."""
    from tpujob_trainer.aot import compile_step

    try:
        compiled = compile_step(trainer_config(c), c["slice"])
    except Exception as e:  # noqa: BLE001 -- a config the compiler refuses is a row too
        return {"error": str(e).splitlines()[0][:200]}
    return {"mesh": compiled.mesh, "device_kind": compiled.device_kind,
            "argument_bytes": compiled.argument_bytes, "output_bytes": compiled.output_bytes,
            "alias_bytes": compiled.alias_bytes, "temp_bytes": compiled.temp_bytes,
            "hbm_bytes": compiled.hbm_bytes, "compile_s": compiled.compile_s}


def compile_in_subprocess(c: dict) -> dict:
    from importlib.metadata import version

    with tempfile.TemporaryDirectory() as dump:
        env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={dump}", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
        proc = subprocess.run([sys.executable, __file__, "--compile-one", json.dumps(c)], env=env,
                              capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode or not lines:
            if proc.returncode < 0:
                return {"error": f"the compile process died of signal {-proc.returncode} "
                                 "(twice in a row here)"}
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:160]
            return {"error": f"the compile process exited {proc.returncode}: {last}"}
        result = json.loads(lines[-1])
        reports = sorted(Path(dump).glob("*train_step*after_optimizations-memory-usage-report.txt"))
        if reports:
            text = reports[-1].read_text()
            total = re.search(r"Total bytes: (\d+)", text)
            result["report_total_bytes"] = int(total.group(1)) if total else None
            result["allocations"] = report_allocations(text)
        live = sorted(Path(dump).glob("*train_step*after_optimizations-live-range.txt"))
        if live:
            result.update(peak_sources(live[-1].read_text()))
    result["libtpu"] = version("libtpu")
    return result


def load_compiled() -> dict[str, dict]:
    return json.loads(COMPILED.read_text()) if COMPILED.exists() else {}


def save_compiled(store: dict[str, dict]) -> None:
    COMPILED.write_text(json.dumps(store, indent=1, sort_keys=True) + "\n")


def row(c: dict, compiled: dict | None) -> dict:
    from tpujob_plan.slice_plan import plan_slice

    if compiled is None:
        return {**c, "error": "not compiled (run with --compile missing)"}
    if "error" in compiled:
        return {**c, "error": compiled["error"]}
    plan = plan_slice(c["slice"])
    est = trainer_config(c).memory_request().estimate(compiled["mesh"], plan.hbm_bytes_per_device,
                                                      plan.generation.prefix)
    return {**c, "mesh": compiled["mesh"], "compiled": compiled["hbm_bytes"],
            "estimate": est.per_device_bytes, "breakdown": est.breakdown,
            "error_pct": 100 * (est.per_device_bytes / compiled["hbm_bytes"] - 1),
            "rounded": "source" in compiled}


def summary(rows: list[dict]) -> str:
    ok = [r for r in rows if "error" not in r]
    if not ok:
        return "no config compiled"
    worst = max(ok, key=lambda r: abs(r["error_pct"]))
    low = min(r["error_pct"] for r in ok)
    high = max(r["error_pct"] for r in ok)
    within = sum(abs(r["error_pct"]) <= 10 for r in ok)
    below = sum(r["error_pct"] < -5 for r in ok)
    return (f"{len(ok)} configs; within 10%: {within}; from {low:+.1f}% to {high:+.1f}%; more than 5% "
            f"below the compiler: {below}; worst {worst['error_pct']:+.1f}% ({worst['name']} "
            f"{worst['slice']} remat {worst['remat']})")


def table(rows: list[dict]) -> str:
    lines = ["| set | model | slice | mesh | remat | batch x seq | compiled GiB | estimate GiB | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        axes = r.get("mesh") or r["ici"]
        mesh = ",".join(f"{k}={axes[k]}" for k in AXES if k in axes and axes[k] != 1)
        head = f"| {r['set']} | {r['name']} | {r['slice']} | {mesh} | {r['remat']} | {r['batch']} x {r['seq']} "
        if "error" in r:
            lines.append(head + f"| {r['error']} | | |")
        else:
            mark = "*" if r.get("rounded") else ""
            lines.append(head + f"| {r['compiled'] / GIB:.2f}{mark} | {r['estimate'] / GIB:.2f} "
                         f"| {r['error_pct']:+.1f}% |")
    lines.append("")
    if any(r.get("rounded") for r in rows):
        lines.append("\\* compiled by the same trainer code and libtpu in an earlier run of this "
                     "benchmark, kept to 2 decimals (GiB) without the buffer report; "
                     "`--compile all` compiles them again.")
        lines.append("")
    for split in ("fit", "refit", "held-out"):
        lines.append(f"- {split}: {summary([r for r in rows if r['set'] == split])}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--compile", choices=["none", "missing", "all"], default="missing",
                   help="which configs to compile (default: those not in the results file)")
    p.add_argument("--only", action="append", default=[],
                   help="only configs whose set|key contains this (repeatable: all of them)")
    p.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(REPO)}")
    p.add_argument("--compile-one", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.compile_one:
        print(json.dumps(compile_here(json.loads(args.compile_one))), flush=True)
        return 0
    store = load_compiled()
    rows = []
    for c in configs():
        k = key(c)
        if not all(part in f"{c['set']}|{k}" for part in args.only):
            continue
        if args.compile == "all" or (args.compile == "missing" and k not in store):
            store[k] = compile_in_subprocess(c)
            save_compiled(store)
        rows.append(row(c, store.get(k)))
        print(table(rows[-1:]).splitlines()[2], flush=True)
    text = table(rows)
    print(text)
    if args.write:
        head = RESULTS.read_text().split("<!-- table -->")[0] if RESULTS.exists() else ""
        RESULTS.write_text(head + "<!-- table -->\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
