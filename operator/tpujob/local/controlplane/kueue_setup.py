"""The Kueue queues that xpk sets up on a cluster, made for local mode's TPU node pools, so that a
job with `spec.scheduling.queueName: multislice-queue` and a `priority` is queued and admitted
by the real Kueue of `tpujob local up --control-plane real` with no Kueue object written by hand.

What xpk's `cluster create` / `cluster adapt` applies (github.com/AI-Hypercomputer/xpk,
src/xpk/core/kueue_manager.py, `KueueManager._KueueManager__configure` and its template
src/xpk/templates/kueue_config.yaml.j2), and what is made here in its place:

- xpk: one ResourceFlavor, `<slices>x<device type>` (`1xv6e-8`), for the one TPU shape the
  cluster's node pools have, its nodeLabels the accelerator and topology labels of the nodes.
  Here: local mode makes a node pool for any TPU shape a pod asks for (executor/nodes.py), so one
  flavor per shape of at most `max_chips` chips of every generation of the slice catalog, named
  `<generation>-<topology>` (`v6e-2x4`, `v5litepod-2x2`, `tpu7x-2x2x2`: the topology form of the
  slice name, one name per shape where `<generation>-<N>` names would not be), its nodeLabels
  exactly the nodeSelector the operator gives the pods of that slice (`SlicePlan.node_selector`:
  accelerator, topology, and on tpu7x multi-host slices the workload policy's name). 16 chips
  is every single-host shape and the multi-host ones of up to 4 hosts, what a laptop's local
  processes can run; a bigger shape is one more flavor and one more quota line by hand.
- xpk: ClusterQueue `cluster-queue`, namespaceSelector `{}`, preemption withinClusterQueue
  `LowerPriority` and reclaimWithinCohort `Never`, `google.com/tpu` quota of its node pools'
  chips. Here: the same, with `slices_per_shape` slices' chips of quota per flavor.
- xpk: LocalQueue `multislice-queue` in namespace `default`. Here: the same (and the namespace
  itself, where another one is asked for).
- xpk: Kubernetes PriorityClasses very-low 100, low 250, medium 500, high 750, very-high 1000.
  Here: those, and Kueue WorkloadPriorityClasses of the same names and values, since Kueue takes
  a Workload's priority from the JobSet's `kueue.x-k8s.io/priority-class` label, which is what
  tpujob writes for `spec.scheduling.priority` (a pod's PriorityClass is Kueue's fallback only).

Pure: the objects as dicts (kueue.x-k8s.io/v1beta2, what Kueue v0.17 serves);
`RealControlPlane._start_kueue` creates them once Kueue's webhooks answer.
"""

from __future__ import annotations

from tpujob.local.executor.client import Resource
from tpujob_plan.catalog import SliceType
from tpujob_plan.generations import GENERATIONS
from tpujob_plan.slice_plan import TPU_RESOURCE, plan_slice
from tpujob_plan.topologies import topologies

KUEUE_API = "kueue.x-k8s.io/v1beta2"
CLUSTER_QUEUE = "cluster-queue"         # xpk's CLUSTER_QUEUE_NAME
LOCAL_QUEUE = "multislice-queue"        # xpk's LOCAL_QUEUE_NAME
LOCAL_QUEUE_NAMESPACE = "default"
SLICES_PER_SHAPE = 2                    # quota: two slices of each shape at a time
MAX_CHIPS = 16
# xpk's PriorityClasses, in order: (name, value, description).
PRIORITIES = (("very-low", 100, "Very Low"), ("low", 250, "Low"), ("medium", 500, "Medium"),
              ("high", 750, "High"), ("very-high", 1000, "Very High"))
# Where each kind is created (the control plane creates the objects in list order).
RESOURCES = {
    "Namespace": Resource("", "v1", "namespaces"),
    "ResourceFlavor": Resource("kueue.x-k8s.io", "v1beta2", "resourceflavors"),
    "ClusterQueue": Resource("kueue.x-k8s.io", "v1beta2", "clusterqueues"),
    "LocalQueue": Resource("kueue.x-k8s.io", "v1beta2", "localqueues"),
    "WorkloadPriorityClass": Resource("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses"),
    "PriorityClass": Resource("scheduling.k8s.io", "v1", "priorityclasses"),
}


def plan_shapes(max_chips: int = MAX_CHIPS) -> list[SliceType]:
    """Every slice shape of at most `max_chips` chips, in catalog order (generation, then
    topology as xpk lists them)."""
    return [SliceType(g, t) for g in GENERATIONS for t in topologies(g)
            if SliceType(g, t).chips <= max_chips]


def build_flavor(shape: SliceType) -> dict:
    """The shape's ResourceFlavor: its node labels are what the pods of such a slice select."""
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor",
            "metadata": {"name": shape.topology_name},
            "spec": {"nodeLabels": plan_slice(shape.topology_name).node_selector}}


def build_cluster_queue(shapes: list[SliceType], slices_per_shape: int) -> dict:
    """xpk's ClusterQueue: every namespace, lower priorities preempted within it, never a
    cohort's; `slices_per_shape` slices of each shape's chips."""
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue",
            "metadata": {"name": CLUSTER_QUEUE},
            "spec": {"namespaceSelector": {},
                     "preemption": {"reclaimWithinCohort": "Never",
                                    "withinClusterQueue": "LowerPriority"},
                     "resourceGroups": [{"coveredResources": [TPU_RESOURCE], "flavors": [
                         {"name": s.topology_name, "resources": [
                             {"name": TPU_RESOURCE, "nominalQuota": slices_per_shape * s.chips}]}
                         for s in shapes]}]}}


def build_local_queue(namespace: str) -> dict:
    return {"apiVersion": KUEUE_API, "kind": "LocalQueue",
            "metadata": {"name": LOCAL_QUEUE, "namespace": namespace},
            "spec": {"clusterQueue": CLUSTER_QUEUE}}


def build_priority_classes() -> list[dict]:
    """Kueue's WorkloadPriorityClasses (what `spec.scheduling.priority` names), then xpk's
    Kubernetes PriorityClasses (what `spec.scheduling.priorityClassName` may name)."""
    workload = [{"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass",
                 "metadata": {"name": name}, "value": value, "description": description}
                for name, value, description in PRIORITIES]
    pods = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
             "metadata": {"name": name}, "value": value, "globalDefault": False,
             "description": description}
            for name, value, description in PRIORITIES]
    return workload + pods


def build_kueue_objects(slices_per_shape: int = SLICES_PER_SHAPE, max_chips: int = MAX_CHIPS,
                        namespace: str = LOCAL_QUEUE_NAMESPACE) -> list[dict]:
    """Everything to create, in order: the LocalQueue's namespace, the flavors, the
    ClusterQueue, the LocalQueue, the priority classes. Raises ValueError naming a bad
    argument."""
    if isinstance(slices_per_shape, bool) or not isinstance(slices_per_shape, int) \
            or slices_per_shape < 1:
        raise ValueError(f"slices_per_shape is the quota in slices of each shape: a whole "
                         f"number of at least 1, got {slices_per_shape!r}")
    shapes = plan_shapes(max_chips)
    if not shapes:
        raise ValueError(f"max_chips {max_chips!r} leaves no TPU shape; the smallest has 1 chip")
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            *(build_flavor(s) for s in shapes),
            build_cluster_queue(shapes, slices_per_shape),
            build_local_queue(namespace),
            *build_priority_classes()]
