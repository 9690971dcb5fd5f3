"""Plan a job before launching it: slice plan, mesh check and memory estimate together.

Pure: the CLI (`tpujob plan`) and the operator's validation use the same functions.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tpujob_plan.errors import PlanError
from tpujob_plan.gpu_plan import GpuPlan, Launcher
from tpujob_plan.hardware import HardwarePlan, plan_hardware
from tpujob_plan.memory import MemoryEstimate, MemoryRequest
from tpujob_plan.mesh import MeshPlan, batch_split_error, parse_axes, plan_mesh
from tpujob_plan.model_shape import PRESETS, ModelShape
from tpujob_plan.slice_plan import SlicePlan
from tpujob_plan.zero_memory import Offload, model_state_bytes, offload_problem, zero_problem

DEFAULT_SEQ_LEN = 2048
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)
_SUFFIX = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


@dataclass(frozen=True)
class ModelRequest:
    """A model to estimate memory for, with the batch and sequence it trains on."""

    shape: ModelShape
    label: str
    global_batch: int | None = None
    seq_len: int = DEFAULT_SEQ_LEN
    remat: str = "auto"
    optimizer: str = "adamw"
    grad_accum: int = 1
    param_dtype: str = "float32"   # from the config file's model section, when one is given
    dtype: str = "bfloat16"
    capacity_factor: float = 1.25
    moe_routing: str = "capacity"
    optimizer_sharding: str = "auto"   # the config file's mesh.optimizer_sharding

    def memory_request(self, default_batch: int) -> MemoryRequest:
        """What the estimate needs, as the trainer builds it (`TrainerConfig.memory_request`)."""
        return MemoryRequest(shape=self.shape, global_batch=self.global_batch or default_batch,
                             seq_len=self.seq_len, grad_accum=self.grad_accum,
                             optimizer=self.optimizer, param_dtype=self.param_dtype,
                             dtype=self.dtype, remat=self.remat,
                             capacity_factor=self.capacity_factor,
                             moe_routing=self.moe_routing,
                             optimizer_sharding=self.optimizer_sharding)


@dataclass(frozen=True)
class ZeroRequest:
    """`--zero STAGE [--offload ...]`: a PyTorch program's model states under DeepSpeed ZeRO."""

    stage: int
    offload: Offload = Offload.NONE


@dataclass(frozen=True)
class ModelStates:
    """The model states each GPU holds, and why they do not fit (None when they do)."""

    zero: ZeroRequest
    parameters: int
    largest_layer: int
    bytes_per_gpu: int
    problem: str | None

    def to_dict(self) -> dict:
        return {"zeroStage": self.zero.stage, "offload": self.zero.offload.value,
                "parameters": self.parameters, "largestLayerParameters": self.largest_layer,
                "perGpuGiB": round(self.bytes_per_gpu / 2**30, 3), "fits": self.problem is None,
                **({"problem": self.problem} if self.problem else {})}


def largest_layer_params(shape: ModelShape) -> int:
    """The largest single module (as DeepSpeed's estimator counts them): the embedding, or an
    MLP projection when it is wider."""
    return max(shape.vocab_size * shape.d_model, shape.d_model * shape.mlp_dim,
               shape.d_model * shape.n_heads * shape.head_dim)


@dataclass(frozen=True)
class PlanRequest:
    """Everything `tpujob plan` was asked, parsed and checked."""

    slices: int = 1
    nodes: int | None = None
    launcher: str = "jax"
    machine_type: str | None = None
    containers_per_host: int | None = None
    ici: dict[str, int] | None = None
    dcn: dict[str, int] | None = None
    model: ModelRequest | None = None
    zero: ZeroRequest | None = None

    @classmethod
    def from_cli(cls, args) -> PlanRequest:
        model = None
        if args.model or args.params:
            numerics: dict[str, Any] = {}
            if args.model:
                shape, label, batch, seq, numerics = load_model_file(args.model)
            else:
                shape, label, batch, seq = shape_for_params(args.params), f"~{args.params}", None, None
            for name, value in (("--batch", args.batch), ("--seq", args.seq),
                                ("--grad-accum", args.grad_accum)):
                if value is not None and value < 1:
                    raise PlanError(f"must be a positive whole number, got {value}", field=name)
            model = ModelRequest(shape=shape, label=label,
                                 global_batch=args.batch or batch,
                                 seq_len=args.seq or seq or DEFAULT_SEQ_LEN,
                                 remat=args.remat, optimizer=args.optimizer,
                                 grad_accum=args.grad_accum, **numerics)
        launcher = getattr(args, "launcher", None) or "jax"
        zero = _zero_request(getattr(args, "zero", None), getattr(args, "offload", None),
                             launcher, model)
        return cls(slices=args.slices, nodes=getattr(args, "nodes", None),
                   launcher=launcher, zero=zero,
                   machine_type=args.machine_type,
                   containers_per_host=getattr(args, "containers_per_host", None),
                   ici=parse_axes(args.ici, field="--ici") if args.ici else None,
                   dcn=parse_axes(args.dcn, field="--dcn") if args.dcn else None,
                   model=model)

    @property
    def has_mesh(self) -> bool:
        return self.ici is not None or self.dcn is not None


def _zero_request(stage: int | None, offload: str | None, launcher: str,
                  model: ModelRequest | None) -> ZeroRequest | None:
    if stage is None:
        if offload is not None:
            raise PlanError("goes with --zero STAGE", field="--offload")
        return None
    if launcher == Launcher.JAX.value:
        raise PlanError("a PyTorch program's ZeRO stage: plan it with --launcher torchrun or "
                        "accelerate (a JAX program's memory is estimated without --zero)",
                        field="--zero")
    if model is None:
        raise PlanError("needs the model's size: --params N or --model FILE|PRESET",
                        field="--zero")
    zero = ZeroRequest(stage, Offload(offload or Offload.NONE.value))
    problem = offload_problem(zero.stage, zero.offload)
    if problem:
        raise PlanError(problem, field="--offload")
    return zero


@dataclass(frozen=True)
class SliceResult:
    """The plan for one requested slice name, or why there is none."""

    requested: str
    plan: HardwarePlan | None = None
    mesh: MeshPlan | None = None
    mesh_requested: bool = False
    memory: MemoryEstimate | None = None
    model: ModelRequest | None = None
    error: str | None = None
    batch_error: str | None = None  # the batch does not split over the batch shards
    model_states: ModelStates | None = None   # --zero: a PyTorch program's, on GPUs

    @property
    def ok(self) -> bool:
        return self.plan is not None

    @property
    def fits(self) -> bool:
        """The mesh is valid and the model (if any) fits in HBM."""
        mesh_ok = self.mesh is None or self.mesh.valid
        return self.ok and mesh_ok and self.batch_error is None and \
            (self.memory is None or bool(self.memory.fits)) and \
            (self.model_states is None or self.model_states.problem is None)

    def to_dict(self) -> dict:
        p = self.plan
        assert p is not None, "only planned slices have a dict form"
        out = gpu_dict(self.requested, p) if p.is_gpu else self._slice_dict(p)
        if self.mesh_requested and self.mesh is not None:
            out["mesh"] = self.mesh.to_dict()
        if self.memory is not None and self.model is not None:
            out["memory"] = self.memory.to_dict() | {
                "model": self.model.label, "params": self.model.shape.total_params,
                "globalBatch": self._global_batch(), "seqLen": self.model.seq_len}
            if self.batch_error:
                out["memory"]["batchError"] = self.batch_error
        if self.model_states is not None:
            out["modelStates"] = self.model_states.to_dict()
        return out

    def _slice_dict(self, p: SlicePlan) -> dict:
        return {
            "name": p.slice_type.name,
            "requested": self.requested,
            "generation": p.generation.prefix,
            "acceleratorLabel": p.generation.accelerator_label,
            "machineType": p.machine_type.name,
            "topology": p.slice_type.topology,
            "slices": p.slices,
            "chips": p.slice_type.chips,
            "tensorcores": p.slice_type.tensorcores,
            "hosts": p.hosts,
            "chipsPerHost": p.machine_type.chips_per_host,
            "containersPerHost": p.containers_per_host,
            "chipsPerContainer": p.chips_per_container,
            "devices": p.slice_type.devices,
            "devicesPerHost": p.devices_per_host,
            "processes": p.processes,
            "totalDevices": p.devices,
            "hbmPerChipGiB": round(p.generation.hbm_bytes_per_chip / 2**30, 3),
            "hbmPerDeviceGiB": round(p.hbm_bytes_per_device / 2**30, 3),
            "peakTflopsPerChip": p.generation.peak_bf16_tflops_per_chip,
            "peakTflopsPerDevice": p.peak_tflops_per_device,
            "physicalMesh": list(p.physical_mesh),
            "nodeSelector": p.node_selector,
            "resources": p.container_resources,
            "workloadPolicy": p.workload_policy,
            "layouts": [{"containersPerHost": lp.containers_per_host,
                         "chipsPerContainer": lp.chips_per_container,
                         "processes": lp.processes} for lp in layouts(p)],
        }

    def _global_batch(self) -> int:
        assert self.plan is not None and self.model is not None
        return self.model.global_batch or self.plan.devices


def gpu_dict(requested: str, p: GpuPlan) -> dict:
    """`tpujob plan -o json`'s answer for GPU nodes."""
    m = p.machine
    return {
        "name": m.name, "requested": requested, "series": m.series, "gpu": m.gpu,
        "xpkDeviceType": m.device_type, "acceleratorLabel": m.accelerator_label,
        "machineType": m.name, "topology": p.topology, "nodes": p.nodes,
        "gpusPerNode": m.gpus_per_node, "totalGpus": p.devices, "launcher": p.launcher.value,
        "processesPerNode": p.processes_per_node, "processes": p.processes,
        "gpuMemoryPerGpuGiB": round(p.hbm_bytes_per_device / 2**30, 3),
        "peakTflopsPerGpu": p.peak_tflops_per_device, "network": m.network.value,
        "gpuNics": m.gpu_nics, "nodeSelector": p.node_selector,
        "resources": p.container_resources,
        "launchers": {lp.value: replace(p, launcher=lp).processes for lp in Launcher},
    }


def layouts(plan: SlicePlan) -> list[SlicePlan]:
    """The plan under every container layout its machine type offers (default first)."""
    return [replace(plan, containers_per_host=n) for n in plan.machine_type.layouts]


def plan_one(slice_name: str, request: PlanRequest) -> SliceResult:
    """Plan one slice name. Invalid names give a result with `error`, never an exception."""
    try:
        plan = plan_hardware(slice_name, slices=request.slices, nodes=request.nodes,
                             machine_type=request.machine_type,
                             containers_per_host=request.containers_per_host,
                             launcher=request.launcher)
    except PlanError as err:
        return SliceResult(requested=slice_name, error=_cli_message(err))
    mesh = plan_mesh(request.ici, request.dcn, devices_per_slice=plan.mesh_granule_devices,
                     num_slices=plan.mesh_granules, physical_dims=plan.physical_mesh)
    result = SliceResult(requested=slice_name, plan=plan, mesh=mesh,
                         mesh_requested=request.has_mesh)
    if request.model is None:
        return result
    model = request.model
    if request.zero is not None:
        if not plan.is_gpu:
            return SliceResult(requested=slice_name, error=f"--zero: {slice_name} is a TPU "
                               "slice; ZeRO stages are for PyTorch programs on GPU nodes")
        return replace(result, model=model,
                       model_states=_model_states(plan, request.zero, model.shape))
    axes = mesh.axes if mesh.error is None or mesh.suggestions else {"fsdp": plan.devices}
    # Refused by the operator too (InvalidBatch): the same rule, the same words.
    batch_error = batch_split_error(model.global_batch or plan.devices, model.grad_accum, axes)
    return SliceResult(requested=slice_name, plan=plan, mesh=mesh,
                       mesh_requested=request.has_mesh, model=model,
                       memory=_estimate(plan, axes, model), batch_error=batch_error)


def _model_states(plan: GpuPlan, zero: ZeroRequest, shape: ModelShape) -> ModelStates:
    m = plan.machine
    params, largest = shape.total_params, largest_layer_params(shape)
    return ModelStates(
        zero=zero, parameters=params, largest_layer=largest,
        bytes_per_gpu=model_state_bytes(params, zero.stage, plan.devices, zero.offload,
                                        largest),
        problem=zero_problem(params, zero.stage, zero.offload, largest, nodes=plan.nodes,
                             gpus_per_node=m.gpus_per_node,
                             gpu_memory_bytes=m.gpu_memory_bytes, machine=f"{m.name} ({m.gpu})"))


def _cli_message(err: PlanError) -> str:
    """A planner's message with the command-line option it is about, where it names one."""
    option = {"slices": "--slices", "nodes": "--nodes", "machineType": "--machine-type",
              "containersPerHost": "--containers-per-host", "launcher": "--launcher"}
    if err.field in option and not err.message.startswith(option[err.field]):
        return f"{option[err.field]}: {err.message}"
    return err.message


def _estimate(plan: HardwarePlan, axes: dict[str, int], model: ModelRequest) -> MemoryEstimate:
    return model.memory_request(plan.devices).estimate(axes, plan.hbm_bytes_per_device,
                                                       plan.memory_generation)


def plan_many(slice_names: list[str], request: PlanRequest) -> list[SliceResult]:
    return [plan_one(name, request) for name in slice_names]


def load_model_file(ref: str) -> tuple[ModelShape, str, int | None, int | None, dict[str, Any]]:
    """A preset name, or a YAML file: a trainer config (its `model:` and `train:` sections) or
    a bare model section. Returns (shape, label, global batch, sequence length, and what the
    file says of the model's numbers (param_dtype, dtype, MoE capacity_factor and routing), as
    ModelRequest keywords: empty for a preset)."""
    from tpujob_trainer.config.model import ModelConfig

    if ref in PRESETS:
        return PRESETS[ref], ref, None, None, {}
    path = Path(ref)
    if not path.is_file():
        raise PlanError(f"{ref!r} is neither a file nor a preset; presets: "
                        f"{', '.join(PRESETS)}", field="--model", valid=list(PRESETS))
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise PlanError(f"{ref}: not valid YAML: {err}", field="--model") from None
    if not isinstance(doc, dict):
        raise PlanError(f"{ref}: expected a mapping at the top level", field="--model")
    section = doc.get("model", doc)
    prefix = "model." if "model" in doc else ""
    try:
        config = ModelConfig.model_validate(section)
    except ValidationError as err:
        problems = "; ".join(_describe_model_error(e, prefix) for e in err.errors())
        raise PlanError(f"{ref}: {problems}", field="--model") from None
    train = doc.get("train") if isinstance(doc.get("train"), dict) else {}
    numerics = {"param_dtype": config.param_dtype, "dtype": config.dtype,
                "capacity_factor": config.moe.capacity_factor, "moe_routing": config.moe.routing}
    mesh = doc.get("mesh") if "model" in doc else None
    if isinstance(mesh, dict) and "optimizer_sharding" in mesh:
        from tpujob_trainer.config.mesh import MeshConfig

        try:
            numerics["optimizer_sharding"] = MeshConfig.model_validate(
                {"optimizer_sharding": mesh["optimizer_sharding"]}).optimizer_sharding
        except ValidationError as err:
            raise PlanError(f"{ref}: mesh.optimizer_sharding: {err.errors()[0]['msg']}",
                            field="--model") from None
    return (config.to_shape(), path.name, train.get("global_batch"), train.get("seq_len"),
            numerics)


def _describe_model_error(error: Any, prefix: str) -> str:
    """`model.d_modle: unknown key; did you mean model.d_model? ...` or pydantic's message."""
    from tpujob_trainer.config.keys import keys_taken, unknown_key_message
    from tpujob_trainer.config.model import ModelConfig

    where = f"{prefix}{'.'.join(str(p) for p in error['loc'])}"
    if error["type"] != "extra_forbidden":
        return f"{where}: {error['msg']}"
    parent = error["loc"][:-1]
    return f"{where}: " + unknown_key_message(
        str(error["loc"][-1]), keys_taken(ModelConfig, parent),
        f"{prefix}{'.'.join(map(str, parent))}".rstrip("."))


def shape_for_params(text: str) -> ModelShape:
    """A Llama-shaped model of about `text` parameters ("8B", "350M", "1.5e9"): width a multiple
    of 128, 128 channels per layer of depth, MLP 3.5x width, 128-wide heads, vocab 32000."""
    match = _SIZE.match(text or "")
    if not match:
        raise PlanError(f"expected a parameter count such as 8B, 350M or 1.5e9, got {text!r}",
                        field="--params")
    target = float(match[1]) * _SUFFIX[match[2].lower()]
    if not 1e6 <= target <= 1e13:
        raise PlanError(f"a parameter count from 1M to 10T, got {text!r}", field="--params")
    vocab = 32000
    best: ModelShape | None = None
    for d in range(128, 65536 + 1, 128):
        layers = max(2, d // 128)
        heads = max(1, d // 128)
        shape = ModelShape(vocab_size=vocab, d_model=d, n_layers=layers, n_heads=heads,
                           n_kv_heads=max(1, heads // 4) if heads >= 4 else heads,
                           head_dim=d // heads, mlp_dim=int(math.ceil(3.5 * d / 128) * 128))
        if best is None or abs(shape.total_params - target) < abs(best.total_params - target):
            best = shape
        if shape.total_params > target:
            break
    assert best is not None
    return best
