"""Pre-flight validation of a TpuTrainingJob: everything that can be known to fail before any
TPU is spent. Pure: a parsed job in, a verdict out (the first problem, with the field it names
and what would be valid), so the operator, the admission webhook and `tpujob render` agree.

Order: the object's own schema (apiVersion, kind, metadata, spec: `validate_fields`, which
readers of job files run alone before creating anything), no literal value for an env
variable whose name says it holds a credential, the job's name (a DNS label), then the slice
(and whether the name leaves room for its pods' host names), whether the Kueue topology levels
asked for can hold the slice, the mesh against the slice's topology, the trainer config (the
trainer's own schema, with the job's settings laid over it), and the model's memory against the
slice's HBM.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tpujob.api.patterns import DNS_LABEL_PATTERN
from tpujob.api.resource import InvalidJobError, TpuTrainingJob, load_job
from tpujob.api.status import FailureReason
from tpujob.builders.invocation import build_invocation
from tpujob.builders.launchers import launcher_problem
from tpujob.builders.names import host_fqdn
from tpujob.builders.scheduling import topology_problem
from tpujob.maxtext_args import CHECKED_AXES, read_maxtext_settings
from tpujob_plan.errors import PlanError
from tpujob_plan.gpu_plan import Launcher
from tpujob_plan.hardware import HardwarePlan, plan_hardware
from tpujob_plan.memory import REMAT_POLICIES
from tpujob_plan.mesh import MeshPlan, batch_split_error, format_axes, plan_mesh
from tpujob_plan.zero_memory import zero_problem

GIB = 1024**3
MAX_HOSTNAME = 63  # a pod's host name is a DNS label
# Env names that conventionally hold a credential: *_API_KEY, *_TOKEN, *_PASSWORD, *_SECRET*,
# HF_TOKEN, AWS_SECRET_ACCESS_KEY, ... A literal value there would sit in the job, readable by
# anyone who can read the job, and be copied into the JobSet and its pods' specs. Names of files
# that hold one (GOOGLE_APPLICATION_CREDENTIALS, *_PASSWORD_FILE) are not credentials.
CREDENTIAL_ENV = re.compile(
    r"^(?:.*_)?(?:API_?KEY|TOKEN|PASSWORD|PASSWD|PASSPHRASE|ACCESS_KEY|PRIVATE_KEY)$"
    r"|(?:^|_)SECRETS?(?:_|$)", re.IGNORECASE)


@dataclass(frozen=True)
class Verdict:
    """The outcome of validation. When not `valid`: `reason` (a CamelCase word for conditions),
    `field` (the spec path at fault) and `message` (what is wrong and what would be valid)."""

    valid: bool
    reason: str = "Valid"
    field: str | None = None
    message: str = ""
    job: TpuTrainingJob | None = None
    plan: HardwarePlan | None = None
    mesh: MeshPlan | None = None
    checked: str = "slice, mesh, trainer config and memory checked"  # what a valid job passed
    trainer_config: Any = None  # the built-in trainer's config as checked (a TrainerConfig)

    @classmethod
    def refuse(cls, reason: str, field: str, message: str, **kw: Any) -> Verdict:
        return cls(False, reason=reason, field=field, message=f"{field}: {message}", **kw)


def validate_fields(obj: Mapping[str, Any]) -> Verdict:
    """The object against its own schema alone: unknown or misspelt fields, wrong types, values
    out of range. The first step of `validate_job`, and what every reader of a job file runs
    before it creates anything: an API server prunes an unknown field it is not told to refuse,
    so after `create` a misspelt field would be gone without a word."""
    if isinstance(obj, Mapping) and not isinstance(obj.get("metadata", {}), Mapping):
        return Verdict.refuse("InvalidSpec", "metadata",
                              "must be a mapping holding at least the job's name "
                              "(metadata: {name: my-job})")
    try:
        job = load_job(obj)
    except InvalidJobError as err:
        first = err.problems[0]
        field = first.split(":", 1)[0].strip() if ":" in first else "spec"
        return Verdict(False, reason="InvalidSpec", field=field, message="; ".join(err.problems))
    return Verdict(True, job=job, checked="fields checked")


def validate_job(obj: dict[str, Any]) -> Verdict:
    """Validate a TpuTrainingJob object as read from YAML or the API server."""
    fields = validate_fields(obj)
    if not fields.valid or fields.job is None:
        return fields
    job = fields.job
    for i, env in enumerate(job.spec.env):
        if env.value is not None and CREDENTIAL_ENV.search(env.name):
            return Verdict.refuse(
                "InvalidSpec", f"spec.env[{i}].value",
                f"{env.name} is named like a credential, and a literal value would be stored in "
                f"the job (and its JobSet) for anyone who can read them; put it in a Secret in "
                f"the job's namespace and use valueFrom.secretKeyRef: {{name: SECRET, key: KEY}} "
                f"instead of value", job=job)
    problem = _name_problem(job.metadata.get("name"))
    if problem:
        return Verdict.refuse("InvalidName", "metadata.name", problem, job=job)
    spec = job.spec
    try:
        plan = plan_hardware(spec.slice, slices=spec.slices, nodes=spec.nodes,
                             machine_type=spec.machine_type,
                             containers_per_host=spec.containers_per_host,
                             launcher=spec.trainer.launcher, field="spec.slice")
    except PlanError as err:
        field = {"slices": "spec.slices", "nodes": "spec.nodes",
                 "machineType": "spec.machineType", "launcher": "spec.trainer.launcher",
                 "containersPerHost": "spec.containersPerHost"}.get(err.field, err.field)
        return Verdict.refuse("InvalidSlice", field, err.message, job=job)
    problem = _gpu_problem(spec, plan)
    if problem:
        return Verdict.refuse(FailureReason.INVALID_LAUNCHER.value, problem[0], problem[1],
                              job=job, plan=plan)
    zero = spec.trainer.zero
    if zero is not None and plan.is_gpu:
        message = zero_problem(zero.parameters, zero.stage, zero.offload,
                               zero.largest_layer_parameters, nodes=plan.nodes,
                               gpus_per_node=plan.machine.gpus_per_node,
                               gpu_memory_bytes=plan.machine.gpu_memory_bytes,
                               machine=f"{plan.name} ({plan.machine.gpu})")
        if message:
            return Verdict.refuse(FailureReason.OUT_OF_MEMORY.value, "spec.trainer.zero",
                                  message, job=job, plan=plan)
    longest = host_fqdn(job.metadata.get("name", ""), plan.slices - 1, plan.hosts - 1)
    if len(longest.split(".", 1)[0]) > MAX_HOSTNAME:
        return Verdict.refuse(
            "InvalidName", "metadata.name",
            f"too long for this slice: pod host names like {longest.split('.', 1)[0]!r} must "
            f"be at most {MAX_HOSTNAME} characters; use a name of at most "
            f"{MAX_HOSTNAME - len(longest.split('.', 1)[0]) + len(job.metadata.get('name', ''))}"
            f" characters", job=job, plan=plan)
    placement = topology_problem(spec.scheduling.topology, plan)
    if placement:
        return Verdict.refuse("InvalidTopology", placement[0], placement[1], job=job, plan=plan)
    mesh = plan_mesh(spec.parallelism.ici_sizes or None, spec.parallelism.dcn_sizes or None,
                     devices_per_slice=plan.mesh_granule_devices, num_slices=plan.mesh_granules,
                     physical_dims=plan.physical_mesh, field="spec.parallelism")
    if not mesh.valid:
        return _refuse_mesh(mesh, mesh.field or "spec.parallelism", job, plan)
    if spec.is_custom_trainer:
        return _validate_own_trainer(job, plan, mesh)
    return _validate_trainer(job, plan, mesh)


def _gpu_problem(spec, plan: HardwarePlan) -> tuple[str, str] | None:
    """(field, message) where the job's GPU settings do not fit its hardware."""
    if not plan.is_gpu:
        if spec.gpu_networks is not None:
            return ("spec.gpuNetworks", f"names the networks of GPU NICs; {spec.slice} is a TPU "
                                        f"slice: remove it")
        return None
    networks = spec.gpu_networks
    if networks is not None and len(networks) != plan.machine.gpu_nics:
        return ("spec.gpuNetworks",
                f"a {plan.name} node has {plan.machine.gpu_nics} GPU NICs, one network each; "
                f"got {len(networks)} ({', '.join(networks)})")
    return launcher_problem(spec.trainer, spec.env, plan)


def _refuse_mesh(mesh: MeshPlan, field: str, job: TpuTrainingJob, plan: HardwarePlan,
                 written: str = "") -> Verdict:
    hint = ""
    if mesh.suggestions:
        hint = "; valid layouts: " + " | ".join(format_axes(s) for s in mesh.suggestions)
    error = mesh.error or ""
    for prefix in (f"{mesh.field}: ", f"{field}: "):
        error = error[len(prefix):] if error.startswith(prefix) else error
    return Verdict.refuse("InvalidMesh", field, f"{written}{error}{hint}", job=job, plan=plan,
                          mesh=mesh)


def _validate_own_trainer(job: TpuTrainingJob, plan: HardwarePlan, mesh: MeshPlan) -> Verdict:
    """A program of the job's own: MaxText's mesh and batch settings, where its command line
    has them, get the built-in trainer's checks; otherwise the verdict says what was not
    checked."""
    spec = job.spec
    if spec.trainer.launcher is not Launcher.JAX:
        zero = spec.trainer.zero
        states = (f"model states under ZeRO stage {zero.stage} checked" if zero is not None
                  else "model states not checked (set spec.trainer.zero)")
        return Verdict(True, job=job, plan=plan, mesh=mesh, checked=(
            f"nodes and {spec.trainer.launcher.value}'s world checked; {states}; activations "
            f"not checked"))
    field = "spec.trainer.args"
    try:
        mt = read_maxtext_settings([*(spec.trainer.command or []), *(spec.trainer.args or [])])
    except ValueError as err:
        return Verdict.refuse("InvalidMesh", field, str(err), job=job, plan=plan, mesh=mesh)
    if not mt.found:
        return Verdict(True, job=job, plan=plan, mesh=mesh, checked=(
            "slice checked; mesh, batch and memory not checked: the command and args hold no "
            "MaxText ici_*/dcn_*_parallelism or per_device_batch_size setting"))
    if mt.unchecked:
        axes = ", ".join(f"{k}_parallelism={v}" for k, v in mt.unchecked.items())
        return Verdict(True, job=job, plan=plan, mesh=mesh, checked=(
            f"slice checked; mesh and batch not checked: {axes} is an axis the check does not "
            f"model (it knows {', '.join(CHECKED_AXES)})"))
    own = plan_mesh(mt.ici, mt.dcn, devices_per_slice=plan.mesh_granule_devices,
                    num_slices=plan.mesh_granules, physical_dims=plan.physical_mesh,
                    field="parallelism")
    if not own.valid:
        written = f"MaxText's {' '.join(w for w in mt.words if 'parallelism' in w) or 'defaults'}"
        return _refuse_mesh(own, field, job, plan, f"{written}: ")
    checked = "slice and MaxText's mesh (from args) checked"
    if mt.per_device_batch_size is not None:
        global_batch = mt.per_device_batch_size * plan.devices
        shards = own.axes["data"] * own.axes["fsdp"] * own.axes["expert"]
        micro = global_batch / mt.grad_accum
        if micro != int(micro) or int(micro) % shards:
            return Verdict.refuse(
                "InvalidBatch", field,
                f"per_device_batch_size={mt.per_device_batch_size:g} on {plan.devices} devices "
                f"is a batch of {micro:g} sequences (per_device_batch_size x devices / "
                f"gradient_accumulation_steps) that must split evenly over the {shards} batch "
                f"shards (data x fsdp x expert = "
                f"{format_axes({a: own.axes[a] for a in ('data', 'fsdp', 'expert')})}); use a "
                f"per_device_batch_size that makes it a multiple of {shards}",
                job=job, plan=plan, mesh=own)
        checked = "slice, MaxText's mesh and batch (from args) checked"
    return Verdict(True, job=job, plan=plan, mesh=own, checked=f"{checked}; memory not checked")


def _name_problem(name: Any) -> str | None:
    """What is wrong with a job's name, if anything: the JobSet, its ConfigMap and the pods'
    host names are made from it, so it must be a DNS label."""
    valid = (f"use a DNS label: lowercase letters, digits and '-', starting and ending with a "
             f"letter or digit, at most {MAX_HOSTNAME} characters (e.g. llama-8b-run1)")
    if name is None:
        return f"required; {valid}"
    if not isinstance(name, str):
        return f"must be a string; {valid}"
    if len(name) > MAX_HOSTNAME or not re.fullmatch(DNS_LABEL_PATTERN, name):
        shown = repr(name) if len(name) <= 2 * MAX_HOSTNAME else f"{name[:MAX_HOSTNAME]!r}..."
        return f"{shown} is not a valid name; {valid}"
    return None


def _validate_trainer(job: TpuTrainingJob, plan: HardwarePlan, mesh: MeshPlan) -> Verdict:
    from tpujob_trainer.config import ConfigError, TrainerConfig
    from tpujob_trainer.config.model import attention_platform_problem

    spec = job.spec
    try:
        invocation = build_invocation(spec)
        config = TrainerConfig.from_dict(invocation.config, invocation.config_args)
    except ConfigError as err:
        return Verdict.refuse("ConfigError", _config_error_field(spec), "; ".join(err.problems),
                              job=job, plan=plan, mesh=mesh)
    kernel_problem = attention_platform_problem(config.model.attention,
                                                "gpu" if plan.is_gpu else "tpu")
    if kernel_problem:
        return Verdict.refuse("ConfigError", "spec.trainer.config.model.attention",
                              f"{kernel_problem} ({plan.name})", job=job, plan=plan, mesh=mesh)
    batch_error = batch_split_error(config.train.global_batch, config.train.grad_accum,
                                    mesh.axes)
    if batch_error:
        return Verdict.refuse("InvalidBatch", "spec.trainer.config.train.global_batch",
                              batch_error, job=job, plan=plan, mesh=mesh)
    estimate = config.memory_request().estimate(mesh.axes, plan.hbm_bytes_per_device,
                                                plan.memory_generation)
    remat = estimate.remat
    if not estimate.fits:
        parts = sorted(estimate.breakdown.items(), key=lambda kv: -kv[1])[:3]
        where = ", ".join(f"{k} {v / GIB:.1f} GiB" for k, v in parts)
        better = "" if remat == REMAT_POLICIES[-1] else " or model.remat=full"
        return Verdict.refuse(
            "OutOfMemory", "spec.trainer.config.model",
            f"needs about {estimate.per_device_bytes / GIB:.1f} GiB per device (remat {remat}: "
            f"{where}) but a {plan.name} device has "
            f"{(estimate.usable_bytes or 0) / GIB:.1f} GiB usable; shard more (fsdp, tensor), "
            f"use a larger slice, a smaller batch{better}", job=job, plan=plan, mesh=mesh)
    return Verdict(True, job=job, plan=plan, mesh=mesh, trainer_config=config)


def _config_error_field(spec) -> str:
    """Where a trainer config error comes from: `spec.trainer.overrides[i]` for the first
    override that breaks a config that is valid without it, else `spec.trainer.config`."""
    from tpujob_trainer.config import ConfigError, TrainerConfig

    invocation = build_invocation(spec)
    args = invocation.config_args            # the operator's own first, then the job's
    first = len(args) - len(spec.trainer.overrides or ())
    for count in range(first, len(args) + 1):
        try:
            TrainerConfig.from_dict(invocation.config, args[:count])
        except ConfigError:
            return ("spec.trainer.config" if count == first
                    else f"spec.trainer.overrides[{count - 1 - first}]")
    return "spec.trainer.config"
