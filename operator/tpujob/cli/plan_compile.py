"""`tpujob plan --compile`: the trainer's step compiled for each planned slice by the TPU compiler
(libtpu, no TPU needed), beside the estimate. Each compile runs in its own process
(`python -m tpujob_trainer.aot`), which needs the trainer and the compile extras:
`pip install 'tpujob[trainer,compile]'`. What the compiler said is kept in `tpu-compile/` in
tpujob's cache (`$TPUJOB_TPU_COMPILE_CACHE_DIR` where set; `tpujob_trainer.aot_cache`): the same
step planned again for the same slice is answered in seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from tpujob.local.cache import cache_root
from tpujob.planning import PlanRequest, SliceResult
from tpujob_trainer import aot_cache

GIB = 2**30
# ModelShape field -> the trainer config's model key (MoE fields under model.moe).
_MOE_KEYS = {"num_experts": "num_experts", "experts_per_token": "experts_per_token",
             "num_shared_experts": "num_shared_experts", "moe_mlp_dim": "mlp_dim",
             "moe_every": "every", "first_dense_layers": "first_dense_layers"}


def trainer_config(result: SliceResult, request: PlanRequest, model_file: str | None) -> dict:
    """The trainer config the job would run with on this slice: the model (from the file, or
    the preset's shape), the remat the estimate chose, the batch, sequence and mesh planned."""
    assert result.plan is not None and result.memory is not None and result.model is not None
    model = result.model
    section: dict[str, Any] = {}
    optimizer: dict[str, Any] = {"kind": model.optimizer}
    if model_file is not None and Path(model_file).is_file():
        doc = yaml.safe_load(Path(model_file).read_text()) or {}
        section = dict(doc.get("model", doc))
        if isinstance(doc.get("optimizer"), dict):
            optimizer = {**doc["optimizer"], "kind": model.optimizer}
    else:
        shape = asdict(model.shape)
        moe = {_MOE_KEYS[k]: shape.pop(k) for k in list(_MOE_KEYS)}
        section = shape | ({"moe": moe} if moe["num_experts"] else {})
    mesh = result.mesh
    ici = mesh.ici if mesh is not None and mesh.valid else {"fsdp": -1}
    dcn = mesh.dcn if mesh is not None and mesh.valid and result.plan.slices > 1 else \
        ({"data": -1} if result.plan.slices > 1 else {})
    return {"model": section | {"remat": result.memory.remat},
            "train": {"global_batch": model.global_batch or result.plan.devices,
                      "seq_len": model.seq_len, "grad_accum": model.grad_accum},
            "optimizer": optimizer, "mesh": {"ici": ici, "dcn": dcn}}


def compile_one(result: SliceResult, request: PlanRequest, model_file: str | None,
                python: str = sys.executable) -> dict:
    """Compile for one slice in a child process; its JSON (the compiler's figures, or an
    `error`)."""
    assert result.plan is not None
    config = trainer_config(result, request, model_file)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(config, f)
        path = f.name
    try:
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        env.setdefault(aot_cache.ENV, str(cache_root() / "tpu-compile"))
        proc = subprocess.run(
            [python, "-m", "tpujob_trainer.aot", "--slice", result.plan.slice_type.name,
             "--slices", str(result.plan.slices), "--config", path, "--json"],
            capture_output=True, text=True, env=env, check=False)
    finally:
        os.unlink(path)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if lines:
        return json.loads(lines[-1])
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    if "No module named" in proc.stderr:
        tail = "the trainer is not installed here: pip install 'tpujob[trainer,compile]'"
    return {"error": f"the compile did not run (exit {proc.returncode}): {tail}"}


def size(n: float) -> str:
    """Bytes as GiB with two decimals, or MiB below a tenth of a GiB."""
    return f"{n / GIB:.2f} GiB" if n >= GIB / 10 else f"{n / 2**20:.1f} MiB"


def compiled_fits(result: SliceResult, compiled: dict) -> bool:
    """The compiled step's HBM is within the device's usable HBM."""
    usable = result.memory.usable_bytes if result.memory is not None else None
    return "error" not in compiled and (not usable or compiled["hbm_bytes"] <= usable)


def compile_lines(result: SliceResult, compiled: dict) -> list[str]:
    """The compiler's figures, under the estimate's lines of `tpujob plan`."""
    if "error" in compiled:
        return [f"  compiled        FAILED: {compiled['error']}"]
    assert result.memory is not None
    estimate = result.memory.per_device_bytes
    hbm = compiled["hbm_bytes"]
    verdict = "fits" if compiled_fits(result, compiled) else "DOES NOT FIT"
    cost = (f"{compiled['optimal_seconds'] * 1e3:.1f} ms/step" if compiled["optimal_seconds"]
            else compiled["cost_model_note"])
    return [
        f"  compiled        {size(hbm)}/device by the TPU compiler ({verdict}; the estimate "
        f"{size(estimate)} is {(estimate - hbm) / hbm:+.0%} off): arguments "
        f"{size(compiled['argument_bytes'])}, temporaries {size(compiled['temp_bytes'])}",
        f"  compiled step   {compiled['flops'] / 1e12:.2f} TFLOP and {compiled['bytes_accessed'] / 1e9:.1f} GB "
        f"accessed per device; cost model: {cost}; compiled in {compiled['compile_s']:.0f} s"
        + (" (answered from the compile cache)" if compiled.get("cached") else ""),
    ]


def compilable(r: SliceResult) -> bool:
    """A slice whose step can be compiled: planned, with a model, a valid mesh and a batch that
    splits. The estimate's verdict does not matter: the compiler's replaces it."""
    return (r.ok and r.memory is not None and (r.mesh is None or r.mesh.valid)
            and r.batch_error is None)


def exit_status(results: list[SliceResult], compiled: dict[str, dict]) -> int:
    """`tpujob plan`'s exit status: 1 for an invalid slice name; 2 for a mesh, a batch or a model
    that does not fit, by the compiler where the step was compiled (a failed compile counts as
    not fitting), else by the estimate; 0 when all is well."""
    if any(not r.ok for r in results):
        return 1
    for r in results:
        c = compiled.get(r.requested)
        if c is None and not r.fits:
            return 2
        if c is not None and not compiled_fits(r, c):
            return 2
    return 0


def compile_all(results: list[SliceResult], request: PlanRequest,
                model_file: str | None) -> dict[str, dict]:
    """Compile for every compilable slice (`compilable`); by requested name."""
    out = {}
    for r in results:
        if compilable(r):
            print(f"compiling the step for {r.plan.slice_type.name} with the TPU compiler ...",
                  file=sys.stderr, flush=True)
            out[r.requested] = compile_one(r, request, model_file)
    return out
