"""The Kueue queues local mode's real control plane sets up as xpk does (kueue_setup): their
names, node labels, quotas and priorities, and that a job of each shape, built by the operator's
own validation and builders, selects exactly the nodes of its shape's flavor."""

from __future__ import annotations

import re

import pytest

from tpujob.builders.jobset import build_children
from tpujob.local.controlplane import kueue_setup
from tpujob.local.controlplane.kueue_setup import build_kueue_objects
from tpujob.validation import validate_job

pytestmark = pytest.mark.unit

ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY = "cloud.google.com/gke-tpu-topology"
POLICY = "cloud.google.com/placement-policy-name"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# Every shape of at most 16 chips of the catalog: (flavor, accelerator label, topology, chips).
SHAPES = [
    ("v4-2x2x1", "tpu-v4-podslice", "2x2x1", 4),
    ("v4-2x2x2", "tpu-v4-podslice", "2x2x2", 8),
    ("v4-2x2x4", "tpu-v4-podslice", "2x2x4", 16),
    ("v5litepod-1x1", "tpu-v5-lite-podslice", "1x1", 1),
    ("v5litepod-2x2", "tpu-v5-lite-podslice", "2x2", 4),
    ("v5litepod-2x4", "tpu-v5-lite-podslice", "2x4", 8),
    ("v5litepod-4x4", "tpu-v5-lite-podslice", "4x4", 16),
    ("v5p-2x2x1", "tpu-v5p-slice", "2x2x1", 4),
    ("v5p-2x2x2", "tpu-v5p-slice", "2x2x2", 8),
    ("v5p-2x2x4", "tpu-v5p-slice", "2x2x4", 16),
    ("v6e-1x1", "tpu-v6e-slice", "1x1", 1),
    ("v6e-2x2", "tpu-v6e-slice", "2x2", 4),
    ("v6e-2x4", "tpu-v6e-slice", "2x4", 8),
    ("v6e-4x4", "tpu-v6e-slice", "4x4", 16),
    ("tpu7x-1x1x1", "tpu7x", "1x1x1", 1),
    ("tpu7x-2x2x1", "tpu7x", "2x2x1", 4),
    ("tpu7x-2x2x2", "tpu7x", "2x2x2", 8),
    ("tpu7x-2x2x4", "tpu7x", "2x2x4", 16),
]
# tpu7x multi-host slices select their workload policy's nodes too (xpk's policy name).
POLICIES = {"tpu7x-2x2x2": "tpu7x-16-2x2x2-placement-policy",
            "tpu7x-2x2x4": "tpu7x-32-2x2x4-placement-policy"}


def of_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def flavors(objects: list[dict]) -> dict[str, dict[str, str]]:
    return {f["metadata"]["name"]: f["spec"]["nodeLabels"]
            for f in of_kind(objects, "ResourceFlavor")}


def quotas(objects: list[dict]) -> dict[str, int]:
    [cq] = of_kind(objects, "ClusterQueue")
    [group] = cq["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["google.com/tpu"]
    out = {}
    for flavor in group["flavors"]:
        [resource] = flavor["resources"]
        assert resource["name"] == "google.com/tpu"
        out[flavor["name"]] = resource["nominalQuota"]
    return out


def test_one_flavor_per_shape_of_at_most_16_chips_labelled_as_its_nodes():
    expected = {name: {ACCELERATOR: accelerator, TOPOLOGY: topology}
                | ({POLICY: POLICIES[name]} if name in POLICIES else {})
                for name, accelerator, topology, _ in SHAPES}
    got = flavors(build_kueue_objects())
    assert kueue_setup.MAX_CHIPS == 16, "docs/queueing.md names the bound"
    assert list(got) == [name for name, *_ in SHAPES]
    assert got == expected


@pytest.mark.parametrize("slices_per_shape", [1, 2, 3])
def test_the_quota_is_slices_per_shape_slices_of_each_shape(slices_per_shape):
    got = quotas(build_kueue_objects(slices_per_shape))
    assert got == {name: slices_per_shape * chips for name, _, _, chips in SHAPES}


def test_the_default_quota_holds_two_slices_of_each_shape():
    assert kueue_setup.SLICES_PER_SHAPE == 2
    assert quotas(build_kueue_objects())["v6e-2x4"] == 16


@pytest.mark.parametrize("max_chips, names", [
    (1, ["v5litepod-1x1", "v6e-1x1", "tpu7x-1x1x1"]),
    (4, ["v4-2x2x1", "v5litepod-1x1", "v5litepod-2x2", "v5p-2x2x1", "v6e-1x1", "v6e-2x2",
         "tpu7x-1x1x1", "tpu7x-2x2x1"]),
    (15, [name for name, _, _, chips in SHAPES if chips <= 8]),
    (32, [*(name for name, *_ in SHAPES), "v4-2x4x4", "v5litepod-4x8", "v5p-2x4x4", "v6e-4x8",
          "tpu7x-2x4x4"]),
])
def test_max_chips_bounds_the_shapes(max_chips, names):
    objects = build_kueue_objects(max_chips=max_chips)
    assert sorted(flavors(objects)) == sorted(names)
    assert list(quotas(objects)) == list(flavors(objects)), "every flavor has quota, in order"


def test_the_cluster_queue_is_xpks():
    [cq] = of_kind(build_kueue_objects(), "ClusterQueue")
    assert cq["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert cq["metadata"] == {"name": "cluster-queue"}
    assert cq["spec"]["namespaceSelector"] == {}
    assert cq["spec"]["preemption"] == {"reclaimWithinCohort": "Never",
                                        "withinClusterQueue": "LowerPriority"}
    assert set(cq["spec"]) == {"namespaceSelector", "preemption", "resourceGroups"}


@pytest.mark.parametrize("namespace", ["default", "team-a"])
def test_the_local_queue_and_its_namespace(namespace):
    objects = build_kueue_objects(namespace=namespace)
    [lq] = of_kind(objects, "LocalQueue")
    assert lq == {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                  "metadata": {"name": "multislice-queue", "namespace": namespace},
                  "spec": {"clusterQueue": "cluster-queue"}}
    assert objects[0] == {"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": namespace}}


PRIORITIES = [("very-low", 100), ("low", 250), ("medium", 500), ("high", 750),
              ("very-high", 1000)]


@pytest.mark.parametrize("kind, api_version", [
    ("WorkloadPriorityClass", "kueue.x-k8s.io/v1beta2"),
    ("PriorityClass", "scheduling.k8s.io/v1"),
])
def test_xpks_priorities_as_workload_and_pod_priority_classes(kind, api_version):
    classes = of_kind(build_kueue_objects(), kind)
    assert [(c["metadata"]["name"], c["value"]) for c in classes] == PRIORITIES
    assert {c["apiVersion"] for c in classes} == {api_version}
    if kind == "PriorityClass":
        assert {c["globalDefault"] for c in classes} == {False}, "no pod gets one unasked"


def test_objects_come_in_the_order_they_can_be_created():
    kinds = [o["kind"] for o in build_kueue_objects()]
    order = ["Namespace", "ResourceFlavor", "ClusterQueue", "LocalQueue",
             "WorkloadPriorityClass", "PriorityClass"]
    assert sorted(kinds, key=order.index) == kinds
    assert kinds.count("ClusterQueue") == kinds.count("LocalQueue") == 1


def test_each_kind_has_where_it_is_created_and_every_name_is_a_dns_label():
    for obj in build_kueue_objects():
        resource = kueue_setup.RESOURCES[obj["kind"]]
        group_version = f"{resource.group}/{resource.version}".lstrip("/")
        assert obj["apiVersion"] == group_version, obj["kind"]
        assert DNS_LABEL.match(obj["metadata"]["name"]) and len(obj["metadata"]["name"]) <= 63
        for value in (obj.get("spec") or {}).get("nodeLabels", {}).values():
            assert len(value) <= 63, value   # a label value's limit


@pytest.mark.parametrize("kwargs, says", [
    ({"slices_per_shape": 0}, "slices_per_shape"),
    ({"slices_per_shape": -1}, "slices_per_shape"),
    ({"slices_per_shape": True}, "slices_per_shape"),
    ({"slices_per_shape": 1.5}, "slices_per_shape"),
    ({"max_chips": 0}, "max_chips 0 leaves no TPU shape"),
])
def test_bad_arguments_are_refused_naming_them(kwargs, says):
    with pytest.raises(ValueError, match=says):
        build_kueue_objects(**kwargs)


def _job(slice_name: str) -> dict:
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "llm", "namespace": "default", "uid": "u-1"},
            "spec": {"slice": slice_name, "image": "trainer:1", "output": "gs://bucket/run",
                     "trainer": {"command": ["python", "-c", "pass"]},
                     "scheduling": {"queueName": kueue_setup.LOCAL_QUEUE, "priority": "high"}}}


@pytest.mark.parametrize("name", [name for name, *_ in SHAPES])
def test_a_job_of_each_shape_selects_exactly_its_flavors_nodes(name):
    """The operator's own path (validate_job, then build_children): the pods' nodeSelector is
    the flavor's nodeLabels, no other flavor's labels fit it, and the JobSet names the queue
    and a WorkloadPriorityClass that is made."""
    objects = build_kueue_objects()
    verdict = validate_job(_job(name))
    assert verdict.valid, verdict
    [jobset] = [c for c in build_children(_job(name), verdict.job.spec, verdict.plan)
                if c["kind"] == "JobSet"]
    [replicated] = jobset["spec"]["replicatedJobs"]
    selector = replicated["template"]["spec"]["template"]["spec"]["nodeSelector"]
    labels = flavors(objects)
    assert selector == labels[name]
    assert [f for f, lab in labels.items() if lab.items() <= selector.items()] == [name]
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "multislice-queue"
    priority = jobset["metadata"]["labels"]["kueue.x-k8s.io/priority-class"]
    assert priority in {c["metadata"]["name"]
                        for c in of_kind(objects, "WorkloadPriorityClass")}
