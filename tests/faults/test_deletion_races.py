"""A job deleted while the operator still works on it.

- Deleted (or deleted and created again under the same name) while a reconcile is in flight:
  the reconcile's results must not bring the old job or its JobSet back into the operator's
  caches. A ghost job would be reconciled (and fail) forever; a ghost JobSet would make the new
  job of that name look blocked by a JobSet that is not its own. Driven through the operator's
  work function, so the interleaving is exact.
- Its JobSet garbage-collected before the job's own DELETED event reaches the operator (two
  watch streams, no order between them): the operator must not create the children again for a
  job that is gone; a JobSet deleted by hand is made again. Driven through the reconciler
  against the embedded API server and against the real control plane (its garbage collector,
  JobSet's webhooks, the chart's RBAC for the operator's identity).
"""

from __future__ import annotations

import asyncio
import secrets

import pytest
from kubernetes import client

from tests.operator.conftest import JOBS, JOBSETS, ROOT, Cluster
from tests.support.apiserver import wait_for
from tpujob.api.status import Phase
from tpujob.builders import names
from tpujob.controller.kube import KubeApi
from tpujob.controller.operator import Operator
from tpujob.controller.reconcile import Outcome, Reconciler
from tpujob.controller.runner import load_api_config
from tpujob.controller.settings import OperatorSettings
from tpujob.local.apiserver import ApiServer, bundled_crd_paths, load_crds

pytestmark = pytest.mark.integration
KEY = ("team", "job-a")


def _job(uid: str, rv: int, phase: str | None = None) -> dict:
    job = {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
           "metadata": {"namespace": KEY[0], "name": KEY[1], "uid": uid,
                        "resourceVersion": str(rv)}, "spec": {}}
    if phase:
        job["status"] = {"phase": phase}
    return job


def _jobset(owner_uid: str, rv: int) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"namespace": KEY[0], "name": KEY[1], "uid": f"js-{owner_uid}",
                         "resourceVersion": str(rv), "labels": {names.LABEL_JOB: KEY[1]},
                         "ownerReferences": [{"uid": owner_uid, "controller": True}]},
            "spec": {"replicatedJobs": [{"name": "slice", "replicas": 1}]}}


class _Reconciler:
    """Stands in for the reconciler: while "calling the API" the watch reports `during`."""

    def __init__(self, operator: Operator, during):
        self.operator = operator
        self.during = during

    def reconcile(self, job, jobset):
        self.during(self.operator)
        uid = job["metadata"]["uid"]
        return Outcome(Phase.STARTING, 5.0, job=_job(uid, 20, "Starting"),
                       jobset=_jobset(uid, 21))

    def forget(self, uid):
        pass


def _operator(during) -> Operator:
    op = Operator(OperatorSettings(http_port=None), client.Configuration())
    op.reconciler = _Reconciler(op, during)
    op.on_job_event({"type": "ADDED", "object": _job("uid-1", 10)})
    return op


def test_a_job_deleted_during_its_reconcile_stays_gone():
    def delete(op):
        op.on_job_event({"type": "DELETED", "object": _job("uid-1", 19)})
        op.on_jobset_event({"type": "DELETED", "object": _jobset("uid-1", 22)})
    op = _operator(delete)
    asyncio.run(op._work(KEY))
    assert KEY not in op.jobs, "the deleted job came back into the cache"
    assert KEY not in op.jobsets, "the deleted job's JobSet came back into the cache"
    assert op._phases() == []


def test_a_job_created_again_under_the_same_name_keeps_its_own_state():
    def recreate(op):
        op.on_job_event({"type": "DELETED", "object": _job("uid-1", 19)})
        op.on_jobset_event({"type": "DELETED", "object": _jobset("uid-1", 22)})
        op.on_job_event({"type": "ADDED", "object": _job("uid-2", 23)})
    op = _operator(recreate)
    asyncio.run(op._work(KEY))
    assert op.jobs[KEY]["metadata"]["uid"] == "uid-2"
    assert "status" not in op.jobs[KEY], "the old job's status was written over the new one"
    assert KEY not in op.jobsets, "the old job's JobSet is taken for the new job's"


def test_a_job_found_gone_leaves_the_operator():
    op = _operator(lambda op: None)
    op.reconciler.reconcile = lambda job, jobset: Outcome(Phase.STARTING, None, gone=True)
    assert asyncio.run(op._work(KEY)) is None
    assert KEY not in op.jobs and op._phases() == []


@pytest.fixture(scope="module")
def real_plane(tmp_path_factory):
    """The real control plane (kube-apiserver, the garbage collector, the JobSet controller and
    its webhooks, the chart installed by helm), with no operator and no kubelet running."""
    from tpujob.local.controlplane.cluster import RealControlPlane

    with RealControlPlane(tmp_path_factory.mktemp("real")) as plane:
        yield plane


@pytest.fixture(params=["embedded", "real"])
def cluster(request, tmp_path):
    """A namespace of the embedded API server (its request log at hand), or of the real
    control plane; `operator_kubeconfig` is the identity the reconciler runs with: on the
    real plane the chart's ServiceAccount, authorized by the real RBAC against its rules."""
    if request.param == "real":
        plane = request.getfixturevalue("real_plane")
        c = Cluster(None, plane.admin_kubeconfig, f"gone-{secrets.token_hex(3)}")
        c.operator_kubeconfig = plane.operator_kubeconfig
        c.request("POST", "/api/v1/namespaces", json={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": c.namespace}})
        yield c
        return
    crds = load_crds(bundled_crd_paths() + [ROOT / "manifests" / "crd.yaml"])
    with ApiServer(crds=crds) as srv:
        c = Cluster(srv, srv.write_kubeconfig(tmp_path / "kubeconfig"),
                    f"gone-{secrets.token_hex(3)}")
        c.operator_kubeconfig = c.kubeconfig
        c.request("POST", "/api/v1/namespaces", json={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": c.namespace}})
        yield c


def _reconciler(cluster: Cluster) -> Reconciler:
    api = client.ApiClient(load_api_config(cluster.operator_kubeconfig))
    return Reconciler(KubeApi(api), OperatorSettings(http_port=None))


def test_the_children_of_a_deleted_job_are_not_created_again(cluster):
    reconciler = _reconciler(cluster)
    job = cluster.create_job("gone")
    first = reconciler.reconcile(job, None)
    assert first.jobset is not None and cluster.jobset("gone") is not None
    seen = first.job  # the job as the operator last saw it: Starting, with a JobSet
    assert seen["status"]["phase"] == "Starting"
    assert cluster.request("DELETE", JOBS + "/gone").status_code == 200
    wait_for(lambda: cluster.jobset("gone") is None, timeout=30,
             message="the JobSet to be garbage-collected")
    if cluster.server is not None:
        cluster.server.reset_requests()
    # The JobSet's DELETED event came in first; the job's has not: the cache still holds it.
    outcome = reconciler.reconcile(seen, None)
    assert outcome.gone, "the operator would keep a job the server no longer has"
    if cluster.server is not None:
        creates = [r for r in cluster.server.requests() if r.verb == "create"]
        assert creates == [], [(r.resource, r.status) for r in creates]
    # (On the real plane a JobSet created for the gone owner would stay until the garbage
    # collector's next pass: the listing right after shows it.)
    listing = cluster.request("GET", JOBSETS).json()["items"]
    assert listing == []


def test_a_jobset_deleted_by_hand_is_created_again(cluster):
    reconciler = _reconciler(cluster)
    job = cluster.create_job("kept")
    seen = reconciler.reconcile(job, None).job
    assert cluster.request("DELETE", JOBSETS + "/kept").status_code == 200
    again = reconciler.reconcile(seen, None)
    assert again.jobset is not None and not again.gone
    assert cluster.jobset("kept")["metadata"]["ownerReferences"][0]["uid"] == \
        job["metadata"]["uid"]
