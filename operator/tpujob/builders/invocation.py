"""How a job's trainer is started, translated from the spec in one place: the config file the
built-in trainer loads and the arguments laid over it, the command, the environment the job
adds beside the process wiring, the mounts, and the pod volumes they need. The JobSet builder
puts it in every container; the operator's validation loads exactly the config the trainer will
(the file and the arguments), so what is checked before launch is what runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tpujob.api.recovery import LocalCheckpointMedium
from tpujob.api.spec import TpuTrainingJobSpec
from tpujob.builders import names
from tpujob.builders.trainer_config import build_trainer_config

SHM_VOLUME = "dshm"
CONFIG_VOLUME = "config"
LOCAL_CHECKPOINT_VOLUME = "local-checkpoints"
TRAINER_COMMAND = "tpujob-train"
WANDB_KEY_ENV = "WANDB_API_KEY"


@dataclass(frozen=True)
class TrainerInvocation:
    """One trainer process's start, less what differs between the processes (their wiring and
    metrics port)."""

    command: list[str]
    args: list[str]                                   # before the per-process metrics port
    config: dict[str, Any] | None = None              # built-in trainer: the config file
    config_args: list[str] = field(default_factory=list)  # its overrides, in the args too
    env: list[dict[str, Any]] = field(default_factory=list)      # before the user's spec.env
    secret_env: list[dict[str, Any]] = field(default_factory=list)  # after it
    mounts: list[dict[str, Any]] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)  # the pod's

    def container_args(self, metrics_port: int) -> list[str]:
        """The arguments of the process that serves its metrics on `metrics_port`."""
        if self.config is None:
            return list(self.args)
        return [*self.args, f"metrics.port={metrics_port}"]


def _local_checkpoint_volume(spec: TpuTrainingJobSpec, namespace: str, job_name: str
                             ) -> dict[str, Any]:
    """A hostPath folder per job (outlives the pod on its node) or an emptyDir (outlives
    container restarts only)."""
    local = spec.local_checkpoints
    if local.medium == LocalCheckpointMedium.NODE:
        return {"name": LOCAL_CHECKPOINT_VOLUME, "hostPath": {
            "path": f"{local.host_path}/{namespace}/{job_name}", "type": "DirectoryOrCreate"}}
    empty_dir: dict[str, Any] = {}
    if local.medium == LocalCheckpointMedium.MEMORY:
        empty_dir["medium"] = "Memory"
    if local.size_limit is not None:
        empty_dir["sizeLimit"] = local.size_limit
    return {"name": LOCAL_CHECKPOINT_VOLUME, "emptyDir": empty_dir}


def build_invocation(spec: TpuTrainingJobSpec, namespace: str = "default",
                     job_name: str = "job") -> TrainerInvocation:
    """The spec's trainer invocation (see the module docstring)."""
    env: list[dict[str, Any]] = []
    mounts = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    volumes: list[dict[str, Any]] = [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}]
    config = None if spec.is_custom_trainer else build_trainer_config(spec)
    config_args: list[str] = []
    if config is not None:
        mounts.append({"name": CONFIG_VOLUME, "mountPath": names.CONFIG_MOUNT, "readOnly": True})
        volumes.append({"name": CONFIG_VOLUME,
                        "configMap": {"name": config_map_name(job_name)}})
    local = spec.local_checkpoints
    if local is not None:
        env.append({"name": names.LOCAL_CHECKPOINT_ENV, "value": names.LOCAL_CHECKPOINT_MOUNT})
        mounts.append({"name": LOCAL_CHECKPOINT_VOLUME,
                       "mountPath": names.LOCAL_CHECKPOINT_MOUNT})
        volumes.append(_local_checkpoint_volume(spec, namespace, job_name))
        if config is not None:
            config.setdefault("checkpoint", {}).setdefault("local", {}).update(
                {"every": local.every_steps, "keep": local.keep})
            # The folder goes on the command line, not in the file: a path in the arguments
            # is one the runtime maps (local mode does), a path inside a file is not.
            config_args.append(f"checkpoint.local.directory={names.LOCAL_CHECKPOINT_MOUNT}")
    secret_env = []
    if spec.wandb is not None and spec.wandb.api_key_secret is not None:
        ref = spec.wandb.api_key_secret
        secret_env.append({"name": WANDB_KEY_ENV, "valueFrom": {
            "secretKeyRef": {"name": ref.name, "key": ref.key}}})
    if config is None:
        command = list(spec.trainer.command or [])
        args = list(spec.trainer.args or [])
    else:
        config_args.extend(spec.trainer.overrides)
        command = [TRAINER_COMMAND]
        args = ["--config", f"{names.CONFIG_MOUNT}/{names.CONFIG_FILE}", *config_args]
    return TrainerInvocation(command=command, args=args, config=config, config_args=config_args,
                             env=env, secret_env=secret_env, mounts=mounts, volumes=volumes)


def config_map_name(job_name: str) -> str:
    return f"{job_name}-trainer"
