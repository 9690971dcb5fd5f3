"""The checkpoint section of the trainer config: Orbax checkpoints and resume (pure pydantic)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LocalCheckpointConfig(BaseModel):
    """The node-local tier: frequent checkpoints of each process's own shards on fast storage
    that survives the process (a node path or a RAM disk), beside the persistent ones."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    directory: str | None = Field(
        None, description="A node-local path (e.g. an emptyDir or hostPath mount); each process "
        "writes under `process-<index>/` in it. None: no local tier.")
    every: int = Field(10, ge=1, description="Steps between local checkpoints.")
    keep: int = Field(2, ge=1, description="Local checkpoints kept per process (older ones are deleted).")


class CheckpointConfig(BaseModel):
    """Checkpoints under `<output>/checkpoints`, local or `gs://`: every N steps and at the end."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(True, description="Save checkpoints and resume from the newest complete one.")
    every: int = Field(100, ge=1, description="Steps between checkpoints (a save at every multiple of it).")
    keep: int = Field(3, ge=1, description="Keep the last K complete checkpoints; older ones are deleted.")
    async_save: bool = Field(
        True, description="Write in the background: save() blocks only to copy arrays off the device.")
    save_timeout_s: int = Field(
        1200, ge=1,
        description="Seconds a save may take from its start until it is complete on storage (the "
        "background part of an async save included). A save that fails or takes longer stops the "
        "run with CheckpointError (exit 42, retried); the restarted run resumes from the last "
        "complete checkpoint and skips the unfinished one.")
    resume: bool = Field(True, description="On start, resume from the newest complete checkpoint in the output.")
    init_params_from: str | None = Field(
        None,
        description="A checkpoint directory (local or gs://) of another run to load the parameters "
        "from when there is nothing to resume; optimizer state starts fresh.")
    init_params_step: int | None = Field(
        None, ge=0, description="Step of `init_params_from` to load; default: its newest complete one.")
    local: LocalCheckpointConfig = Field(
        default_factory=LocalCheckpointConfig,
        description="Emergency checkpoints on node-local storage, restored when newer than the "
        "persistent ones (docs/goodput.md).")
