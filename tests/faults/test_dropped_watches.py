"""Watches cut off every second or so (connections reset mid-stream, then streams ended early
as a server-side timeout does): every change made meanwhile still reaches the operator. The
operator reads JobSets and jobs only from its watches and never looks again on a timer here
(resync and progress looks are set far out), so an event lost on a reconnect leaves its job in
the old phase and the test fails."""

from __future__ import annotations

import time

import pytest

from tests.faults.conftest import (
    _retrying,
    count,
    create_jobs,
    operator_requests,
    phases,
    wait_until_ended,
)
from tests.operator.conftest import JOBS, JOBSETS, ROOT, Cluster, start_operator
from tests.support.apiserver import wait_for
from tpujob.local.apiserver import ApiServer, bundled_crd_paths, load_crds

pytestmark = pytest.mark.integration
READY = [{"name": "slice", "ready": 1, "succeeded": 0, "failed": 0, "active": 1,
          "suspended": 0}]


def test_changes_made_while_watches_drop_are_all_seen(cluster):
    to_run = [f"drop-run-{i}" for i in range(6)]         # JobSet status -> Running
    to_suspend = [f"drop-sus-{i}" for i in range(3)]     # job spec -> Suspended
    to_delete = [f"drop-del-{i}" for i in range(3)]      # job deleted -> out of the operator
    everyone = to_run + to_suspend + to_delete
    # A watch is cut only if it starts while the faults are on: on from the start. About a
    # third of the attempts to watch again fail, so the operator is blind for a second or more
    # at a time, and the changes made meanwhile reach it only by resuming from the version it
    # last saw.
    faults = dict(watch_drop_after_s=(0.3, 0.9), error_rate=0.3, verbs={"watch"},
                  user_agent="kopf")
    cluster.server.set_faults(**faults, seed=4)
    op = start_operator(cluster, resync_interval_s=600, progress_interval_s=600)
    try:
        create_jobs(cluster, everyone, [])
        wait_until_ended(cluster, everyone, [], timeout=30)
        cluster.server.reset_requests()
        changes = [lambda n=n: cluster.set_jobset_status(n, replicatedJobsStatus=READY)
                   for n in to_run]
        changes += [lambda n=n: cluster.patch(JOBS + f"/{n}", {"spec": {"suspend": True}})
                    for n in to_suspend]
        changes += [lambda n=n: cluster.request("DELETE", JOBS + f"/{n}") for n in to_delete]
        changes = [changes[i] for i in (0, 6, 9, 1, 7, 10, 2, 8, 11, 3, 4, 5)]  # interleaved
        for mode, batch in (("reset", changes[:6]), ("end", changes[6:])):
            cluster.server.set_faults(**faults, watch_drop_mode=mode, seed=5)
            for change in batch:
                change()
                time.sleep(0.35)  # spread over several drops
            time.sleep(1.0)
        want = {n: "Running" for n in to_run} | {n: "Suspended" for n in to_suspend}
        wait_for(lambda: all(phases(cluster).get(n) == p for n, p in want.items()),
                 timeout=20, interval=0.2,
                 message=f"every change to be seen (now {phases(cluster)})")
        wait_for(lambda: sorted(op.operator.jobs) == sorted(
            (cluster.namespace, n) for n in to_run + to_suspend), timeout=10,
            message="the deleted jobs to leave the operator")
    finally:
        op.stop()
        cluster.server.set_faults()
    dropped = {r.resource for r in operator_requests(cluster) if r.fault == "watch-drop"}
    assert {"tputrainingjobs", "jobsets"} <= dropped, dropped
    for n in to_suspend:
        assert cluster.jobset(n)["spec"]["suspend"] is True, n


def test_a_job_deleted_while_the_operator_could_not_watch_leaves_it(tmp_path):
    # The server keeps only 10 events per kind: a watch that was down for more than that
    # cannot resume (410 Gone) and lists everything again, which reports no deletions. The
    # operator must still let the deleted job go (its JobSet's deletion, replayed on the other
    # watch, makes it ask the server) and create nothing for it.
    crds = load_crds(bundled_crd_paths() + [ROOT / "manifests" / "crd.yaml"])
    with ApiServer(crds=crds, bookmark_interval_s=1.0, watch_history=10) as srv:
        cluster = _retrying(Cluster(srv, srv.write_kubeconfig(tmp_path / "kubeconfig"), "gap"))
        cluster.request("POST", "/api/v1/namespaces", json={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gap"}})
        op = start_operator(cluster)
        try:
            create_jobs(cluster, ["gone", "kept"], [])
            wait_until_ended(cluster, ["gone", "kept"], [], timeout=30)
            srv.set_faults(error_rate=1.0, verbs={"watch", "list"}, user_agent="kopf")
            srv.restart(down_s=0.2)  # cuts the watches; they cannot come back yet
            cluster.request("DELETE", JOBS + "/gone")
            for i in range(20):  # more job events than the server keeps
                cluster.patch(JOBS + "/kept", {"metadata": {"labels": {"n": str(i)}}})
            srv.set_faults()
            cleared_at = time.monotonic()
            wait_for(lambda: sorted(op.operator.jobs) == [("gap", "kept")], timeout=20,
                     message=f"the deleted job to leave the operator ({sorted(op.operator.jobs)})")
        finally:
            op.stop()
        # The job watch could not resume: kopf listed the jobs again.
        relisted = [r for r in operator_requests(cluster) if r.verb == "list" and
                    r.resource == "tputrainingjobs" and r.status == 200 and r.at > cleared_at]
        assert relisted, "the job watch resumed: the gap was not past the server's history"
        assert cluster.jobset("gone") is None
        assert count(cluster, JOBSETS) == 1


def _label(job: dict) -> str | None:
    return ((job.get("metadata") or {}).get("labels") or {}).get("n")


@pytest.mark.parametrize("namespaces", [(), ("gap2",)], ids=["clusterwide", "namespaced"])
def test_a_job_deleted_while_both_watches_lost_their_history_is_dropped_by_the_relist(
        tmp_path, namespaces):
    # As above, but the JobSet watch cannot resume either, so no event at all says the job
    # went: only listing again (every relist_interval_s) shows it. Without the relist the
    # job and its JobSet stay in the operator's caches for good.
    crds = load_crds(bundled_crd_paths() + [ROOT / "manifests" / "crd.yaml"])
    with ApiServer(crds=crds, bookmark_interval_s=1.0, watch_history=10) as srv:
        cluster = _retrying(Cluster(srv, srv.write_kubeconfig(tmp_path / "kubeconfig"), "gap2"))
        cluster.request("POST", "/api/v1/namespaces", json={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gap2"}})
        op = start_operator(cluster, relist_interval_s=1.0, namespaces=namespaces)
        try:
            create_jobs(cluster, ["gone", "kept"], [])
            wait_until_ended(cluster, ["gone", "kept"], [], timeout=30)
            srv.set_faults(error_rate=1.0, verbs={"watch", "list"}, user_agent="kopf")
            srv.restart(down_s=0.2)  # cuts the watches; they cannot come back yet
            cluster.request("DELETE", JOBS + "/gone")  # its JobSet goes too (owner reference)
            wait_for(lambda: cluster.jobset("gone") is None, message="garbage collection")
            for i in range(20):  # more events of each kind than the server keeps
                cluster.patch(JOBS + "/kept", {"metadata": {"labels": {"n": str(i)}}})
                cluster.patch(JOBSETS + "/kept", {"metadata": {"labels": {"n": str(i)}}})
            srv.set_faults()
            # The relist may run while the patches above are still being made (the operator's
            # own lists are not the ones failing): wait for the kept job's last change as well.
            wait_for(lambda: sorted(op.operator.jobs) == [("gap2", "kept")] and
                     sorted(op.operator.jobsets) == [("gap2", "kept")] and
                     _label(op.operator.jobs[("gap2", "kept")]) == "19", timeout=20,
                     message=f"the deleted job to leave the operator ({sorted(op.operator.jobs)}"
                             f", {sorted(op.operator.jobsets)}) and the kept one's last change "
                             "to arrive")
            found = op.operator.metrics.registry.get_sample_value(
                "tpujob_operator_relist_changes_total")
        finally:
            op.stop()
        assert found and found >= 2  # the job and its JobSet: nothing else told the operator
        # The kept job's changes came through as well, and nothing was made for the gone one.
        assert _label(op.operator.jobs[("gap2", "kept")]) == "19"
        assert cluster.jobset("gone") is None
        assert count(cluster, JOBSETS) == 1
