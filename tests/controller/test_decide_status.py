"""What the decision writes besides the phase, as `kubectl get` and `kubectl describe` show it:
the slice, the conditions and their words, the Events' words, the start and completion times,
the stall deadline at its boundaries, and a running job whose update cannot be read at all."""

from dataclasses import FrozenInstanceError
from datetime import timedelta

import pytest

from tests.controller.test_decide import T0, TINY, cond, js, obs, running_status, status
from tpujob.api.status import FailureReason, Phase, Progress
from tpujob.controller.decide import Action, Decision, Event, decide
from tpujob.controller.observe import FailureCause
from tpujob.controller.trainer_reports import ProgressReading, TimelineReading

pytestmark = pytest.mark.unit
# Two v6e-16 slices: 32 devices, so a batch that splits over 32.
TWO_SLICES = {"slices": 2, "trainer": {"config": TINY | {"train": TINY["train"] | {
    "global_batch": 32}}}}


@pytest.mark.parametrize("spec, topology, hosts, chips", [
    ({}, "4x4", 4, 16),                      # v6e-16: 16 chips, 4 per host
    (TWO_SLICES, "4x4", 8, 32),              # two of them: the status sums every slice
    ({"slice": "v5p-32"}, "2x2x4", 4, 16),   # v5p-N counts TensorCores: 2 per chip
])
def test_slice_status_sums_every_slice(spec, topology, hosts, chips):
    d = decide(status(), obs(spec=spec))
    assert (d.status.slice.topology, d.status.slice.hosts, d.status.slice.chips) == \
        (topology, hosts, chips)


def test_the_starting_message_counts_the_slices_asked_for():
    d = decide(status(), obs(spec=TWO_SLICES))
    assert cond(d, "Running").message == "0 of 2 slices have every host running"


def test_running_condition_is_true_only_while_every_host_runs():
    starting = decide(status(), obs())
    running = decide(starting.status, obs(js(ready_jobs=1)))
    assert (cond(starting, "Running").status, cond(starting, "Running").message) == \
        ("False", "0 of 1 slices have every host running")
    assert (cond(running, "Running").status, cond(running, "Running").message) == \
        ("True", "every host is running")


def test_suspended_condition_through_suspend_and_resume():
    # A job that was never suspended has no Suspended condition at all.
    running = decide(status(Phase.STARTING), obs(js(ready_jobs=1)))
    assert cond(running, "Suspended") is None
    suspended = decide(running.status, obs(js(ready_jobs=1), spec={"suspend": True}))
    c = cond(suspended, "Suspended")
    assert (c.status, c.reason) == ("True", "Suspended") and "spec.suspend" in c.message
    resumed = decide(suspended.status, obs(js(suspended=True)))
    assert resumed.actions == [Action.RESUME]
    assert (cond(resumed, "Suspended").status, cond(resumed, "Suspended").reason) == \
        ("False", "Starting")


@pytest.mark.parametrize("prev, observation", [
    (status(), obs()),                                                # Starting
    (status(Phase.STARTING), obs(js(ready_jobs=1))),                  # Running: no words given
    (status(Phase.RUNNING), obs(js(completed=True))),                 # Succeeded
    (status(Phase.RUNNING), obs(js(failed=True))),                    # Failed
    (status(Phase.RUNNING), obs(js(ready_jobs=1), spec={"suspend": True})),
])
def test_every_event_says_something(prev, observation):
    d = decide(prev, observation)
    assert d.events and all(e.message for e in d.events)


def test_start_time_is_the_first_time_every_host_ran():
    running = decide(status(Phase.STARTING), obs(js(ready_jobs=1)))
    assert running.status.start_time == T0
    later = decide(running.status, obs(js(ready_jobs=1), now=T0 + timedelta(minutes=5)))
    assert later.status.start_time == T0


@pytest.mark.parametrize("prev, observation, finished", [
    (status(), obs(), False),
    (status(Phase.STARTING), obs(js(ready_jobs=1)), False),
    (status(Phase.RUNNING), obs(js(ready_jobs=1), spec={"suspend": True}), False),
    (status(Phase.RUNNING), obs(js(completed=True)), True),
    (status(Phase.RUNNING), obs(js(failed=True)), True),
    (status(), obs(spec={"slice": "v6e-12"}), True),                  # Invalid
])
def test_completion_time_only_for_a_job_that_ended(prev, observation, finished):
    d = decide(prev, observation)
    assert d.status.completion_time == (T0 if finished else None)


@pytest.mark.parametrize("jobset_message, shown", [
    ("jobset done", "jobset done"),
    ("", "every host finished"),
])
def test_succeeded_condition_gives_the_jobsets_words_or_its_own(jobset_message, shown):
    d = decide(status(Phase.RUNNING), obs(js(completed=True, message=jobset_message)))
    c = cond(d, "Succeeded")
    assert (c.status, c.reason, c.message) == ("True", "Completed", shown)


@pytest.mark.parametrize("jobset_message, shown", [
    ("jobset failed: backoff", "jobset failed: backoff"),
    ("", "the JobSet failed"),
])
def test_a_failure_no_pod_explains_keeps_the_jobsets_words(jobset_message, shown):
    d = decide(status(Phase.RUNNING), obs(js(failed=True, message=jobset_message)))
    assert (d.status.failure.reason, d.status.failure.message) == (FailureReason.ERROR, shown)
    c = cond(d, "Failed")
    assert (c.status, c.reason, c.message) == ("True", "Error", shown)


def test_blocked_children_are_not_running_and_say_why():
    blocked = (FailureReason.CONFLICT, "a JobSet named j exists and is not owned by this job")
    c = cond(decide(status(), obs(blocked=blocked)), "Running")
    assert (c.status, c.reason, c.message) == ("False", "Conflict", blocked[1])


def test_progress_readable_stays_false_until_a_progress_document_is_read():
    prev = running_status(T0)
    bad = decide(prev, obs(js(ready_jobs=1), progress_problem="seconds 'x'"))
    assert cond(bad, "ProgressReadable").status == "False"
    # A look that read nothing (process 0 not serving yet) proves nothing either way.
    nothing = decide(bad.status, obs(js(ready_jobs=1), now=T0 + timedelta(seconds=5)))
    assert cond(nothing, "ProgressReadable").status == "False"
    read = decide(nothing.status, obs(js(ready_jobs=1), now=T0 + timedelta(seconds=9),
                                      progress=ProgressReading(step=2)))
    assert cond(read, "ProgressReadable").status == "True"


def test_spec_applied_through_a_refused_update_and_its_undoing():
    running = running_status(T0)
    assert cond(decide(running, obs(js(ready_jobs=1))), "SpecApplied") is None  # never refused
    refused = decide(running, obs(js(ready_jobs=1), spec_matches=False,
                                  changed_fields=("spec.image",)))
    assert cond(refused, "SpecApplied").status == "False"
    undone = decide(refused.status, obs(js(ready_jobs=1)))
    c = cond(undone, "SpecApplied")
    assert (c.status, c.reason) == ("True", "Applied")


def test_suspend_set_with_another_change_while_running_suspends_before_recreating():
    """The JobSet is suspended first (the trainer checkpoints on SIGTERM); only a suspended
    JobSet is deleted and re-created from the changed spec."""
    running = running_status(T0)
    first = decide(running, obs(js(ready_jobs=1), spec={"suspend": True}, spec_matches=False,
                                changed_fields=("spec.image",)))
    assert first.actions == [Action.SUSPEND] and first.status.phase == Phase.SUSPENDED
    then = decide(first.status, obs(js(suspended=True), spec={"suspend": True},
                                    spec_matches=False, changed_fields=("spec.image",)))
    assert then.actions == [Action.RECREATE]


def test_no_step_for_exactly_the_allowance_is_not_yet_a_stall():
    prev = running_status(T0)
    at = decide(prev, obs(js(ready_jobs=1), now=T0 + timedelta(seconds=1200)))
    assert at.status.phase == Phase.RUNNING and at.actions == []
    past = decide(prev, obs(js(ready_jobs=1), now=T0 + timedelta(seconds=1200, microseconds=1)))
    assert past.actions == [Action.COLLECT_STACKS, Action.RESTART]


@pytest.mark.parametrize("progress, says", [
    (None, "last step none"),
    (Progress(step=10, last_step_time=T0 + timedelta(seconds=100)), "last step 10"),
])
def test_a_stall_names_the_last_step(progress, says):
    prev = running_status(T0, progress)
    d = decide(prev, obs(js(ready_jobs=1), now=T0 + timedelta(hours=1)))
    assert says in cond(d, "Stalled").message
    assert all(says in e.message for e in d.events if e.reason == "Stalled")


def test_an_ignored_stall_warns_once():
    spec = {"restartPolicy": {"onStall": "Ignore"}}
    prev = running_status(T0)
    first = decide(prev, obs(js(ready_jobs=1), spec=spec, now=T0 + timedelta(hours=1)))
    assert [e.reason for e in first.events] == ["Stalled"]
    again = decide(first.status, obs(js(ready_jobs=1), spec=spec, now=T0 + timedelta(hours=2)))
    assert again.status.phase == Phase.RUNNING and again.events == []
    assert cond(again, "Stalled").status == "True"


def test_a_job_refused_before_it_ran_has_no_goodput_but_one_that_ran_keeps_it():
    never = decide(status(), obs(spec={"slice": "v6e-12"}))
    assert never.status.goodput is None
    ran = decide(status(Phase.RUNNING), obs(js(ready_jobs=1), progress=ProgressReading(step=3)))
    assert ran.status.goodput is not None
    # Its JobSet was re-created from an update, which turns out invalid once it is gone.
    refused = decide(ran.status, obs(spec={"slice": "v6e-12"}, now=T0 + timedelta(seconds=30)))
    assert refused.status.phase == Phase.INVALID
    assert refused.status.goodput is not None
    assert refused.status.goodput.wall_seconds >= ran.status.goodput.wall_seconds


# An update the job's schema cannot even read (here: two env entries of one name) while its
# JobSet runs: the JobSet goes on as built from the spec before, nothing is done to it, and
# SpecApplied says why. Before, the decision raised on the missing spec at every look.
UNREADABLE = {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}


@pytest.mark.parametrize("prev, jobset, phase", [
    (status(Phase.RUNNING), js(ready_jobs=1), Phase.RUNNING),
    (status(Phase.RUNNING), js(ready_jobs=0), Phase.RUNNING),
    (status(Phase.SUSPENDED), js(suspended=True), Phase.SUSPENDED),
    (status(Phase.QUEUED), js(suspended=True, queue_name="q"), Phase.QUEUED),
])
def test_an_unreadable_update_leaves_the_jobset_as_it_runs(prev, jobset, phase):
    observation = obs(jobset, spec=UNREADABLE, now=T0 + timedelta(days=1))
    assert observation.verdict.job is None  # the premise: nothing of the spec could be read
    d = decide(prev, observation)
    assert d.status.phase == phase and d.actions == []
    c = cond(d, "SpecApplied")
    assert c.status == "False" and "duplicate names A" in c.message


def test_a_failure_under_an_unreadable_update_gives_the_cause_not_a_made_up_limit():
    d = decide(status(Phase.RUNNING),
               obs(js(failed=True, restarts=1), spec=UNREADABLE,
                   failure=FailureCause(FailureReason.PREEMPTED, "pod p was disrupted")))
    assert d.status.phase == Phase.FAILED
    assert (d.status.failure.reason, d.status.failure.message) == \
        (FailureReason.PREEMPTED, "pod p was disrupted")


@pytest.mark.parametrize("value, field", [
    (Event("Normal", "Running", "phase Running"), "message"),
    (obs(), "now"),
    (Decision(status()), "status"),
])
def test_what_decide_takes_and_gives_cannot_be_changed_in_place(value, field):
    """The reconciler hands one Observation to `decide` and then to `act`, and sends Events
    from another thread: none of them may be altered on the way."""
    with pytest.raises(FrozenInstanceError):
        setattr(value, field, None)


# A restart as a user watches it in `kubectl get tpujobs`: the phase says Restarting from the
# moment a host is lost, the ended attempt's loss and speed are not shown beside the next
# attempt's step, and a fall of GOODPUT comes with an Event that says why.
def _attempt(name: str, step: int, steps: int, productive: float, resumed: int | None = None,
             phase: str = "training") -> ProgressReading:
    return ProgressReading(step=step, loss=2.0 + step / 100, step_time_s=0.5,
                           tokens_per_s_per_device=1000.0, tflops_per_device=1.0, mfu=0.3,
                           last_checkpoint_step=40, training=phase == "training",
                           trainer_phase=phase,
                           timeline=TimelineReading.from_document({
                               "attempt": name, "step": step, "steps": steps,
                               "resumed_from_step": resumed,
                               "seconds": {"productive": productive}}))


@pytest.mark.parametrize("prev_phase, restarts, phase", [
    # A host lost: the JobSet has not acted yet (restart, or fail on a fatal exit): no
    # Starting with 0 restarts, no Restarting before a failure.
    (Phase.RUNNING, 0, Phase.RUNNING),
    (Phase.RESTARTING, 0, Phase.RESTARTING),
    (Phase.RUNNING, 1, Phase.RESTARTING),      # the JobSet restarted it
    (Phase.STARTING, 0, Phase.STARTING),       # the first start is still a start
    (Phase.PENDING, 0, Phase.STARTING),
])
def test_a_host_lost_while_running_never_reads_as_starting(prev_phase, restarts, phase):
    d = decide(status(prev_phase), obs(js(ready_jobs=0, restarts=restarts)))
    assert d.status.phase == phase


def test_a_restart_blanks_the_ended_attempts_figures_until_the_next_one_reports():
    running = decide(status(Phase.RUNNING), obs(js(ready_jobs=1),
                                                progress=_attempt("a", 57, 57, 28.5, 0)))
    assert running.status.progress.display.loss == "2.57"
    # The JobSet restarted; every host runs again, process 0 does not serve progress yet.
    again = decide(running.status, obs(js(ready_jobs=1, restarts=1),
                                       now=T0 + timedelta(seconds=20)))
    p = again.status.progress
    assert (p.step, p.last_checkpoint_step) == (57, 40)
    assert (p.loss, p.tokens_per_second_per_device, p.mfu, p.last_step_time) == \
        (None, None, None, None)
    assert p.display.loss is None and p.display.mfu is None
    # The new attempt restored step 40 and compiles: its step, still no loss of its own.
    restored = decide(again.status, obs(js(ready_jobs=1, restarts=1),
                                        now=T0 + timedelta(seconds=25),
                                        progress=ProgressReading(step=40, training=False,
                                                                 trainer_phase="compiling")))
    assert restored.status.progress.step == 40 and restored.status.progress.loss is None


def test_a_restart_that_lost_steps_says_so_in_an_event():
    first = decide(status(Phase.RUNNING), obs(js(ready_jobs=1),
                                              progress=_attempt("a", 57, 57, 28.5, 0)))
    later = decide(first.status, obs(js(ready_jobs=1), now=T0 + timedelta(seconds=30),
                                     progress=_attempt("a", 57, 57, 28.5, 0)))
    assert [e.reason for e in later.events] == []
    resumed = decide(later.status, obs(js(ready_jobs=1, restarts=1),
                                       now=T0 + timedelta(seconds=60),
                                       progress=_attempt("b", 41, 1, 0.5, 40)))
    [lost] = [e for e in resumed.events if e.reason == "LostSteps"]
    assert lost.type == "Warning"
    assert lost.message == (
        f"the restart lost 17 steps (8.5 s of training) computed after the checkpoint at step "
        f"40; goodput {later.status.goodput.display} -> {resumed.status.goodput.display}")
    assert resumed.status.goodput.lost_steps == 17
    # Said once: the next pass adds no loss.
    after = decide(resumed.status, obs(js(ready_jobs=1, restarts=1),
                                       now=T0 + timedelta(seconds=61),
                                       progress=_attempt("b", 42, 2, 1.0, 40)))
    assert [e for e in after.events if e.reason == "LostSteps"] == []


def test_one_lost_step_is_said_too():
    first = decide(status(Phase.RUNNING), obs(js(ready_jobs=1),
                                              progress=_attempt("a", 41, 41, 20.5, 0)))
    resumed = decide(first.status, obs(js(ready_jobs=1, restarts=1),
                                       now=T0 + timedelta(seconds=60),
                                       progress=_attempt("b", 40, 0, 0.0, 40, "compiling")))
    [lost] = [e for e in resumed.events if e.reason == "LostSteps"]
    assert lost.message.startswith("the restart lost 1 step (0.5 s of training)")
