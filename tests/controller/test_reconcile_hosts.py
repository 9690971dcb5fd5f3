"""The reconciler reads every trainer container's log for its host reports (not only process
0's): the slow host named in status, the SlowHost condition, the SLOW HOST column's text and
one Warning Event; reads at most every `host_report_interval_s`, each looking back only past
the previous one; a new attempt's hosts scored afresh; what is kept dropped with the job. Against
the embedded API server, whose pods/log this test serves from files."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.controller.test_reconcile_paths import (
    RUNNING,
    SETTINGS,
    LogFiles,
    add_pod,
    event_reasons,
    mark,
    sent,
    started,
    status_of,
)
from tpujob.api.status import TpuTrainingJobStatus
from tpujob.controller.decide import Action, Decision
from tpujob.controller.reconcile import Reconciler

pytestmark = pytest.mark.integration
HOSTS_ON = dataclasses.replace(SETTINGS, host_report_interval_s=30.0)


def report_lines(host: int, busy: float, first: int = 1, last: int = 40) -> str:
    """A host's report lines as the trainer writes them: 10 steps a line, step 1 compiling."""
    lines = []
    for end in range(first + 9, last + 1, 10):
        entries = [[s, 20.0 if s == 1 else busy, 1.0 - busy, 0] for s in range(end - 9, end + 1)]
        # Beats of a job that runs now (a beat decades old would be a hang).
        at = time.time() - 100 + end
        lines.append(json.dumps({"event": "host_report", "time": at, "process": host,
                                 "slice": 0, "host": host, "phase": "step", "step": end,
                                 "moved_at": at, "steps": entries},
                                separators=(",", ":")))
    return "\n".join(["a line of the trainer's own", *lines]) + "\n"


class Clock:
    def __init__(self, reconciler_clock):
        self.now = reconciler_clock()

    def __call__(self):
        return self.now


def two_hosts_one_slow(c, kube, tmp_path, name: str):
    """A running job of 2 hosts whose logs say host 1 is busy 0.25 s a step, host 0 0.05 s:
    (reconciler, its clock, the log files, the job, its JobSet, the two pods' names)."""
    logs = LogFiles(tmp_path)
    c.server.set_pod_logs(logs)
    r = Reconciler(kube, HOSTS_ON)
    clock = Clock(r.clock)
    r.clock = clock
    job, jobset = started(c, r, name)
    pods = [add_pod(c, name, index=i)["metadata"]["name"] for i in range(2)]
    logs.write(pods[0], report_lines(0, 0.05))
    logs.write(pods[1], report_lines(1, 0.25))
    return r, clock, logs, job, jobset, pods


def test_every_hosts_log_is_read_and_the_slow_one_named(c, kube, tmp_path):
    r, _, _, job, jobset, _ = two_hosts_one_slow(c, kube, tmp_path, "slow")
    before = mark(c)
    job = r.reconcile(job, jobset).job
    hosts = job["status"]["hosts"]
    assert (hosts["slowHost"], hosts["display"], hosts["reporting"], hosts["scored"]) == (
        "slice-0/host-1", "slice-0/host-1 0.80", 2, 2)
    assert hosts["slowest"][0]["flagged"] and not hosts["slowest"][1]["flagged"]
    cond = next(c for c in job["status"]["conditions"] if c["type"] == "SlowHost")
    assert (cond["status"], cond["reason"]) == ("True", "SlowHost")
    assert "host slice-0/host-1 at 0.80" in cond["message"]
    assert event_reasons(c, "slow").count("SlowHost") == 1
    # Both trainer containers' logs, one pod list for the pass (process 0 found from it).
    assert sent(c, before).count(("get", "pods/log")) == 2
    assert sent(c, before).count(("list", "pods")) == 1
    # Within the interval: no read, the figures stand, no second Event.
    before = mark(c)
    r.reconcile(job, jobset)
    assert sent(c, before).count(("get", "pods/log")) == 0
    assert status_of(c, "slow")["hosts"]["slowHost"] == "slice-0/host-1"
    assert event_reasons(c, "slow").count("SlowHost") == 1


def test_host_1_recovers_and_a_new_attempt_is_scored_afresh(c, kube, tmp_path):
    r, clock, logs, job, jobset, pods = two_hosts_one_slow(c, kube, tmp_path, "heal")
    job = r.reconcile(job, jobset).job
    assert job["status"]["hosts"]["slowHost"] == "slice-0/host-1"
    # 40 more steps at the same speed as host 0: its current window is healthy again.
    logs.write(pods[0], report_lines(0, 0.05, last=80))
    logs.write(pods[1], report_lines(1, 0.25) + report_lines(1, 0.05, first=41, last=80))
    clock.now += timedelta(seconds=31)
    job = r.reconcile(job, jobset).job
    assert job["status"]["hosts"].get("slowHost") is None
    assert event_reasons(c, "heal")[-1] == "SlowHostRecovered"
    # The JobSet restarts: the new attempt's pods only, its hosts not scored yet (5 steps).
    js = c.set_jobset_status("heal", restarts=1, replicatedJobsStatus=RUNNING)
    fresh = [add_pod(c, "heal", index=i, attempt=1)["metadata"]["name"] for i in range(2)]
    for i, pod in enumerate(fresh):
        logs.write(pod, report_lines(i, 0.05, first=81, last=90))
    clock.now += timedelta(seconds=31)
    before = mark(c)
    r.reconcile(c.job("heal"), js)  # Restarting: the hosts are not looked at
    r.reconcile(c.job("heal"), js)
    hosts = status_of(c, "heal")["hosts"]
    assert (hosts["reporting"], hosts["scored"]) == (2, 0)
    assert sent(c, before).count(("get", "pods/log")) == 2   # not the old attempt's
    uid = job["metadata"]["uid"]
    assert uid in r._host_watch
    r.forget(uid)
    assert uid not in r._host_watch


def test_the_reads_can_be_switched_off(c, kube, tmp_path):
    logs = LogFiles(tmp_path)
    c.server.set_pod_logs(logs)
    r = Reconciler(kube, SETTINGS)
    job, jobset = started(c, r, "off")
    logs.write(add_pod(c, "off")["metadata"]["name"], report_lines(0, 0.05))
    before = mark(c)
    r.reconcile(job, jobset)
    assert "hosts" not in status_of(c, "off") and sent(c, before).count(("get", "pods/log")) == 0


def test_stacks_are_asked_of_every_process_before_a_restart(c, kube):
    asked = []

    def read_stacks(ip, port, label):
        asked.append((ip, port, label))
        if port == 9431:
            return {"host": "slice-0/host-0", "saved": "gs://bucket/run/stacks/x.txt"}, None
        return None, "no answer in 5 s"

    r = Reconciler(kube, HOSTS_ON, read_stacks=read_stacks)
    job, jobset = started(c, r, "stk")
    add_pod(c, "stk", index=0)
    add_pod(c, "stk", index=1, port=9432)
    add_pod(c, "stk", index=1, attempt=1, port=9433)     # another attempt's: not asked
    obs = r.observe(job, jobset, TpuTrainingJobStatus())
    obs = dataclasses.replace(obs, now=datetime(2026, 5, 4, 3, 2, 1, tzinfo=UTC))
    r.act(job, obs, Decision(TpuTrainingJobStatus(), actions=[Action.COLLECT_STACKS]))
    assert sorted(asked) == [("127.0.0.1", 9431, "hang-20260504T030201Z"),
                             ("127.0.0.1", 9432, "hang-20260504T030201Z")]
    [event] = [e for e in c.events("stk") if e["reason"] == "HangStacks"]
    assert event["type"] == "Warning"
    assert event["message"] == (
        "stacks of 1 of 2 processes, label hang-20260504T030201Z: slice-0/host-0 "
        "(gs://bucket/run/stacks/x.txt). No stacks from slice-0/host-1: no answer in 5 s "
        "(a stopped process, or one holding the GIL, cannot answer)")
