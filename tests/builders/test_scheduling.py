"""spec.scheduling: what each kind of capacity, the Kueue priority and the topology-aware
placement write into the JobSet (table-driven, every built JobSet checked against the real JobSet
CRD), what a job without them writes (nothing new), and the combinations refused, by the models,
by the CRD's CEL rules and by the operator's validation, each naming the field."""

import json
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest
import yaml

from tests.api import k8s_schema as k8s
from tests.api.k8s_schema import schema_errors, strict_schema
from tpujob.api.crd import build_crd
from tpujob.api.resource import load_job, load_spec
from tpujob.builders.fingerprint import _digest, build_fingerprint
from tpujob.builders.jobset import build_jobset
from tpujob.builders.scheduling import (
    build_capacity_placement,
    build_jobset_annotations,
    build_jobset_labels,
    build_topology_annotations,
)
from tpujob.validation import validate_job
from tpujob_plan.slice_plan import plan_slice

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
JOBSET_CRD = ROOT / "operator" / "tpujob" / "local" / "crds" / "jobset.x-k8s.io_jobsets.yaml"
BASE = {"slice": "v6e-16", "image": "trainer:1", "output": "gs://bucket/run"}
TINY = {"model": {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4,
                  "n_kv_heads": 2, "head_dim": 16, "mlp_dim": 128},
        "train": {"steps": 10, "global_batch": 512, "seq_len": 64}}
Q = {"queueName": "team-a"}
OFF_PREEMPTIBLE = [
    {"key": "cloud.google.com/gke-spot", "operator": "NotIn", "values": ["true"]},
    {"key": "cloud.google.com/gke-flex-start", "operator": "NotIn", "values": ["true"]},
]


def _scheduling(**fields):
    return load_spec(BASE | {"scheduling": fields}).scheduling


def _job(slice_name="v6e-16", slices=1, machine_type=None, **scheduling) -> dict:
    machine = {"machineType": machine_type} if machine_type else {}
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "llm", "namespace": "team-a", "uid": "u-1"},
            "spec": BASE | machine | {"slice": slice_name, "slices": slices,
                                      "scheduling": scheduling, "trainer": {"config": TINY}}}


def _build(slice_name="v6e-16", slices=1, **scheduling) -> dict:
    job = _job(slice_name, slices, **scheduling)
    spec = load_job(job).spec
    return build_jobset(job, spec, plan_slice(slice_name, slices=slices))


@pytest.fixture(scope="module")
def jobset_schema():
    crd = yaml.safe_load(JOBSET_CRD.read_text())
    return strict_schema(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


# (spec.scheduling.capacity, nodeSelector added, tolerations added, node affinity)
CAPACITY = [
    (None, {}, [], []),
    ({"type": "OnDemand"}, {}, [], OFF_PREEMPTIBLE),
    ({"type": "Spot"}, {"cloud.google.com/gke-spot": "true"},
     [{"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true",
       "effect": "NoSchedule"}], []),
    ({"type": "Reservation"}, {}, [], OFF_PREEMPTIBLE),
    ({"type": "Reservation", "reservation": {}}, {}, [], OFF_PREEMPTIBLE),
    ({"type": "Reservation", "reservation": {"name": "tpu-res"}},
     {"cloud.google.com/reservation-name": "tpu-res",
      "cloud.google.com/reservation-affinity": "specific"}, [], []),
    ({"type": "Reservation", "reservation": {"name": "tpu-res", "project": "owner-proj",
                                             "block": "b-1", "subBlock": "sb-2"}},
     {"cloud.google.com/reservation-name": "tpu-res",
      "cloud.google.com/reservation-affinity": "specific",
      "cloud.google.com/reservation-project": "owner-proj",
      "cloud.google.com/reservation-blocks": "b-1",
      "cloud.google.com/reservation-subblocks": "sb-2"}, [], []),
    ({"type": "FlexStart"}, {"cloud.google.com/gke-flex-start": "true"}, [], []),
    ({"type": "FlexStart", "flexStart": {"queuedProvisioning": True}},
     {"cloud.google.com/gke-flex-start": "true"},
     [{"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"}], []),
]


@pytest.mark.parametrize("capacity, selector, tolerations, affinity", CAPACITY)
def test_capacity_placement(capacity, selector, tolerations, affinity):
    fields = Q | ({"capacity": capacity} if capacity else {})
    placement = build_capacity_placement(_scheduling(**fields).capacity)
    assert (placement.node_selector, placement.tolerations, placement.node_affinity) == (
        selector, tolerations, affinity)


@pytest.mark.parametrize("capacity, selector, tolerations, affinity", CAPACITY)
def test_capacity_in_the_jobset(jobset_schema, capacity, selector, tolerations, affinity):
    jobset = _build(**Q, **({"capacity": capacity} if capacity else {}))
    assert schema_errors(jobset_schema, jobset) == []
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    # The slice's own selectors stay; the capacity's are added.
    assert pod["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                                   "cloud.google.com/gke-tpu-topology": "4x4", **selector}
    assert pod["tolerations"] == [
        {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}, *tolerations]
    if affinity:
        assert pod["affinity"] == {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": affinity}]}}}
    else:
        assert "affinity" not in pod


# (spec.scheduling, JobSet labels from it, JobSet annotations from it)
KUEUE_OBJECT = [
    ({}, {}, {}),
    (Q, {"kueue.x-k8s.io/queue-name": "team-a"}, {}),
    (Q | {"priority": "high"},
     {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/priority-class": "high"}, {}),
    (Q | {"capacity": {"type": "FlexStart", "flexStart": {"queuedProvisioning": True}}},
     {"kueue.x-k8s.io/queue-name": "team-a"}, {}),
    (Q | {"capacity": {"type": "FlexStart", "flexStart": {
        "queuedProvisioning": True, "maxRunDurationSeconds": 86400}}},
     {"kueue.x-k8s.io/queue-name": "team-a"},
     {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "86400"}),
    (Q | {"maxRunSeconds": 3600},
     {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/max-exec-time-seconds": "3600"},
     {}),
]


@pytest.mark.parametrize("scheduling, labels, annotations", KUEUE_OBJECT)
def test_kueue_labels_and_annotations(scheduling, labels, annotations):
    parsed = _scheduling(**scheduling)
    assert build_jobset_labels(parsed) == labels
    assert build_jobset_annotations(parsed) == annotations
    meta = _build(**scheduling)["metadata"]
    assert {k: v for k, v in meta["labels"].items() if k.startswith("kueue.")} == labels
    assert {k: v for k, v in meta["annotations"].items() if k.startswith("provreq.")} == \
        annotations


# (slice, slices, spec.scheduling.topology, pod-template annotations)
TOPOLOGY = [
    ("v6e-16", 1, None, {}),
    ("v6e-16", 1, {"level": "cloud.google.com/gce-topology-block"},
     {"kueue.x-k8s.io/podset-required-topology": "cloud.google.com/gce-topology-block"}),
    ("v6e-16", 1, {"level": "cloud.google.com/gce-topology-block", "mode": "Preferred"},
     {"kueue.x-k8s.io/podset-preferred-topology": "cloud.google.com/gce-topology-block"}),
    # Each of 4 slices of 4 hosts in one node pool, all of them in one block.
    ("v6e-16", 4, {"sliceLevel": "cloud.google.com/gke-nodepool",
                   "level": "cloud.google.com/gce-topology-block"},
     {"kueue.x-k8s.io/podset-required-topology": "cloud.google.com/gce-topology-block",
      "kueue.x-k8s.io/podset-slice-required-topology": "cloud.google.com/gke-nodepool",
      "kueue.x-k8s.io/podset-slice-size": "4"}),
    ("v5p-128", 2, {"sliceLevel": "cloud.google.com/gce-topology-subblock"},
     {"kueue.x-k8s.io/podset-slice-required-topology": "cloud.google.com/gce-topology-subblock",
      "kueue.x-k8s.io/podset-slice-size": "16"}),
    ("v6e-16", 1, {"sliceLevel": "cloud.google.com/gke-tpu-slice-4x4-id"},
     {"kueue.x-k8s.io/podset-slice-required-topology": "cloud.google.com/gke-tpu-slice-4x4-id",
      "kueue.x-k8s.io/podset-slice-size": "4"}),
]


@pytest.mark.parametrize("slice_name, slices, topology, annotations", TOPOLOGY)
def test_topology_annotations(jobset_schema, slice_name, slices, topology, annotations):
    scheduling = Q | ({"topology": topology} if topology else {})
    hosts = plan_slice(slice_name).hosts
    assert build_topology_annotations(_scheduling(**scheduling).topology, hosts) == annotations
    jobset = _build(slice_name, slices, **scheduling)
    assert schema_errors(jobset_schema, jobset) == []
    # Multi-slice stays one replicated job (one Kueue PodSet of hosts x slices pods).
    [rjob] = jobset["spec"]["replicatedJobs"]
    assert rjob["replicas"] == slices
    template = rjob["template"]["spec"]["template"]["metadata"]
    assert template.get("annotations", {}) == annotations
    assert validate_job(_job(slice_name, slices, **scheduling)).valid


def test_a_job_without_the_new_fields_writes_nothing_new():
    jobset = _build()
    pod_template = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert "annotations" not in pod_template["metadata"]
    assert "affinity" not in pod_template["spec"]
    assert pod_template["spec"]["tolerations"] == [
        {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert set(jobset["metadata"]["annotations"]) == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology", "tpujob.dev/spec-fingerprint"}
    # The JobSets of running jobs were fingerprinted before the new fields existed: a job that
    # does not use them must hash as then, or every running job would read as changed.
    spec = load_spec(BASE | {"scheduling": {"queueName": "q"}})
    assert build_fingerprint(spec)["scheduling"] == _digest(
        {"priorityClassName": None, "queueName": "q"})
    assert build_fingerprint(load_spec(BASE))["scheduling"] == _digest(
        {"priorityClassName": None, "queueName": None})


def test_a_placement_is_a_value():
    placement = build_capacity_placement(_scheduling(capacity={"type": "Spot"}).capacity)
    with pytest.raises(FrozenInstanceError):
        placement.node_selector = {}  # type: ignore[misc]


def test_a_changed_priority_or_warning_bound_is_not_a_changed_spec():
    # The operator patches the JobSet's priority label itself (Kueue moves the Workload and it
    # keeps its place in line); re-creating the JobSet would queue it again from the back.
    old = load_spec(BASE | {"scheduling": Q | {"priority": "low"}})
    new = load_spec(BASE | {"scheduling": Q | {"priority": "high",
                                               "unscheduledWarningSeconds": 60}})
    assert build_fingerprint(old)["scheduling"] == build_fingerprint(new)["scheduling"]
    moved = load_spec(BASE | {"scheduling": {"queueName": "other", "priority": "low"}})
    assert build_fingerprint(old)["scheduling"] != build_fingerprint(moved)["scheduling"]


# (slice, slices, spec.scheduling, the field refused, words of the message)
REFUSED = [
    ("v6e-16", 1, {"maxRunSeconds": 60}, "spec.scheduling.maxRunSeconds",
     "set spec.scheduling.queueName"),
    ("v6e-16", 1, Q | {"maxRunSeconds": 0}, "spec.scheduling.maxRunSeconds",
     "greater than or equal to 1"),
    ("v6e-16", 1, {"priority": "high"}, "spec.scheduling.priority",
     "set spec.scheduling.queueName"),
    ("v6e-16", 1, {"topology": {"level": "cloud.google.com/gce-topology-block"}},
     "spec.scheduling.topology", "set spec.scheduling.queueName"),
    ("v6e-16", 1, {"capacity": {"type": "FlexStart"}}, "spec.scheduling.capacity",
     "only through Kueue"),
    ("v6e-16", 1, Q | {"priority": "High"}, "spec.scheduling.priority",
     "WorkloadPriorityClass"),
    ("v6e-16", 1, Q | {"capacity": {"type": "Reservation", "reservation": {"name": "Res_1"}}},
     "spec.scheduling.capacity.reservation.name", "Compute Engine name"),
    ("v6e-16", 1, Q | {"capacity": {"type": "Reservation",
                                    "reservation": {"name": "r", "project": "p"}}},
     "spec.scheduling.capacity.reservation.project", "project ID"),
    ("v6e-16", 1, Q | {"capacity": {"type": "Reservation", "reservation": {"block": "b"}}},
     "spec.scheduling.capacity.reservation.block", "set name too"),
    ("v6e-16", 1, Q | {"capacity": {"type": "Reservation",
                                    "reservation": {"name": "r", "subBlock": "s"}}},
     "spec.scheduling.capacity.reservation.subBlock", "set block too"),
    ("v6e-16", 1, Q | {"capacity": {"type": "Spot", "reservation": {"name": "r"}}},
     "spec.scheduling.capacity.reservation", "needs type: Reservation"),
    ("v6e-16", 1, Q | {"capacity": {"type": "OnDemand", "flexStart": {}}},
     "spec.scheduling.capacity.flexStart", "needs type: FlexStart"),
    ("v6e-16", 1, Q | {"capacity": {"type": "Cheap"}}, "spec.scheduling.capacity.type",
     "OnDemand"),
    ("v6e-16", 1, Q | {"capacity": {"type": "FlexStart",
                                    "flexStart": {"maxRunDurationSeconds": 600}}},
     "spec.scheduling.capacity.flexStart.maxRunDurationSeconds", "queuedProvisioning: true"),
    ("v6e-16", 1, Q | {"capacity": {"type": "FlexStart", "flexStart": {
        "queuedProvisioning": True, "maxRunDurationSeconds": 8 * 24 * 3600}}},
     "spec.scheduling.capacity.flexStart.maxRunDurationSeconds", "604800"),
    ("v6e-16", 1, Q | {"topology": {}}, "spec.scheduling.topology", "set level, sliceLevel"),
    ("v6e-16", 1, Q | {"topology": {"sliceLevel": "cloud.google.com/gke-nodepool",
                                    "mode": "Preferred"}},
     "spec.scheduling.topology", "Preferred applies to level"),
    ("v6e-16", 1, Q | {"topology": {"level": "no spaces"}}, "spec.scheduling.topology.level",
     "node label key"),
    # What no cluster can give, known from the slice.
    ("v6e-16", 1, Q | {"topology": {"sliceLevel": "kubernetes.io/hostname"}},
     "spec.scheduling.topology.sliceLevel", "is one host and cannot hold a v6e-4x4 slice"),
    ("v6e-8", 2, Q | {"topology": {"level": "cloud.google.com/gce-topology-host"}},
     "spec.scheduling.topology.level", "cannot hold the job's 4 hosts"),
    ("v5p-128", 1, Q | {"topology": {"sliceLevel": "cloud.google.com/gke-tpu-slice-4x4-id"}},
     "spec.scheduling.topology.sliceLevel", "on v6e (ct6e-standard-4t) nodes only"),
    ("v6e-16", 1, Q | {"topology": {"sliceLevel": "cloud.google.com/gke-tpu-slice-2x3-id"}},
     "spec.scheduling.topology.sliceLevel", "gke-tpu-slice-16x16-id"),
    ("v6e-32", 1, Q | {"topology": {"sliceLevel": "cloud.google.com/gke-tpu-slice-4x4-id"}},
     "spec.scheduling.topology.sliceLevel", "is 4x4 chips and cannot hold a v6e-4x8 slice"),
    ("v6e-16", 2, Q | {"topology": {"level": "cloud.google.com/gke-tpu-slice-4x4-id"}},
     "spec.scheduling.topology.level", "cannot hold the job's 8 hosts"),
    ("v6e-16", 1, Q | {"topology": {"level": "cloud.google.com/gke-tpu-partition-4x4x4-id",
                                    "mode": "Preferred"}},
     "spec.scheduling.topology.level", "on tpu7x nodes only"),
    # A single-host v6e-8 (8 chips on one ct6e-standard-8t) is not sub-sliced.
    ("v6e-8/ct6e-standard-8t", 1,
     Q | {"topology": {"sliceLevel": "cloud.google.com/gke-tpu-slice-2x4-id"}},
     "spec.scheduling.topology.sliceLevel", "on v6e (ct6e-standard-4t) nodes only"),
]


@pytest.mark.parametrize("slice_name, slices, scheduling, field, says", REFUSED)
def test_refused_naming_the_field(slice_name, slices, scheduling, field, says):
    slice_name, _, machine_type = slice_name.partition("/")
    verdict = validate_job(_job(slice_name, slices, machine_type or None, **scheduling))
    assert not verdict.valid
    assert verdict.field == field, verdict.message
    assert says in verdict.message, verdict.message


ALLOWED = [
    ("v6e-16", 1, Q | {"priority": "high", "priorityClassName": "high"}),
    ("v6e-16", 1, Q | {"capacity": {"type": "FlexStart", "flexStart": {
        "queuedProvisioning": True, "maxRunDurationSeconds": 7 * 24 * 3600}}}),
    ("v6e-16", 1, {"capacity": {"type": "Spot"}}),  # no Kueue needed
    ("v6e-16", 1, {"capacity": {"type": "Reservation", "reservation": {"name": "r"}}}),
    # One host holds a single-host slice; a preference for one host spreads when it cannot.
    ("v6e-4", 1, Q | {"topology": {"sliceLevel": "kubernetes.io/hostname"}}),
    ("v6e-16", 1, Q | {"topology": {"level": "kubernetes.io/hostname", "mode": "Preferred"}}),
    ("v6e-32", 2, Q | {"topology": {"level": "cloud.google.com/gke-tpu-slice-16x16-id",
                                    "sliceLevel": "cloud.google.com/gke-tpu-slice-4x8-id"}}),
    ("tpu7x-128", 1, Q | {"topology": {
        "sliceLevel": "cloud.google.com/gke-tpu-partition-4x4x4-id"}}),
    # A domain exactly the job's size holds it.
    ("v6e-16", 1, Q | {"topology": {"level": "cloud.google.com/gke-tpu-slice-4x4-id"}}),
]


@pytest.mark.parametrize("slice_name, slices, scheduling", ALLOWED)
def test_allowed(slice_name, slices, scheduling):
    verdict = validate_job(_job(slice_name, slices, **scheduling))
    assert verdict.valid, verdict.message


@pytest.fixture(scope="module")
def root_schema():
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


# The cross-field refusals `kubectl apply` gives from the CRD's own rules, before the operator.
CEL_REFUSED = [
    ({"maxRunSeconds": 60}, "spec.scheduling.maxRunSeconds: Kueue reads it only"),
    ({"priority": "high"}, "spec.scheduling.priority: Kueue reads it only for a job in a queue"),
    ({"topology": {"level": "x"}}, "spec.scheduling.topology: Kueue reads it only"),
    ({"capacity": {"type": "FlexStart"}}, "flex-start capacity is obtained"),
    (Q | {"capacity": {"type": "Spot", "reservation": {}}}, "needs type: Reservation"),
    (Q | {"capacity": {"type": "Spot", "flexStart": {}}}, "needs type: FlexStart"),
    (Q | {"capacity": {"type": "Reservation", "reservation": {"block": "b"}}},
     "project and block belong to a named reservation"),
    (Q | {"capacity": {"type": "Reservation", "reservation": {"name": "r", "subBlock": "s"}}},
     "subBlock is a part of a block"),
    (Q | {"capacity": {"type": "FlexStart", "flexStart": {"maxRunDurationSeconds": 5}}},
     "needs queuedProvisioning: true"),
    (Q | {"topology": {"mode": "Preferred"}}, "set level, sliceLevel or both"),
    (Q | {"topology": {"sliceLevel": "x", "mode": "Preferred"}}, "Preferred applies to level"),
]


@pytest.mark.parametrize("scheduling, message", CEL_REFUSED)
def test_the_crd_refuses_the_same(root_schema, scheduling, message):
    obj = {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
           "metadata": {"name": "j"}, "spec": BASE | {"scheduling": scheduling}}
    errors = k8s.validate_object(root_schema, obj)
    assert any(message in e for e in errors), errors


@pytest.mark.parametrize("scheduling", [s for _, _, s in ALLOWED])
def test_the_crd_takes_what_the_models_take(root_schema, scheduling):
    obj = {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
           "metadata": {"name": "j"}, "spec": BASE | {"scheduling": scheduling}}
    assert k8s.validate_object(root_schema, obj) == []


def test_priority_may_change_while_queued(root_schema):
    old = {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
           "metadata": {"name": "j"}, "spec": BASE | {"scheduling": Q | {"priority": "low"}}}
    new = json.loads(json.dumps(old))
    new["spec"]["scheduling"]["priority"] = "high"
    assert k8s.validate_object(root_schema, new, old=old) == []
