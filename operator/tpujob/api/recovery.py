"""How a run recovers: when a failed or stalled run is restarted, how the JobSet restarts it, and
the node-local checkpoint tier a restart may resume from."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from tpujob.api.base import ApiModel, Quantity


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


class RestartPolicy(ApiModel):
    """When a failed run is restarted (all hosts together, resuming from the newest checkpoint)."""

    max_restarts: int = Field(3, ge=0, le=1000,
                              description="Restarts allowed before the job fails.")
    retryable_exit_codes: list[Annotated[int, Field(ge=1, le=255)]] | None = Field(
        None, max_length=64,
        description="Container exit codes that restart the job; other non-zero codes fail it. "
                    "Default [42] (the built-in trainer exits 42 on a retryable error such as "
                    "a lost peer); [1, 42] under the torchrun and accelerate launchers, which "
                    "exit 1 when a peer is lost (and on any other error of their processes).")
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
