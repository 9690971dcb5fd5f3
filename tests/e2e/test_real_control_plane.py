"""What only the real control plane shows: the operator runs with the chart's ServiceAccount, so
the real RBAC authorizer decides each call (a rule taken out of the chart's ClusterRole is a 403
the job reports, and putting it back lets the job run); the real garbage collector deletes every
child of a deleted job; the real scheduler places a job's pods on TPU nodes of the slice's shape,
one pool per slice."""

from __future__ import annotations

import copy

import pytest

from tests.e2e.conftest import Local, stand_in, unique
from tests.support.apiserver import wait_for
from tpujob.local.controlplane import kueue_setup
from tpujob.local.controlplane.cluster import RELEASE, RELEASE_NAMESPACE
from tpujob.local.executor.client import (
    CONFIGMAPS,
    JOBS,
    JOBSETS,
    PODS,
    SERVICES,
    ApiError,
    Resource,
)
from tpujob.local.executor.nodes import ACCELERATOR, NODEPOOL, NODES, TOPOLOGY

pytestmark = pytest.mark.e2e
CONTROL_PLANES = ("real",)

CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles")
SLEEP = "import time; time.sleep(300)"
QUICK = "print('done')"


def _without_jobset_create(role: dict) -> dict:
    changed = copy.deepcopy(role)
    for rule in changed["rules"]:
        if "jobsets" in rule.get("resources", []):
            rule["verbs"] = [v for v in rule["verbs"] if v != "create"]
    return changed


def test_a_permission_taken_from_the_chart_is_a_403_the_job_reports(local):
    api = local.cluster.api
    role = api.get(CLUSTER_ROLES, None, RELEASE)
    assert role is not None, "helm install made the operator's ClusterRole"
    assert any("jobsets" in r.get("resources", []) and "create" in r["verbs"]
               for r in role["rules"])
    name = unique("rbac")
    api.replace(CLUSTER_ROLES, _without_jobset_create(role))
    try:
        local.apply(name, stand_in(QUICK))
        event = wait_for(lambda: next((e for e in local.events(name)
                                       if e["reason"] == "Forbidden"), None),
                         timeout=60, message="a Forbidden event on the job")
        assert event["type"] == "Warning"
        message = event["message"]
        assert "403" in message and 'cannot create resource "jobsets"' in message, message
        assert f"system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}" in message, message
        assert api.get(JOBSETS, local.namespace, name) is None
    finally:
        current = api.get(CLUSTER_ROLES, None, RELEASE)
        api.replace(CLUSTER_ROLES, {**current, "rules": role["rules"]})
    # The rule back, the operator's next try creates the JobSet and the job runs to the end.
    job = local.wait_phase(name, "Succeeded", "Failed", timeout=120)
    assert job["status"]["phase"] == "Succeeded", job["status"]


def test_the_garbage_collector_deletes_every_child_of_a_deleted_job(local):
    name = unique("gc")
    local.apply(name, stand_in(SLEEP))
    local.wait_phase(name, "Running", timeout=90)
    api, ns = local.cluster.api, local.namespace
    selector = f"jobset.sigs.k8s.io/jobset-name={name}"
    assert api.get(JOBSETS, ns, name) is not None
    assert len(api.list(JOBS, ns, selector)[0]) == 1
    assert len(api.list(PODS, ns, selector)[0]) == 2
    assert api.get(SERVICES, ns, name) is not None   # the JobSet's headless Service
    # A stand-in job has no trainer config; any ConfigMap the job owns goes with it too.
    configs = [c for c in api.list(CONFIGMAPS, ns)[0]
               if any(o.get("name") == name for o in c["metadata"].get("ownerReferences", []))]

    assert local.cluster.delete_job(ns, name)
    wait_for(lambda: local.job(name) is None and api.get(JOBSETS, ns, name) is None
             and not api.list(JOBS, ns, selector)[0] and not api.list(PODS, ns, selector)[0]
             and api.get(SERVICES, ns, name) is None
             and all(api.get(CONFIGMAPS, ns, c["metadata"]["name"]) is None for c in configs),
             timeout=90, message="every child of the job to be gone")
    assert local.processes(name) == []


def test_the_scheduler_binds_each_host_to_a_tpu_node_of_the_slices_shape(local):
    name = unique("sched")
    local.apply(name, stand_in(SLEEP))
    local.wait_phase(name, "Running", timeout=90)
    pods = local.pods(name)
    nodes = {n["metadata"]["name"]: n for n in local.cluster.api.list(NODES)[0]}
    bound = [nodes[p["spec"]["nodeName"]] for p in pods]
    labels = [n["metadata"]["labels"] for n in bound]
    assert [(lab[ACCELERATOR], lab[TOPOLOGY]) for lab in labels] == [("tpu-v6e-slice", "2x4")] * 2
    assert len({lab[NODEPOOL] for lab in labels}) == 1, "one slice, one node pool"
    assert len({n["metadata"]["name"] for n in bound}) == 2, "one host per node"
    scheduled = [c for p in pods for c in p["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert [c["status"] for c in scheduled] == ["True", "True"]
    assert local.cluster.delete_job(local.namespace, name)


def test_pod_logs_come_through_the_apiserver_from_the_nodes_kubelet_endpoint(local):
    name = unique("logs")
    local.apply(name, stand_in("import sys, time\nfor i in range(3): print(f'line {i}')\n"
                               "sys.stdout.flush(); time.sleep(300)"))
    local.wait_phase(name, "Running", timeout=90)
    pod = local.pods(name)[0]["metadata"]["name"]
    api = local.cluster.api
    path = PODS.path(local.namespace, pod, "log")

    def read(**params) -> str:
        response = api.session.get(api.base_url + path, params=params, timeout=30,
                                   verify=api.session.verify)
        assert response.status_code == 200, response.text
        return response.text

    assert wait_for(lambda: read() == "line 0\nline 1\nline 2\n", timeout=30,
                    message="the three lines through the apiserver")
    assert read(tailLines=1) == "line 2\n"
    assert read(tailLines=10) == "line 0\nline 1\nline 2\n"
    response = api.session.get(api.base_url + path, params={"container": "nope"}, timeout=30,
                               verify=api.session.verify)
    assert response.status_code == 400 and "nope" in response.text
    assert local.cluster.delete_job(local.namespace, name)


KUEUE = "kueue.x-k8s.io"
FLAVORS = Resource(KUEUE, "v1beta2", "resourceflavors")
CLUSTER_QUEUES = Resource(KUEUE, "v1beta2", "clusterqueues")
LOCAL_QUEUES = Resource(KUEUE, "v1beta2", "localqueues")
WORKLOADS = Resource(KUEUE, "v1beta2", "workloads")
NAMESPACES = Resource("", "v1", "namespaces")


@pytest.fixture(scope="module")
def queue(local):
    """A LocalQueue whose ClusterQueue has quota for one v6e-8 (8 chips) at a time."""
    api, name = local.cluster.api, unique("tpu")
    try:   # the module's namespace, made by its first job otherwise
        api.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": local.namespace}})
    except ApiError as err:
        assert err.status == 409, err
    api.create(FLAVORS, None, {"apiVersion": f"{KUEUE}/v1beta2", "kind": "ResourceFlavor",
                               "metadata": {"name": name}})
    api.create(CLUSTER_QUEUES, None, {
        "apiVersion": f"{KUEUE}/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["google.com/tpu"],
            "flavors": [{"name": name, "resources": [
                {"name": "google.com/tpu", "nominalQuota": 8}]}]}]}})
    api.create(LOCAL_QUEUES, local.namespace, {
        "apiVersion": f"{KUEUE}/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": "tpus", "namespace": local.namespace},
        "spec": {"clusterQueue": name}})
    wait_for(lambda: any(c["type"] == "Active" and c["status"] == "True" for c in (
        api.get(CLUSTER_QUEUES, None, name) or {}).get("status", {}).get("conditions", [])),
        timeout=60, message="the ClusterQueue to be active")
    return "tpus"


def test_a_queued_job_waits_suspended_until_kueue_admits_it_then_runs(local, queue):
    first, second = unique("q1"), unique("q2")
    sleeper = "import time; time.sleep(8)"
    local.apply(first, stand_in(sleeper, scheduling={"queueName": queue}))
    local.wait_phase(first, "Running", timeout=90)
    # The quota holds one v6e-8: the second waits, its JobSet suspended, no pod made.
    local.apply(second, stand_in(sleeper, scheduling={"queueName": queue}))
    job = local.wait(second, lambda s: s.get("reason") == "WaitingForQuota", timeout=60,
                     message="the second job to wait for quota")
    assert job["status"]["phase"] == "Queued"
    [running] = [c for c in job["status"]["conditions"] if c["type"] == "Running"]
    assert (running["status"], running["reason"]) == ("False", "Queued"), running
    assert running["message"].startswith(f"waiting in LocalQueue {queue}: insufficient unused "
                                         "quota for google.com/tpu"), running
    jobset = local.cluster.api.get(JOBSETS, local.namespace, second)
    assert jobset["spec"]["suspend"] is True
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == queue
    assert local.pods(second) == []
    workloads = [w for w in local.cluster.api.list(WORKLOADS, local.namespace)[0]
                 if w["metadata"]["ownerReferences"][0]["name"] == second]
    assert len(workloads) == 1, "Kueue made a Workload for the queued JobSet"
    assert local.status(first)["phase"] == "Running"
    # The first ends and frees the quota: Kueue admits the second, which runs to the end.
    assert local.wait_phase(first, "Succeeded", "Failed", timeout=90)["status"]["phase"] == \
        "Succeeded"
    job = local.wait_phase(second, "Succeeded", "Failed", timeout=120)
    assert job["status"]["phase"] == "Succeeded", job["status"]


def test_a_job_in_xpks_queue_is_admitted_at_its_priority_with_no_kueue_object_made_by_hand(
        local):
    """The control plane made xpk's queues (kueue_setup): a job in `default` naming
    multislice-queue and priority high gets a Workload of priority 750, admitted by
    cluster-queue to the flavor of its shape, and runs on nodes of that shape."""
    api = local.cluster.api
    wait_for(lambda: any(c["type"] == "Active" and c["status"] == "True" for c in (
        api.get(CLUSTER_QUEUES, None, kueue_setup.CLUSTER_QUEUE) or {}).get(
            "status", {}).get("conditions", [])),
        timeout=60, message="cluster-queue, made at start, to be active")
    assert api.get(LOCAL_QUEUES, "default", "multislice-queue") is not None
    xpk, name = Local(local.cluster, "default"), unique("xpk")
    xpk.apply(name, stand_in("import time; time.sleep(6)",
                             scheduling={"queueName": "multislice-queue", "priority": "high"}))
    try:
        def admitted() -> dict | None:
            for workload in api.list(WORKLOADS, "default")[0]:
                owners = workload["metadata"].get("ownerReferences") or [{}]
                if owners[0].get("name") == name and (workload.get("status") or {}).get(
                        "admission"):
                    return workload
            return None

        workload = wait_for(admitted, timeout=60, message="Kueue to admit the job's Workload")
        assert workload["spec"]["queueName"] == "multislice-queue"
        assert workload["spec"]["priority"] == 750
        assert workload["spec"]["priorityClassRef"] == {
            "group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
        admission = workload["status"]["admission"]
        assert admission["clusterQueue"] == "cluster-queue"
        [assignment] = admission["podSetAssignments"]
        assert assignment["flavors"] == {"google.com/tpu": "v6e-2x4"}, assignment

        xpk.wait_phase(name, "Running", timeout=90)
        nodes = {n["metadata"]["name"]: n["metadata"]["labels"]
                 for n in api.list(NODES)[0]}
        flavor = api.get(FLAVORS, None, "v6e-2x4")["spec"]["nodeLabels"]
        for pod in xpk.pods(name):
            labels = nodes[pod["spec"]["nodeName"]]
            assert flavor.items() <= labels.items(), (flavor, labels)
        job = xpk.wait_phase(name, "Succeeded", "Failed", timeout=120)
        assert job["status"]["phase"] == "Succeeded", job["status"]
        queue = job["status"]["queue"]
        assert (queue["clusterQueue"], queue["priority"], queue["priorityClass"],
                queue["flavors"]) == ("cluster-queue", 750, "high",
                                      {"google.com/tpu": "v6e-2x4"}), queue
    finally:
        local.cluster.delete_job("default", name)
