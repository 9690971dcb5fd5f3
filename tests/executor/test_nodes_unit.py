"""The TPU and GPU node pools the local kubelets register for the real scheduler: which pool a
pod needs, how many pools a set of pods needs, and the Node and Lease objects."""

from __future__ import annotations

import re

import pytest

from tpujob.builders.jobset import build_jobset
from tpujob.local.executor.client import ApiError
from tpujob.local.executor.nodes import (
    ACCELERATOR,
    COMPLETION_INDEX,
    GPU_ACCELERATOR,
    NODEPOOL,
    POOL_LABEL,
    TOPOLOGY,
    TPU,
    NodePools,
    PoolShape,
    build_lease,
    build_node,
    build_node_status,
    plan_pools,
    pool_shape,
)
from tpujob.validation import validate_job

pytestmark = pytest.mark.unit


def _job(slice_name: str, **spec) -> dict:
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "j", "namespace": "default", "uid": "u-1"},
            "spec": {"slice": slice_name, "image": "img", "output": "gs://bucket/out",
                     "trainer": {"config": {"train": {"global_batch": 1024}}}, **spec}}


def _pod_of(job: dict, job_name: str = "j-slice-0", phase: str = "Pending",
            index: int = 0) -> dict:
    """A pod as the Job controller makes it from the JobSet tpujob builds for `job`."""
    verdict = validate_job(job)
    assert verdict.valid, verdict.message
    jobset = build_jobset(job, verdict.job.spec, verdict.plan)
    template = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    return {"metadata": {"name": f"{job_name}-{index}-x", "labels": {
                "batch.kubernetes.io/job-name": job_name, COMPLETION_INDEX: str(index)}},
            "spec": template["spec"], "status": {"phase": phase}}


def _gpu_job(machine: str, nodes: int = 2) -> dict:
    job = _job(machine, nodes=nodes)
    job["spec"]["trainer"] = {"launcher": "torchrun", "command": ["python3", "train.py"]}
    return job


@pytest.mark.parametrize(("slice_name", "spec", "label", "topology", "per_host", "hosts",
                          "machine"), [
    ("v6e-8", {}, "tpu-v6e-slice", "2x4", 4, 2, "ct6e-standard-4t"),
    ("v6e-16", {}, "tpu-v6e-slice", "4x4", 4, 4, "ct6e-standard-4t"),
    ("v5p-128", {}, "tpu-v5p-slice", "4x4x4", 4, 16, "ct5p-hightpu-4t"),
    ("tpu7x-64", {}, "tpu7x", "2x4x4", 4, 8, "tpu7x-standard-4t"),
    ("tpu7x-64", {"containersPerHost": 2}, "tpu7x", "2x4x4", 4, 8, "tpu7x-standard-4t"),
    ("v6e-8", {"machineType": "ct6e-standard-8t"}, "tpu-v6e-slice", "2x4", 8, 1,
     "ct6e-standard-8t"),
])
def test_the_pool_a_jobs_pod_needs(slice_name, spec, label, topology, per_host, hosts, machine):
    shape = pool_shape(_pod_of(_job(slice_name, **spec)))
    assert shape is not None
    assert (shape.labels[ACCELERATOR], shape.labels[TOPOLOGY]) == (label, topology)
    assert (shape.chips_per_host, shape.hosts, shape.machine_type) == (per_host, hosts, machine)


def test_a_placement_policy_selector_is_a_label_of_the_pool():
    pod = _pod_of(_job("tpu7x-64"))
    policy = "cloud.google.com/placement-policy-name"
    assert policy in pod["spec"]["nodeSelector"]
    assert pool_shape(pod).labels[policy] == pod["spec"]["nodeSelector"][policy]


@pytest.mark.parametrize("selector", [
    {}, {ACCELERATOR: "tpu-v6e-slice"}, {ACCELERATOR: "tpu-v99", TOPOLOGY: "2x4"},
    {ACCELERATOR: "tpu-v6e-slice", TOPOLOGY: "banana"},
])
def test_pods_that_ask_for_no_known_slice_get_no_pool(selector):
    pod = {"spec": {"nodeSelector": selector, "containers": [
        {"resources": {"limits": {TPU: "4"}}}]}}
    assert pool_shape(pod) is None


def test_a_pod_without_tpu_chips_gets_no_pool():
    pod = _pod_of(_job("v6e-8"))
    for c in pod["spec"]["containers"]:
        c["resources"] = {}
    assert pool_shape(pod) is None


def test_one_pool_per_slice_and_none_twice():
    # Two hosts of one slice (indexes 0 and 1) need one pool between them.
    a0, a1 = _pod_of(_job("v6e-8"), "j-slice-0"), _pod_of(_job("v6e-8"), "j-slice-0", index=1)
    b0 = _pod_of(_job("v6e-8"), "j-slice-1")
    plans = plan_pools([a0, a1, b0], [])
    assert len(plans) == 2 and len({name for name, _ in plans}) == 2
    nodes = [build_node(name, i, shape, "127.0.0.1", 10250)
             for name, shape in plans[:1] for i in range(shape.hosts)]
    again = plan_pools([a0, a1, b0], nodes)
    assert len(again) == 1 and again[0][0] != plans[0][0]
    assert plan_pools([a0, b0], nodes + [build_node(again[0][0], 0, again[0][1], "127.0.0.1",
                                                     10250)]) == []


def test_a_pod_that_names_its_pool_needs_no_new_one():
    # JobSet's exclusive placement: a follower pod selects the pool its leader landed on.
    follower = _pod_of(_job("v6e-8"), "j-slice-0")
    follower["spec"]["nodeSelector"][NODEPOOL] = "tpu-v6e-slice-2x4-abc123-0"
    assert pool_shape(follower) is None
    assert plan_pools([follower], []) == []


def test_finished_pods_need_no_pool():
    done = _pod_of(_job("v6e-8"), phase="Succeeded")
    assert plan_pools([done], []) == []


def test_pools_of_other_shapes_do_not_count():
    v6e = _pod_of(_job("v6e-8"))
    v5p = _pod_of(_job("v5p-8"))
    made = plan_pools([v6e], [])
    nodes = [build_node(made[0][0], 0, made[0][1], "127.0.0.1", 1)]
    assert [s.labels[ACCELERATOR] for _, s in plan_pools([v6e, v5p], nodes)] == ["tpu-v5p-slice"]


def test_a_node_is_shaped_like_gkes():
    shape = PoolShape(((ACCELERATOR, "tpu-v6e-slice"), (TOPOLOGY, "2x4")), 4, 2,
                      "ct6e-standard-4t")
    node = build_node("pool-a", 1, shape, "127.0.0.1", 10250)
    labels = node["metadata"]["labels"]
    label_value = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
    assert all(len(v) <= 63 and label_value.match(v) for v in labels.values()), labels
    assert labels[ACCELERATOR] == "tpu-v6e-slice" and labels[TOPOLOGY] == "2x4"
    assert labels[NODEPOOL] == labels[POOL_LABEL] == "pool-a"
    assert labels["node.kubernetes.io/instance-type"] == "ct6e-standard-4t"
    assert node["spec"]["taints"] == [{"key": TPU, "value": "present", "effect": "NoSchedule"}]
    status = build_node_status(node, shape, 0.0)
    assert status["allocatable"][TPU] == "4"
    assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250
    assert [c["type"] for c in status["conditions"] if c["status"] == "True"] == ["Ready"]
    lease = build_lease(node["metadata"]["name"], "uid-1", 1.5)
    assert lease["metadata"]["namespace"] == "kube-node-lease"
    assert lease["spec"]["renewTime"] == "1970-01-01T00:00:01.500000Z"
    assert lease["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


class FakeApi:
    """Just what NodePools calls, in memory; `fail_status`: writing a node's status fails."""

    def __init__(self, fail_status: bool = False):
        self.nodes: dict[str, dict] = {}
        self.leases: dict[str, dict] = {}
        self.deleted: list[str] = []
        self.fail_status = fail_status

    def list(self, resource, namespace=None, label_selector=None):
        return list(self.nodes.values()), "1"

    def create(self, resource, namespace, body):
        store = self.nodes if resource.plural == "nodes" else self.leases
        name = body["metadata"]["name"]
        if name in store:
            raise ApiError(409, "AlreadyExists", name)
        store[name] = {**body, "metadata": {**body["metadata"], "uid": f"uid-{name}"}}
        return store[name]

    def get(self, resource, namespace, name):
        return self.nodes.get(name)

    def patch(self, resource, namespace, name, body, subresource=None):
        if resource.plural == "nodes":
            if self.fail_status:
                raise ApiError(500, "InternalError", "boom")
            self.nodes[name] = {**self.nodes[name], **body}
            return self.nodes[name]
        self.leases[name]["spec"].update(body["spec"])
        return self.leases[name]

    def delete(self, resource, namespace, name, **kw):
        self.deleted.append(name)
        self.nodes.pop(name, None)
        return True


def test_a_pool_is_registered_ready_with_a_lease_per_node_and_not_made_twice():
    api = FakeApi()
    pools = NodePools(api, "127.0.0.1", 10250)
    pods = [_pod_of(_job("v6e-8"), "j-slice-0")]
    assert pools.sync(pods) is True
    assert len(api.nodes) == 2 and set(api.leases) == set(api.nodes) == pools.names()
    for node in api.nodes.values():
        assert node["status"]["conditions"][0]["type"] == "Ready"
        assert node["status"]["allocatable"][TPU] == "4"
        assert api.leases[node["metadata"]["name"]]["metadata"]["ownerReferences"][0][
            "uid"] == node["metadata"]["uid"]
    assert pools.sync(pods) is False, "the pool is there"
    assert len(api.nodes) == 2


def test_a_node_whose_status_cannot_be_written_is_removed_so_the_pool_is_made_again():
    api = FakeApi(fail_status=True)
    pools = NodePools(api, "127.0.0.1", 10250)
    with pytest.raises(ApiError):
        pools.sync([_pod_of(_job("v6e-8"), "j-slice-0")])
    assert api.nodes == {} and len(api.deleted) == 1 and pools.names() == set()


def test_nodes_made_by_an_earlier_executor_are_this_ones_too():
    api = FakeApi()
    NodePools(api, "127.0.0.1", 10250).sync([_pod_of(_job("v6e-8"), "j-slice-0")])
    later = NodePools(api, "127.0.0.1", 10250)
    later.sync([])
    assert later.names() == set(api.nodes) and len(api.nodes) == 2


@pytest.mark.parametrize(("machine", "label"), [
    ("a3-highgpu-8g", "nvidia-h100-80gb"), ("a3-megagpu-8g", "nvidia-h100-mega-80gb"),
    ("a3-ultragpu-8g", "nvidia-h200-141gb"), ("a4-highgpu-8g", "nvidia-b200"),
])
def test_a_gpu_pod_needs_one_node_of_its_machine_type(machine, label):
    shape = pool_shape(_pod_of(_gpu_job(machine)))
    assert shape is not None and shape.is_gpu
    assert (shape.labels, shape.chips_per_host, shape.hosts, shape.machine_type) == (
        {GPU_ACCELERATOR: label}, 8, 1, machine)
    node = build_node("gpu-pool", 0, shape, "127.0.0.1", 10250)
    # GKE's GPU nodes: the accelerator label, the machine type, the GPU taint and capacity.
    assert node["metadata"]["labels"][GPU_ACCELERATOR] == label
    assert node["metadata"]["labels"]["node.kubernetes.io/instance-type"] == machine
    assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present",
                                       "effect": "NoSchedule"}]
    status = build_node_status(node, shape, 0.0)
    assert status["allocatable"]["nvidia.com/gpu"] == "8" and TPU not in status["allocatable"]


def test_each_pod_of_a_gpu_job_gets_a_node_and_a_restart_reuses_them():
    pods = [_pod_of(_gpu_job("a3-megagpu-8g"), "j-slice-0", index=i) for i in (0, 1)]
    plans = plan_pools(pods, [])
    assert len(plans) == 2 and len({name for name, _ in plans}) == 2
    assert all(name.startswith("gpu-a3-megagpu-8g-") for name, _ in plans)
    nodes = [build_node(name, 0, shape, "127.0.0.1", 1) for name, shape in plans]
    assert plan_pools(pods, nodes) == []
    # The next attempt's pods (new names, same Job and indexes) land on the same nodes.
    again = [_pod_of(_gpu_job("a3-megagpu-8g"), "j-slice-0", index=i) for i in (0, 1)]
    for pod in again:
        pod["metadata"]["name"] += "-attempt-1"
    assert plan_pools(again, nodes) == []
    # A third node's pod needs a third node; a pod without its index is not placed.
    third = _pod_of(_gpu_job("a3-megagpu-8g", nodes=3), "j-slice-0", index=2)
    assert len(plan_pools([*pods, third], nodes)) == 1
    del third["metadata"]["labels"][COMPLETION_INDEX]
    assert plan_pools([third], []) == []


@pytest.mark.parametrize("change", [
    lambda spec: spec["nodeSelector"].update({GPU_ACCELERATOR: "nvidia-tesla-k80"}),
    lambda spec: [c.update(resources={}) for c in spec["containers"]],
    lambda spec: [c.update(resources={"limits": {"nvidia.com/gpu": "16"}})
                  for c in spec["containers"]],
    lambda spec: [c.update(resources={"limits": {"nvidia.com/gpu": "0"}})
                  for c in spec["containers"]],
])
def test_a_gpu_pod_no_machine_type_serves_gets_no_pool(change):
    pod = _pod_of(_gpu_job("a3-megagpu-8g"))
    change(pod["spec"])
    assert pool_shape(pod) is None


def test_a_pod_asking_for_one_gpu_still_gets_a_whole_node():
    pod = _pod_of(_gpu_job("a3-highgpu-8g"))
    for c in pod["spec"]["containers"]:
        if c.get("resources"):
            c["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    shape = pool_shape(pod)
    assert shape is not None and (shape.chips_per_host, shape.hosts) == (8, 1)

