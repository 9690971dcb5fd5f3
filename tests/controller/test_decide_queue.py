"""The decision for a job in a Kueue queue, and for pods the scheduler has not placed: the
reason, the sentence, status.queue, the Events and the priority label, through `decide`."""

from datetime import timedelta

import pytest

from tests.controller.test_decide import T0, cond, js, obs, status
from tests.controller.test_kueue_workload import (
    ADMISSION,
    NO_FLAVOR,
    NO_QUOTA,
    PREEMPTION,
    RESERVED,
    T1,
    TOO_BIG,
    workload,
)
from tests.controller.test_kueue_workload import cond as wl_cond
from tpujob.api.status import ConditionStatus, Phase, QueueStatus
from tpujob.controller.decide import Action, decide
from tpujob.controller.kueue_workload import read_workload
from tpujob.controller.observe import Unscheduled, read_unscheduled

pytestmark = pytest.mark.unit
Q = {"scheduling": {"queueName": "tpus"}}
QUEUED_JS = js(suspended=True, queue_name="tpus")


def reading(*conditions, **status_):
    return read_workload(workload(*conditions, **status_))


def events(decision):
    return [(e.type, e.reason) for e in decision.events]


@pytest.mark.parametrize("wl, reason, says, warned", [
    (reading(wl_cond("QuotaReserved", False, "Pending", NO_QUOTA)), "WaitingForQuota",
     "waiting in LocalQueue tpus: insufficient unused quota", False),
    (reading(wl_cond("QuotaReserved", False, "Pending", NO_FLAVOR)), "NoMatchingFlavor",
     "never admitted as LocalQueue tpus stands", True),
    (reading(wl_cond("QuotaReserved", False, "Pending", TOO_BIG)), "ExceedsMaxQuota",
     "ask for a smaller slice", True),
    (reading(wl_cond("QuotaReserved", False, "Inadmissible", "LocalQueue tpus doesn't exist")),
     "QueueNotFound", "create the LocalQueue", True),
    (None, "Pending", "waiting for Kueue queue tpus to admit it", False),
])
def test_a_queued_job_says_why_it_waits(wl, reason, says, warned):
    d = decide(status(Phase.QUEUED), obs(QUEUED_JS, spec=Q, workload=wl))
    assert d.status.phase == Phase.QUEUED
    assert d.status.reason == reason and d.status.queue.reason == reason
    assert says in cond(d, "Running").message
    assert (("Warning", reason) in events(d)) is warned
    assert "Admitted" not in [e[1] for e in events(d)]
    # Said once: the same reading again is no news.
    again = decide(d.status, obs(QUEUED_JS, spec=Q, workload=wl))
    assert [e for e in events(again) if e[0] == "Warning"] == []


def test_the_queue_status_holds_the_workloads_facts():
    wl = reading(RESERVED, wl_cond("Admitted", True, "Admitted", "ok", T1), admission=ADMISSION)
    d = decide(status(Phase.QUEUED, queue=QueueStatus(state="Pending", reason="Pending",
                                                      local_queue="tpus")),
               obs(js(ready_jobs=0, queue_name="tpus"), spec=Q, workload=wl))
    q = d.status.queue
    assert (q.state, q.cluster_queue, q.flavors, q.priority, q.priority_class, q.workload,
            q.local_queue) == ("Admitted", "cluster-queue", {"google.com/tpu": "v6e-2x4"}, 100,
                               "low", "jobset-j-1a2b3", "tpus")
    assert d.status.phase == Phase.STARTING and d.status.reason is None
    [admitted] = [e for e in d.events if e.reason == "Admitted"]
    assert admitted.message == ("admitted by ClusterQueue cluster-queue to flavor v6e-2x4 "
                                "(google.com/tpu) after 29 s in the queue")


def test_an_eviction_is_a_warning_once_and_the_job_is_queued_again():
    wl = reading(wl_cond("QuotaReserved", False, "Pending", NO_QUOTA),
                 wl_cond("Evicted", True, "Preempted", PREEMPTION),
                 wl_cond("Preempted", True, "InClusterQueue", PREEMPTION),
                 schedulingStats={"evictions": [{"reason": "Preempted", "count": 1}]})
    prev = status(Phase.RUNNING, queue=QueueStatus(state="Admitted", reason="Admitted",
                                                   local_queue="tpus"))
    d = decide(prev, obs(QUEUED_JS, spec=Q, workload=wl))
    assert d.status.phase == Phase.QUEUED and d.status.queue.evictions == 1
    assert d.status.queue.state == "Preempted" and d.status.reason == "WaitingForQuota"
    assert ("Warning", "Preempted") in events(d)
    assert cond(d, "Running").message.startswith("preempted by a higher-priority workload; ")
    again = decide(d.status, obs(QUEUED_JS, spec=Q, workload=wl))
    assert ("Warning", "Preempted") not in events(again)


@pytest.mark.parametrize("jobset, spec_priority, actions, refused", [
    (js(suspended=True, queue_name="tpus", priority_class="low"), "high",
     [Action.SET_PRIORITY], None),
    (js(suspended=True, queue_name="tpus"), "high", [Action.SET_PRIORITY], None),
    (js(ready_jobs=1, queue_name="tpus", priority_class="low"), "high",
     [Action.SET_PRIORITY], None),
    (js(ready_jobs=1, queue_name="tpus"), "high", [], "can be added only while the job is "
                                                     "queued or suspended"),
    (js(ready_jobs=1, queue_name="tpus", priority_class="low"), None, [],
     "cannot be removed once the job has one"),
    (js(ready_jobs=1, queue_name="tpus", priority_class="high"), "high", [], None),
])
def test_the_priority_label_follows_the_spec_where_kueue_allows(jobset, spec_priority,
                                                                actions, refused):
    spec = {"scheduling": {"queueName": "tpus"} | (
        {"priority": spec_priority} if spec_priority else {})}
    d = decide(status(Phase.RUNNING), obs(jobset, spec=spec))
    assert [a for a in d.actions if a == Action.SET_PRIORITY] == actions
    applied = cond(d, "SpecApplied")
    if refused:
        assert applied.status == ConditionStatus.FALSE and refused in applied.message
        assert ("Warning", "UpdateRefused") in events(d)
    else:
        assert applied is None


def unscheduled(age_s: float, pods: int = 1, of: int = 1) -> Unscheduled:
    return Unscheduled(pods, of, T0 - timedelta(seconds=age_s), "j-slice-0-0-x",
                       "0/8 nodes are available: 8 node(s) didn't match Pod's node "
                       "affinity/selector.")


@pytest.mark.parametrize("age_s, bound, flagged", [
    (599, None, False), (600, None, True), (30, 10, True), (9, 10, False), (10_000, 0, False)])
def test_pods_left_unplaced_past_the_bound_are_flagged(age_s, bound, flagged):
    spec = {"scheduling": {"unscheduledWarningSeconds": bound}} if bound is not None else {}
    d = decide(status(Phase.STARTING), obs(js(ready_jobs=0), spec=spec,
                                           unscheduled=unscheduled(age_s)))
    assert d.status.phase == Phase.STARTING
    assert (d.status.reason == "Unschedulable") is flagged
    assert (("Warning", "Unschedulable") in events(d)) is flagged
    if flagged:
        # v6e-16: 4 hosts, 1 pod made and unplaced, 3 not made yet.
        assert cond(d, "PodsScheduled").message.startswith("4 of 4 pods not scheduled for ")
        assert cond(d, "Running").message.endswith("didn't match Pod's node affinity/selector.")
        again = decide(d.status, obs(js(ready_jobs=0), spec=spec,
                                     unscheduled=unscheduled(age_s + 5)))
        assert ("Warning", "Unschedulable") not in events(again)
        placed = decide(d.status, obs(js(ready_jobs=1), spec=spec))
        assert placed.status.reason is None
        assert cond(placed, "PodsScheduled").status == ConditionStatus.TRUE


def pod(name: str, created: str, scheduled: bool | None, phase: str = "Pending",
        deleting: bool = False) -> dict:
    conditions = [] if scheduled is None else [{
        "type": "PodScheduled", "status": "True" if scheduled else "False",
        "reason": "" if scheduled else "Unschedulable",
        "message": "" if scheduled else f"0/2 nodes are available ({name})"}]
    meta = {"name": name, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = created
    return {"metadata": meta, "status": {"phase": phase, "conditions": conditions}}


def test_the_unplaced_pods_are_counted_from_the_oldest_with_the_schedulers_words():
    found = read_unscheduled([
        pod("a", "2026-11-01T12:00:05Z", True, "Running"),
        pod("b", "2026-11-01T12:00:03Z", False),
        pod("c", "2026-11-01T11:59:58Z", False),
        pod("d", "2026-11-01T11:59:00Z", False, deleting=True),   # going: not counted
        pod("e", "2026-11-01T11:58:00Z", False, "Failed"),         # ended: not counted
        pod("f", "2026-11-01T12:00:09Z", None)])                   # not looked at yet
    assert (found.pods, found.of, found.pod) == (2, 4, "c")
    assert found.since == T0 - timedelta(seconds=2)
    assert found.message == "0/2 nodes are available (c)"
    assert read_unscheduled([pod("a", "2026-11-01T12:00:05Z", True, "Running")]) is None


def test_a_pass_without_the_workload_keeps_the_queue_as_it_was():
    kept = QueueStatus(state="Pending", reason="WaitingForQuota", local_queue="tpus",
                       message="insufficient unused quota", workload="jobset-j-1a2b3")
    d = decide(status(Phase.QUEUED, queue=kept), obs(QUEUED_JS, spec=Q))
    assert d.status.queue == kept and d.status.reason == "WaitingForQuota"
    moved = decide(status(Phase.QUEUED, queue=kept),
                   obs(js(suspended=True, queue_name="other"), spec=Q))
    assert (moved.status.queue.local_queue, moved.status.queue.reason) == ("other", "Pending")


def test_an_eviction_seen_first_is_still_a_warning():
    wl = reading(wl_cond("QuotaReserved", False, "Pending", NO_QUOTA),
                 wl_cond("Evicted", True, "Preempted", PREEMPTION),
                 schedulingStats={"evictions": [{"reason": "Preempted", "count": 1},
                                                {"reason": "Other"}]})
    assert wl.evictions == 1, "an entry without a count counts none"
    d = decide(status(Phase.QUEUED), obs(QUEUED_JS, spec=Q, workload=wl))
    assert ("Warning", "Preempted") in events(d)


def test_an_admission_right_after_queueing_took_no_seconds():
    wl = reading(RESERVED, wl_cond("Admitted", True, "Admitted", "ok"), admission=ADMISSION)
    d = decide(status(Phase.QUEUED), obs(js(ready_jobs=0, queue_name="tpus"), spec=Q,
                                         workload=wl))
    [admitted] = [e for e in d.events if e.reason == "Admitted"]
    assert admitted.message.endswith("after 0 s in the queue")


@pytest.mark.parametrize("age_s, bound, says", [
    (600, None, "4 of 4 pods not scheduled for 10m00s (pod j-slice-0-0-x): "),
    (61, 1, "4 of 4 pods not scheduled for 1m01s "), (5, 1, "4 of 4 pods not scheduled for 5s ")])
def test_the_flag_says_how_long(age_s, bound, says):
    spec = {"scheduling": {"unscheduledWarningSeconds": bound}} if bound else {}
    d = decide(status(Phase.STARTING), obs(js(ready_jobs=0), spec=spec,
                                           unscheduled=unscheduled(age_s)))
    assert cond(d, "PodsScheduled").message.startswith(says)
