"""The operator's decision, table-driven: previous status + observation -> phase, conditions,
Events and actions. Every phase transition the operator makes is a row here."""

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from tpujob.api.status import FailureReason, Phase, Progress, TpuTrainingJobStatus, find_condition
from tpujob.controller.decide import Action, Observation, decide, stall_deadline
from tpujob.controller.hangs import HostBeat, HostPhase
from tpujob.controller.host_watch import HostsView
from tpujob.controller.observe import FailureCause, JobSetState
from tpujob.controller.stragglers import HostScore
from tpujob.controller.trainer_reports import ProgressReading
from tpujob.validation import validate_job

pytestmark = pytest.mark.unit
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
TINY = {"model": {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4,
                  "n_kv_heads": 2, "head_dim": 16, "mlp_dim": 128},
        "train": {"steps": 100, "global_batch": 16, "seq_len": 64}}


def job(**spec) -> dict:
    base = {"slice": "v6e-16", "image": "trainer:1", "output": "gs://bucket/run",
            "trainer": {"config": TINY}, "stallTimeoutSeconds": 600,
            "firstStepTimeoutSeconds": 1200}
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": 1},
            "spec": base | spec}


def js(**kw) -> JobSetState:
    return JobSetState(**({"exists": True, "uid": "js", "owner_uid": "u", "jobs": 1} | kw))


def obs(jobset=None, spec=None, now=T0, **kw) -> Observation:
    return Observation(now=now, generation=1, verdict=validate_job(job(**(spec or {}))),
                       jobset=jobset or JobSetState.missing(), **kw)


def status(phase=Phase.PENDING, **kw) -> TpuTrainingJobStatus:
    return TpuTrainingJobStatus(phase=phase, **kw)


def cond(decision, type_):
    return find_condition(decision.status.conditions, type_)


@pytest.mark.parametrize("prev, observation, phase, actions, event", [
    # new valid job: create the children
    (status(), obs(), Phase.STARTING, [Action.CREATE_CHILDREN], "Starting"),
    (status(), obs(spec={"suspend": True}), Phase.SUSPENDED, [Action.CREATE_CHILDREN], "Suspended"),
    (status(), obs(spec={"scheduling": {"queueName": "q"}}), Phase.QUEUED,
     [Action.CREATE_CHILDREN], "Queued"),
    # JobSet exists: follow it
    (status(Phase.STARTING), obs(js(ready_jobs=0)), Phase.STARTING, [], None),
    (status(Phase.STARTING), obs(js(ready_jobs=1)), Phase.RUNNING, [], "Running"),
    (status(Phase.RUNNING), obs(js(ready_jobs=1)), Phase.RUNNING, [], None),
    (status(Phase.RUNNING), obs(js(ready_jobs=0, restarts=1)), Phase.RESTARTING, [], "Restarting"),
    (status(Phase.RESTARTING, restarts=1, jobset_restarts=1), obs(js(ready_jobs=1, restarts=1)),
     Phase.RUNNING, [], "Running"),
    (status(Phase.RUNNING), obs(js(completed=True)), Phase.SUCCEEDED, [], "Succeeded"),
    (status(Phase.RUNNING), obs(js(failed=True), failure=FailureCause(FailureReason.OUT_OF_MEMORY, "oom")),
     Phase.FAILED, [], "Failed"),
    # queued by Kueue until admitted
    (status(Phase.QUEUED), obs(js(suspended=True, queue_name="q"),
                               spec={"scheduling": {"queueName": "q"}}), Phase.QUEUED, [], None),
    (status(Phase.QUEUED), obs(js(ready_jobs=0, queue_name="q"),
                               spec={"scheduling": {"queueName": "q"}}),
     Phase.STARTING, [], "Starting"),
    # suspend and resume
    (status(Phase.RUNNING), obs(js(ready_jobs=1), spec={"suspend": True}), Phase.SUSPENDED,
     [Action.SUSPEND], "Suspended"),
    (status(Phase.SUSPENDED), obs(js(suspended=True), spec={"suspend": True}), Phase.SUSPENDED,
     [], None),
    (status(Phase.SUSPENDED), obs(js(suspended=True)), Phase.STARTING, [Action.RESUME],
     "Starting"),
    # a spec change made while suspended is applied by re-creating the JobSet
    (status(Phase.SUSPENDED), obs(js(suspended=True), spec={"suspend": True},
                                  spec_matches=False), Phase.PENDING, [Action.RECREATE],
     "Pending"),
    (status(Phase.PENDING), obs(js(deleting=True)), Phase.PENDING, [], None),
    # terminal phases never change
    (status(Phase.SUCCEEDED), obs(js(failed=True)), Phase.SUCCEEDED, [], None),
    (status(Phase.FAILED), obs(js(ready_jobs=1)), Phase.FAILED, [], None),
])
def test_phase_transitions(prev, observation, phase, actions, event):
    d = decide(prev, observation)
    assert d.status.phase == phase
    assert d.actions == actions
    assert [e.reason for e in d.events if e.reason == phase.value] == ([event] if event else [])
    assert d.status.observed_generation == (1 if prev.phase not in (Phase.SUCCEEDED, Phase.FAILED)
                                            else None)


@pytest.mark.parametrize("spec, reason, field", [
    ({"slice": "v6e-12"}, "InvalidSlice", "spec.slice"),
    ({"parallelism": {"ici": {"tensor": 3}}}, "InvalidMesh", "spec.parallelism"),
    ({"trainer": {"config": {"train": {"steps": "many"}}}}, "ConfigError", "train.steps"),
])
def test_invalid_job_is_refused_with_the_field_and_creates_nothing(spec, reason, field):
    d = decide(status(), obs(spec=spec))
    assert d.status.phase == Phase.INVALID
    assert d.actions == []
    valid = cond(d, "Valid")
    assert valid.status == "False" and (reason is None or valid.reason == reason)
    assert field in valid.message and field in d.status.failure.message
    # The pre-flight check's own reason, for the REASON column of `kubectl get tpujobs`.
    assert d.status.failure.reason == (reason or FailureReason.INVALID_SPEC)
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "Invalid")]


def test_an_invalid_job_fixed_by_an_update_starts():
    bad = decide(status(), obs(spec={"slice": "v6e-12"})).status
    d = decide(bad, obs())
    assert d.status.phase == Phase.STARTING and d.actions == [Action.CREATE_CHILDREN]
    assert d.status.failure is None and cond(d, "Valid").status == "True"


def test_invalid_update_of_a_running_job_is_not_applied():
    d = decide(status(Phase.RUNNING), obs(js(ready_jobs=1), spec={"slice": "v6e-12"}))
    assert d.status.phase == Phase.RUNNING
    assert cond(d, "SpecApplied").status == "False"


def test_spec_change_while_running_is_refused_once_with_an_event():
    first = decide(status(Phase.RUNNING), obs(js(ready_jobs=1), spec_matches=False,
                                              changed_fields=("spec.image",)))
    assert first.status.phase == Phase.RUNNING and first.actions == []
    applied = cond(first, "SpecApplied")
    assert applied.status == "False" and "spec.image" in applied.message
    assert [e.reason for e in first.events] == ["UpdateRefused"]
    again = decide(first.status, obs(js(ready_jobs=1), spec_matches=False,
                                     changed_fields=("spec.image",)))
    assert again.events == []


def test_restart_counts_and_survives_a_recreated_jobset():
    d = decide(status(Phase.RUNNING), obs(js(ready_jobs=0, restarts=2),
                                          failure=FailureCause(FailureReason.PREEMPTED, "pod x preempted")))
    assert d.status.restarts == 2 and d.status.jobset_restarts == 2
    restarted = [e for e in d.events if e.reason == "Restarted"]
    assert restarted and "pod x preempted" in restarted[0].message
    # A JobSet re-created after a spec change starts counting from 0 again.
    d2 = decide(d.status, obs(js(ready_jobs=1, restarts=1)))
    assert d2.status.restarts == 3 and d2.status.jobset_restarts == 1


@pytest.mark.parametrize("failure, restarts, reason", [
    (FailureCause(FailureReason.OUT_OF_MEMORY, "oom", "j-0", "trainer"), 0,
     FailureReason.OUT_OF_MEMORY),
    (FailureCause(FailureReason.CONFIG_ERROR, "bad", "j-1", "trainer-1"), 0,
     FailureReason.CONFIG_ERROR),
    (FailureCause(FailureReason.PREEMPTED, "spot", "j-0", "trainer"), 3,
     FailureReason.RESTART_LIMIT_EXCEEDED),
    (None, 0, FailureReason.ERROR),
])
def test_failure_reason(failure, restarts, reason):
    d = decide(status(Phase.RUNNING, restarts=restarts, jobset_restarts=restarts),
               obs(js(failed=True, restarts=restarts, message="jobset failed"), failure=failure))
    assert d.status.failure.reason == reason
    # The container that explains it is named apart from the message (its logs say more).
    assert (d.status.failure.pod, d.status.failure.container) == \
        ((failure.pod, failure.container) if failure else (None, None))
    assert d.status.failure.message.endswith(failure.message if failure else "jobset failed")
    assert (cond(d, "Failed").status, cond(d, "Failed").reason) == ("True", reason.value)
    assert d.status.reason == reason.value   # the REASON column, written in the same pass
    assert d.status.completion_time == T0


def test_a_job_running_again_after_a_failure_record_has_no_reason():
    from tpujob.api.status import Failure
    prev = status(Phase.RESTARTING, restarts=1, jobset_restarts=1,
                  failure=Failure(reason=FailureReason.PREEMPTED, message="spot"))
    d = decide(prev, obs(js(ready_jobs=1, restarts=1)))
    assert d.status.phase == Phase.RUNNING and d.status.reason is None


def running_status(since: datetime, progress: Progress | None = None) -> TpuTrainingJobStatus:
    first = decide(status(Phase.STARTING), obs(js(ready_jobs=1), now=since)).status
    if progress is not None:
        first = first.model_copy(update={"progress": progress})
    return first


def test_progress_is_copied_and_the_step_clock_moves_only_on_a_new_step():
    prev = running_status(T0)
    reading = ProgressReading(step=5, total_steps=100, loss=2.5, step_time_s=0.5,
                              tokens_per_s_per_device=1000.0, mfu=0.4, last_checkpoint_step=0)
    d = decide(prev, obs(js(ready_jobs=1), now=T0 + timedelta(seconds=10), progress=reading))
    p = d.status.progress
    assert (p.step, p.total_steps, p.loss, p.mfu) == (5, 100, 2.5, 0.4)
    assert p.last_step_time is None  # first reading: only a mark
    d2 = decide(d.status, obs(js(ready_jobs=1), now=T0 + timedelta(seconds=20),
                              progress=ProgressReading(step=7)))
    assert d2.status.progress.last_step_time == T0 + timedelta(seconds=20)
    d3 = decide(d2.status, obs(js(ready_jobs=1), now=T0 + timedelta(seconds=30),
                               progress=ProgressReading(step=7)))
    assert d3.status.progress.last_step_time == T0 + timedelta(seconds=20)


@pytest.mark.parametrize("on_stall, phase, actions, restarts", [
    ("Restart", Phase.RESTARTING, [Action.COLLECT_STACKS, Action.RESTART], 1),
    ("Fail", Phase.FAILED, [Action.COLLECT_STACKS, Action.STOP], 0),
    ("Ignore", Phase.RUNNING, [], 0),
])
def test_stall_after_the_first_step_allowance(on_stall, phase, actions, restarts):
    prev = running_status(T0)
    spec = {"restartPolicy": {"onStall": on_stall}}
    quiet = decide(prev, obs(js(ready_jobs=1), spec=spec, now=T0 + timedelta(seconds=1199)))
    assert quiet.status.phase == Phase.RUNNING and quiet.actions == []
    d = decide(prev, obs(js(ready_jobs=1), spec=spec, now=T0 + timedelta(seconds=1201)))
    assert d.status.phase == phase and d.actions == actions
    assert d.status.stall_restarts == restarts == d.status.restarts
    assert cond(d, "Stalled").status == "True"
    assert any(e.reason == "Stalled" and e.type == "Warning" for e in d.events)
    if phase == Phase.FAILED:
        assert d.status.failure.reason == FailureReason.STALLED


def test_stall_timeout_counts_from_the_last_step():
    progress = Progress(step=10, last_step_time=T0 + timedelta(seconds=100))
    prev = running_status(T0, progress)
    ok = decide(prev, obs(js(ready_jobs=1), now=T0 + timedelta(seconds=699)))
    assert ok.status.phase == Phase.RUNNING and ok.actions == []
    d = decide(prev, obs(js(ready_jobs=1), now=T0 + timedelta(seconds=701)))
    assert d.actions == [Action.COLLECT_STACKS, Action.RESTART]
    assert d.status.progress.last_step_time is None  # the next attempt gets the allowance


def test_a_stall_names_the_host_behind_the_others():
    progress = Progress(step=10, last_step_time=T0 + timedelta(seconds=100))
    prev = running_status(T0, progress)
    now = T0 + timedelta(seconds=701)
    beats = (HostBeat("slice-0/host-0", HostPhase.STEP, 10, now, T0),
             HostBeat("slice-0/host-1", HostPhase.STEP, 9, T0 + timedelta(seconds=90), T0))
    hosts = HostsView((), beats, "no slow host: too few steady steps to score yet", 0)
    d = decide(prev, obs(js(ready_jobs=1), now=now, hosts=hosts))
    assert d.actions == [Action.COLLECT_STACKS, Action.RESTART]
    want = ("behind: slice-0/host-1 at step 9; the furthest host is at step 10")
    assert cond(d, "Stalled").message.endswith(want)
    assert any(e.reason == "Stalled" and want in e.message for e in d.events)
    assert cond(d, "SlowHost") is None   # nothing scored: no condition yet
    assert d.status.hosts.behind == ["slice-0/host-1"]
    # Kept by the reads that follow, until a JobSet restart.
    later = decide(d.status, obs(js(ready_jobs=1), now=now + timedelta(seconds=5), hosts=hosts))
    assert later.status.hosts.behind == ["slice-0/host-1"]


@pytest.mark.parametrize("spec, restarted", [({}, True), ({"stallTimeoutSeconds": 0}, False)])
def test_a_hang_learned_from_the_steps_restarts_before_the_stall_timeout(spec, restarted):
    progress = Progress(step=10, last_step_time=T0 + timedelta(seconds=100))
    prev = running_status(T0, progress)
    now = T0 + timedelta(seconds=300)            # 200 s without a step: well within 600
    beats = (HostBeat("slice-0/host-0", HostPhase.STEP, 10, now, T0 + timedelta(seconds=100)),
             HostBeat("slice-0/host-1", HostPhase.STEP, 10, now, T0 + timedelta(seconds=100)))
    hosts = HostsView((), beats, "", 0, step_timeout_s=150.0)
    d = decide(prev, obs(js(ready_jobs=1), spec=spec, now=now, hosts=hosts))
    if not restarted:
        assert d.actions == [] and cond(d, "Stalled") is None
        return
    assert d.actions == [Action.COLLECT_STACKS, Action.RESTART]
    assert cond(d, "Stalled").message.startswith("hung in step: no host moved for 200 s")
    quiet = decide(prev, obs(js(ready_jobs=1), now=now, hosts=dataclasses.replace(
        hosts, step_timeout_s=250.0)))
    assert quiet.actions == []


def test_the_slow_host_is_decided_while_running_and_dropped_on_a_restart():
    scores = (HostScore("slice-0/host-0", 1.0, 1.0, False, 20, 0.1, 0.1, 0.1, 1.0),
              HostScore("slice-0/host-1", 0.8, 1.0, True, 20, 0.3, 0.3, 0.1, 1.0))
    hosts = HostsView(scores, (), "host slice-0/host-1 at 0.80", 0)
    d = decide(running_status(T0), obs(js(ready_jobs=1), now=T0, hosts=hosts))
    assert d.status.hosts.slow_host == "slice-0/host-1"
    assert cond(d, "SlowHost").status == "True"
    assert [e.reason for e in d.events] == ["SlowHost"]
    again = decide(d.status, obs(js(ready_jobs=1, restarts=1), now=T0 + timedelta(seconds=5)))
    assert again.status.hosts is None
    assert (cond(again, "SlowHost").status, cond(again, "SlowHost").reason) == (
        "False", "Restarted")


def test_the_checkpoints_of_the_last_64_stall_restarts_are_kept():
    progress = Progress(step=700, last_step_time=T0 + timedelta(seconds=100),
                        last_checkpoint_step=640)
    prev = running_status(T0, progress).model_copy(
        update={"restart_checkpoints": list(range(0, 640, 10))})    # 64, each newer
    d = decide(prev, obs(js(ready_jobs=1), spec={"restartPolicy": {"maxRestarts": 100}},
                         now=T0 + timedelta(seconds=701)))
    assert d.actions == [Action.COLLECT_STACKS, Action.RESTART]
    assert d.status.restart_checkpoints == list(range(10, 640, 10)) + [640]


def test_stall_restarts_stop_at_the_restart_limit():
    prev = running_status(T0).model_copy(update={"restarts": 3, "jobset_restarts": 3})
    d = decide(prev, obs(js(ready_jobs=1, restarts=3), now=T0 + timedelta(hours=1)))
    assert d.status.phase == Phase.FAILED and d.actions == [Action.COLLECT_STACKS, Action.STOP]
    assert "restart limit 3" in d.status.failure.message


def test_custom_trainer_without_progress_is_not_judged_stalled():
    spec = {"trainer": {"command": ["python", "train.py"]}}
    prev = decide(status(Phase.STARTING), obs(js(ready_jobs=1), spec=spec)).status
    d = decide(prev, obs(js(ready_jobs=1), spec=spec, now=T0 + timedelta(days=1)))
    assert d.status.phase == Phase.RUNNING and d.actions == []


@pytest.mark.parametrize("first, stall, last_step, expected", [
    (1200, 600, None, T0 + timedelta(seconds=1200)),
    (0, 600, None, None),
    (1200, 600, T0 + timedelta(seconds=50), T0 + timedelta(seconds=650)),
    (1200, 0, T0 + timedelta(seconds=50), None),
    (1200, 600, T0 - timedelta(seconds=50), T0 + timedelta(seconds=1200)),  # previous attempt
    (1200, 600, T0, T0 + timedelta(seconds=600)),  # seen as every host came up: this attempt's
    (1, 600, None, T0 + timedelta(seconds=1)),     # the shortest timeouts are timeouts, not off
    (1200, 1, T0 + timedelta(seconds=50), T0 + timedelta(seconds=51)),
])
def test_stall_deadline(first, stall, last_step, expected):
    spec = validate_job(job(firstStepTimeoutSeconds=first, stallTimeoutSeconds=stall)).job.spec
    progress = Progress(step=1, last_step_time=last_step) if last_step else None
    assert stall_deadline(spec, T0, progress) == expected


def test_blocked_children_keep_the_job_pending_with_one_warning():
    blocked = (FailureReason.CONFLICT, "a JobSet named j exists and is not owned by this job")
    d = decide(status(), obs(blocked=blocked))
    assert d.status.phase == Phase.PENDING and d.actions == []
    assert [e.reason for e in d.events] == ["Conflict"]
    assert decide(d.status, obs(blocked=blocked)).events == []


def test_a_restart_seen_with_every_host_running_again_is_restarting_for_one_write():
    # The JobSet restarted and its new pods all run before the operator looked: Restarting
    # is still written once, then Running.
    prev = running_status(T0)
    d = decide(prev, obs(js(ready_jobs=1, restarts=1), now=T0 + timedelta(seconds=30)))
    assert d.status.phase == Phase.RESTARTING and d.status.restarts == 1
    assert "Restarting" in [e.reason for e in d.events]
    d2 = decide(d.status, obs(js(ready_jobs=1, restarts=1), now=T0 + timedelta(seconds=31)))
    assert d2.status.phase == Phase.RUNNING


def test_after_a_restart_step_shows_the_checkpoint_the_run_resumes_from():
    prev = running_status(T0, Progress(step=37, loss=2.0, last_checkpoint_step=20))
    restoring = ProgressReading(step=0, training=False, last_checkpoint_step=None,
                                trainer_phase="compiling")
    d = decide(prev, obs(js(ready_jobs=1), now=T0 + timedelta(seconds=5), progress=restoring))
    assert d.status.progress.step == 20 and d.status.progress.trainer_phase == "compiling"
    resumed = ProgressReading(step=21, last_checkpoint_step=20)
    d2 = decide(d.status, obs(js(ready_jobs=1), now=T0 + timedelta(seconds=9), progress=resumed))
    assert d2.status.progress.step == 21
    fresh = decide(running_status(T0), obs(js(ready_jobs=1), progress=restoring))
    assert fresh.status.progress.step == 0  # nothing saved yet: nothing to resume from


@pytest.mark.parametrize("loss, tokens, mfu, tflops, shown", [
    (1.7577435970306396, 5425.809674792159, 2.2e-05, 0.010008215474622838,
     ("1.758", "5426", "0.0022%", "0.0100")),
    (12.5, 0.4, 0.4123, 378.6, ("12.5", "0", "41.2%", "379")),
    (0.000123456, 1e6, 0.0, 0.0, ("0.0001235", "1000000", "0%", "0")),
    # No peak for the device (a CPU): the MFU cell is a dash, not a figure.
    (2.5, 100.0, None, 0.02, ("2.5", "100", "-", "0.0200")),
    (None, None, None, None, (None, None, "-", None)),
])
def test_progress_display_for_kubectl(loss, tokens, mfu, tflops, shown):
    reading = ProgressReading(step=3, loss=loss, tokens_per_s_per_device=tokens, mfu=mfu,
                              tflops_per_device=tflops)
    p = decide(running_status(T0), obs(js(ready_jobs=1), progress=reading)).status.progress
    assert (p.display.loss, p.display.tokens_per_second_per_device, p.display.mfu,
            p.display.tflops_per_device) == shown
    # The figures themselves to 6 significant digits (what describe prints; more than known).
    assert (p.loss, p.tokens_per_second_per_device, p.mfu, p.tflops_per_device) == tuple(
        None if v is None else float(f"{v:.6g}") for v in (loss, tokens, mfu, tflops))
    assert p.loss in (None, 1.75774, 12.5, 0.000123456, 2.5)


LOG_SPEC = {"trainer": {"command": ["python", "-m", "maxtext.train"],
                        "progress": {"source": "log", "format": "maxtext"}}}


def test_custom_trainer_with_log_progress_is_judged_by_the_first_step_allowance():
    prev = decide(status(Phase.STARTING), obs(js(ready_jobs=1), spec=LOG_SPEC)).status
    d = decide(prev, obs(js(ready_jobs=1), spec=LOG_SPEC, now=T0 + timedelta(seconds=1300)))
    assert d.status.phase == Phase.RESTARTING and d.actions == [Action.COLLECT_STACKS, Action.RESTART]


def test_an_unreadable_progress_line_is_a_condition_not_a_failure():
    prev = decide(status(Phase.STARTING), obs(js(ready_jobs=1), spec=LOG_SPEC)).status
    problem = "process 0's log has a maxtext progress line that cannot be read: seconds 'x'"
    d = decide(prev, obs(js(ready_jobs=1), spec=LOG_SPEC, now=T0 + timedelta(seconds=5),
                         progress_problem=problem))
    assert d.status.phase == Phase.RUNNING and d.actions == []
    c = cond(d, "ProgressReadable")
    assert (c.status, c.reason, c.message) == ("False", "UnreadableProgressLine", problem)
    d2 = decide(d.status, obs(js(ready_jobs=1), spec=LOG_SPEC, now=T0 + timedelta(seconds=9),
                              progress=ProgressReading(step=3, loss=2.0)))
    assert cond(d2, "ProgressReadable").status == "True" and d2.status.progress.step == 3
