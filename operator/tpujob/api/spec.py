"""The desired state of a TpuTrainingJob: which TPU slice, which image and trainer config, how the
device mesh is split, where output goes, and how the run is scheduled, restarted and watched.

Checks here are syntactic and local to the spec (what the CRD schema and its CEL rules also
enforce at `kubectl apply`). Whether a slice size exists, whether the mesh fits the topology and
whether the model fits in HBM are the operator's checks, made before anything is launched."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from tpujob.api.base import ApiModel, Quantity, SparseApiModel, pattern_string
from tpujob.api.schema import cel_extra, cel_rule
from tpujob.log_progress import compile_user_regex

# Syntax only: a generation prefix and either a size (`v6e-16`) or a topology (`v5p-4x4x4`).
SLICE_PATTERN = r"^(v4|v5e|v5litepod|v5p|v6e|tpu7x)-([1-9][0-9]*|[1-9][0-9]*x[1-9][0-9]*(x[1-9][0-9]*)?)$"
MACHINE_TYPE_PATTERN = r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$"
# A `gs://bucket[/prefix]`, an absolute path, or a relative path without a URL scheme.
OUTPUT_PATTERN = r"^(gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/[^\s]*)?|/[^\s]*|[A-Za-z0-9._-][^\s:]*)$"
OVERRIDE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*=.*$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
# The pod fields Kubernetes offers environment variables through the downward API.
FIELD_PATH_PATTERN = (r"^(metadata\.(name|namespace|uid)|metadata\.(labels|annotations)"
                      r"\['[-._/a-zA-Z0-9]+'\]|spec\.(nodeName|serviceAccountName)|"
                      r"status\.(hostIPs?|podIPs?))$")
RESOURCE_FIELD_PATTERN = (r"^(limits|requests)\."
                          r"(cpu|memory|ephemeral-storage|hugepages-[-.a-zA-Z0-9]+)$")

SliceName = pattern_string(
    SLICE_PATTERN, "a slice is <generation>-<size> or <generation>-<topology>, generation one "
    "of v4, v5e, v5litepod, v5p, v6e, tpu7x (e.g. v6e-16, tpu7x-64, v5p-4x4x4)", max_length=32)
FieldPath = pattern_string(
    FIELD_PATH_PATTERN, "use metadata.name, metadata.namespace, metadata.uid, "
    "metadata.labels['<key>'], metadata.annotations['<key>'], spec.nodeName, "
    "spec.serviceAccountName, status.hostIP, status.hostIPs, status.podIP or status.podIPs")
PodApiVersion = pattern_string(r"^v1$", "the pod's fields are written in version v1")
ResourceField = pattern_string(
    RESOURCE_FIELD_PATTERN, "use limits.<resource> or requests.<resource>, resource one of cpu, "
    "memory, ephemeral-storage, hugepages-<size>")
OutputLocation = pattern_string(
    OUTPUT_PATTERN, "use gs://<bucket>/<prefix> (a valid bucket name: lowercase letters, digits, "
    "'-', '_', '.') or a path in the container")

# The operator sets these itself to wire the JAX processes (TPUJOB_*) and, on multislice jobs,
# the slices over DCN (MEGASCALE_*) together; a user value would break it.
RESERVED_ENV_PREFIXES = ("TPUJOB_", "MEGASCALE_")
RESERVED_ENV_NAMES = ("TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES")
RESERVED_ENV_DOC = (f"{', '.join(p + '*' for p in RESERVED_ENV_PREFIXES)}, "
                    f"{' and '.join(RESERVED_ENV_NAMES)}")
# Set by the operator from wandb.apiKeySecret, when that is given.
WANDB_KEY_ENV = "WANDB_API_KEY"
# The one resource the operator derives from the slice; users must not request it by hand.
TPU_RESOURCE = "google.com/tpu"


class MeshAxis(StrEnum):
    """Logical device-mesh axes, in the order the mesh is laid out (MaxText's names)."""

    DATA = "data"
    FSDP = "fsdp"
    CONTEXT = "context"
    TENSOR = "tensor"
    EXPERT = "expert"


AxisSize = Annotated[int, Field(ge=-1)]


def _check_axes(axes: dict[MeshAxis, int]) -> dict[MeshAxis, int]:
    zero = [a.value for a, s in axes.items() if s == 0]
    if zero:
        raise ValueError(f"axis {', '.join(zero)} has size 0; sizes are >= 1, or -1 for the "
                         "one axis whose size is filled in")
    filled = [a.value for a, s in axes.items() if s == -1]
    if len(filled) > 1:
        raise ValueError(f"at most one axis may be -1, got {', '.join(filled)}")
    return axes


AXES_DOC = ", ".join(a.value for a in MeshAxis)
_AXIS_RULES = cel_extra(
    cel_rule("self.all(k, self[k] != 0)",
             "axis sizes are >= 1, or -1 for the one axis whose size is filled in"),
    cel_rule("self.filter(k, self[k] == -1).size() <= 1", "at most one axis may be -1"),
)


class Parallelism(ApiModel):
    """How the device mesh is split, MaxText-style: ICI axes inside a slice, DCN across slices."""

    ici: dict[MeshAxis, AxisSize] = Field(
        default_factory=dict, max_length=len(MeshAxis), json_schema_extra=_AXIS_RULES,
        description=f"Axis -> size within one slice (axes: {AXES_DOC}). The product must equal "
                    "the JAX devices of one slice; one axis may be -1 to take what is left. "
                    "Empty: all devices on fsdp.")
    dcn: dict[MeshAxis, AxisSize] = Field(
        default_factory=dict, max_length=len(MeshAxis), json_schema_extra=_AXIS_RULES,
        description=f"Axis -> size across slices over the data-center network (axes: "
                    f"{AXES_DOC}). The product must equal spec.slices; one axis may be -1. "
                    "Empty: all slices on data.")

    @field_validator("ici", "dcn")
    @classmethod
    def _sizes(cls, axes: dict[MeshAxis, int]) -> dict[MeshAxis, int]:
        return _check_axes(axes)

    @property
    def ici_sizes(self) -> dict[str, int]:
        """ICI axes as plain names in mesh order, as the planner and the trainer take them."""
        return {a.value: self.ici[a] for a in MeshAxis if a in self.ici}

    @property
    def dcn_sizes(self) -> dict[str, int]:
        """DCN axes as plain names in mesh order."""
        return {a.value: self.dcn[a] for a in MeshAxis if a in self.dcn}


class ProgressSource(StrEnum):
    """Where the operator reads a run's progress from."""

    HTTP = "http"
    LOG = "log"


class LogFormat(StrEnum):
    """How a progress line in process 0's log is read."""

    MAXTEXT = "maxtext"
    JSONL = "jsonl"
    REGEX = "regex"


class ProgressSpec(ApiModel):
    """How the operator follows training progress (step, loss, speed) for status, stall
    detection and goodput."""

    model_config = ConfigDict(json_schema_extra=cel_extra(
        cel_rule("(has(self.format) && self.format == 'regex') == has(self.regex)",
                 "regex is required when format is regex, and only then", ".regex"),
    ))

    source: ProgressSource = Field(
        ProgressSource.HTTP,
        description="http: process 0's /progress endpoint (the built-in trainer serves it). "
                    "log: process 0's container log, read through the Kubernetes pods/log API, "
                    "for a program that does not serve /progress.")
    format: LogFormat = Field(
        LogFormat.JSONL,
        description="With source log: maxtext (MaxText's `completed step: N, seconds: S, "
                    "TFLOP/s/device: F, Tokens/s/device: T, ..., loss: L` lines), jsonl "
                    "(JSON objects with `step` and `loss`) or regex.")
    regex: str | None = Field(
        None, min_length=1, max_length=1024,
        description="With format regex: a Python regular expression with a named group "
                    "`step` and optionally `loss`, `step_time_s`, `tokens_per_s_per_device`, "
                    "`tflops_per_device`.")

    @model_validator(mode="after")
    def _regex_with_format(self) -> ProgressSpec:
        if (self.format == LogFormat.REGEX) != (self.regex is not None):
            raise ValueError("regex is required when format is regex, and only then")
        if self.regex is not None:
            compile_user_regex(self.regex)
        return self


class TrainerSpec(ApiModel):
    """The program every JAX process runs: the built-in trainer with its config, or your own."""

    model_config = ConfigDict(json_schema_extra=cel_extra(cel_rule(
        "!has(self.command) || !has(self.overrides) || size(self.overrides) == 0",
        "overrides apply to the built-in trainer only; with command set, pass settings in args",
        ".overrides")))

    config: dict[str, Any] = Field(
        default_factory=dict,
        description="The built-in trainer's config (its own schema: model, train, checkpoint, "
                    "...). Kept as written; the operator validates it against the trainer's "
                    "schema before launching anything.")
    overrides: list[Annotated[str, Field(pattern=OVERRIDE_PATTERN)]] = Field(
        default_factory=list, max_length=256,
        description="`key=value` overrides applied over config, dotted keys for nested "
                    "settings (e.g. `train.steps=1000`).")
    command: list[str] | None = Field(
        None, min_length=1,
        description="Bring your own trainer: the container command to run instead of the "
                    "built-in trainer (e.g. MaxText). The operator still sizes and wires every "
                    "JAX process. config and overrides must then be empty; use args.")
    args: list[str] | None = Field(
        None, description="Arguments to command (or to the image's entrypoint).")
    progress: ProgressSpec = Field(
        default_factory=ProgressSpec,
        description="Where progress is read from: http (default; the built-in trainer's "
                    "/progress) or log, with the format of process 0's log lines.")

    @model_validator(mode="after")
    def _own_trainer_takes_no_config(self) -> TrainerSpec:
        if self.command is not None and (self.config or self.overrides):
            raise ValueError("config and overrides apply to the built-in trainer only; with "
                             "command set, pass settings in args")
        return self


class DataKind(StrEnum):
    """Where training tokens come from (the built-in trainer's `data.kind`)."""

    SYNTHETIC = "synthetic"
    TEXT = "text"
    JSONL = "jsonl"
    TOKENS = "tokens"


class DataSpec(ApiModel):
    """Training data. The operator hands it to the built-in trainer as its `data` settings, over
    what trainer.config says."""

    model_config = ConfigDict(json_schema_extra=cel_extra(
        cel_rule("!has(self.kind) || self.kind == 'synthetic' || has(self.path)",
                 "path is required unless kind is synthetic", ".path"),
        cel_rule("!has(self.path) || (has(self.kind) && self.kind != 'synthetic')",
                 "path is set but kind is synthetic; set kind to text, jsonl or tokens",
                 ".kind"),
    ))

    kind: DataKind = Field(
        DataKind.SYNTHETIC,
        description="synthetic (deterministic generated tokens, no files), text (plain-text "
                    "files), jsonl (one JSON document per line) or tokens (pre-tokenized files).")
    path: OutputLocation | None = Field(
        None,
        description="File, folder or glob under gs:// or a path in the container; required "
                    "unless kind is synthetic.")
    tokenizer: str | None = Field(
        None, min_length=1,
        description="byte (the built-in byte tokenizer, the default) or a tokenizer.json file "
                    "(gs:// or a path).")

    @model_validator(mode="after")
    def _path_when_files(self) -> DataSpec:
        if self.kind != DataKind.SYNTHETIC and self.path is None:
            raise ValueError(f"path is required when kind is {self.kind.value}")
        if self.kind == DataKind.SYNTHETIC and self.path is not None:
            raise ValueError("path is set but kind is synthetic; set kind to text, jsonl or "
                             "tokens to read files")
        return self


class SecretKeyRef(ApiModel):
    """A key of a Secret in the job's own namespace."""

    name: str = Field(..., min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN,
                      description="Name of the Secret (same namespace as the job).")
    key: str = Field(..., min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN,
                     description="Key inside the Secret.")


class WandbMode(StrEnum):
    """Weights & Biases run modes (the values of WANDB_MODE)."""

    ONLINE = "online"
    OFFLINE = "offline"


class WandbSpec(ApiModel):
    """Weights & Biases logging from process 0. The API key comes only from a Secret."""

    model_config = ConfigDict(json_schema_extra=cel_extra(cel_rule(
        "(has(self.mode) && self.mode != 'online') || has(self.apiKeySecret)",
        "apiKeySecret (a Secret name and key) is required when mode is online",
        ".apiKeySecret")))

    project: str = Field(..., min_length=1, description="W&B project.")
    entity: str | None = Field(None, min_length=1, description="W&B entity (team or user).")
    run_name: str | None = Field(None, min_length=1, description="Run name; default: the job name.")
    tags: list[str] = Field(default_factory=list, description="Run tags.")
    mode: WandbMode = Field(
        WandbMode.ONLINE,
        description="online (needs apiKeySecret) or offline (local run files only, no key).")
    api_key_secret: SecretKeyRef | None = Field(
        None, description="Secret key holding the W&B API key; required when mode is online.")

    @model_validator(mode="after")
    def _key_when_online(self) -> WandbSpec:
        if self.mode == WandbMode.ONLINE and self.api_key_secret is None:
            raise ValueError("apiKeySecret (a Secret name and key) is required when mode is "
                             "online")
        return self


class SecretKeySelector(SparseApiModel):
    """A key of a Secret in the job's own namespace (a Kubernetes SecretKeySelector)."""

    name: str = Field(..., min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN,
                      description="Name of the Secret (same namespace as the job).")
    key: str = Field(..., min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN,
                     description="Key inside the Secret.")
    optional: bool | None = Field(
        None, description="Start the container even when the Secret or its key is missing.")


class ConfigMapKeySelector(SparseApiModel):
    """A key of a ConfigMap in the job's own namespace (a Kubernetes ConfigMapKeySelector)."""

    name: str = Field(..., min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN,
                      description="Name of the ConfigMap (same namespace as the job).")
    key: str = Field(..., min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN,
                     description="Key inside the ConfigMap.")
    optional: bool | None = Field(
        None, description="Start the container even when the ConfigMap or its key is missing.")


class ObjectFieldSelector(SparseApiModel):
    """A field of the pod, through the downward API (a Kubernetes ObjectFieldSelector)."""

    field_path: FieldPath = Field(
        ..., description="metadata.name, metadata.namespace, metadata.uid, "
                         "metadata.labels['<key>'], metadata.annotations['<key>'], "
                         "spec.nodeName, spec.serviceAccountName, status.hostIP, "
                         "status.hostIPs, status.podIP or status.podIPs.")
    api_version: PodApiVersion | None = Field(
        None, description="Version of the schema fieldPath is written in: v1 (the default).")


class ResourceFieldSelector(SparseApiModel):
    """A request or limit of a container (a Kubernetes ResourceFieldSelector)."""

    resource: ResourceField = Field(
        ..., description="limits.cpu, limits.memory, limits.ephemeral-storage, requests.cpu, "
                    "requests.memory, requests.ephemeral-storage (or a hugepages-<size>).")
    container_name: str | None = Field(
        None, min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN,
        description="Container whose resources to read; default: the variable's own.")
    divisor: Quantity | None = Field(
        None, description="Unit the value is expressed in (e.g. 1m, 1Mi); default: 1.")


ENV_SOURCES = ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")


class EnvVarSource(SparseApiModel):
    """Where a variable's value comes from (a Kubernetes EnvVarSource): exactly one source, in
    the job's own namespace."""

    model_config = ConfigDict(json_schema_extra=cel_extra(cel_rule(
        f"[{', '.join(f'has(self.{s})' for s in ENV_SOURCES)}].exists_one(x, x)",
        f"set exactly one of {', '.join(ENV_SOURCES)}")))

    secret_key_ref: SecretKeySelector | None = Field(
        None, description="A key of a Secret in the job's namespace.")
    config_map_key_ref: ConfigMapKeySelector | None = Field(
        None, description="A key of a ConfigMap in the job's namespace.")
    field_ref: ObjectFieldSelector | None = Field(
        None, description="A field of the pod (downward API).")
    resource_field_ref: ResourceFieldSelector | None = Field(
        None, description="A resource request or limit of a container.")

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvVarSource:
        written = list(self.to_dict())
        if len(written) != 1:
            raise ValueError(f"set exactly one of {', '.join(ENV_SOURCES)}"
                             + (f"; got {' and '.join(written)}" if written else ""))
        return self


class EnvVar(ApiModel):
    """An environment variable for every trainer container (a Kubernetes EnvVar)."""

    model_config = ConfigDict(json_schema_extra=cel_extra(
        cel_rule("!(has(self.value) && has(self.valueFrom))", "set value or valueFrom, not both"),
        cel_rule(" && ".join([*(f"!self.name.startsWith('{p}')" for p in RESERVED_ENV_PREFIXES),
                              f"!(self.name in [{', '.join(repr(n) for n in RESERVED_ENV_NAMES)}])"]),
                 f"the operator sets {RESERVED_ENV_DOC} itself", ".name"),
        cel_rule(f"self.name != '{WANDB_KEY_ENV}' || !has(self.value)",
                 "a secret must not be written in the job: use wandb.apiKeySecret or "
                 "valueFrom.secretKeyRef", ".value"),
    ))

    name: str = Field(..., min_length=1, max_length=253, pattern=ENV_NAME_PATTERN,
                      description="Variable name.")
    value: str | None = Field(None, description="Literal value.")
    value_from: EnvVarSource | None = Field(
        None, description="Where the value comes from, exactly one of: a key of a Secret or "
                          "ConfigMap in the job's namespace (secretKeyRef, configMapKeyRef), a "
                          "field of the pod (fieldRef), a resource of a container "
                          "(resourceFieldRef).")

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError(f"env {self.name}: set value or valueFrom, not both")
        if self.name.startswith(RESERVED_ENV_PREFIXES) or self.name in RESERVED_ENV_NAMES:
            raise ValueError(f"env {self.name}: the operator sets {RESERVED_ENV_DOC} itself")
        if self.name == WANDB_KEY_ENV and self.value is not None:
            raise ValueError(f"env {WANDB_KEY_ENV}: a secret must not be written in the job; use "
                             "wandb.apiKeySecret or valueFrom.secretKeyRef")
        return self


_NO_TPU = cel_extra(cel_rule(f"!('{TPU_RESOURCE}' in self)",
                             f"{TPU_RESOURCE} is derived from spec.slice and must not be set"))


class Resources(ApiModel):
    """Extra CPU/memory/ephemeral-storage for each trainer container (google.com/tpu is set by
    the operator from the slice)."""

    requests: dict[str, Quantity] = Field(default_factory=dict, json_schema_extra=_NO_TPU,
                                          description="Resource requests.")
    limits: dict[str, Quantity] = Field(default_factory=dict, json_schema_extra=_NO_TPU,
                                        description="Resource limits.")

    @field_validator("requests", "limits")
    @classmethod
    def _no_tpu(cls, value: dict[str, Any]) -> dict[str, Any]:
        if TPU_RESOURCE in value:
            raise ValueError(f"{TPU_RESOURCE} is derived from spec.slice and must not be set")
        return value


class Scheduling(ApiModel):
    """Queueing and priority."""

    queue_name: str | None = Field(
        None, min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN,
        description="Kueue LocalQueue to submit to; the JobSet is created suspended and Kueue "
                    "admits it when quota allows.")
    priority_class_name: str | None = Field(
        None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN,
        description="PriorityClass of the pods.")


class StallAction(StrEnum):
    """What the operator does when no training step completes within the stall timeout."""

    RESTART = "Restart"
    FAIL = "Fail"
    IGNORE = "Ignore"


class RestartStrategy(StrEnum):
    """How the JobSet restarts after a failure (docs/goodput.md#restart-strategies)."""

    RECREATE = "Recreate"
    IN_PLACE_RESTART = "InPlaceRestart"
    RESTART_JOB = "RestartJob"


_RESTART_JOB_ONE_SLICE = ("spec.restartPolicy.strategy RestartJob restarts only the failed "
                          "slice, so it needs spec.slices > 1; use Recreate or InPlaceRestart "
                          "for a single slice")


class RestartPolicy(ApiModel):
    """When a failed run is restarted (all hosts together, resuming from the newest checkpoint)."""

    max_restarts: int = Field(3, ge=0, le=1000,
                              description="Restarts allowed before the job fails.")
    retryable_exit_codes: list[Annotated[int, Field(ge=1, le=255)]] = Field(
        default_factory=lambda: [42], max_length=64,
        description="Container exit codes that restart the job (the built-in trainer exits 42 "
                    "on a retryable error such as a lost peer). Other non-zero codes fail it.")
    retry_on_signal: bool = Field(
        True, description="A container killed by a signal (exit code 128+N, e.g. 143 after "
                          "SIGTERM on preemption) restarts the job.")
    disruptions_count_towards_max: bool = Field(
        False, description="Whether restarts caused by pod disruption (preemption, node "
                           "maintenance, eviction) count towards maxRestarts.")
    on_stall: StallAction = Field(
        StallAction.RESTART,
        description="Restart, Fail or Ignore when no step completes within stallTimeoutSeconds.")
    strategy: RestartStrategy = Field(
        RestartStrategy.RECREATE,
        description="Recreate: every pod of every slice is deleted and created again (JobSet's "
                    "Recreate). InPlaceRestart: JobSet's in-place restart (v0.11+, behind the "
                    "InPlaceRestart feature gate of the JobSet controller): the pods stay on "
                    "their nodes and their containers start again. RestartJob: multi-slice "
                    "only, JobSet v0.12's RestartJob action restarts only the slice whose Job "
                    "failed.")


class LocalCheckpointMedium(StrEnum):
    """Where the node-local checkpoint tier lives (docs/goodput.md#emergency-checkpoints)."""

    NODE = "Node"
    DISK = "Disk"
    MEMORY = "Memory"


class LocalCheckpoints(ApiModel):
    """Frequent checkpoints of each process's own shards on its node, beside the persistent
    ones in spec.output; a restart resumes from the newest checkpoint of either tier."""

    every_steps: int = Field(..., ge=1, le=1_000_000,
                             description="Steps between local checkpoints (the built-in "
                                         "trainer's checkpoint.local.every).")
    keep: int = Field(2, ge=1, le=16, description="Local checkpoints kept per process.")
    medium: LocalCheckpointMedium = Field(
        LocalCheckpointMedium.NODE,
        description="Node: a hostPath folder per job on the node, which outlives the pod, so "
                    "a pod recreated on its node (Recreate) finds it. Disk or Memory: an "
                    "emptyDir (Memory: a RAM disk counted against the container's memory) "
                    "that outlives only container restarts (InPlaceRestart). A pod that lands "
                    "on another node finds no local tier and every process resumes from the "
                    "persistent one.")
    host_path: str = Field(
        "/var/lib/tpujob/local-checkpoints", pattern=r"^/[^\s]*[^/\s]$",
        description="Node folder for medium Node; the job's checkpoints go under "
                    "<hostPath>/<namespace>/<job>.")
    size_limit: Quantity | None = Field(
        None, description="sizeLimit of the emptyDir for medium Disk or Memory.")


_WANDB_KEY_SET = (f"the operator sets {WANDB_KEY_ENV} from wandb.apiKeySecret; remove it "
                  "from env, or remove wandb.apiKeySecret to pass the key yourself")


class TpuTrainingJobSpec(ApiModel):
    """A JAX training run on one or more TPU slices."""

    # A rule on machineType itself would not see it being added or removed after creation.
    model_config = ConfigDict(json_schema_extra=cel_extra(
        cel_rule(
            "has(self.machineType) == has(oldSelf.machineType) && "
            "(!has(self.machineType) || self.machineType == oldSelf.machineType)",
            "spec.machineType is immutable: delete the job and create it again to change it",
            ".machineType"),
        cel_rule(
            "!has(self.wandb) || !has(self.wandb.apiKeySecret) || !has(self.env) || "
            f"!self.env.exists(e, e.name == '{WANDB_KEY_ENV}')",
            _WANDB_KEY_SET, ".env"),
        cel_rule(
            "!has(self.restartPolicy) || !has(self.restartPolicy.strategy) || "
            "self.restartPolicy.strategy != 'RestartJob' || "
            "(has(self.slices) && self.slices > 1)",
            _RESTART_JOB_ONE_SLICE, ".restartPolicy.strategy"),
    ))

    slice: SliceName = Field(
        ..., json_schema_extra=cel_extra(cel_rule(
            "self == oldSelf",
            "spec.slice is immutable: delete the job and create it again to change the slice")),
        description="TPU slice as <generation>-<size> or <generation>-<topology>, e.g. v6e-16, "
                    "tpu7x-64, v5p-128, v5p-4x4x4 (the size counts TensorCores on v4, v5p and "
                    "tpu7x, chips on v5e/v5litepod and v6e). Immutable.")
    machine_type: str | None = Field(
        None, pattern=MACHINE_TYPE_PATTERN,
        description="GKE machine type, where the generation offers a choice (e.g. "
                    "ct6e-standard-8t for a single-host v6e-8); default: the multi-host type. "
                    "Immutable.")
    containers_per_host: int = Field(
        1, ge=1, le=2, json_schema_extra=cel_extra(cel_rule(
            "self == oldSelf",
            "spec.containersPerHost is immutable: delete the job and create it again to change "
            "it")),
        description="Trainer containers (JAX processes) per host. 1 (default): one container "
                    "with every chip of the host, as xpk runs by default. 2: on "
                    "tpu7x-standard-4t only, two containers of 2 chips each, one per NUMA node "
                    "(xpk's --use-parallel-containers), with the TPU runtime variables two "
                    "processes on one host need (see docs/bring-your-own.md). Immutable.")
    slices: int = Field(1, ge=1, le=1024, json_schema_extra=cel_extra(cel_rule(
                            "self == oldSelf",
                            "spec.slices is immutable: delete the job and create it again to "
                            "change the number of slices")),
                        description="Number of identical slices (multislice over DCN). Immutable.")
    image: str = Field(..., min_length=1, pattern=r"^\S+$",
                       description="Container image of the trainer.")
    trainer: TrainerSpec = Field(default_factory=TrainerSpec,
                                 description="What each JAX process runs.")
    parallelism: Parallelism = Field(default_factory=Parallelism,
                                     description="Device-mesh layout.")
    output: OutputLocation = Field(
        ...,
        description="Where checkpoints and metrics go: gs://bucket/prefix, or a path in the "
                    "container. Passed to the trainer as its output setting.")
    data: DataSpec | None = Field(
        None, description="Training data; default: what trainer.config says.")
    wandb: WandbSpec | None = Field(None, description="Weights & Biases logging; default: off.")
    env: list[EnvVar] = Field(default_factory=list, max_length=128, json_schema_extra={
                                  "x-kubernetes-list-type": "map",
                                  "x-kubernetes-list-map-keys": ["name"]},
                              description="Extra environment variables for the trainer.")
    resources: Resources = Field(default_factory=Resources,
                                 description="Extra resources for each trainer container.")
    scheduling: Scheduling = Field(default_factory=Scheduling,
                                   description="Kueue queue and priority class.")
    restart_policy: RestartPolicy = Field(default_factory=RestartPolicy,
                                          description="Restarts after retryable failures.")
    local_checkpoints: LocalCheckpoints | None = Field(
        None, description="Emergency checkpoints on node-local storage; default: off.")
    stall_timeout_seconds: int = Field(
        1800, ge=0,
        description="A run that completes no training step for this long is stalled "
                    "(restartPolicy.onStall decides what happens); 0 turns detection off.")
    first_step_timeout_seconds: int = Field(
        3600, ge=0,
        description="Allowance for the first step after a (re)start, which includes "
                    "compilation and checkpoint restore; 0 turns it off.")
    suspend: bool = Field(False, description="Suspend the run (pods are deleted, the job and "
                                             "its checkpoints stay); set false to resume.")

    @field_validator("restart_policy")
    @classmethod
    def _restart_job_needs_slices(cls, policy: RestartPolicy, info: ValidationInfo
                                  ) -> RestartPolicy:
        slices = info.data.get("slices", 1)
        if policy.strategy == RestartStrategy.RESTART_JOB and slices == 1:
            raise ValueError(_RESTART_JOB_ONE_SLICE)
        return policy

    @field_validator("env")
    @classmethod
    def _unique_env(cls, env: list[EnvVar], info: ValidationInfo) -> list[EnvVar]:
        names = [e.name for e in env]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate names {', '.join(duplicates)}")
        # wandb is declared before env, so it is here when it was valid.
        wandb = info.data.get("wandb")
        if WANDB_KEY_ENV in names and wandb is not None and wandb.api_key_secret is not None:
            raise ValueError(_WANDB_KEY_SET)
        return env

    @property
    def is_custom_trainer(self) -> bool:
        """True when the job brings its own program instead of the built-in trainer."""
        return self.trainer.command is not None
