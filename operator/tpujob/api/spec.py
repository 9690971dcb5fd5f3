"""The desired state of a TpuTrainingJob: which TPU slice, which image and trainer config, how the
device mesh is split, where output goes, and how the run is scheduled, restarted and watched.

Checks here are syntactic and local to the spec (what the CRD schema and its CEL rules also
enforce at `kubectl apply`). Whether a slice size exists, whether the mesh fits the topology and
whether the model fits in HBM are the operator's checks, made before anything is launched."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from tpujob.api.base import ApiModel, Quantity
from tpujob.api.env_vars import WANDB_KEY_ENV, EnvVar
from tpujob.api.parallelism import Parallelism
from tpujob.api.patterns import (
    DNS_LABEL_PATTERN,
    MACHINE_TYPE_PATTERN,
    OutputLocation,
    SliceName,
)
from tpujob.api.recovery import LocalCheckpoints, RestartPolicy, RestartStrategy
from tpujob.api.scheduling import Scheduling
from tpujob.api.schema import cel_extra, cel_rule
from tpujob.api.trainer_spec import DataSpec, TrainerSpec, WandbSpec

# The one resource the operator derives from the slice; users must not request it by hand.
TPU_RESOURCE = "google.com/tpu"

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


_RESTART_JOB_ONE_SLICE = ("spec.restartPolicy.strategy RestartJob restarts only the failed "
                          "slice, so it needs spec.slices > 1; use Recreate or InPlaceRestart "
                          "for a single slice")




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
                    "tpu7x, chips on v5e/v5litepod and v6e); or a GPU machine type "
                    "(a3-highgpu-8g, a3-megagpu-8g, a3-ultragpu-8g, a4-highgpu-8g) with "
                    "spec.nodes. Immutable.")
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
    nodes: int | None = Field(
        None, ge=1, le=1024, json_schema_extra=cel_extra(cel_rule(
            "self == oldSelf",
            "spec.nodes is immutable: delete the job and create it again to change it")),
        description="GPU machine types only: how many nodes (VMs) of spec.slice, each running "
                    "one trainer container with every GPU of the node; default 1. A TPU "
                    "slice's hosts follow from its size. Immutable.")
    gpu_networks: list[Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=63)]] | None = Field(
        None, min_length=1, max_length=16,
        description="GPU machine types only: the cluster's networks for the node's GPU NICs "
                    "(GKE network names), in NIC order, for the pod's "
                    "networking.gke.io/interfaces. Default: GKE's documented names, vpc1-vpc4 "
                    "(a3-highgpu-8g), vpc1-vpc8 (a3-megagpu-8g), rdma-0-rdma-7 (a3-ultragpu-8g, "
                    "a4-highgpu-8g).")
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
                                   description="Kueue queue and priorities, GKE capacity and "
                                               "topology-aware placement.")
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
