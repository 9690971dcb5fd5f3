"""The operator's decision for one job: from the previous status and what was just observed, the
new status, the Events to emit and the actions to take. Pure, so every phase transition is a
table row in a test; `reconcile` only gathers the observation and carries the decision out.

Phases: Invalid (refused before anything is created), Pending (nothing running yet), Queued
(suspended until Kueue admits it), Starting (JobSet created, not every host running),
Running, Restarting (after a restart, until every host runs again), Suspended, and the terminal
Succeeded and Failed. Terminal phases stay: a finished job never runs again.
"""

from __future__ import annotations

from datetime import datetime

from tpujob.api.scheduling import DEFAULT_UNSCHEDULED_WARNING_SECONDS
from tpujob.api.spec import TpuTrainingJobSpec
from tpujob.api.status import (
    Condition,
    ConditionStatus,
    ConditionType,
    Failure,
    FailureReason,
    Phase,
    SliceStatus,
    TpuTrainingJobStatus,
    build_conditions,
    find_condition,
)
from tpujob.api.trainer_spec import ProgressSource
from tpujob.controller.decision import Action, Decision, Event, Observation
from tpujob.controller.goodput import account, display_of_percent, summary
from tpujob.controller.host_status import decide_hosts
from tpujob.controller.kueue_workload import QueueState, describe_wait
from tpujob.controller.observe import FailureCause
from tpujob.controller.progress_status import (
    build_progress,
    replace_progress,
    restart_progress,
    stall_deadline,
)
from tpujob.controller.queueing import (
    UNSCHEDULABLE,
    build_queue_status,
    is_unscheduled_too_long,
    queue_events,
    unscheduled_sentence,
)
from tpujob.controller.recovery import track
from tpujob.controller.stall import StallOutcome, hang_before_the_deadline, judge_stall
from tpujob.validation import Verdict

RETRYABLE = {FailureReason.PREEMPTED, FailureReason.ERROR}
WARNING_PHASES = {Phase.FAILED, Phase.INVALID, Phase.RESTARTING}


def _condition(type_: ConditionType, status: bool, reason: str, message: str, now: datetime,
               generation: int) -> Condition:
    return Condition(type=type_.value,
                     status=ConditionStatus.TRUE if status else ConditionStatus.FALSE,
                     reason=reason, message=message, last_transition_time=now,
                     observed_generation=generation)


class _Fields:
    """A mutable stand-in for the (frozen) status model while it is decided."""

    def __init__(self, prev: TpuTrainingJobStatus):
        object.__setattr__(self, "_values", {k: getattr(prev, k)
                                             for k in TpuTrainingJobStatus.model_fields})

    def __getattr__(self, name: str):
        return self._values[name]

    def __setattr__(self, name: str, value) -> None:
        if name not in self._values:
            raise AttributeError(name)
        self._values[name] = value

    def build(self) -> TpuTrainingJobStatus:
        return TpuTrainingJobStatus.model_validate(self._values)


class _Builder:
    """The status being decided, with the conditions and events that go with it."""

    def __init__(self, prev: TpuTrainingJobStatus, obs: Observation):
        self.prev = prev
        self.obs = obs
        self.status = _Fields(prev)
        self.status.observed_generation = obs.generation
        self.events: list[Event] = []
        self.actions: list[Action] = []

    def set(self, type_: ConditionType, status: bool, reason: str, message: str = "") -> None:
        self.status.conditions = build_conditions(
            self.status.conditions,
            _condition(type_, status, reason, message, self.obs.now, self.obs.generation))

    def clear_if_present(self, type_: ConditionType, reason: str, message: str = "") -> None:
        if find_condition(self.status.conditions, type_.value) is not None:
            self.set(type_, False, reason, message)

    def event(self, type_: str, reason: str, message: str) -> None:
        self.events.append(Event(type_, reason, message))

    def decision(self) -> Decision:
        return Decision(self.status.build(), self.events, self.actions)

    def finish(self, phase: Phase, message: str = "") -> Decision:
        status = self.status
        status.phase = phase
        if phase.is_terminal and status.completion_time is None:
            status.completion_time = self.obs.now
        running = phase == Phase.RUNNING
        self.set(ConditionType.RUNNING, running, phase.value,
                 message if not running else "every host is running")
        if phase == Phase.SUSPENDED:
            self.set(ConditionType.SUSPENDED, True, "Suspended", message)
        else:
            self.clear_if_present(ConditionType.SUSPENDED, phase.value)
        if phase != self.prev.phase:
            kind = "Warning" if phase in WARNING_PHASES else "Normal"
            self.event(kind, phase.value, message or f"phase {phase.value}")
        status.reason = self._reason(phase)
        return self.decision()

    def _reason(self, phase: Phase) -> str | None:
        """The REASON column: why the job is where it is, where there is a why."""
        status = self.status
        if phase in (Phase.FAILED, Phase.INVALID) and status.failure is not None:
            return status.failure.reason.value
        if phase == Phase.QUEUED and status.queue is not None:
            return status.queue.reason
        scheduled = find_condition(status.conditions, ConditionType.PODS_SCHEDULED.value)
        if phase in (Phase.STARTING, Phase.RESTARTING) and scheduled is not None and \
                scheduled.status == ConditionStatus.FALSE:
            return UNSCHEDULABLE
        return None


def _slice_status(verdict: Verdict) -> SliceStatus | None:
    plan = verdict.plan
    if plan is None:
        return None
    if plan.is_gpu:
        return SliceStatus(topology=plan.topology, machine_type=plan.name, hosts=plan.hosts,
                           chips=plan.devices, devices=plan.devices, processes=plan.processes)
    return SliceStatus(topology=plan.slice_type.topology, machine_type=plan.machine_type.name,
                       hosts=plan.hosts * plan.slices, chips=plan.slice_type.chips * plan.slices,
                       devices=plan.devices,
                       processes=plan.processes)


def _refusal_reason(reason: str) -> FailureReason:
    """The pre-flight check's own reason (InvalidSlice, InvalidMesh, ConfigError, OutOfMemory,
    ...), so that `kubectl get tpujobs` says what is wrong; InvalidSpec for any other."""
    try:
        return FailureReason(reason)
    except ValueError:
        return FailureReason.INVALID_SPEC


def _fail(b: _Builder, reason: FailureReason, message: str, *, pod: str | None = None,
          container: str | None = None) -> Decision:
    b.status.failure = Failure(reason=reason, message=message, pod=pod, container=container)
    b.set(ConditionType.FAILED, True, reason.value, message)
    return b.finish(Phase.FAILED, message)


def decide(prev: TpuTrainingJobStatus, obs: Observation) -> Decision:
    """The next status, Events and actions for a job (see the module docstring for phases),
    with its goodput accounted up to now; a job that ends gets a Goodput Event."""
    decision = _decide(prev, obs)
    if prev.phase in (Phase.SUCCEEDED, Phase.FAILED):
        return decision
    new = decision.status
    reading = obs.progress.timeline if obs.progress is not None else None
    goodput = account(prev.goodput, now=obs.now, phase_before=prev.phase,
                      phase_after=new.phase, reading=reading, finals=obs.finals,
                      last_step_time_s=obs.progress.step_time_s if obs.progress else None)
    if new.phase == Phase.INVALID and prev.goodput is None:
        goodput = None  # never ran
    events = list(decision.events)
    lost = (goodput.lost_steps - prev.goodput.lost_steps
            if goodput is not None and prev.goodput is not None else 0)
    if lost > 0:
        # Why GOODPUT just fell: the steps the ended attempt computed past the checkpoint the
        # new one resumed from count as badput (docs/goodput.md).
        resumed = goodput.current.resumed_from_step if goodput.current else None
        wasted = ((goodput.badput.wasted_progress_from_disruption or 0.0)
                  - (prev.goodput.badput.wasted_progress_from_disruption or 0.0))
        events.append(Event("Warning", "LostSteps", (
            f"the restart lost {lost} step{'s' if lost > 1 else ''} ({wasted:.1f} s of "
            f"training) computed after the checkpoint at step {resumed}; goodput "
            f"{display_of_percent(prev.goodput.percent)} -> {goodput.display}")))
    recoveries, recovered = track(
        prev, new, failure=obs.failure, now=obs.now, start=obs.attempt_start, timeline=reading,
        serves_timeline=goodput is not None and goodput.current is not None)
    if recovered is not None:
        events.append(Event("Normal", "Recovered", recovered))
    if new.phase in (Phase.SUCCEEDED, Phase.FAILED) and goodput is not None:
        # Before the phase's own Event: the job's last word stays its phase.
        events.insert(0, Event("Normal", "Goodput", summary(goodput)))
    return Decision(new.model_copy(update={"goodput": goodput, "recoveries": recoveries}),
                    events, decision.actions)


def _decide(prev: TpuTrainingJobStatus, obs: Observation) -> Decision:
    if prev.phase in (Phase.SUCCEEDED, Phase.FAILED):
        return Decision(prev)  # terminal: nothing changes, nothing is done
    b = _Builder(prev, obs)
    verdict, js = obs.verdict, obs.jobset
    if not verdict.valid and not js.exists:
        b.status.failure = Failure(reason=_refusal_reason(verdict.reason),
                                   message=verdict.message)
        b.set(ConditionType.VALID, False, verdict.reason, verdict.message)
        return b.finish(Phase.INVALID, verdict.message)
    if prev.phase == Phase.INVALID:  # fixed by an update: start over
        b.status.failure = None
        b.status.completion_time = None
    spec = verdict.job.spec if verdict.job is not None else None
    if verdict.valid:
        b.set(ConditionType.VALID, True, "Valid", verdict.checked)
        b.status.slice = _slice_status(verdict)
    if obs.blocked is not None and not js.exists:
        reason, message = obs.blocked
        if find_condition(prev.conditions, ConditionType.RUNNING.value) is None or \
                (find_condition(prev.conditions, ConditionType.RUNNING.value).reason
                 != reason.value):
            b.event("Warning", reason.value, message)
        b.set(ConditionType.RUNNING, False, reason.value, message)
        b.status.phase = Phase.PENDING
        return b.decision()
    if not js.exists:
        b.actions.append(Action.CREATE_CHILDREN)
        b.event("Normal", "Created", "created the JobSet for "
                f"{b.status.slice.hosts if b.status.slice else '?'} hosts")
        if spec.suspend:
            return b.finish(Phase.SUSPENDED, "created suspended (spec.suspend)")
        if spec.scheduling.queue_name:
            return b.finish(Phase.QUEUED, f"waiting for Kueue queue "
                                          f"{spec.scheduling.queue_name} to admit it")
        # The words the next pass writes once the JobSet is seen, so that it writes nothing.
        return b.finish(Phase.STARTING, f"0 of {verdict.plan.slices} slices have every host "
                                        "running")
    if js.deleting:
        return b.finish(Phase.PENDING, "the previous JobSet is being deleted")
    # The restart count survives a JobSet re-created after a spec change.
    baseline = prev.jobset_restarts if js.restarts >= prev.jobset_restarts else 0
    b.status.restarts = prev.restarts + (js.restarts - baseline)
    b.status.jobset_restarts = js.restarts
    restarted = b.status.restarts > prev.restarts
    b.status.progress = build_progress(
        restart_progress(prev.progress) if restarted and prev.progress is not None
        else prev.progress, obs.progress, obs.now)
    if obs.progress_problem is not None:
        b.set(ConditionType.PROGRESS_READABLE, False, "UnreadableProgressLine",
              obs.progress_problem)
    elif obs.progress is not None and find_condition(
            prev.conditions, ConditionType.PROGRESS_READABLE.value) is not None:
        b.set(ConditionType.PROGRESS_READABLE, True, "ProgressRead", "")
    if restarted:  # a new attempt: its hosts are scored afresh
        b.status.hosts = None
        b.clear_if_present(ConditionType.SLOW_HOST, "Restarted", "a new attempt: its hosts "
                           "are not scored yet")
    if b.status.restarts > prev.restarts and not js.failed:
        cause = f": {obs.failure.message}" if obs.failure else ""
        b.event("Warning", "Restarted", f"restart {b.status.restarts} of "
                f"{spec.restart_policy.max_restarts if spec else '?'}{cause}")
    if not verdict.valid:
        b.set(ConditionType.SPEC_APPLIED, False, verdict.reason,
              f"the updated spec is not valid and was not applied: {verdict.message}")
    elif not obs.spec_matches:
        if js.suspended and (spec.suspend or spec.scheduling.queue_name):
            b.actions.append(Action.RECREATE)
            b.event("Normal", "Updating", "applying the changed spec: re-creating the JobSet")
            return b.finish(Phase.PENDING, "re-creating the JobSet from the changed spec")
        message = (f"{', '.join(obs.changed_fields) or 'spec'} changed while the job runs and "
                   "was not applied; set spec.suspend to true to apply it (the run resumes "
                   "from its checkpoint), or delete and re-create the job")
        _refuse_update(b, message)
    else:
        b.clear_if_present(ConditionType.SPEC_APPLIED, "Applied")
        if find_condition(b.status.conditions, ConditionType.SPEC_APPLIED.value) is not None:
            b.set(ConditionType.SPEC_APPLIED, True, "Applied", "")
    _follow_queue(b, spec)
    if js.completed:
        b.set(ConditionType.SUCCEEDED, True, "Completed", js.message or "every host finished")
        return b.finish(Phase.SUCCEEDED, "training finished")
    if js.failed:
        cause = obs.failure or FailureCause(FailureReason.ERROR,
                                            js.message or "the JobSet failed")
        reason, message = cause.reason, cause.message
        # Under an update that cannot be read, the limit is unknown: the cause stands as seen.
        max_restarts = spec.restart_policy.max_restarts if spec else None
        if reason in RETRYABLE and max_restarts is not None and js.restarts >= max_restarts:
            message = f"restarted {b.status.restarts} times (restartPolicy.maxRestarts " \
                      f"{max_restarts}); last failure: {message}"
            reason = FailureReason.RESTART_LIMIT_EXCEEDED
        return _fail(b, reason, message, pod=cause.pod, container=cause.container)
    if spec is not None and spec.suspend:
        if not js.suspended:
            b.actions.append(Action.SUSPEND)
        return b.finish(Phase.SUSPENDED, "suspended (spec.suspend); pods are deleted, "
                                          "checkpoints stay")
    if js.suspended:
        if js.queue_name:
            return b.finish(Phase.QUEUED, describe_wait(obs.workload) if obs.workload else
                            f"waiting for Kueue queue {js.queue_name} to admit it")
        if spec is None:  # whether to resume is the unreadable spec's to say: nothing is done
            return b.finish(Phase.SUSPENDED, "suspended; the updated spec cannot be read")
        b.actions.append(Action.RESUME)
        return b.finish(Phase.RESTARTING if b.status.restarts else Phase.STARTING, "resuming")
    if not js.all_ready:
        # A host lost while the job runs: the JobSet has not acted yet (a restart or, for a
        # fatal exit, a failure), so the job stays in its phase until it does; never Starting.
        phase = (Phase.RESTARTING if b.status.restarts else
                 prev.phase if prev.phase in (Phase.RUNNING, Phase.RESTARTING)
                 else Phase.STARTING)
        message = f"{js.ready_jobs} of {js.jobs} slices have every host running"
        if phase != Phase.RUNNING and _flag_unscheduled(b, spec):
            message = find_condition(b.status.conditions,
                                     ConditionType.PODS_SCHEDULED.value).message
        return b.finish(phase, message)
    _mark_scheduled(b)
    if b.status.restarts > prev.restarts:
        # Seen only once every host already runs again: Restarting for this write at least.
        return b.finish(Phase.RESTARTING, f"restart {b.status.restarts}: every host is running "
                                          "again")
    return _supervise(b, spec)


def _follow_queue(b: _Builder, spec: TpuTrainingJobSpec | None) -> None:
    """status.queue from the Workload, its Events, and the priority label kept as the spec
    says (Kueue moves the Workload in its queue when the label changes)."""
    obs, js = b.obs, b.obs.jobset
    queue_name = js.queue_name or (spec.scheduling.queue_name if spec else None)
    new = build_queue_status(obs.workload, queue_name, b.prev.queue)
    sentence = describe_wait(obs.workload) if obs.workload is not None else ""
    for type_, reason, message in queue_events(b.prev.queue, new, obs.now, sentence):
        b.event(type_, reason, message)
    b.status.queue = new
    wanted = spec.scheduling.priority if spec is not None else None
    if spec is None or not js.queue_name or wanted == js.priority_class:
        return
    if wanted is not None and (js.suspended or js.priority_class is not None):
        b.actions.append(Action.SET_PRIORITY)
        b.event("Normal", "PriorityChanged", f"Kueue priority {js.priority_class or 'none'} "
                                             f"-> {wanted}")
        return
    # Kueue refuses removing the label, and adding one to a job it has admitted
    # (ValidateUpdateForWorkloadPriorityClassName in its jobframework/validation.go).
    message = ("spec.scheduling.priority cannot be removed once the job has one (Kueue refuses "
               "it); set it to another WorkloadPriorityClass" if wanted is None else
               "spec.scheduling.priority can be added only while the job is queued or "
               "suspended (Kueue refuses it for an admitted job); set spec.suspend to true "
               "to apply it")
    _refuse_update(b, message)


def _refuse_update(b: _Builder, message: str) -> None:
    """SpecApplied False with why; a Warning Event only when it was not refused already."""
    before = find_condition(b.prev.conditions, ConditionType.SPEC_APPLIED.value)
    if before is None or before.status != ConditionStatus.FALSE:
        b.event("Warning", "UpdateRefused", message)
    b.set(ConditionType.SPEC_APPLIED, False, "UpdateRefused", message)


def _flag_unscheduled(b: _Builder, spec: TpuTrainingJobSpec | None) -> bool:
    """Pods waiting for nodes past spec.scheduling.unscheduledWarningSeconds: a PodsScheduled
    condition with the scheduler's words, once a Warning Event; True when flagged."""
    obs = b.obs
    bound = (spec.scheduling.unscheduled_warning_s if spec is not None
             else DEFAULT_UNSCHEDULED_WARNING_SECONDS)
    if not is_unscheduled_too_long(obs.unscheduled, obs.now, bound):
        _mark_scheduled(b)
        return False
    admitted = b.status.queue is not None and b.status.queue.state == QueueState.ADMITTED
    hosts = b.status.slice.hosts if b.status.slice is not None else 0
    message = unscheduled_sentence(obs.unscheduled, admitted, obs.now, hosts)
    before = find_condition(b.prev.conditions, ConditionType.PODS_SCHEDULED.value)
    if before is None or before.status != ConditionStatus.FALSE:
        b.event("Warning", UNSCHEDULABLE, message[:1024])
    b.set(ConditionType.PODS_SCHEDULED, False, UNSCHEDULABLE, message)
    return True


def _mark_scheduled(b: _Builder) -> None:
    """A PodsScheduled flag raised before turns True once the pods are placed."""
    if find_condition(b.status.conditions, ConditionType.PODS_SCHEDULED.value) is not None:
        b.set(ConditionType.PODS_SCHEDULED, True, "Scheduled", "")


def _supervise(b: _Builder, spec: TpuTrainingJobSpec | None) -> Decision:
    """Every host runs: watch for a stall."""
    obs = b.obs
    if b.status.start_time is None:
        b.status.start_time = obs.now
    hosts = decide_hosts(b.prev.hosts if b.status.hosts is not None else None, obs.hosts)
    b.status.hosts = hosts.hosts
    if hosts.condition is not None:
        b.set(ConditionType.SLOW_HOST, *hosts.condition)
    for event in hosts.events:
        b.event(*event)
    if spec is None:  # the timeouts are in the update that cannot be read: no stall is judged
        return b.finish(Phase.RUNNING)
    running = find_condition(b.prev.conditions, ConditionType.RUNNING.value)
    running_since = (running.last_transition_time
                     if running is not None and running.status == ConditionStatus.TRUE
                     else obs.now)
    # A program of one's own is judged by its progress only once some is seen, unless its
    # progress is read from its log (then the first-step allowance applies as to the built-in).
    watched = (not spec.is_custom_trainer or b.status.progress is not None
               or spec.trainer.progress.source == ProgressSource.LOG)
    deadline = stall_deadline(spec, running_since, b.status.progress) if watched else None
    passed = deadline is not None and obs.now > deadline
    # stallTimeoutSeconds 0 turns both off.
    hang = (hang_before_the_deadline(obs.hosts, obs.now)
            if watched and not passed and spec.stall_timeout_seconds else None)
    if not passed and hang is None:
        b.clear_if_present(ConditionType.STALLED, "Progressing")
        return b.finish(Phase.RUNNING)
    progress = b.status.progress
    judged = judge_stall(spec, deadline=deadline if passed else None, now=obs.now, hang=hang,
                         step=progress.step if progress else None,
                         checkpoint_step=progress.last_checkpoint_step if progress else None,
                         restarts=b.status.restarts,
                         checkpoints=tuple(b.status.restart_checkpoints or ()),
                         hosts=obs.hosts)
    message = judged.message
    already = find_condition(b.prev.conditions, ConditionType.STALLED.value)
    b.set(ConditionType.STALLED, True, "Stalled", message)
    if b.status.hosts is not None:
        b.status.hosts = b.status.hosts.model_copy(update={"behind": list(judged.behind)})
    if judged.outcome == StallOutcome.IGNORE:
        if already is None or already.status != ConditionStatus.TRUE:
            b.event("Warning", "Stalled", message + "; restartPolicy.onStall is Ignore")
        return b.finish(Phase.RUNNING)
    b.actions.append(Action.COLLECT_STACKS)
    if judged.outcome == StallOutcome.STOP:
        b.actions.append(Action.STOP)
        b.event("Warning", "Stalled", message + "; stopping the run")
        return _fail(b, FailureReason.STALLED, message)
    b.actions.append(Action.RESTART)
    b.status.stall_restarts += 1
    b.status.restarts += 1
    b.status.restart_checkpoints = list(judged.checkpoints)[-64:]
    # The next attempt gets the first-step allowance again.
    if b.status.progress is not None:
        b.status.progress = replace_progress(b.status.progress)
    b.event("Warning", "Stalled", message + "; restarting every host")
    return b.finish(Phase.RESTARTING, "restarting after a stall")


__all__ = ["Action", "Decision", "Event", "Observation", "decide", "replace_progress",
           "restart_progress", "stall_deadline"]
