"""A restart's recovery broken down (status.recoveries): through `decide`, the path the operator
takes, pass by pass, and the pod reading that gives the first parts."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from datetime import timedelta

import pytest

from tests.controller.test_decide import T0, js, obs, running_status
from tpujob.api.status import FailureReason, Progress, RecoveryStatus, TrainerSeconds
from tpujob.controller.decide import decide
from tpujob.controller.observe import FailureCause
from tpujob.controller.recovery import (
    RECOVERIES_KEPT,
    AttemptStart,
    after_a_stall,
    describe,
    fill_recovery,
    read_attempt_start,
)
from tpujob.controller.trainer_reports import ProgressReading, TimelineReading

pytestmark = pytest.mark.unit
KILLED = FailureCause(FailureReason.PREEMPTED, "pod j-0 was killed by signal 9", "j-0",
                      "trainer", at=T0)


def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


def new_attempt(first_step_at: float | None, *, started: float = 5.5,
                cache: str | None = "hit") -> ProgressReading:
    """Process 0 of the attempt after the failure: started 5.5 s after it, init 4 s, prepare
    1 s, restore 2 s, compile 10 s (so compiled at 22.5 s)."""
    return ProgressReading(step=20, training=first_step_at is not None, timeline=TimelineReading(
        attempt="b", started_at=T0.timestamp() + started, resumed_from_step=20,
        seconds=TrainerSeconds(tpu_initialization=4, training_prep=1, checkpoint_restore=2,
                               program_startup=10),
        compile_cache=cache,
        first_step_at=None if first_step_at is None else T0.timestamp() + first_step_at))


PODS_UP = AttemptStart(created_at=at(3), scheduled_at=at(4), running_at=at(6))


def test_a_restart_is_broken_down_pass_by_pass_and_closed_with_one_event():
    prev = running_status(T0 - timedelta(minutes=5))
    # The JobSet restarted after host 0 was killed: a record opens, nothing measured yet.
    d = decide(prev, obs(js(ready_jobs=0, restarts=1), failure=KILLED, now=at(2)))
    [opened] = d.status.recoveries
    assert (opened.restart, opened.failed_at, opened.cause) == (1, T0, KILLED.message)
    assert opened.total_seconds is None and opened.detect_seconds is None
    # Every host runs again and process 0 compiled: the parts up to compile are known.
    d2 = decide(d.status, obs(js(ready_jobs=1, restarts=1), now=at(23),
                              attempt_start=PODS_UP, progress=new_attempt(None)))
    [mid] = d2.status.recoveries
    assert [mid.detect_seconds, mid.schedule_seconds, mid.start_seconds, mid.init_seconds,
            mid.prepare_seconds, mid.restore_seconds, mid.compile_seconds] == \
        [3.0, 1.0, 2.0, 3.5, 1.0, 2.0, 10.0]
    assert (mid.compile_cache, mid.resumed_from_step) == ("hit", 20)
    assert mid.first_step_seconds is None and mid.total_seconds is None
    assert not [e for e in d2.events if e.reason == "Recovered"]
    # The first step: closed, the parts adding up to the total, one Event saying so.
    d3 = decide(d2.status, obs(js(ready_jobs=1, restarts=1), now=at(25),
                               attempt_start=PODS_UP, progress=new_attempt(24.0)))
    [done] = d3.status.recoveries
    assert (done.first_step_seconds, done.total_seconds) == (1.5, 24.0)
    parts = [done.detect_seconds, done.schedule_seconds, done.start_seconds, done.init_seconds,
             done.prepare_seconds, done.restore_seconds, done.compile_seconds,
             done.first_step_seconds]
    assert sum(parts) == pytest.approx(done.total_seconds)
    [event] = [e for e in d3.events if e.reason == "Recovered"]
    assert event.type == "Normal" and event.message == (
        "restart 1: training again 24.0 s after the failure (detect 3.0 s, schedule 1.0 s, "
        "start 2.0 s, init 3.5 s, prepare 1.0 s, restore 2.0 s, compile 10.0 s (compilation cache hit), "
        "first step 1.5 s); resumed from step 20")
    # A pass that did not read the pods keeps what an earlier one read.
    kept = decide(d2.status, obs(js(ready_jobs=1, restarts=1), now=at(24),
                                 progress=new_attempt(None)))
    assert kept.status.recoveries == d2.status.recoveries
    # Closed for good: later readings change nothing and say nothing again.
    d4 = decide(d3.status, obs(js(ready_jobs=1, restarts=1), now=at(60),
                               attempt_start=AttemptStart(created_at=at(50)),
                               progress=new_attempt(40.0)))
    assert d4.status.recoveries == d3.status.recoveries
    assert not [e for e in d4.events if e.reason == "Recovered"]


def test_the_attempt_that_failed_is_not_read_as_the_new_one():
    """Until the new process 0 serves its timeline, the old one's (started before the failure)
    gives no parts."""
    prev = decide(running_status(T0 - timedelta(minutes=5)),
                  obs(js(ready_jobs=0, restarts=1), failure=KILLED, now=at(2))).status
    d = decide(prev, obs(js(ready_jobs=1, restarts=1), now=at(20), attempt_start=PODS_UP,
                         progress=new_attempt(10.0, started=-60)))
    [record] = d.status.recoveries
    assert record.detect_seconds == 3.0 and record.init_seconds is None
    assert record.total_seconds is None


def test_a_stall_restart_counts_from_the_last_step():
    progress = Progress(step=10, last_step_time=at(100))
    d = decide(running_status(T0, progress), obs(js(ready_jobs=1), now=at(701)))
    assert d.status.stall_restarts == 1
    [record] = d.status.recoveries
    assert record.failed_at == at(100) and record.cause.startswith("stalled: ")
    # The pods the operator's restart made, 601 s after the last step: detection.
    d2 = decide(d.status, obs(js(ready_jobs=0), now=at(703),
                              attempt_start=AttemptStart(created_at=at(702))))
    assert d2.status.recoveries[0].detect_seconds == 602.0


@pytest.mark.parametrize("last_step, failed_at, counted_from", [
    (at(-7), at(-7), "the last step read before it"),
    (None, at(30), "when the restart was seen"),
])
def test_a_failure_whose_time_was_not_read(last_step, failed_at, counted_from):
    """The failed pods gone before the operator looked (the JobSet controller deletes them as
    it restarts): the failure came after the last step read."""
    unknown = FailureCause(FailureReason.ERROR, "pod j-1 exited 1")
    prev = running_status(T0 - timedelta(minutes=5), Progress(step=9, last_step_time=last_step))
    for failure, cause in [(unknown, "pod j-1 exited 1"), (None, "the JobSet restarted")]:
        d = decide(prev, obs(js(ready_jobs=0, restarts=1), failure=failure, now=at(30)))
        [record] = d.status.recoveries
        assert record.failed_at == failed_at
        assert record.cause == (f"{cause} (the failure's time was not read: counted from "
                                f"{counted_from})")
    # The new attempt's pods, made after it, are this record's.
    d2 = decide(d.status, obs(js(ready_jobs=0, restarts=1), now=at(40),
                              attempt_start=AttemptStart(created_at=at(31))))
    assert d2.status.recoveries[0].detect_seconds == (at(31) - failed_at).total_seconds()


def test_without_a_timeline_only_the_pods_and_the_first_step_seen_count():
    spec = {"trainer": {"command": ["python3", "train.py"]}}
    prev = decide(running_status(T0 - timedelta(minutes=5)),
                  obs(js(ready_jobs=0, restarts=1), spec=spec, failure=KILLED,
                      now=at(2))).status
    d = decide(prev, obs(js(ready_jobs=1, restarts=1), spec=spec, now=at(30),
                         attempt_start=PODS_UP, progress=ProgressReading(step=21)))
    # The first reading after a restart sets the step clock; the next change is a step.
    d2 = decide(d.status, obs(js(ready_jobs=1, restarts=1), spec=spec, now=at(40),
                              attempt_start=PODS_UP, progress=ProgressReading(step=22)))
    [record] = d2.status.recoveries
    assert record.total_seconds == 40.0 and record.start_seconds == 2.0
    assert record.init_seconds is None and record.compile_cache is None


def test_the_newest_recoveries_are_kept():
    old = [RecoveryStatus(restart=i, failed_at=at(i), total_seconds=1.0)
           for i in range(1, RECOVERIES_KEPT + 1)]
    prev = running_status(T0).model_copy(update={
        "recoveries": old, "restarts": RECOVERIES_KEPT, "jobset_restarts": RECOVERIES_KEPT})
    d = decide(prev, obs(js(ready_jobs=0, restarts=RECOVERIES_KEPT + 1), failure=KILLED,
                         now=at(2)))
    assert [r.restart for r in d.status.recoveries] == list(range(2, RECOVERIES_KEPT + 2))


def test_a_second_restart_is_filled_in_and_the_first_left_as_it_was():
    first = RecoveryStatus(restart=1, failed_at=at(-100), detect_seconds=2.0,
                           total_seconds=30.0)
    prev = running_status(T0).model_copy(update={
        "recoveries": [first], "restarts": 1, "jobset_restarts": 1})
    d = decide(prev, obs(js(ready_jobs=0, restarts=2), failure=KILLED, now=at(2)))
    d2 = decide(d.status, obs(js(ready_jobs=0, restarts=2), now=at(4),
                              attempt_start=AttemptStart(created_at=at(3))))
    assert d2.status.recoveries[0] == first
    assert (d2.status.recoveries[1].restart, d2.status.recoveries[1].detect_seconds) == (2, 3.0)
    d3 = decide(d2.status, obs(js(ready_jobs=1, restarts=2), now=at(30),
                               attempt_start=PODS_UP, progress=new_attempt(24.0)))
    [event] = [e for e in d3.events if e.reason == "Recovered"]
    assert event.message.startswith("restart 2: training again 24.0 s ")


def test_init_counts_from_the_containers_once_they_are_read():
    """Read before the pods, init counts from process 0's own start; the pods' reading, once
    there, puts it from the last container's start."""
    record = RecoveryStatus(restart=1, failed_at=T0)
    timeline = new_attempt(None).timeline
    early = fill_recovery(record, None, timeline, None)
    assert early.init_seconds == 4.0
    assert fill_recovery(early, PODS_UP, timeline, None).init_seconds == 3.5
    # A process that started at the failure's instant is the attempt that failed.
    same = fill_recovery(record, None, new_attempt(None, started=0).timeline, None)
    assert same.init_seconds is None


def test_an_attempt_start_is_frozen():
    with pytest.raises(FrozenInstanceError):
        PODS_UP.created_at = None


def test_parts_are_never_negative_kept_to_the_millisecond_and_add_up_to_the_total():
    """Whole-second pod times may put a later mark a second before an earlier one: each mark is
    taken no earlier than the one before it, so no part of a second is counted twice (seen on
    the real API server: parts summing to 13.191 s against a total of 12.193 s)."""
    record = fill_recovery(
        RecoveryStatus(restart=1, failed_at=at(0.4)),
        AttemptStart(created_at=at(0), scheduled_at=at(3), running_at=at(2)),
        TimelineReading(attempt="b", started_at=T0.timestamp() + 2.5,
                        seconds=TrainerSeconds(tpu_initialization=1.23456,
                                               training_prep=0.98765),
                        first_step_at=T0.timestamp() + 6.0),
        None)
    assert (record.detect_seconds, record.schedule_seconds, record.start_seconds) == \
        (0.0, 2.6, 0.0)
    assert (record.init_seconds, record.prepare_seconds) == (0.735, 0.988)
    parts = [getattr(record, f) for f in ("detect_seconds", "schedule_seconds", "start_seconds",
                                          "init_seconds", "prepare_seconds", "restore_seconds",
                                          "compile_seconds", "first_step_seconds")]
    assert None not in parts and all(p >= 0 for p in parts)
    assert sum(parts) == pytest.approx(record.total_seconds, abs=0.005) == 5.6


def test_a_step_change_counts_only_once_the_new_containers_run():
    """Without a timeline, the first step is the first step change the operator reads once
    the new attempt's containers run: the old attempt's processes may step on while they are
    torn down."""
    record = RecoveryStatus(restart=1, failed_at=T0)
    assert fill_recovery(record, None, None, at(5)).total_seconds is None
    assert fill_recovery(record, PODS_UP, None, at(5.9)).total_seconds is None
    assert fill_recovery(record, PODS_UP, None, at(6)).total_seconds == 6.0


def test_the_old_attempt_stepping_on_does_not_close_a_timeline_trainers_record():
    old = TimelineReading(attempt="a", started_at=T0.timestamp() - 300,
                          seconds=TrainerSeconds(productive=100), resumed_from_step=0)
    prev = decide(running_status(T0 - timedelta(minutes=5)),
                  obs(js(ready_jobs=1), now=at(-1),
                      progress=ProgressReading(step=10, timeline=old))).status
    d = decide(prev, obs(js(ready_jobs=0, restarts=1), failure=KILLED, now=at(2)))
    # The old process 0, not yet torn down, completes a step; then a pass reads nothing.
    d2 = decide(d.status, obs(js(ready_jobs=1, restarts=1), now=at(8), attempt_start=PODS_UP,
                              progress=ProgressReading(step=12, timeline=old)))
    d3 = decide(d2.status, obs(js(ready_jobs=1, restarts=1), now=at(9), attempt_start=PODS_UP))
    assert d3.status.progress.last_step_time == at(8)
    assert d3.status.recoveries[0].total_seconds is None


def test_a_long_cause_is_cut_to_what_the_status_holds():
    d = decide(running_status(T0), obs(
        js(ready_jobs=0, restarts=1), now=at(2),
        failure=FailureCause(FailureReason.ERROR, "x" * 5000, at=T0)))
    assert d.status.recoveries[0].cause == "x" * 1024


def test_a_job_without_restarts_has_no_recoveries():
    d = decide(running_status(T0), obs(js(ready_jobs=1), now=at(5)))
    assert d.status.recoveries is None


def test_describe_leaves_out_what_was_not_measured():
    record = RecoveryStatus(restart=2, failed_at=T0, detect_seconds=1.25, total_seconds=9.0)
    assert describe(record) == ("restart 2: training again 9.0 s after the failure "
                                "(detect 1.2 s)")


def pod(name: str, created: float, *, scheduled: float | None = None,
        running: float | None = None, deleting: bool = False) -> dict:
    def stamp(seconds: float) -> str:
        return at(seconds).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta = {"name": name, "creationTimestamp": stamp(created)}
    if deleting:
        meta["deletionTimestamp"] = stamp(created + 100)
    conditions = [{"type": "PodScheduled", "status": "True" if scheduled is not None else "False",
                   **({"lastTransitionTime": stamp(scheduled)} if scheduled is not None else {})}]
    containers = [{"name": "trainer", "state": {"running": {"startedAt": stamp(running)}}
                   if running is not None else {"waiting": {"reason": "ContainerCreating"}}},
                  {"name": "sidecar", "state": {"running": {"startedAt": stamp(99)}}}]
    return {"metadata": meta, "status": {"conditions": conditions,
                                         "containerStatuses": containers}}


@pytest.mark.parametrize("pods, expected", [
    # Nothing made since the failure (the old pods, one being deleted).
    ([pod("old-0", -60, scheduled=-59, running=-50),
      pod("old-1", -60, scheduled=-59, running=-50, deleting=True)], None),
    # One of two new pods so far: when it was made, nothing else.
    ([pod("old-0", -60, scheduled=-59, running=-50), pod("a", 4, scheduled=5, running=7)],
     AttemptStart(created_at=at(4))),
    # Both made, one not placed: the first pod's creation only.
    ([pod("a", 3, scheduled=4, running=6), pod("b", 4)], AttemptStart(created_at=at(3))),
    # Both placed, one container still starting.
    ([pod("a", 3, scheduled=4, running=6), pod("b", 4, scheduled=5)],
     AttemptStart(created_at=at(3), scheduled_at=at(5))),
    # A new pod already being deleted, and one whose containers the kubelet has not
    # reported yet: neither is up.
    ([pod("a", 3, scheduled=4, running=6), pod("b", 4, scheduled=5, running=6, deleting=True)],
     AttemptStart(created_at=at(3))),
    ([pod("a", 3, scheduled=4, running=6),
      {**pod("b", 4, scheduled=5), "status": {"conditions": [
          {"type": "PodScheduled", "status": "True",
           "lastTransitionTime": at(5).strftime("%Y-%m-%dT%H:%M:%SZ")}]}}],
     AttemptStart(created_at=at(3), scheduled_at=at(5))),
    # Every host up: the last placement and the last trainer container's start (the
    # sidecar's later start does not count).
    ([pod("a", 3, scheduled=4, running=8), pod("b", 4, scheduled=5, running=6)],
     AttemptStart(created_at=at(3), scheduled_at=at(5), running_at=at(8))),
])
def test_read_attempt_start(pods, expected):
    # The failure at 0.5 s: a pod made in the same second counts (creation times are whole
    # seconds); the old pods do not.
    assert read_attempt_start(pods, after=at(0.5), hosts=2) == expected


def test_a_pod_made_in_the_failures_second_counts():
    assert read_attempt_start([pod("a", 0)], after=at(0.9), hosts=1) == \
        AttemptStart(created_at=at(0))


@pytest.mark.parametrize("records, held", [
    (None, False),
    ([RecoveryStatus(restart=1, cause="stalled: x", failed_at=T0)], True),
    ([RecoveryStatus(restart=1, cause="stalled: x", failed_at=T0, total_seconds=3.0)], False),
    ([RecoveryStatus(restart=1, cause="stalled: x", failed_at=T0),
      RecoveryStatus(restart=2, cause="pod p exited 1", failed_at=at(9))], False),
    ([RecoveryStatus(restart=1, cause="pod p exited 1", failed_at=T0, total_seconds=3.0),
      RecoveryStatus(restart=2, cause="stalled: x", failed_at=at(9))], True),
])
def test_only_an_open_stall_restart_holds_the_job_back(records, held):
    """The newest record decides whether the old attempt's pods are still counted."""
    assert after_a_stall(records) is held
