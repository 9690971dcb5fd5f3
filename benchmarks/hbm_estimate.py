"""The HBM estimate (`tpujob_plan.memory`, what `tpujob plan --model` and the operator's admission
check print) against what the TPU compiler allocates for the same step, over a grid of configs.

    .venv/bin/python benchmarks/hbm_estimate.py [--limit N] [--write]

Each config is a trainer config; the estimate comes from `TrainerConfig.memory_request()` (the
one place the operator, `tpujob plan` and the trainer build it from) with the mesh and the device
HBM the compile uses; the compiled figure is `memory_analysis()` of the trainer's real step
compiled by libtpu for the slice's topology (`tpujob_trainer.aot.compile_step`): arguments +
outputs - aliased + temporaries, per device. Goal: the estimate within 10% of the compiler on
every config, and never more than 5% below it (an estimate below the compiler lets through a job
that runs out of memory after its compile). `--write` writes benchmarks/results/hbm_estimate.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "hbm_estimate.md"
GIB = 2**30

DENSE = {"vocab_size": 32000, "d_model": 1024, "n_layers": 4, "n_heads": 8, "n_kv_heads": 8,
         "head_dim": 128, "mlp_dim": 4096}
DENSE_WIDE = {"vocab_size": 32000, "d_model": 2048, "n_layers": 4, "n_heads": 16,
              "n_kv_heads": 8, "head_dim": 128, "mlp_dim": 8192}
MOE = {**DENSE, "mlp_dim": 2048,
       "moe": {"num_experts": 8, "experts_per_token": 2, "mlp_dim": 2048}}


def configs() -> list[dict]:
    out = []
    # Dense: remat x sequence on three generations, FSDP over every device.
    for (name, model), remat, (seq, batch), slice_name in itertools.product(
            [("dense-1024", DENSE), ("dense-2048", DENSE_WIDE)], ["none", "minimal", "full"],
            [(2048, 16), (8192, 8)], ["v6e-8", "v5p-8", "tpu7x-8"]):
        if name == "dense-2048" and slice_name != "v6e-8":
            continue
        out.append({"name": name, "model": model, "remat": remat, "seq": seq, "batch": batch,
                    "slice": slice_name, "ici": {"fsdp": -1}})
    # Tensor parallelism.
    for remat, slice_name in itertools.product(["minimal", "full"], ["v6e-8", "tpu7x-8"]):
        out.append({"name": "dense-2048", "model": DENSE_WIDE, "remat": remat, "seq": 4096,
                    "batch": 8, "slice": slice_name, "ici": {"fsdp": -1, "tensor": 2}})
    # Mixture of experts: FSDP, and experts over `expert`.
    for remat, ici in itertools.product(["minimal", "full"],
                                        [{"fsdp": -1}, {"fsdp": -1, "expert": 2}]):
        out.append({"name": "moe-8x2", "model": MOE, "remat": remat, "seq": 2048, "batch": 16,
                    "slice": "v6e-8", "ici": ici})
    return out


def one(c: dict) -> dict:
    from tpujob_plan.slice_plan import plan_slice
    from tpujob_trainer.aot import compile_step
    from tpujob_trainer.config.root import TrainerConfig

    cfg = TrainerConfig.from_dict({
        "model": {**c["model"], "remat": c["remat"]},
        "train": {"global_batch": c["batch"], "seq_len": c["seq"]},
        "mesh": {"ici": c["ici"]}})
    t0 = time.perf_counter()
    try:
        compiled = compile_step(cfg, c["slice"])
    except Exception as e:  # noqa: BLE001 -- a config the compiler refuses is a row too
        return {**c, "error": str(e).splitlines()[0][:200]}
    hbm = plan_slice(c["slice"]).hbm_bytes_per_device
    est = cfg.memory_request().estimate(compiled.mesh, hbm)
    return {**c, "mesh": compiled.mesh, "compiled": compiled.hbm_bytes,
            "temp": compiled.temp_bytes, "estimate": est.per_device_bytes,
            "breakdown": est.breakdown, "error_pct": 100 * (est.per_device_bytes / compiled.hbm_bytes - 1),
            "seconds": round(time.perf_counter() - t0, 1)}


def table(rows: list[dict]) -> str:
    lines = ["| model | slice | mesh | remat | batch x seq | compiled GiB | estimate GiB | error |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mesh = ",".join(f"{k}={v}" for k, v in (r.get("mesh") or r["ici"]).items() if v != 1)
        if "error" in r:
            lines.append(f"| {r['name']} | {r['slice']} | {mesh} | {r['remat']} | {r['batch']} x "
                         f"{r['seq']} | compile failed: {r['error']} | | |")
            continue
        lines.append(f"| {r['name']} | {r['slice']} | {mesh} | {r['remat']} | {r['batch']} x {r['seq']} "
                     f"| {r['compiled'] / GIB:.2f} | {r['estimate'] / GIB:.2f} | {r['error_pct']:+.1f}% |")
    ok = [r for r in rows if "error" not in r]
    if ok:
        worst = max(ok, key=lambda r: abs(r["error_pct"]))
        below = min(r["error_pct"] for r in ok)
        within = sum(abs(r["error_pct"]) <= 10 for r in ok)
        lines.append("")
        lines.append(f"{len(ok)} configs compiled; within 10%: {within}; worst {worst['error_pct']:+.1f}% "
                     f"({worst['name']} {worst['slice']} remat {worst['remat']}); lowest {below:+.1f}% "
                     f"(goal: never below -5%).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=int, help="only the first N configs")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(REPO)}")
    args = p.parse_args(argv)
    rows = []
    for c in configs()[:args.limit]:
        rows.append(one(c))
        print(table(rows[-1:]).splitlines()[2], flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    text = table(rows)
    print(text)
    if args.write:
        head = RESULTS.read_text().split("<!-- table -->")[0] if RESULTS.exists() else ""
        RESULTS.write_text(head + "<!-- table -->\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
