"""tpujob's trainer and MaxText compiled for TPU slices by the TPU compiler, side by side, on
the same model, in the same run, without a TPU.

    .venv/bin/python benchmarks/tpu_compile.py [--row NAME ...] [--json FILE] [--write]
    .venv/bin/python benchmarks/tpu_compile.py --from-json FILE [FILE ...] [--write]

Both sides compile their real train step with libtpu's compiler for a TPU topology from
`jax.experimental.topologies.get_topology_desc` (libtpu 0.0.42.*, the version JAX 0.10.2 pairs
with): tpujob with `python -m tpujob_trainer.aot` (the code `tpujob plan --compile` runs),
MaxText with its own `maxtext.trainers.pre_train.train_compile` entry point, unchanged, from
its environment (`tools/maxtext_env.py`, with libtpu added beside it on PYTHONPATH, cached
outside the repository), which prints the compiled step's cost and memory analysis.

Per device, from `compiled.memory_analysis()` and `compiled.cost_analysis()`: HBM (arguments +
outputs - aliased + temporaries) and its parts, FLOPs, bytes accessed, and the cost model's
time where it is positive (libtpu returns a negative time for most of these programs). Both
sides scan their layers (MaxText's default, tpujob's default): the cost analysis counts a
loop's body once, on both sides alike, so FLOPs and bytes compare as they stand.

Same model on both sides: Llama-style decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU),
untied output layer, bf16 compute, f32 weights, AdamW, remat full, FSDP over every device (DCN
data parallelism across slices). `--write` writes benchmarks/results/tpu_compile.md.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "benchmarks" / "results" / "tpu_compile.md"
LIBTPU = "0.0.42.1"
GIB = 2**30

MODELS = {
    # The 1.14B dense model: d_model 2048, 16 layers, 16/8 heads of 128, MLP 8192, vocab 32000.
    "decoder-1b": dict(vocab_size=32000, d_model=2048, n_layers=16, n_heads=16, n_kv_heads=8,
                       head_dim=128, mlp_dim=8192),
    # Llama 3 8B's layer (d_model 4096, 32/8 heads of 128, MLP 14336, vocab 128256), 4 of its
    # 32 layers: compare per layer.
    "llama3-8b-4l": dict(vocab_size=128256, d_model=4096, n_layers=4, n_heads=32, n_kv_heads=8,
                         head_dim=128, mlp_dim=14336),
    # Mixtral's layer shape scaled to d_model 2048 (8 experts, top 2, expert MLP 8192, 16/8 heads
    # of 128, vocab 32000), 4 layers, every layer MoE. MaxText: decoder_block mixtral, dropless
    # routing by its megablox grouped-matmul kernel (its TPU default); tpujob: capacity-based
    # routing (capacity factor 1.25, tokens over capacity dropped).
    "mixtral-2048-4l": dict(vocab_size=32000, d_model=2048, n_layers=4, n_heads=16, n_kv_heads=8,
                            head_dim=128, mlp_dim=8192,
                            moe=dict(num_experts=8, experts_per_token=2, mlp_dim=8192)),
    # DeepSeek's fine-grained routing (DeepSeek-V2-Lite's shape: d_model 2048, 64 routed experts
    # of MLP 1408, top 6, 16 heads of 128, vocab 102400), 4 layers, every layer MoE. Attention is
    # grouped-query on both sides (MaxText's DeepSeek block brings multi-head latent attention,
    # which tpujob does not build) and there are no shared experts (MaxText's mixtral block,
    # the one without MLA, has none): the routed experts compared alone.
    "deepseek-moe-4l": dict(vocab_size=102400, d_model=2048, n_layers=4, n_heads=16,
                            n_kv_heads=16, head_dim=128, mlp_dim=1408,
                            moe=dict(num_experts=64, experts_per_token=6, mlp_dim=1408)),
}
# The same with tpujob's dropless routing (`model.moe.routing: dropless`: the megablox grouped
# matmul, as MaxText's), MaxText's side unchanged.
MODELS["deepseek-moe-4l-dropless"] = MODELS["deepseek-moe-4l"] | {
    "moe": MODELS["deepseek-moe-4l"]["moe"] | {"routing": "dropless"}}

# name: (model, slice, slices, global batch, seq)
ROWS = {
    "1b-v6e8-s2048": ("decoder-1b", "v6e-8", 1, 32, 2048),
    "1b-v6e8-s8192": ("decoder-1b", "v6e-8", 1, 8, 8192),
    "1b-v5p8-s2048": ("decoder-1b", "v5p-8", 1, 32, 2048),
    "1b-tpu7x8-s2048": ("decoder-1b", "tpu7x-8", 1, 32, 2048),
    "1b-2xv6e8-s2048": ("decoder-1b", "v6e-8", 2, 64, 2048),
    "8b4l-v6e8-s8192": ("llama3-8b-4l", "v6e-8", 1, 8, 8192),
    "moe-v6e8-s2048": ("mixtral-2048-4l", "v6e-8", 1, 32, 2048),
    "dsmoe-v6e8-s4096": ("deepseek-moe-4l", "v6e-8", 1, 16, 4096),
    "dsmoe-tpu7x8-s4096": ("deepseek-moe-4l", "tpu7x-8", 1, 16, 4096),
    "dsmoe-dropless-v6e8-s4096": ("deepseek-moe-4l-dropless", "v6e-8", 1, 16, 4096),
}


def load1() -> float:
    return os.getloadavg()[0]


def libtpu_overlay(python: str) -> Path:
    """libtpu installed for MaxText's Python into a cached directory (PYTHONPATH overlay)."""
    from tpujob.local.cache import cache_root, locked

    out = cache_root() / f"libtpu-{LIBTPU}-py312"
    with locked(out.with_suffix(".lock")):
        if not (out / "libtpu").is_dir():
            subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
                            str(out), f"libtpu=={LIBTPU}"], check=True)
    return out


def trainer_compile(model: dict, slice_name: str, slices: int, batch: int, seq: int) -> dict:
    config = {"model": model | {"remat": "full", "dtype": "bfloat16", "param_dtype": "float32"},
              "train": {"global_batch": batch, "seq_len": seq},
              "mesh": {"ici": {"fsdp": -1}, "dcn": {"data": -1} if slices > 1 else {}}}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(config, f)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tpujob_trainer.aot", "--slice", slice_name, "--slices",
             str(slices), "--config", f.name, "--json"], capture_output=True, text=True,
            env={**os.environ, "JAX_PLATFORMS": "cpu"}, check=False)
    finally:
        os.unlink(f.name)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"tpujob compile failed: {proc.stderr[-2000:]}")
    d = json.loads(lines[-1])
    if "error" in d:
        raise RuntimeError(d["error"])
    return d


def maxtext_compile(model: dict, slice_name: str, slices: int, batch: int, seq: int) -> dict:
    from tools.maxtext_env import base_yml, ensure, run_env

    python = ensure()["python"]
    overlay = libtpu_overlay(python)
    devices = _devices(slice_name) * slices
    argv = [python, "-m", "maxtext.trainers.pre_train.train_compile", base_yml(),
            f"compile_topology={slice_name}", f"compile_topology_num_slices={slices}",
            f"base_emb_dim={model['d_model']}", f"base_num_decoder_layers={model['n_layers']}",
            f"base_num_query_heads={model['n_heads']}", f"base_num_kv_heads={model['n_kv_heads']}",
            f"head_dim={model['head_dim']}", f"base_mlp_dim={model['mlp_dim']}",
            f"vocab_size={model['vocab_size']}", f"max_target_length={seq}",
            *_maxtext_moe(model),
            f"per_device_batch_size={batch / devices:g}", "ici_fsdp_parallelism=-1",
            *(["dcn_data_parallelism=-1"] if slices > 1 else []),
            "remat_policy=full", "dtype=bfloat16", "weight_dtype=float32", "scan_layers=true",
            "dataset_type=synthetic", "enable_checkpointing=false", "run_name=tpu_compile"]
    env = run_env()
    env["PYTHONPATH"] = str(overlay)
    env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"  # compiles beside others (no TPU to guard)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False,
                          cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t0
    cost = re.search(r"^Cost analysis: (\{.*\})$", proc.stdout, re.M)
    mem = re.search(r"^Memory analysis: CompiledMemoryStats\((.*)\)$", proc.stdout, re.M)
    if not (cost and mem):
        raise RuntimeError(f"MaxText compile failed: {(proc.stdout + proc.stderr)[-3000:]}")
    c = ast.literal_eval(cost.group(1))
    m = dict(kv.split("=") for kv in mem.group(1).split(", "))
    t = c.get("optimal_seconds")
    out = {"argument_bytes": int(m["argument_size_in_bytes"]),
           "output_bytes": int(m["output_size_in_bytes"]),
           "alias_bytes": int(m["alias_size_in_bytes"]), "temp_bytes": int(m["temp_size_in_bytes"]),
           "flops": float(c.get("flops", 0)), "bytes_accessed": float(c.get("bytes accessed", 0)),
           "optimal_seconds": t if t is not None and t > 0 else None, "compile_s": round(wall, 1)}
    out["hbm_bytes"] = (out["argument_bytes"] + out["output_bytes"] - out["alias_bytes"]
                        + out["temp_bytes"])
    return out


def _maxtext_moe(model: dict) -> list[str]:
    moe = model.get("moe")
    if not moe:
        return []
    return ["decoder_block=mixtral", f"num_experts={moe['num_experts']}",
            f"num_experts_per_tok={moe['experts_per_token']}",
            f"base_moe_mlp_dim={moe['mlp_dim']}"]


def _devices(slice_name: str) -> int:
    from tpujob_plan.slice_plan import plan_slice

    return plan_slice(slice_name).slice_type.devices


def one_row(name: str) -> dict:
    model_name, slice_name, slices, batch, seq = ROWS[name]
    model = MODELS[model_name]
    row = {"row": name, "model": model_name, "slice": slice_name, "slices": slices,
           "batch": batch, "seq": seq}
    row["load_before"] = round(load1(), 2)
    row["maxtext"] = maxtext_compile(model, slice_name, slices, batch, seq)
    row["tpujob"] = trainer_compile(model, slice_name, slices, batch, seq)
    row["load_after"] = round(load1(), 2)
    return row


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def estimate_gib(r: dict) -> float:
    """`tpujob plan`'s HBM estimate (`TrainerConfig.memory_request()`) for the row, per device,
    on the mesh and generation the row compiled for."""
    from tpujob_trainer.config.root import TrainerConfig

    model = MODELS[r["model"]] | {"remat": "full", "dtype": "bfloat16", "param_dtype": "float32"}
    cfg = TrainerConfig.from_dict({"model": model, "train": {"global_batch": r["batch"],
                                                             "seq_len": r["seq"]}})
    devices = _devices(r["slice"])
    mesh = {"fsdp": devices, "data": r["slices"]}
    est = cfg.memory_request().estimate(mesh, None, r["slice"].split("-")[0])
    return est.per_device_bytes / GIB


def table(rows: list[dict]) -> str:
    head = ("| model | slice | batch x seq | HBM MaxText | HBM tpujob | ratio (goal <= 0.95) "
            "| temporaries MaxText / tpujob | bytes accessed MaxText / tpujob (ratio, goal <= 1) "
            "| FLOPs MaxText / tpujob | cost model (s) MaxText / tpujob | compile s MaxText / tpujob "
            "| tpujob plan's estimate (vs compiled) |")
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        m, t = r["maxtext"], r["tpujob"]
        slices = f"{r['slices']} x {r['slice']}" if r["slices"] > 1 else r["slice"]

        est = estimate_gib(r)

        def cm(d):
            return f"{d['optimal_seconds']:.4f}" if d.get("optimal_seconds") else "invalid"
        lines.append(
            f"| {r['model']} | {slices} | {r['batch']} x {r['seq']} | {m['hbm_bytes'] / GIB:.2f} GiB "
            f"| {t['hbm_bytes'] / GIB:.2f} GiB | {_ratio(t['hbm_bytes'], m['hbm_bytes'])} "
            f"| {m['temp_bytes'] / GIB:.2f} / {t['temp_bytes'] / GIB:.2f} GiB "
            f"| {m['bytes_accessed'] / 1e9:.1f} / {t['bytes_accessed'] / 1e9:.1f} GB "
            f"({_ratio(t['bytes_accessed'], m['bytes_accessed'])}) "
            f"| {m['flops'] / 1e12:.2f} / {t['flops'] / 1e12:.2f} T | {cm(m)} / {cm(t)} "
            f"| {m['compile_s']:.0f} / {t['compile_s']:.0f} "
            f"| {est:.2f} GiB ({est * GIB / t['hbm_bytes'] - 1:+.0%}) |")
    return "\n".join(lines)


def replace_table(page: str, text: str) -> str:
    """The page with the table after its `<!-- table -->` mark replaced by `text`, the prose
    before and after it kept."""
    head, _, rest = page.partition("<!-- table -->\n")
    lines = rest.splitlines(keepends=True)
    end = next((i for i, line in enumerate(lines) if not line.startswith("|")), len(lines))
    return head + "<!-- table -->\n" + text + "\n" + "".join(lines[end:])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--row", action="append", choices=list(ROWS), help="rows to run (default all)")
    p.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(REPO)}")
    p.add_argument("--json", help="also write the raw rows to this file")
    p.add_argument("--from-json", nargs="+", metavar="FILE",
                   help="compile nothing: the table of rows saved by --json (a row in a later "
                        "file replaces the same row in an earlier one), in ROWS order")
    args = p.parse_args(argv)
    rows = []
    if args.from_json:
        saved = {r["row"]: r for f in args.from_json for r in json.loads(Path(f).read_text())}
        rows = [saved[name] for name in ROWS if name in saved]
    for name in [] if args.from_json else args.row or list(ROWS):
        print(f"compiling {name} ...", file=sys.stderr, flush=True)
        rows.append(one_row(name))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    text = table(rows)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.write:
        RESULTS.write_text(replace_table(RESULTS.read_text(), text) if RESULTS.exists()
                           else text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
