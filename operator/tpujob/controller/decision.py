"""What the operator's decision for one job is made of (`decide`): what it looked at (the
Observation) and what it decided (the Decision: the new status, the Events to emit, the Actions
to take, in order)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from tpujob.api.status import FailureReason, TpuTrainingJobStatus
from tpujob.controller.host_watch import HostsView
from tpujob.controller.kueue_workload import WorkloadReading
from tpujob.controller.observe import FailureCause, JobSetState, Unscheduled
from tpujob.controller.recovery import AttemptStart
from tpujob.controller.trainer_reports import ProgressReading, TimelineReading
from tpujob.validation import Verdict


class Action(StrEnum):
    """What the reconciler must do, in this order, before writing the status."""

    CREATE_CHILDREN = "CreateChildren"    # the ConfigMap and the JobSet
    SUSPEND = "Suspend"                   # set the JobSet's spec.suspend
    RESUME = "Resume"                     # clear it
    RESTART = "Restart"                   # delete the JobSet's Jobs: every host starts again
    RECREATE = "Recreate"                 # delete the JobSet; it is created anew from the spec
    SET_PRIORITY = "SetPriority"          # label the JobSet with spec.scheduling.priority
    STOP = "Stop"                         # suspend for good: the job failed
    COLLECT_STACKS = "CollectStacks"      # every process's stacks, before a stall's restart


@dataclass(frozen=True)
class Event:
    type: str      # Normal or Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Observation:
    """Everything the decision looks at, gathered by the reconciler."""

    now: datetime
    generation: int
    verdict: Verdict
    jobset: JobSetState
    spec_matches: bool = True           # the JobSet's spec is what the job's spec builds
    changed_fields: tuple[str, ...] = ()
    failure: FailureCause | None = None   # from the pods, when read
    progress: ProgressReading | None = None            # None: not read or not served
    finals: tuple[TimelineReading, ...] = ()           # timelines left in termination messages
    blocked: tuple[FailureReason, str] | None = None   # children cannot be created (yet)
    progress_problem: str | None = None  # a progress line in process 0's log that cannot be read
    workload: WorkloadReading | None = None   # the JobSet's Kueue Workload, when read
    unscheduled: Unscheduled | None = None    # pods the scheduler has not placed, when read
    hosts: HostsView | None = None            # every host's reports, when read this pass
    attempt_start: AttemptStart | None = None  # the pods of a restart's new attempt, when read


@dataclass(frozen=True)
class Decision:
    status: TpuTrainingJobStatus
    events: list[Event] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
