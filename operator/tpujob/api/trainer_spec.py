"""What every JAX process is told: the program it runs (the built-in trainer with its config, or
your own), how its progress is followed, the data it reads and where it logs to Weights & Biases."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator

from tpujob.api.base import ApiModel
from tpujob.api.patterns import (
    DNS_SUBDOMAIN_PATTERN,
    OVERRIDE_PATTERN,
    SECRET_KEY_PATTERN,
    OutputLocation,
)
from tpujob.api.schema import cel_extra, cel_rule
from tpujob.log_progress import compile_user_regex
from tpujob_plan.gpu_plan import Launcher
from tpujob_plan.zero_memory import (
    OFFLOAD_NEEDS_A_STAGE,
    OFFLOAD_PARAMETERS_NEEDS_STAGE_3,
    Offload,
    offload_problem,
)


class ProgressSource(StrEnum):
    """Where the operator reads a run's progress from."""

    HTTP = "http"
    LOG = "log"


class LogFormat(StrEnum):
    """How a progress line in process 0's log is read."""

    MAXTEXT = "maxtext"
    JSONL = "jsonl"
    REGEX = "regex"
    DEEPSPEED = "deepspeed"
    TRANSFORMERS = "transformers"


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
                    "(JSON objects with `step` and `loss`), deepspeed (DeepSpeed's `[Rank 0] "
                    "step=N, ...` lines; no loss), transformers (Hugging Face Trainer's "
                    "training bar and log dicts) or regex.")
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


_ZERO_NEEDS_TORCH = ("zero describes a PyTorch program's model states, for the torchrun and "
                     "accelerate launchers; the built-in trainer's memory is checked from its "
                     "config")


class ZeroSpec(ApiModel):
    """The model states a PyTorch program keeps on each GPU under DeepSpeed ZeRO (or FSDP), so
    that a job whose parameters, gradients and optimizer states cannot fit its GPUs is refused
    before any node is started (docs/gpu.md#memory)."""

    model_config = ConfigDict(json_schema_extra=cel_extra(
        cel_rule("!has(self.offload) || self.offload != 'parameters' || self.stage == 3",
                 OFFLOAD_PARAMETERS_NEEDS_STAGE_3, ".offload"),
        cel_rule("!has(self.offload) || self.offload == 'none' || self.stage != 0",
                 OFFLOAD_NEEDS_A_STAGE, ".offload"),
    ))

    stage: int = Field(
        ..., ge=0, le=3,
        description="0: plain data parallelism (DDP: every GPU holds everything); 1, 2, 3: "
                    "DeepSpeed ZeRO's stages (FSDP FULL_SHARD shards as 3, SHARD_GRAD_OP as 2).")
    parameters: int = Field(
        ..., ge=1, le=100_000_000_000_000,
        description="The model's parameters (e.g. 8030261248 for Llama-3-8B).")
    largest_layer_parameters: int = Field(
        0, ge=0, le=100_000_000_000_000,
        description="Parameters of the largest layer (usually the embedding, vocab x width), "
                    "which ZeRO stage 3 gathers whole on each GPU; 0 leaves it out.")
    offload: Offload = Field(
        Offload.NONE,
        description="none; optimizer (ZeRO-Offload of the optimizer states to CPU memory, "
                    "stages 1-3); parameters (the optimizer and the parameters, stage 3).")

    @model_validator(mode="after")
    def _offload_fits_the_stage(self) -> ZeroSpec:
        problem = offload_problem(self.stage, self.offload)
        if problem:
            raise ValueError(problem)
        return self


_LAUNCHER_NEEDS_COMMAND = ("launcher torchrun or accelerate starts a script of the job's own: "
                           "set command to the script and its arguments")
_LAUNCHER_ARGS_NEED_LAUNCHER = ("launcherArgs are options for torchrun or accelerate; set "
                                "launcher, or pass them in command")


class TrainerSpec(ApiModel):
    """The program every JAX process runs: the built-in trainer with its config, or your own."""

    model_config = ConfigDict(json_schema_extra=cel_extra(
        cel_rule("!has(self.command) || !has(self.overrides) || size(self.overrides) == 0",
                 "overrides apply to the built-in trainer only; with command set, pass "
                 "settings in args", ".overrides"),
        cel_rule("!has(self.launcher) || self.launcher == 'jax' || has(self.command)",
                 _LAUNCHER_NEEDS_COMMAND, ".launcher"),
        cel_rule("!has(self.launcherArgs) || size(self.launcherArgs) == 0 || "
                 "(has(self.launcher) && self.launcher != 'jax')",
                 _LAUNCHER_ARGS_NEED_LAUNCHER, ".launcherArgs"),
        cel_rule("!has(self.zero) || (has(self.launcher) && self.launcher != 'jax')",
                 _ZERO_NEEDS_TORCH, ".zero"),
    ))

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
    launcher: Launcher = Field(
        Launcher.JAX,
        description="What starts the processes of a node. jax (default): command runs once "
                    "per node (per container on TPUs), one JAX process. On GPU machine types, "
                    "torchrun or accelerate: the operator runs `torchrun` or `accelerate "
                    "launch` with the job's nodes, processes per node (one per GPU), node "
                    "rank and rendezvous at the first pod, and command is the script and its "
                    "arguments (e.g. [python3, train.py, --epochs, '3']).")
    launcher_args: list[str] = Field(
        default_factory=list, max_length=64,
        description="Extra options for the launcher, before the script (e.g. [--config_file, "
                    "/etc/accelerate/ds.yaml] or [--max-restarts, '0']). The options the "
                    "operator sets from the job (nodes, processes, rank, rendezvous) are "
                    "refused here.")
    progress: ProgressSpec = Field(
        default_factory=ProgressSpec,
        description="Where progress is read from: http (default; the built-in trainer's "
                    "/progress) or log, with the format of process 0's log lines.")
    zero: ZeroSpec | None = Field(
        None,
        description="Under torchrun or accelerate: the program's parameters and ZeRO stage, "
                    "so that model states that cannot fit the GPUs are refused before the "
                    "job starts.")

    @model_validator(mode="after")
    def _own_trainer_takes_no_config(self) -> TrainerSpec:
        if self.command is not None and (self.config or self.overrides):
            raise ValueError("config and overrides apply to the built-in trainer only; with "
                             "command set, pass settings in args")
        if self.launcher is not Launcher.JAX and self.command is None:
            raise ValueError(_LAUNCHER_NEEDS_COMMAND)
        if self.launcher_args and self.launcher is Launcher.JAX:
            raise ValueError(_LAUNCHER_ARGS_NEED_LAUNCHER)
        if self.zero is not None and self.launcher is Launcher.JAX:
            raise ValueError(_ZERO_NEEDS_TORCH)
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
