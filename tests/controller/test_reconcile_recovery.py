"""After the operator's own restart of a stalled job, the JobSet still counts the old attempt's
pods ready while they are torn down, and their processes may step on: the reconciler reads no
progress and keeps the job Restarting until every pod of the new attempt (made after the
failure) runs, then fills the recovery's schedule and start parts from those pods. Against the
embedded API server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.controller.test_reconcile_paths import PODS, SETTINGS, add_pod, started, status_of
from tpujob.api.status import Phase
from tpujob.controller.reconcile import Reconciler
from tpujob.controller.trainer_reports import ProgressReading

pytestmark = pytest.mark.integration


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_the_old_attempt_is_not_read_until_the_new_one_runs(c, kube):
    reads = []

    def read_progress(ip, port):
        reads.append((ip, port))
        return ProgressReading(step=30)

    r = Reconciler(kube, SETTINGS, read_progress=read_progress)
    job, jobset = started(c, r, "after-stall")
    # A v6e-16: 4 hosts, 4 pods.
    pods = [add_pod(c, "after-stall", index=i)["metadata"] for i in range(4)]
    # The API server stamps creation to the second: four pods may straddle a second's edge.
    created = [datetime.fromisoformat(p["creationTimestamp"].replace("Z", "+00:00"))
               for p in pods]
    first, made = min(created), max(created)
    ns = c.namespace

    def stalled_at(failed: datetime) -> None:
        kube.patch_status(ns, "after-stall", {
            "phase": "Restarting", "restarts": 1, "stallRestarts": 1,
            "recoveries": [{"restart": 1, "cause": "stalled: no training step",
                            "failedAt": failed.isoformat().replace("+00:00", "Z")}]})

    # The stall came after the pod was made: it is the old attempt's. No read, Restarting.
    stalled_at(made + timedelta(seconds=2))
    assert r.reconcile(c.job("after-stall"), jobset).phase == Phase.RESTARTING
    assert reads == []
    # Made after the failure, but its container has not started: still not every host.
    stalled_at(first - timedelta(seconds=5))
    assert r.reconcile(c.job("after-stall"), jobset).phase == Phase.RESTARTING
    assert reads == []
    # Placed and running: the new attempt is up; progress is read again. Detection runs from
    # the failure to the first new pod, scheduling from it to the last placement.
    for pod in pods:
        c.patch(PODS.format(ns=ns) + f"/{pod['name']}/status", {"status": {
            "conditions": [{"type": "PodScheduled", "status": "True",
                            "lastTransitionTime": stamp(made + timedelta(seconds=1))}],
            "containerStatuses": [{"name": "trainer", "ready": True, "restartCount": 0,
                                   "image": "trainer:1", "imageID": "", "started": True,
                                   "state": {"running": {"startedAt": stamp(
                                       made + timedelta(seconds=3))}}}]}})
    assert r.reconcile(c.job("after-stall"), jobset).phase == Phase.RUNNING
    assert len(reads) == 1
    [record] = status_of(c, "after-stall")["recoveries"]
    assert (record["detectSeconds"], record["scheduleSeconds"], record["startSeconds"]) == \
        (5.0, 1.0 + (made - first).total_seconds(), 2.0)
    # A restart by the JobSet (not a stall) is not held back: its ready count is its own.
    kube.patch_status(ns, "after-stall", {"recoveries": [
        {"restart": 2, "cause": "pod x exited 1",
         "failedAt": (made + timedelta(seconds=2)).isoformat().replace("+00:00", "Z")}]})
    assert r.reconcile(c.job("after-stall"), jobset).phase == Phase.RUNNING
    assert len(reads) == 2


def test_nothing_is_listed_for_a_job_without_an_open_recovery(c, kube):
    r = Reconciler(kube, SETTINGS, read_progress=lambda ip, port: ProgressReading(step=3))
    job, jobset = started(c, r, "no-recovery")
    add_pod(c, "no-recovery")
    kube.patch_status(c.namespace, "no-recovery", {"recoveries": [
        {"restart": 1, "cause": "stalled: x", "failedAt": stamp(datetime.now(UTC)),
         "totalSeconds": 4.0}]})
    out = r.reconcile(c.job("no-recovery"), jobset)
    assert out.phase == Phase.RUNNING
