"""Queued, admitted, preempted: jobs in Kueue queues on the real control plane, with the real
Kueue v0.17 deciding. Each scenario sets up its own ResourceFlavors, ClusterQueue and
LocalQueue (and WorkloadPriorityClasses where it needs them), and asserts the phase, the REASON
(`status.reason`) and the sentence a person reads (the Running condition's message), as
`kubectl get tpujobs` and `kubectl describe` show them. docs/queueing.md has the table."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.e2e.conftest import Local, stand_in, unique
from tests.support.apiserver import wait_for
from tpujob.local.controlplane.cluster import TPUJOBS
from tpujob.local.executor.client import JOBSETS, ApiError, Resource

pytestmark = pytest.mark.e2e
CONTROL_PLANES = ("real",)

KUEUE = "kueue.x-k8s.io"
FLAVORS = Resource(KUEUE, "v1beta2", "resourceflavors")
CLUSTER_QUEUES = Resource(KUEUE, "v1beta2", "clusterqueues")
LOCAL_QUEUES = Resource(KUEUE, "v1beta2", "localqueues")
WORKLOADS = Resource(KUEUE, "v1beta2", "workloads")
PRIORITIES = Resource(KUEUE, "v1beta2", "workloadpriorityclasses")
TOPOLOGIES = Resource(KUEUE, "v1beta2", "topologies")
ADMISSION_CHECKS = Resource(KUEUE, "v1beta2", "admissionchecks")
PROVISIONING_CONFIGS = Resource(KUEUE, "v1beta2", "provisioningrequestconfigs")
PROVISIONING_REQUESTS = Resource("autoscaling.x-k8s.io", "v1", "provisioningrequests")
CONFIGMAPS = Resource("", "v1", "configmaps")
NAMESPACES = Resource("", "v1", "namespaces")
V6E = "tpu-v6e-slice"
SLEEP = "import time; time.sleep(600)"


@dataclass
class Queues:
    """Kueue objects of one scenario, named uniquely, deleted at the end."""

    local: Local
    made: list[tuple[Resource, str | None, str]] = field(default_factory=list)

    def _create(self, resource: Resource, namespace: str | None, body: dict[str, Any]) -> str:
        name = body["metadata"]["name"]
        self.local.cluster.api.create(resource, namespace, {
            "apiVersion": f"{KUEUE}/v1beta2", **body})
        self.made.append((resource, namespace, name))
        return name

    def flavor(self, topology: str, **extra_labels: str) -> str:
        return self._create(FLAVORS, None, {"kind": "ResourceFlavor", "metadata": {
            "name": unique(f"v6e-{topology}")}, "spec": {"nodeLabels": {
                "cloud.google.com/gke-tpu-accelerator": V6E,
                "cloud.google.com/gke-tpu-topology": topology, **extra_labels}}})

    def priority(self, name: str, value: int) -> str:
        return self._create(PRIORITIES, None, {"kind": "WorkloadPriorityClass", "metadata": {
            "name": unique(name)}, "value": value})

    def provisioning_check(self) -> str:
        """An AdmissionCheck of Kueue's ProvisioningRequest controller, configured as xpk's
        `dws-prov` (class queued-provisioning.gke.io, the request's name as the pods' node
        selector), retrying a failed or expired request after 4 s instead of 60 (long enough
        for the status to be seen saying so)."""
        config = self._create(PROVISIONING_CONFIGS, None, {
            "kind": "ProvisioningRequestConfig", "metadata": {"name": unique("dws-config")},
            "spec": {"provisioningClassName": "queued-provisioning.gke.io",
                     "managedResources": ["google.com/tpu"],
                     "retryStrategy": {"backoffLimitCount": 3, "backoffBaseSeconds": 4,
                                       "backoffMaxSeconds": 8},
                     "podSetUpdates": {"nodeSelector": [{
                         "key": "autoscaling.gke.io/provisioning-request",
                         "valueFromProvisioningClassDetail": "ResizeRequestName"}]}}})
        return self._create(ADMISSION_CHECKS, None, {
            "kind": "AdmissionCheck", "metadata": {"name": unique("dws-prov")},
            "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request", "parameters": {
                "apiGroup": KUEUE, "kind": "ProvisioningRequestConfig", "name": config}}})

    def queue(self, quotas: dict[str, int], checks: tuple[str, ...] = ()) -> str:
        """A ClusterQueue with `google.com/tpu` quota per flavor (preempting lower priorities
        within it, as xpk's does), and a LocalQueue of the test's namespace for it."""
        cq = self._create(CLUSTER_QUEUES, None, {"kind": "ClusterQueue", "metadata": {
            "name": unique("cq")}, "spec": {
                "namespaceSelector": {},
                **({"admissionChecksStrategy": {"admissionChecks": [
                    {"name": c} for c in checks]}} if checks else {}),
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [{"coveredResources": ["google.com/tpu"], "flavors": [
                    {"name": f, "resources": [{"name": "google.com/tpu", "nominalQuota": q}]}
                    for f, q in quotas.items()]}]}})
        api = self.local.cluster.api
        wait_for(lambda: any(c["type"] == "Active" and c["status"] == "True" for c in (
            api.get(CLUSTER_QUEUES, None, cq) or {}).get("status", {}).get("conditions", [])),
            timeout=60, message=f"ClusterQueue {cq} to be active")
        return self._create(LOCAL_QUEUES, self.local.namespace, {
            "kind": "LocalQueue", "metadata": {"name": unique("lq"),
                                               "namespace": self.local.namespace},
            "spec": {"clusterQueue": cq}})

    def delete(self) -> None:
        for resource, namespace, name in reversed(self.made):
            self.local.cluster.api.delete(resource, namespace, name)


@pytest.fixture(scope="module")
def namespace(local: Local) -> str:
    try:   # the module's namespace: LocalQueues are made before any job
        local.cluster.api.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": local.namespace}})
    except ApiError as err:
        assert err.status == 409, err
    return local.namespace


@pytest.fixture
def kueue(local: Local, namespace: str) -> Iterator[Queues]:
    queues = Queues(local)
    try:
        yield queues
    finally:
        queues.delete()


def job(queue: str | None, code: str = SLEEP, **scheduling: Any) -> dict[str, Any]:
    extra = {"scheduling": {"queueName": queue, **scheduling}} if queue else {}
    return stand_in(code, **extra)


def running_message(status: dict[str, Any]) -> str:
    return next((c["message"] for c in status.get("conditions", []) if c["type"] == "Running"),
                "")


def wait_reason(local: Local, name: str, reason: str, timeout: float = 60) -> dict[str, Any]:
    try:
        return local.wait(name, lambda s: s.get("reason") == reason, timeout,
                          f"{name} to say {reason}")["status"]
    except BaseException:
        print("events:", [(e["reason"], e["message"]) for e in local.events(name)])
        raise


def workload_of(local: Local, name: str) -> dict[str, Any] | None:
    jobset = local.cluster.api.get(JOBSETS, local.namespace, name)
    if jobset is None:
        return None
    found, _ = local.cluster.api.list(WORKLOADS, local.namespace,
                                      f"{KUEUE}/job-uid={jobset['metadata']['uid']}")
    return found[0] if found else None


def event(local: Local, name: str, reason: str) -> dict[str, Any]:
    return wait_for(lambda: next((e for e in local.events(name) if e["reason"] == reason), None),
                    timeout=30, message=f"a {reason} Event on {name}")


def delete_job(local: Local, name: str) -> None:
    assert local.cluster.delete_job(local.namespace, name)


def patch_job(local: Local, name: str, spec: dict[str, Any]) -> None:
    local.cluster.api.patch(TPUJOBS, local.namespace, name, {"spec": spec})


def test_a_queue_that_does_not_exist_is_named_at_once(local, kueue):
    name = unique("noq")
    local.apply(name, job("no-such-queue"))
    status = wait_reason(local, name, "QueueNotFound")
    assert status["phase"] == "Queued"
    assert running_message(status) == (
        "not admitted: LocalQueue no-such-queue doesn't exist; create the LocalQueue in the "
        "job's namespace or set spec.scheduling.queueName to one that exists")
    assert event(local, name, "QueueNotFound")["type"] == "Warning"
    assert local.pods(name) == []
    delete_job(local, name)


def test_a_slice_no_flavor_offers_is_never_admitted(local, kueue):
    lq = kueue.queue({kueue.flavor("2x4"): 64})
    name = unique("shape")
    local.apply(name, job(lq) | {"slice": "v6e-16"})
    status = wait_reason(local, name, "NoMatchingFlavor")
    assert status["phase"] == "Queued"
    assert running_message(status).startswith(
        f"never admitted as LocalQueue {lq} stands: no flavor of its ClusterQueue offers this "
        "slice (flavor v6e-2x4-"), running_message(status)
    assert "doesn't match node affinity" in running_message(status)
    delete_job(local, name)


def test_multi_slice_is_admitted_whole_or_not_at_all(local, kueue):
    # Two v6e-8 slices are 16 chips; the queue has 12: Kueue admits neither slice.
    flavor = kueue.flavor("2x4")
    lq = kueue.queue({flavor: 12})
    name = unique("ms")
    local.apply(name, job(lq) | {"slices": 2})
    status = wait_reason(local, name, "ExceedsMaxQuota")
    assert running_message(status) == (
        f"never admitted as LocalQueue {lq} stands: insufficient quota for google.com/tpu in "
        f"flavor {flavor}, previously considered podsets requests (0) + current podset "
        "request (16) > maximum capacity (12); ask for a smaller slice or "
        "fewer slices, or for more quota in its ClusterQueue")
    [podset] = workload_of(local, name)["spec"]["podSets"]
    assert podset["count"] == 4, "every host of both slices in one PodSet"
    assert event(local, name, "ExceedsMaxQuota")["type"] == "Warning"
    assert local.pods(name) == []
    delete_job(local, name)


def test_a_job_waits_for_quota_then_is_admitted_and_a_job_deleted_while_queued_frees_nothing(
        local, kueue):
    flavor = kueue.flavor("2x4")
    lq = kueue.queue({flavor: 8})
    first, second, third = unique("q1"), unique("q2"), unique("q3")
    local.apply(first, job(lq))
    local.wait_phase(first, "Running", timeout=90)
    assert local.status(first)["queue"]["state"] == "Admitted"
    assert local.status(first)["queue"]["flavors"] == {"google.com/tpu": flavor}
    local.apply(second, job(lq, "print('done')"))
    status = wait_reason(local, second, "WaitingForQuota")
    assert running_message(status) == (
        f"waiting in LocalQueue {lq}: insufficient unused quota for google.com/tpu in flavor "
        f"{flavor}, 8 more needed")
    assert status["queue"]["localQueue"] == lq and status["queue"]["workload"]
    local.apply(third, job(lq))
    wait_reason(local, third, "WaitingForQuota")
    delete_job(local, third)
    wait_for(lambda: workload_of(local, third) is None, timeout=60,
             message="the deleted job's Workload to go")
    delete_job(local, first)   # frees the quota
    done = local.wait_phase(second, "Succeeded", "Failed", timeout=120)["status"]
    assert done["phase"] == "Succeeded" and done.get("reason") is None
    admitted = event(local, second, "Admitted")
    assert admitted["message"].startswith("admitted by ClusterQueue ") and \
        f"to flavor {flavor} (google.com/tpu) after " in admitted["message"], admitted
    assert done["goodput"]["queuedSeconds"] > 0


def running_low(local: Local, kueue: Queues, prefix: str) -> tuple[str, str, str, str]:
    """A queue of one v6e-8's quota, priorities low and high, and a low job running in it:
    (LocalQueue, low, high, the job)."""
    lq = kueue.queue({kueue.flavor("2x4"): 8})
    low, high = kueue.priority("low", 100), kueue.priority("high", 1000)
    name = unique(prefix)
    local.apply(name, job(lq, priority=low))
    local.wait_phase(name, "Running", timeout=90)
    return lq, low, high, name


def test_a_higher_priority_preempts_and_the_preempted_job_runs_again_after(local, kueue):
    lq, low, high, victim = running_low(local, kueue, "low")
    urgent = unique("high")
    local.apply(urgent, job(lq, "import time; time.sleep(5)", priority=high))
    status = local.wait(victim, lambda s: (s.get("queue") or {}).get("state") == "Preempted",
                        timeout=90, message="the preemption")["status"]
    assert status["phase"] == "Queued" and status["queue"]["evictions"] == 1
    assert running_message(status).startswith("preempted by a higher-priority workload; "
                                              f"waiting in LocalQueue {lq}: ")
    preempted = event(local, victim, "Preempted")
    assert preempted["type"] == "Warning"
    assert "resumes from its newest checkpoint" in preempted["message"]
    assert local.wait_phase(urgent, "Succeeded", "Failed", timeout=120)["status"]["phase"] == \
        "Succeeded"
    # The quota is free again: the preempted job is admitted and runs.
    status = local.wait_phase(victim, "Running", timeout=120)["status"]
    assert status["queue"]["state"] == "Admitted" and status.get("reason") is None
    delete_job(local, victim)


def test_a_priority_raised_while_queued_moves_the_same_workload_ahead(local, kueue):
    lq, low, high, running = running_low(local, kueue, "run")
    waiting = unique("wait")
    local.apply(waiting, job(lq, priority=low))
    wait_reason(local, waiting, "WaitingForQuota")
    jobset_uid = local.cluster.api.get(JOBSETS, local.namespace, waiting)["metadata"]["uid"]
    workload = workload_of(local, waiting)["metadata"]["name"]
    patch_job(local, waiting, {"scheduling": {"queueName": lq, "priority": high}})
    # The same JobSet and Workload (its place in line kept), now of the higher priority: it
    # preempts the running job of the lower one.
    local.wait_phase(waiting, "Running", timeout=120)
    assert local.cluster.api.get(JOBSETS, local.namespace, waiting)["metadata"]["uid"] == \
        jobset_uid
    now = workload_of(local, waiting)
    assert now["metadata"]["name"] == workload and now["spec"]["priority"] == 1000
    assert event(local, waiting, "PriorityChanged")["message"] == \
        f"Kueue priority {low} -> {high}"
    local.wait(running, lambda s: (s.get("queue") or {}).get("state") == "Preempted",
               timeout=60, message="the lower priority preempted")
    delete_job(local, running)
    delete_job(local, waiting)


def test_admitted_but_no_node_takes_the_pods_is_flagged_with_the_schedulers_words(local, kueue):
    # The flavor sends admitted pods to a node pool that does not exist (Kueue adds a flavor's
    # node labels to the pods' nodeSelector): quota is reserved, the scheduler cannot place.
    flavor = kueue.flavor("2x4", **{"cloud.google.com/gke-nodepool": "no-such-pool"})
    lq = kueue.queue({flavor: 8})
    name = unique("unsched")
    local.apply(name, job(lq, unscheduledWarningSeconds=3))
    status = wait_reason(local, name, "Unschedulable", timeout=90)
    assert status["phase"] == "Starting" and status["queue"]["state"] == "Admitted"
    message = running_message(status)
    assert message.startswith("admitted by Kueue, 2 of 2 pods not scheduled for "), message
    # The scheduler's own words: "no nodes available to schedule pods" on a cluster without
    # nodes yet, "0/N nodes are available: N node(s) didn't match Pod's node
    # affinity/selector. ..." once there are some.
    def carries_the_schedulers_words() -> bool:
        words = {c["message"] for p in local.pods(name)
                 for c in p["status"].get("conditions", [])
                 if c["type"] == "PodScheduled" and c["status"] == "False"}
        said = running_message(local.status(name))
        return any(said.endswith(f"): {w}") for w in words)

    wait_for(carries_the_schedulers_words, timeout=30,
             message="the flag to carry the pods' PodScheduled message")
    assert event(local, name, "Unschedulable")["type"] == "Warning"
    delete_job(local, name)


def test_a_job_suspended_while_queued_is_not_admitted_until_resumed(local, kueue):
    flavor = kueue.flavor("2x4")
    lq = kueue.queue({flavor: 8})
    holder, name = unique("hold"), unique("sus")
    local.apply(holder, job(lq))
    local.wait_phase(holder, "Running", timeout=90)
    local.apply(name, job(lq, "print('done')"))
    wait_reason(local, name, "WaitingForQuota")
    patch_job(local, name, {"suspend": True})
    local.wait_phase(name, "Suspended", timeout=60)
    delete_job(local, holder)   # the quota is free, but the job stays suspended
    wait_for(lambda: workload_of(local, holder) is None, timeout=60,
             message="the holder's Workload to go")
    assert local.status(name)["phase"] == "Suspended" and local.pods(name) == []
    patch_job(local, name, {"suspend": False})
    assert local.wait_phase(name, "Succeeded", "Failed", timeout=120)["status"]["phase"] == \
        "Succeeded"


def test_a_maximum_run_time_ends_the_admission_for_good(local, kueue):
    flavor = kueue.flavor("2x4")
    lq = kueue.queue({flavor: 8})
    name = unique("maxrun")
    local.apply(name, job(lq, maxRunSeconds=5))
    # Kueue counts the time from its admission, whether or not the pods run by then: the
    # deactivation is waited for, not the Running phase (a loaded machine can take longer).
    status = wait_reason(local, name, "Deactivated", timeout=90)
    assert event(local, name, "Admitted")["type"] == "Normal"
    assert status["phase"] == "Queued"
    assert running_message(status).startswith("deactivated by Kueue, not admitted again: ")
    assert "maximum execution time" in running_message(status)
    assert event(local, name, "Deactivated")["type"] == "Warning"
    wait_for(lambda: local.pods(name) == [], timeout=60, message="the pods stopped")
    delete_job(local, name)


def test_a_topology_the_nodes_do_not_have_cannot_place_the_job(local, kueue):
    topology = kueue._create(TOPOLOGIES, None, {"kind": "Topology", "metadata": {
        "name": unique("topo")}, "spec": {"levels": [
            {"nodeLabel": "cloud.google.com/gce-topology-block"},
            {"nodeLabel": "kubernetes.io/hostname"}]}})
    flavor = kueue._create(FLAVORS, None, {"kind": "ResourceFlavor", "metadata": {
        "name": unique("v6e-2x4-tas")}, "spec": {"topologyName": topology, "nodeLabels": {
            "cloud.google.com/gke-tpu-accelerator": V6E,
            "cloud.google.com/gke-tpu-topology": "2x4"}}})
    lq = kueue.queue({flavor: 8})
    name = unique("tas")
    local.apply(name, job(lq, topology={"level": "cloud.google.com/gce-topology-block"}))
    status = wait_reason(local, name, "TopologyPlacementFailed", timeout=90)
    assert running_message(status).startswith(
        f"waiting in LocalQueue {lq}: Kueue cannot place the slice: "), running_message(status)
    assert local.pods(name) == []
    delete_job(local, name)


def test_a_job_without_a_queue_is_not_kueues(local, kueue):
    name = unique("free")
    local.apply(name, job(None, "print('done')"))
    status = local.wait_phase(name, "Succeeded", "Failed", timeout=120)["status"]
    assert status["phase"] == "Succeeded" and "queue" not in status
    assert workload_of(local, name) is None


def script_provisioning(local: Local, job_name: str, outcomes: str) -> None:
    """What local mode's stand-in provisioner answers each attempt of the job's request."""
    api, ns = local.cluster.api, local.namespace
    body = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "tpujob-local-provisioning", "namespace": ns},
            "data": {job_name: outcomes}}
    try:
        api.create(CONFIGMAPS, ns, body)
    except ApiError as err:
        assert err.status == 409, err
        api.patch(CONFIGMAPS, ns, "tpujob-local-provisioning", {"data": {job_name: outcomes}})


@pytest.mark.parametrize("outcomes, says", [
    ("Failed,Provisioned", "Retrying after failure: no capacity for "),
    ("BookingExpired,Provisioned", "Retrying after booking expired: the booking of "),
])
def test_flex_start_capacity_that_fails_or_expires_is_retried_then_runs(local, kueue, outcomes,
                                                                         says):
    check = kueue.provisioning_check()
    lq = kueue.queue({kueue.flavor("2x4"): 8}, checks=(check,))
    name = unique("flex")
    script_provisioning(local, name, outcomes)
    local.apply(name, job(lq, "print('done')", capacity={
        "type": "FlexStart", "flexStart": {"queuedProvisioning": True,
                                           "maxRunDurationSeconds": 3600}}))
    # The first request's answer, as Kueue words it in the admission check: the job waits with
    # quota reserved, and says why.
    status = local.wait(name, lambda s: says in running_message(s) or s.get("phase") in (
        "Running", "Succeeded"), timeout=90, message="the retry in the status")["status"]
    assert says in running_message(status), status
    assert status["reason"] in ("UnsatisfiedAdmissionChecks",), status
    [state] = status["queue"]["admissionChecks"]
    assert state["name"] == check and state["state"] in ("Retry", "Pending"), state
    done = local.wait_phase(name, "Succeeded", "Failed", timeout=150)["status"]
    assert done["phase"] == "Succeeded", done
    requests, _ = local.cluster.api.list(PROVISIONING_REQUESTS, local.namespace)
    mine = sorted(r["metadata"]["name"] for r in requests
                  if r["metadata"]["name"].startswith(workload_of(local, name)["metadata"]["name"]))
    # Kueue deletes the failed (or expired) attempt's request when it makes the next one.
    assert [m.rsplit("-", 1)[1] for m in mine] == ["2"], mine
    second = next(r for r in requests if r["metadata"]["name"] == mine[0])
    assert second["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
    assert second["spec"]["parameters"] == {"maxRunDurationSeconds": "3600"}
    pods = local.pods(name)
    assert {p["spec"]["nodeSelector"]["autoscaling.gke.io/provisioning-request"]
            for p in pods} == {mine[0]}, "the pods go to the provisioned nodes"
