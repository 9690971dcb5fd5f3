"""The trainer's step compiled for a TPU slice without a TPU: the real XLA:TPU program, from
libtpu's compiler (`pip install 'tpujob[compile]'`), for the slice's topology, with what the
compiler says about it per device: HBM (arguments, outputs, aliased, temporaries), FLOPs,
bytes accessed and the cost model's time.

    python -m tpujob_trainer.aot --slice v6e-8 --config model.yaml [a.b=c ...] [--json]

The devices come from `jax.experimental.topologies.get_topology_desc` (no TPU needed); the mesh,
the shardings, the state and the step are built by the same code as in a run
(`tpujob_trainer.mesh.build_mesh`, `tpujob_trainer.step.build_step_fns`), so what compiles here
is what a job on that slice compiles. The compile runs on this machine's CPU: seconds for a
small model, a minute or more for billions of parameters.

A step whose share of one device needs more HBM than the device has is refused by the compiler
itself ("RESOURCE_EXHAUSTED: Ran out of memory on HBM"): that is `StepDoesNotFit`, with what
the compiler says it needs and what would make it smaller (exit status 2 from the command line).

The cost model's time (`optimal_seconds`) is reported only where it is positive: libtpu 0.0.42
returns a negative time for many programs (every one compiled for tpu7x here, and the larger
models on v6e and v5p, scanned or not), without saying why; see `cost_model_time`.

Nothing compiled here goes into JAX's persistent compilation cache (`JAX_COMPILATION_CACHE_DIR`):
an executable compiled without a TPU cannot be loaded back without one ("PjRtCompiler must be
constructed with a Client"), so an entry would only cost a failed read and a warning on every
later compile of the same program. What the compiler said of a program is kept instead, where
`$TPUJOB_TPU_COMPILE_CACHE_DIR` names a folder (`tpujob_trainer.aot_cache`; `tpujob plan
--compile` sets it): the same step compiled again for the same slice, by the same compiler with
the same flags, is then answered from there (`cached: True`, with the first compile's time).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from tpujob_plan.catalog import resolve_slice
from tpujob_plan.errors import PlanError
from tpujob_trainer import aot_cache
from tpujob_trainer.config.root import ConfigError, TrainerConfig
from tpujob_trainer.exits import TrainerExit
from tpujob_trainer.mesh import build_mesh
from tpujob_trainer.remat import device_generation, device_memory_bytes, resolve_remat
from tpujob_trainer.sharding import activate
from tpujob_trainer.step import step_program

# The topology names libtpu's compiler takes (`<name>:<topology>`), by the catalog's prefix.
TOPOLOGY_NAMES = {"v4": "v4", "v5litepod": "v5e", "v5p": "v5p", "v6e": "v6e", "tpu7x": "tpu7x"}


class CompilerUnavailable(RuntimeError):
    """libtpu (the TPU compiler) is not installed here."""


class StepDoesNotFit(RuntimeError):
    """The TPU compiler refused the step: one device's share needs more HBM than it has."""


# libtpu 0.0.42's refusal: "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory
# required for HLO temporaries (74.45G) exceeds available HBM (31.25G)."
_HBM_REFUSAL = re.compile(r"required for HLO temporaries \(([^)]+)\) exceeds available HBM "
                          r"\(([^)]+)\)")


def refusal(slice_name: str, message: str, remat: str) -> StepDoesNotFit | None:
    """The compile error `message` as a StepDoesNotFit, where it is the compiler's out-of-HBM
    refusal of a step compiled with `remat`; None for any other error (pure)."""
    if "RESOURCE_EXHAUSTED" not in message or "memory" not in message.lower():
        return None
    m = _HBM_REFUSAL.search(message)
    need = (f"{m.group(1)} of HBM per device where a device has {m.group(2)}" if m
            else "more HBM per device than a device has")
    first = message.strip().splitlines()[0]
    ways = ([] if remat == "full" else ["model.remat full"]) + [
        "train.grad_accum (micro-batches) or a smaller train.global_batch or train.seq_len",
        "a larger slice to spread the state and the batch over"]
    return StepDoesNotFit(f"the TPU compiler refuses the step for {slice_name}: it needs {need} "
                          f"({first}); make one device's share smaller: {', '.join(ways)}")


def topology_devices(slice_name: str, slices: int = 1) -> list:
    """The devices of `slices` slices of `slice_name`, as the TPU compiler sees them.

    libtpu takes a machine-wide lock file when it loads, so a second process compiling at the
    same time would fail ("Internal error when accessing libtpu multi-process lockfile"); with
    no TPU to guard, each compile here lets others load it too (ALLOW_MULTIPLE_LIBTPU_LOAD)."""
    slice_type = resolve_slice(slice_name)
    name = f"{TOPOLOGY_NAMES[slice_type.generation.prefix]}:{slice_type.topology}"
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from jax.experimental import topologies
    try:
        return list(topologies.get_topology_desc(name, "tpu", num_slices=slices).devices)
    except RuntimeError as e:
        if "Unable to initialize backend 'tpu'" in str(e) or "libtpu" in str(e).lower():
            raise CompilerUnavailable(
                "compiling for a TPU needs libtpu, the TPU compiler: "
                f"pip install 'tpujob[compile]' ({e})") from e
        raise


@dataclass(frozen=True)
class CompiledStep:
    """What the compiler says of one device's share of the step."""

    slice: str
    slices: int
    devices: int
    device_kind: str
    mesh: dict[str, int]
    remat: str
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    code_bytes: int
    flops: float
    bytes_accessed: float
    optimal_seconds: float | None   # the cost model's time; None where it is invalid
    cost_model_note: str
    compile_s: float
    cached: bool = False            # read from the TPU compile cache (`aot_cache`), not compiled now

    @property
    def hbm_bytes(self) -> int:
        """Peak HBM the program holds: arguments + outputs - donated (aliased) + temporaries."""
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hbm_bytes": self.hbm_bytes}


def cost_model_time(cost: dict[str, float]) -> tuple[float | None, str]:
    """The cost model's time when valid: XLA:TPU's cost model gives a negative time for a
    program it does not estimate (the reason is not reported)."""
    t = cost.get("optimal_seconds")
    if t is None:
        return None, "the compiler gave no cost-model time"
    if t <= 0:
        return None, f"invalid: the cost model returned {t:.3g} s (a negative time: no estimate)"
    return float(t), "valid"


# Settings the step is lowered and compiled under (each put back after).
# - JAX writes a persistent-cache entry only for a compile longer than its minimum: none.
# - Source files by name, without their folder: a Pallas kernel's Mosaic program carries its
#   source locations inside the lowered text, by default the kernel's file by its full path (in
#   the clone's own environment), so the same step lowered from another clone was another text
#   and missed the compile cache. The compiled program is the same either way.
LOWERING_SETTINGS = {"jax_persistent_cache_min_compile_time_secs": float("inf"),
                     "jax_hlo_source_file_canonicalization_regex": ".*/"}


@contextlib.contextmanager
def _lowering_settings():
    import jax

    before = {name: getattr(jax.config, name) for name in LOWERING_SETTINGS}
    try:
        for name, value in LOWERING_SETTINGS.items():
            jax.config.update(name, value)
        yield
    finally:
        for name, value in before.items():
            jax.config.update(name, value)


def _lower(cfg: TrainerConfig, slice_name: str, slices: int):
    """The step lowered for the slice (call under `_lowering_settings`): (lowered, the devices,
    the mesh plan, remat)."""
    devices = topology_devices(slice_name, slices)
    mesh, mesh_plan = build_mesh(cfg.mesh, num_slices=slices, devices=devices)
    remat = resolve_remat(cfg, mesh_plan.axes, device_memory_bytes(devices[0]),
                          device_generation(devices[0]))
    model_cfg = cfg.model.model_copy(update={"remat": remat})
    with activate(mesh):
        fns, batch = step_program(cfg, mesh, model_cfg)
        lowered = fns.step.lower(fns.abstract_state, batch)
    return lowered, devices, mesh_plan, remat


def _key(lowered, slice_name: str, slices: int, devices: list) -> str:
    import jax

    return aot_cache.current_key(lowered.as_text(), slice_name=slice_name, slices=slices,
                                 device_kind=devices[0].device_kind, config=jax.config)


def step_key(cfg: TrainerConfig, slice_name: str, slices: int = 1) -> str:
    """The compile cache's key of the step for the slice (lowers it; compiles nothing)."""
    with _lowering_settings():
        lowered, devices, _, _ = _lower(cfg, slice_name, slices)
        return _key(lowered, slice_name, slices, devices)


def compile_step(cfg: TrainerConfig, slice_name: str, slices: int = 1) -> CompiledStep:
    """Compile the step for `slices` slices of `slice_name` and read the compiler's figures;
    where `$TPUJOB_TPU_COMPILE_CACHE_DIR` names a folder, an earlier compile of the same program
    for the same slice by the same compiler answers instead (`aot_cache`)."""
    shown = slice_name if slices == 1 else f"{slices} x {slice_name}"
    t0 = time.perf_counter()
    with _lowering_settings():
        lowered, devices, mesh_plan, remat = _lower(cfg, slice_name, slices)
        folder = aot_cache.directory()
        name = _key(lowered, slice_name, slices, devices) if folder else ""
        entry = aot_cache.read(folder, name) if folder else None
        if entry is None:
            entry = _compile(lowered, shown, remat, t0)
            if folder:
                aot_cache.write(folder, name, **entry)
            cached = False
        else:
            cached = True
    if "refused" in entry:
        refused = refusal(shown, entry["refused"], remat)
        assert refused is not None
        raise refused
    return CompiledStep(slice=slice_name, slices=slices, devices=len(devices),
                        device_kind=devices[0].device_kind, mesh=dict(mesh_plan.axes),
                        remat=remat, **entry["result"], cached=cached)


def _compile(lowered, shown: str, remat: str, t0: float) -> dict:
    """{"result": the compiler's figures} or {"refused": its out-of-HBM message}; any other
    compile error is raised."""
    import jax

    try:
        compiled = lowered.compile()
    except jax.errors.JaxRuntimeError as e:
        if refusal(shown, str(e), remat) is None:
            raise
        return {"refused": str(e)}
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    optimal, note = cost_model_time(cost)
    return {"result": dict(
        argument_bytes=mem.argument_size_in_bytes, output_bytes=mem.output_size_in_bytes,
        alias_bytes=mem.alias_size_in_bytes, temp_bytes=mem.temp_size_in_bytes,
        code_bytes=mem.generated_code_size_in_bytes,
        flops=float(cost.get("flops", 0.0)), bytes_accessed=float(cost.get("bytes accessed", 0.0)),
        optimal_seconds=optimal, cost_model_note=note, compile_s=round(compile_s, 2))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tpujob_trainer.aot", description=__doc__.split("\n\n")[0])
    p.add_argument("--slice", required=True, help="slice name, e.g. v6e-8, tpu7x-64")
    p.add_argument("--slices", type=int, default=1, help="number of slices (multi-slice)")
    p.add_argument("--config", help="trainer config (YAML); default: the trainer's defaults")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("overrides", nargs="*", help="a.b=c overrides of the config")
    args = p.parse_args(argv)
    try:
        cfg = TrainerConfig.load(args.config, args.overrides)
        result = compile_step(cfg, args.slice, args.slices)
    except (ConfigError, TrainerExit, CompilerUnavailable, PlanError, StepDoesNotFit) as e:
        print(json.dumps({"error": str(e)}) if args.json else f"error: {e}", file=sys.stdout if args.json else sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        for k, v in result.to_dict().items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
