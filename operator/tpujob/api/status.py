"""The observed state of a TpuTrainingJob, written only by the operator: phase, Kubernetes-style
conditions, the slice as planned, restarts, training progress and the reason for a failure."""

from __future__ import annotations

import math
from enum import StrEnum

from pydantic import Field

from tpujob.api.base import ApiModel, MicroTimestamp, Timestamp

CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Phase(StrEnum):
    """Where the job is in its life."""

    PENDING = "Pending"
    QUEUED = "Queued"
    STARTING = "Starting"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    INVALID = "Invalid"
    SUSPENDED = "Suspended"

    @property
    def is_terminal(self) -> bool:
        """A job in a terminal phase never runs again without being re-created."""
        return self in (Phase.SUCCEEDED, Phase.FAILED, Phase.INVALID)


class ConditionType(StrEnum):
    """Condition types the operator sets."""

    VALID = "Valid"
    RUNNING = "Running"
    STALLED = "Stalled"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SPEC_APPLIED = "SpecApplied"
    PROGRESS_READABLE = "ProgressReadable"  # progress lines in process 0's log can be read
    PODS_SCHEDULED = "PodsScheduled"      # False: pods wait for nodes past the job's bound
    SLOW_HOST = "SlowHost"                # True: a host's own work slows every step


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class FailureReason(StrEnum):
    """Why a job failed or was refused, as read from the trainer's exit and the cluster."""

    INVALID_SPEC = "InvalidSpec"
    INVALID_SLICE = "InvalidSlice"      # the refusals of the pre-flight check, by what it found
    INVALID_MESH = "InvalidMesh"
    INVALID_BATCH = "InvalidBatch"
    INVALID_NAME = "InvalidName"
    CONFIG_ERROR = "ConfigError"
    OUT_OF_MEMORY = "OutOfMemory"
    PREEMPTED = "Preempted"
    DATA_EXHAUSTED = "DataExhausted"
    DATA_ERROR = "DataError"
    MESH_MISMATCH = "MeshMismatch"
    NAN_LOSS = "NaNLoss"
    CHECKPOINT_ERROR = "CheckpointError"
    STALLED = "Stalled"
    RESTART_LIMIT_EXCEEDED = "RestartLimitExceeded"
    CONFLICT = "Conflict"
    WORKLOAD_POLICY = "WorkloadPolicy"
    INVALID_LAUNCHER = "InvalidLauncher"       # a GPU job's launch would not be its world
    COLLECTIVE_TIMEOUT = "CollectiveTimeout"   # NCCL's watchdog, a rendezvous that timed out
    HARDWARE_ERROR = "HardwareError"           # a GPU Xid, an uncorrectable ECC error
    ERROR = "Error"


class Condition(ApiModel):
    """One aspect of the job's state, as in Kubernetes' metav1.Condition."""

    type: str = Field(..., max_length=316, pattern=CONDITION_TYPE_PATTERN,
                      description="Condition type, e.g. Valid, Running, Stalled.")
    status: ConditionStatus = Field(..., description="True, False or Unknown.")
    reason: str = Field(..., min_length=1, max_length=1024, pattern=REASON_PATTERN,
                        description="CamelCase reason for the last transition.")
    message: str = Field("", max_length=32768, description="Human-readable details.")
    last_transition_time: Timestamp = Field(
        ..., description="When status last changed.")
    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation the condition was set from.")


class SliceStatus(ApiModel):
    """The slice as the operator planned it, summed over all slices of the job."""

    topology: str | None = Field(None, description="Topology of one slice, e.g. 4x4 (GPU "
                                 "nodes: nodes x GPUs per node, e.g. 2x8).")
    machine_type: str | None = Field(None, description="GKE machine type of the hosts.")
    hosts: int = Field(0, ge=0, description="TPU VMs (hosts) or GPU nodes, all slices together.")
    chips: int = Field(0, ge=0, description="TPU chips (or GPUs), all slices together.")
    devices: int = Field(0, ge=0, description="JAX devices (or GPUs), all slices together.")
    processes: int = Field(0, ge=0, description="Trainer processes, all slices together: JAX "
                           "processes (containers), or the launcher's world size on GPUs.")


class HostScoreStatus(ApiModel):
    """One host's straggler scores (docs/operator.md#slow-hosts)."""

    host: str = Field(..., max_length=128, description="slice-S/host-H (and /container-C where "
                      "a host runs several trainer containers).")
    score: float = Field(..., description="The lower of its two scores: 1 - the share of the "
                         "step its extra busy time costs.")
    vs_fastest: float = Field(..., description="Against the fastest host.")
    vs_own_best: float = Field(..., description="Against its own best window.")
    busy_seconds: float = Field(..., ge=0, description="Median busy time per step (its own "
                                "work before the step's collectives), current window.")
    step_seconds: float | None = Field(None, ge=0, description="Median step time, current "
                                       "window, where reported.")
    steps: int = Field(..., ge=0, description="Steady steps scored (warm-up and checkpoint "
                       "steps left out).")
    flagged: bool = Field(False, description="Below the threshold on either score.")


class HostsStatus(ApiModel):
    """Every host's report, read from its own log: which host is slow."""

    reporting: int = Field(0, ge=0, description="Trainer processes whose host reports were "
                           "read in the current attempt.")
    scored: int = Field(0, ge=0, description="Of them, those with enough steady steps to be "
                        "scored.")
    slow_host: str | None = Field(None, max_length=128, description="The flagged host with the "
                                  "lowest score; none when no host is flagged.")
    display: str | None = Field(None, max_length=64, description="The SLOW HOST column: the "
                                "host and its score.")
    message: str = Field("", max_length=4096, description="Every flagged host with its "
                         "figures, or the slowest host's score.")
    slowest: list[HostScoreStatus] = Field(
        default_factory=list, max_length=8, description="The lowest-scored hosts, lowest "
        "first.")
    behind: list[str] = Field(default_factory=list, max_length=64, description="When the job "
                              "last stalled: the hosts behind the others (at a lower step, "
                              "silent while the others beat, or busy in their own work while "
                              "the others wait on the step); kept until a JobSet restart.")


class ProgressDisplay(ApiModel):
    """The progress as `kubectl get tpujobs` prints it (the numbers above keep full
    precision)."""

    loss: str | None = Field(None, description="Loss to 4 significant digits.")
    tokens_per_second_per_device: str | None = Field(
        None, description="Tokens per second per device, a whole number.")
    tflops_per_device: str | None = Field(
        None, description="Model TFLOP/s per device, 3 significant digits.")
    mfu: str | None = Field(None, description="MFU as a percent; - where the device's peak is "
                                              "not known (a CPU).")


def _significant(value: float, digits: int = 3) -> str:
    """`0.010008215474622838` -> `0.0100`, `197.3456` -> `197`: never in e-notation."""
    if value == 0 or not math.isfinite(value):
        return f"{value:.0f}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def display_of(loss: float | None, tokens_per_second: float | None, mfu: float | None,
               tflops: float | None = None) -> ProgressDisplay:
    """`1.7577435970306396` -> `1.758`, `5425.809674792159` -> `5426`, `0.0100082` -> `0.0100`,
    `2.2e-05` -> `0.0022%`; an MFU the trainer could not measure (no peak for its device)
    -> `-`."""
    def percent(value: float) -> str:
        text = f"{value * 100:.2g}" if value * 100 < 1 else f"{value * 100:.1f}"
        if "e" in text:
            text = f"{value * 100:.6f}".rstrip("0").rstrip(".")
        return f"{text}%"
    return ProgressDisplay(
        loss=None if loss is None else f"{loss:.4g}",
        tokens_per_second_per_device=None if tokens_per_second is None
        else f"{tokens_per_second:.0f}",
        tflops_per_device=None if tflops is None else _significant(tflops),
        mfu="-" if mfu is None else percent(mfu))


class Progress(ApiModel):
    """Training progress as reported by process 0 of the trainer."""

    step: int = Field(0, ge=0, description="Last completed training step.")
    total_steps: int | None = Field(None, ge=0, description="Steps the run will take.")
    loss: float | None = Field(None, description="Training loss at step.")
    step_time_seconds: float | None = Field(None, ge=0, description="Seconds per step, recent.")
    tokens_per_second_per_device: float | None = Field(
        None, ge=0, description="Training throughput per JAX device.")
    tflops_per_device: float | None = Field(
        None, ge=0, description="Model TFLOP/s achieved per JAX device.")
    mfu: float | None = Field(
        None, ge=0, description="Model FLOPs utilization: achieved / peak bf16 FLOP/s (0-1).")
    last_checkpoint_step: int | None = Field(None, ge=0,
                                             description="Step of the newest saved checkpoint.")
    last_update_time: Timestamp | None = Field(None, description="When progress was last read.")
    last_step_time: Timestamp | None = Field(
        None, description="When step last changed (what stall detection measures from).")
    trainer_phase: str | None = Field(
        None, max_length=63, description="What process 0 of the trainer is doing, in its own "
        "words: starting, initializing, compiling, training.")
    display: ProgressDisplay | None = Field(
        None, description="Loss, tokens/s and MFU as `kubectl get` prints them.")


class TrainerSeconds(ApiModel):
    """Seconds of the trainer's own timeline by category (its names: docs/goodput.md)."""

    tpu_initialization: float = Field(0, ge=0, description="Process start to JAX distributed "
                                                           "init and device discovery done.")
    training_prep: float = Field(0, ge=0, description="Mesh, model, optimizer, data source and "
                                                      "fresh initialization.")
    checkpoint_restore: float = Field(0, ge=0, description="Reading the checkpoint resumed from.")
    program_startup: float = Field(0, ge=0, description="Compilation up to the first step.")
    data_loading: float = Field(0, ge=0, description="Waiting for the next batch in the loop.")
    checkpoint_save: float = Field(0, ge=0, description="Checkpoint saves that block the loop.")
    productive: float = Field(0, ge=0, description="Training steps (before lost steps are "
                                                   "taken out).")


class GoodputAttempt(ApiModel):
    """One start of the trainer's processes as last read: what the operator folds into the
    totals when the next start appears (kept here because the status is its only memory)."""

    attempt: str = Field(..., max_length=64, description="Process 0's start, as the trainer "
                                                         "names it.")
    resumed_from_step: int | None = Field(None, ge=0, description="Step this start resumed "
                                                                  "from (0: from scratch).")
    step: int | None = Field(None, ge=0, description="Furthest step completed.")
    steps: int = Field(0, ge=0, description="Steps completed by this start.")
    seconds: TrainerSeconds = Field(default_factory=TrainerSeconds,
                                    description="Its timeline so far.")
    step_time_median_seconds: float | None = Field(None, ge=0, description="Median step time.")
    step_time_max_deviation_percent: float | None = Field(
        None, description="Slowest step against the median, in percent.")


class Badput(ApiModel):
    """Seconds that were not productive training, by ml-goodput-measurement's BadputType
    names; null: not measured (a trainer that does not serve its timeline)."""

    tpu_initialization: float | None = Field(None, ge=0, description="TPU_INITIALIZATION.")
    training_prep: float | None = Field(None, ge=0, description="TRAINING_PREP.")
    program_startup: float | None = Field(None, ge=0, description="PROGRAM_STARTUP "
                                                                  "(compilation).")
    data_loading_sync: float | None = Field(None, ge=0, description="DATA_LOADING_SYNC.")
    unproductive_checkpoint_save_time: float | None = Field(
        None, ge=0, description="UNPRODUCTIVE_CHECKPOINT_SAVE_TIME (blocking part).")
    unproductive_checkpoint_restore_time: float | None = Field(
        None, ge=0, description="UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME.")
    wasted_progress_from_disruption: float | None = Field(
        None, ge=0, description="WASTED_PROGRESS_FROM_DISRUPTION: steps a restart threw away.")
    infrastructure_recovery_from_disruption: float | None = Field(
        None, ge=0, description="INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION: failure seen to "
                                "every host running again.")
    other: float | None = Field(None, ge=0, description="OTHER: wall time in none of the "
                                                        "above (pod start, process exit).")


class Goodput(ApiModel):
    """How much of the job's wall time became training progress, integrated by the operator
    over every restart (docs/goodput.md defines each figure)."""

    percent: float | None = Field(None, ge=0, le=100, description="productiveSeconds / "
                                  "wallSeconds x 100; null when productive time is not measured.")
    display: str | None = Field(None, description="percent as `kubectl get` prints it, one "
                                "decimal and a % sign (92.1%); - when not measured.")
    productive_seconds: float | None = Field(None, ge=0, description="Training step time that "
                                             "was kept (lost steps taken out).")
    wall_seconds: float = Field(0, ge=0, description="Time the job was starting, running or "
                                "restarting: from its first start to now or its end.")
    queued_seconds: float = Field(0, ge=0, description="Time pending, queued or suspended.")
    recovery_seconds: float = Field(0, ge=0, description="Failure seen to every host running "
                                                         "again, all restarts together.")
    lost_steps: int = Field(0, ge=0, description="Steps computed after the checkpoint a restart "
                                                 "resumed from, thrown away.")
    badput: Badput = Field(default_factory=Badput, description="Unproductive seconds by "
                                                                "category.")
    not_measured: list[str] = Field(default_factory=list, max_length=16,
                                    description="Categories the operator could not measure.")
    step_time_median_seconds: float | None = Field(None, ge=0, description="Median step time "
                                                   "of the newest start (its first step left "
                                                   "out).")
    step_time_deviation_percent: float | None = Field(
        None, description="The last step's time against that median, in percent.")
    step_time_max_deviation_percent: float | None = Field(
        None, description="The slowest step of the newest start against the median, percent.")
    attempts: int = Field(0, ge=0, description="Trainer starts seen.")
    ended: TrainerSeconds = Field(default_factory=TrainerSeconds,
                                  description="Timelines of the starts that ended, summed.")
    current: GoodputAttempt | None = Field(None, description="The newest start as last read.")
    last_update_time: Timestamp | None = Field(None, description="Time accounted up to.")
    accounted_until: MicroTimestamp | None = Field(
        None, description="The same instant to the microsecond (what the next pass counts "
                          "from).")


class RecoveryStatus(ApiModel):
    """One restart, from the failure to the new attempt's first step, in parts that follow one
    another (docs/goodput.md, "Recovery"); a part is null until known, or where it cannot be
    measured (a trainer without its timeline has no init to first step parts)."""

    restart: int = Field(..., ge=1, description="Which restart (status.restarts after it).")
    cause: str = Field("", max_length=1024, description="What ended the attempt before.")
    failed_at: MicroTimestamp = Field(..., description="When it ended: the first failed "
                                      "container's exit, or the last step before a stall.")
    detect_seconds: float | None = Field(None, ge=0, description="The failure to the new "
                                         "attempt's first pod: seen, old pods torn down.")
    schedule_seconds: float | None = Field(None, ge=0, description="First new pod to the last "
                                           "one placed on a node.")
    start_seconds: float | None = Field(None, ge=0, description="Last pod placed to the last "
                                        "trainer container running (image pull, start).")
    init_seconds: float | None = Field(None, ge=0, description="Then to JAX distributed init "
                                       "done on process 0 (imports, every process joining).")
    prepare_seconds: float | None = Field(None, ge=0, description="Mesh, model, optimizer, "
                                          "data source.")
    restore_seconds: float | None = Field(None, ge=0, description="Reading the checkpoint.")
    compile_seconds: float | None = Field(None, ge=0, description="Getting the step program.")
    compile_cache: str | None = Field(None, max_length=16, description="miss (XLA compiled "
                                      "it), hit (JAX's compilation cache) or executable (the "
                                      "whole compiled step from the job's cache).")
    first_step_seconds: float | None = Field(None, ge=0, description="The first batch and "
                                             "step.")
    total_seconds: float | None = Field(None, ge=0, description="The failure to the first "
                                        "step of the new attempt; set once it is done.")
    resumed_from_step: int | None = Field(None, ge=0, description="Step the new attempt "
                                          "resumed from.")


class Failure(ApiModel):
    """Why the job failed (or was refused)."""

    reason: FailureReason = Field(..., description="Machine-readable cause.")
    message: str = Field("", max_length=32768, description="What happened and what to change.")
    pod: str | None = Field(None, max_length=253, description="The pod whose container's exit "
                            "explains the failure, when one does (its logs say more).")
    container: str | None = Field(None, max_length=63, description="That pod's container.")


class AdmissionCheckStatus(ApiModel):
    """One Kueue admission check of the job's Workload."""

    name: str = Field(..., max_length=253, description="The AdmissionCheck's name.")
    state: str = Field(..., max_length=32, description="Pending, Ready, Retry or Rejected.")
    message: str = Field("", max_length=4096, description="The check's own words.")


class QueueStatus(ApiModel):
    """The job's place in Kueue, read from the Workload Kueue made for its JobSet
    (docs/queueing.md)."""

    state: str = Field(..., max_length=32, description="Pending, Inadmissible, QuotaReserved, "
                       "Admitted, Preempted or Evicted (waiting again), Deactivated, Finished.")
    reason: str = Field(..., max_length=64, description="Why, in one word: WaitingForQuota, "
                        "ExceedsMaxQuota, NoMatchingFlavor, QueueNotFound, QueueInactive, "
                        "TopologyPlacementFailed, WaitingForPreemptedWorkloads, "
                        "UnsatisfiedAdmissionChecks, AdmissionCheckRejected, Preempted, "
                        "Evicted, Deactivated, Admitted or Pending.")
    message: str = Field("", max_length=4096, description="Kueue's own words for the state.")
    local_queue: str | None = Field(None, max_length=253, description="The LocalQueue.")
    cluster_queue: str | None = Field(None, max_length=253, description="The ClusterQueue that "
                                      "reserved quota, once one has.")
    workload: str | None = Field(None, max_length=253, description="The Kueue Workload's name.")
    priority: int | None = Field(None, description="The Workload's priority.")
    priority_class: str | None = Field(None, max_length=253, description="Its "
                                       "WorkloadPriorityClass.")
    flavors: dict[str, str] = Field(default_factory=dict, description="Resource -> the "
                                    "ResourceFlavor admitted to.")
    admission_checks: list[AdmissionCheckStatus] = Field(
        default_factory=list, max_length=16, description="The Workload's admission checks.")
    queued_since: Timestamp | None = Field(None, description="When it was queued, or queued "
                                           "again after an eviction.")
    admitted_time: Timestamp | None = Field(None, description="When Kueue last admitted it.")
    evictions: int = Field(0, ge=0, description="Times Kueue evicted it (preemption included).")
    last_eviction: str | None = Field(None, max_length=4096, description="The newest "
                                      "eviction's reason and Kueue's words.")


class TpuTrainingJobStatus(ApiModel):
    """Observed state; written by the operator through the status subresource."""

    phase: Phase = Field(Phase.PENDING, description="Lifecycle phase.")
    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation the operator last acted on.")
    conditions: list[Condition] = Field(
        default_factory=list, max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        description="Current conditions, one per type.")
    slice: SliceStatus | None = Field(None, description="Hosts, chips and devices of the job.")
    restarts: int = Field(0, ge=0, description="Times the run was restarted (by the JobSet's "
                                               "failure policy or after a stall).")
    stall_restarts: int = Field(0, ge=0, description="Restarts the operator made after a stall "
                                                     "(included in restarts).")
    restart_checkpoints: list[int] | None = Field(
        None, max_length=64, description="The newest checkpoint step at each "
        "stall restart, oldest first (-1: none yet); after 3 restarts in a row with no newer "
        "checkpoint, the next stall fails the job.")
    jobset_restarts: int = Field(0, ge=0, description="Restarts the JobSet reported when last "
                                                      "observed.")
    progress: Progress | None = Field(None, description="Training progress.")
    failure: Failure | None = Field(None, description="Set when phase is Failed or Invalid.")
    reason: str | None = Field(None, max_length=64, description="Why the job is where it is, "
                               "in one word (the REASON column): failure.reason when Failed or "
                               "Invalid, queue.reason while Queued, Unschedulable while pods "
                               "wait for nodes.")
    queue: QueueStatus | None = Field(None, description="Its place in Kueue, for a job with "
                                      "spec.scheduling.queueName.")
    goodput: Goodput | None = Field(None, description="Goodput and badput, all restarts "
                                                      "together.")
    hosts: HostsStatus | None = Field(None, description="Per-host straggler scores of the "
                                      "current attempt, from every process's host reports.")
    recoveries: list[RecoveryStatus] | None = Field(
        None, max_length=16, description="The newest restarts' recoveries, oldest first: "
        "where the time from each failure to the next first step went.")
    start_time: Timestamp | None = Field(None, description="When the trainer first started.")
    completion_time: Timestamp | None = Field(None, description="When the job finished.")


def build_conditions(current: list[Condition], new: Condition) -> list[Condition]:
    """The condition list with `new` set: its type replaced in place (or appended), keeping the
    old lastTransitionTime when the status did not change, as Kubernetes' SetStatusCondition."""
    out: list[Condition] = []
    replaced = False
    for cond in current:
        if cond.type != new.type:
            out.append(cond)
            continue
        replaced = True
        if cond.status == new.status:
            new = new.model_copy(update={"last_transition_time": cond.last_transition_time})
        out.append(new)
    if not replaced:
        out.append(new)
    return out


def find_condition(conditions: list[Condition], type_: str) -> Condition | None:
    """The condition of that type, if present."""
    return next((c for c in conditions if c.type == type_), None)


__all__ = [
    "AdmissionCheckStatus", "Badput", "Condition", "ConditionStatus", "ConditionType", "Failure", "FailureReason",
    "Goodput", "GoodputAttempt", "HostScoreStatus", "HostsStatus", "Phase", "Progress", "ProgressDisplay", "QueueStatus", "RecoveryStatus", "SliceStatus",
    "TpuTrainingJobStatus", "TrainerSeconds", "build_conditions", "display_of", "find_condition",
]
