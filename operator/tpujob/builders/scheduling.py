"""What `spec.scheduling` writes into the JobSet: the Kueue labels and annotations on the JobSet,
the node selectors, tolerations and node affinity of the pods for the kind of capacity, and the
Kueue topology-aware-scheduling annotations of the pod template; and the placements no cluster
can give (a topology level a slice cannot fit in). Pure; docs/queueing.md cites the source of
every name.

Kueue turns a JobSet into one Workload with one PodSet per replicated job, `parallelism x
replicas` pods each (pkg/controller/jobs/jobset/jobset_controller.go, PodSets). A job's slices
are the replicas of one replicated job, so every host of every slice is one PodSet, admitted
together or not at all."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import prod
from typing import Any

from tpujob.api.scheduling import (
    Capacity,
    CapacityType,
    Scheduling,
    Topology,
    TopologyMode,
)
from tpujob.builders import names
from tpujob_plan.slice_plan import SlicePlan
from tpujob_plan.topologies import parse_topology

# A node label whose domains hold one host each.
HOST_LEVELS = ("kubernetes.io/hostname", "cloud.google.com/gce-topology-host")
# xpk's sub-slicing labels (src/xpk/utils/topology.py, get_slice_topology_level) exist on v6e
# (ct6e-standard-4t) nodes for these shapes (src/xpk/core/system_characteristics.py,
# SUB_SLICING_TOPOLOGIES); its super-slicing label (templates/kueue_super_slicing_topology.yaml.j2)
# on tpu7x nodes, for 4x4x4 partitions.
SUB_SLICE_LABEL = "cloud.google.com/gke-tpu-slice-{}-id"
SUB_SLICE_TOPOLOGIES = ("2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
SUB_SLICE_MACHINE = "ct6e-standard-4t"
PARTITION_LABEL = "cloud.google.com/gke-tpu-partition-{}-id"
PARTITION_TOPOLOGIES = ("4x4x4",)
PARTITION_GENERATION = "tpu7x"


def _label_pattern(label_format: str) -> re.Pattern[str]:
    prefix, suffix = label_format.split("{}")
    return re.compile(f"^{re.escape(prefix)}(?P<topology>[0-9]+(x[0-9]+)*){re.escape(suffix)}$")


@dataclass(frozen=True)
class PodPlacement:
    """What the pods get for a kind of capacity."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    # matchExpressions of the one required node-selector term.
    node_affinity: list[dict[str, Any]] = field(default_factory=list)


def build_jobset_labels(scheduling: Scheduling) -> dict[str, str]:
    """Labels Kueue reads on the JobSet: its LocalQueue, its WorkloadPriorityClass and its
    maximum execution time."""
    labels = {}
    if scheduling.queue_name:
        labels[names.KUEUE_QUEUE_LABEL] = scheduling.queue_name
    if scheduling.priority:
        labels[names.KUEUE_PRIORITY_LABEL] = scheduling.priority
    if scheduling.max_run_seconds is not None:
        labels[names.KUEUE_MAX_EXEC_TIME_LABEL] = str(scheduling.max_run_seconds)
    return labels


def build_jobset_annotations(scheduling: Scheduling) -> dict[str, str]:
    """Annotations Kueue copies from the JobSet to its Workload and from there, less the
    prefix, into the parameters of the ProvisioningRequest it creates."""
    flex = scheduling.capacity.flex_start if scheduling.capacity else None
    if flex is None or flex.max_run_duration_seconds is None:
        return {}
    return {f"{names.KUEUE_PROVREQ_PREFIX}maxRunDurationSeconds":
            str(flex.max_run_duration_seconds)}


def _not_on(*labels: str) -> list[dict[str, Any]]:
    # NotIn also matches a node without the label: only nodes that say they are one are kept off.
    return [{"key": label, "operator": "NotIn", "values": ["true"]} for label in labels]


def build_capacity_placement(capacity: Capacity | None) -> PodPlacement:
    """Node selectors, tolerations and node affinity for the kind of capacity; none without."""
    if capacity is None:
        return PodPlacement()
    if capacity.type == CapacityType.SPOT:
        return PodPlacement(
            node_selector={names.GKE_SPOT_LABEL: "true"},
            tolerations=[{"key": names.GKE_SPOT_LABEL, "operator": "Equal", "value": "true",
                          "effect": "NoSchedule"}])
    if capacity.type == CapacityType.FLEX_START:
        flex = capacity.flex_start
        tolerations = []
        if flex is not None and flex.queued_provisioning:
            tolerations.append({"key": names.GKE_QUEUED_LABEL, "operator": "Exists",
                                "effect": "NoSchedule"})
        return PodPlacement(node_selector={names.GKE_FLEX_START_LABEL: "true"},
                            tolerations=tolerations)
    reservation = capacity.reservation
    if capacity.type == CapacityType.RESERVATION and reservation and reservation.name:
        selector = {names.GKE_RESERVATION_NAME: reservation.name,
                    names.GKE_RESERVATION_AFFINITY: "specific"}
        for label, value in ((names.GKE_RESERVATION_PROJECT, reservation.project),
                             (names.GKE_RESERVATION_BLOCKS, reservation.block),
                             (names.GKE_RESERVATION_SUBBLOCKS, reservation.sub_block)):
            if value:
                selector[label] = value
        return PodPlacement(node_selector=selector)
    # OnDemand, and any reservation: GKE gives no node label that says "some reservation" (a
    # node pool's --reservation-affinity=any is not written on its nodes), so both keep the
    # pods off the capacity that can be taken back or runs out, and the queue's flavor and the
    # node pools decide the rest.
    return PodPlacement(node_affinity=_not_on(names.GKE_SPOT_LABEL, names.GKE_FLEX_START_LABEL))


def build_topology_annotations(topology: Topology | None, hosts: int) -> dict[str, str]:
    """Kueue TAS annotations of the pod template: `level` for every pod of the job, and
    `sliceLevel` for each slice's `hosts` pods (Kueue splits the PodSet into the JobSet's Jobs
    by the jobset.sigs.k8s.io/job-index label)."""
    if topology is None:
        return {}
    out = {}
    if topology.level:
        key = (names.TAS_REQUIRED if topology.mode == TopologyMode.REQUIRED
               else names.TAS_PREFERRED)
        out[key] = topology.level
    if topology.slice_level:
        out[names.TAS_SLICE_REQUIRED] = topology.slice_level
        out[names.TAS_SLICE_SIZE] = str(hosts)
    return out


def _fits(inner: tuple[int, ...], outer: tuple[int, ...]) -> bool:
    return len(inner) == len(outer) and all(inner[i] <= outer[i] for i in range(len(inner)))


def _tpu_label_problem(label: str, what: str) -> str | None:
    """A TPU-only topology label asked of GPU nodes."""
    for label_format in (SUB_SLICE_LABEL, PARTITION_LABEL):
        if _label_pattern(label_format).match(label):
            return f"{label} is a TPU node label; {what} have no such label"
    return None


def _level_problem(label: str, plan: SlicePlan, whole_job: bool, required: bool = True
                   ) -> str | None:
    """Why `label` is not on the job's nodes, or (`required`) why no domain of it can hold one
    slice (or, `whole_job`, every slice), if so."""
    pods = plan.hosts * (plan.slices if whole_job else 1)
    if plan.is_gpu:
        what = f"the job's {pods} {plan.name} nodes"
    elif whole_job:
        what = f"the job's {pods} hosts ({plan.slices} x {plan.slice_type.topology_name})"
    else:
        what = f"a {plan.slice_type.topology_name} slice of {plan.hosts} hosts"
    if required and label in HOST_LEVELS and pods > 1:
        return (f"a domain of {label} is one host and cannot hold {what}; use a level that "
                "holds them, e.g. cloud.google.com/gke-nodepool (one slice) or "
                "cloud.google.com/gce-topology-block")
    if plan.is_gpu:
        return _tpu_label_problem(label, what)
    generation = plan.generation.prefix
    for label_format, shapes, owner, ok in (
            (SUB_SLICE_LABEL, SUB_SLICE_TOPOLOGIES, f"v6e ({SUB_SLICE_MACHINE})",
             generation == "v6e" and plan.machine_type.name == SUB_SLICE_MACHINE),
            (PARTITION_LABEL, PARTITION_TOPOLOGIES, PARTITION_GENERATION,
             generation == PARTITION_GENERATION)):
        match = _label_pattern(label_format).match(label)
        if match is None:
            continue
        shape = match["topology"]
        if not ok or shape not in shapes:
            valid = ", ".join(label_format.format(s) for s in shapes)
            return (f"GKE puts {valid} on {owner} nodes only; the nodes of a "
                    f"{plan.slice_type.topology_name} slice have no {label}")
        dims = tuple(parse_topology(shape))
        if whole_job:
            fits = plan.slice_type.chips * plan.slices <= prod(dims)
        else:
            fits = _fits(tuple(plan.slice_type.dims), dims)
        if required and not fits:
            return f"a domain of {label} is {shape} chips and cannot hold {what}"
    return None


def topology_problem(topology: Topology | None, plan: SlicePlan) -> tuple[str, str] | None:
    """(field, message) when a topology level cannot hold what it is asked to; else None."""
    if topology is None:
        return None
    if topology.slice_level:
        problem = _level_problem(topology.slice_level, plan, whole_job=False)
        if problem:
            return "spec.scheduling.topology.sliceLevel", problem
    if topology.level:
        problem = _level_problem(topology.level, plan, whole_job=True,
                                 required=topology.mode == TopologyMode.REQUIRED)
        if problem:
            return "spec.scheduling.topology.level", problem
    return None
