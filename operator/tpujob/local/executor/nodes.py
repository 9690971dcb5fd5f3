"""TPU and GPU node pools for the real scheduler: Nodes shaped like GKE's, created when a pod
asks for a slice (or a GPU node) no pool has, kept Ready by their leases.

GKE makes one node pool per TPU slice (a multi-host slice is one pool of `hosts` nodes), labels
its nodes with the accelerator and topology the pods select
(`cloud.google.com/gke-tpu-accelerator`, `cloud.google.com/gke-tpu-topology`, and the
placement policy's name where one is attached), the pool's name
(`cloud.google.com/gke-nodepool`, what JobSet's exclusive placement keys on), gives each node
`google.com/tpu` capacity for its chips and taints it `google.com/tpu=present:NoSchedule`.
Here a pool is made on demand, like node auto-provisioning: one pool per Job (slice) of a
JobSet whose pods select a TPU shape no free pool offers. Pools stay until local mode stops.

GPU node pools are GKE's too: nodes labelled with the GPU (`cloud.google.com/gke-accelerator`,
e.g. `nvidia-h100-mega-80gb`) and their machine type, `nvidia.com/gpu` capacity for their GPUs
and GKE's GPU taint `nvidia.com/gpu=present:NoSchedule`. A GPU job's nodes are interchangeable
(no slice ties them together), so a pool is made per node a pod needs: one per pod of a Job
(by completion index), reused by the pods of later attempts.

The decisions are pure (`plan_pools`, `build_node`, `build_lease`); `NodePools` applies them.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from math import prod
from typing import Any

from tpujob_plan.generations import GENERATIONS
from tpujob_plan.gpu_catalog import GPU_MACHINES
from tpujob_plan.gpu_plan import GPU_RESOURCE
from tpujob_plan.topologies import parse_topology

from .client import ApiError, KubeApi, Resource

log = logging.getLogger(__name__)

NODES = Resource("", "v1", "nodes")
LEASES = Resource("coordination.k8s.io", "v1", "leases")
LEASE_NAMESPACE = "kube-node-lease"
ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY = "cloud.google.com/gke-tpu-topology"
NODEPOOL = "cloud.google.com/gke-nodepool"
TPU = "google.com/tpu"
GPU_ACCELERATOR = "cloud.google.com/gke-accelerator"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
POOL_LABEL = "tpujob.dev/local-node-pool"   # every node local mode made carries it
SELECTOR_KEYS = "tpujob.dev/local-selector-keys"   # annotation: the labels pods select on
LEASE_SECONDS = 40
RENEW_SECONDS = 10


@dataclass(frozen=True)
class PoolShape:
    """What a slice's pods ask of their nodes."""

    selector: tuple[tuple[str, str], ...]   # the pods' nodeSelector, sorted
    chips_per_host: int                      # TPU chips, or GPUs, of each node
    hosts: int
    machine_type: str
    resource: str = TPU                      # google.com/tpu or nvidia.com/gpu

    @property
    def is_gpu(self) -> bool:
        return self.resource == GPU_RESOURCE

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.selector)


def pool_shape(pod: dict[str, Any]) -> PoolShape | None:
    """The node pool a pod needs, or None when it asks for no TPU slice (or one no
    generation has: the scheduler then leaves it Pending, as on GKE)."""
    spec = pod.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    if GPU_ACCELERATOR in selector and NODEPOOL not in selector:
        return _gpu_pool_shape(selector, spec)
    label, topology = selector.get(ACCELERATOR), selector.get(TOPOLOGY)
    if not label or not topology or NODEPOOL in selector:
        # A pod that names its pool (JobSet's exclusive placement gives followers the pool
        # its leader landed on) goes where that pool is: it needs no new one.
        return None
    generation = next((g for g in GENERATIONS if g.accelerator_label == label), None)
    try:
        chips = prod(parse_topology(topology))
    except ValueError:
        return None
    per_host = sum(int(((c.get("resources") or {}).get("limits") or {}).get(TPU, 0) or 0)
                   for c in spec.get("containers") or [])
    if generation is None or per_host <= 0 or chips % per_host:
        return None
    machine = next((m.name for m in generation.machine_types
                    if m.chips_per_host == per_host and m.serves(topology, chips)), None)
    if machine is None:
        return None
    return PoolShape(tuple(sorted(selector.items())), per_host, chips // per_host, machine)


def _gpu_pool_shape(selector: dict[str, str], spec: dict[str, Any]) -> PoolShape | None:
    """One GPU node for a pod that asks for a GPU machine type's GPUs, all of them."""
    machine = next((m for m in GPU_MACHINES
                    if m.accelerator_label == selector[GPU_ACCELERATOR]), None)
    gpus = sum(int(((c.get("resources") or {}).get("limits") or {}).get(GPU_RESOURCE, 0) or 0)
               for c in spec.get("containers") or [])
    if machine is None or not 0 < gpus <= machine.gpus_per_node:
        return None
    return PoolShape(tuple(sorted(selector.items())), machine.gpus_per_node, 1, machine.name,
                     GPU_RESOURCE)


def slice_key(pod: dict[str, Any], shape: PoolShape | None = None) -> str | None:
    """What needs a pool of its own, stable across JobSet restarts: a TPU slice (its Job's
    name), or one node of a GPU job (its Job's name and the pod's completion index)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    job = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
    if job is None or shape is None or not shape.is_gpu:
        return job
    index = labels.get(COMPLETION_INDEX) or (meta.get("annotations") or {}).get(
        COMPLETION_INDEX)
    return f"{job}/{index}" if index is not None else None


def pool_name(shape: PoolShape, index: int) -> str:
    digest = hashlib.sha256(repr(shape.selector).encode()).hexdigest()[:6]
    if shape.is_gpu:
        return f"gpu-{shape.machine_type}-{digest}-{index}"
    accelerator = shape.labels[ACCELERATOR].removeprefix("tpu-")
    return f"tpu-{accelerator}-{shape.labels[TOPOLOGY]}-{digest}-{index}"


def plan_pools(pods: list[dict[str, Any]], nodes: list[dict[str, Any]]
               ) -> list[tuple[str, PoolShape]]:
    """The pools to create: per shape, as many pools as there are slices (Jobs) with live pods
    of that shape, less the pools of that shape there are."""
    wanted: dict[PoolShape, set[str]] = {}
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            continue
        shape = pool_shape(pod)
        key = slice_key(pod, shape)
        if shape is not None and key is not None:
            wanted.setdefault(shape, set()).add(key)
    have: dict[tuple[tuple[str, str], ...], set[str]] = {}
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if POOL_LABEL in labels:
            have.setdefault(_selector_of(node), set()).add(labels[NODEPOOL])
    plans = []
    for shape, slices in sorted(wanted.items(), key=lambda kv: kv[0].selector):
        existing = have.get(shape.selector, set())
        index = len(existing)
        for _ in range(len(slices) - len(existing)):
            while pool_name(shape, index) in existing:
                index += 1
            plans.append((pool_name(shape, index), shape))
            index += 1
    return plans


def _selector_of(node: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The nodeSelector a pool of local mode was made for (its nodes carry more labels)."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    keys = ((meta.get("annotations") or {}).get(SELECTOR_KEYS) or "").split(",")
    return tuple(sorted((k, labels[k]) for k in keys if k in labels))


def build_node(pool: str, index: int, shape: PoolShape, address: str, kubelet_port: int
               ) -> dict[str, Any]:
    """One node of a pool: GKE's labels and taint, TPU or GPU capacity, and where its kubelet
    endpoint (pod logs) listens. Its status is written separately (`build_node_status`)."""
    name = f"gke-local-{pool}-{index}"
    labels = {**shape.labels, NODEPOOL: pool, POOL_LABEL: pool,
              "node.kubernetes.io/instance-type": shape.machine_type,
              "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels,
                         "annotations": {"tpujob.dev/kubelet-port": str(kubelet_port),
                                         "tpujob.dev/address": address,
                                         SELECTOR_KEYS: ",".join(k for k, _ in shape.selector)}},
            "spec": {"taints": [{"key": shape.resource, "value": "present",
                                 "effect": "NoSchedule"}]}}


def build_node_status(node: dict[str, Any], shape: PoolShape, now: float) -> dict[str, Any]:
    annotations = node["metadata"]["annotations"]
    stamp = _rfc3339(now)
    capacity = {"cpu": "224", "memory": "700Gi", "pods": "110", "ephemeral-storage": "100Gi",
                shape.resource: str(shape.chips_per_host)}
    return {"capacity": capacity, "allocatable": dict(capacity),
            "addresses": [{"type": "InternalIP", "address": annotations["tpujob.dev/address"]},
                          {"type": "Hostname", "address": node["metadata"]["name"]}],
            "daemonEndpoints": {"kubeletEndpoint": {
                "Port": int(annotations["tpujob.dev/kubelet-port"])}},
            "nodeInfo": {"kubeletVersion": "tpujob-local", "kubeProxyVersion": "",
                         "operatingSystem": "linux", "architecture": "amd64",
                         "containerRuntimeVersion": "tpujob-local://processes",
                         "osImage": "local processes", "kernelVersion": "", "machineID": "",
                         "systemUUID": "", "bootID": ""},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "tpujob local executor runs this node's pods",
                            "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}]}


def build_lease(node: str, node_uid: str, now: float) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": node, "namespace": LEASE_NAMESPACE,
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node,
                                              "uid": node_uid}]},
            "spec": {"holderIdentity": node, "leaseDurationSeconds": LEASE_SECONDS,
                     "renewTime": _micro_time(now)}}


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodePools:
    """Creates the pools `plan_pools` asks for and renews every node's lease until `stop()`.
    `names()` are the nodes whose pods this machine runs."""

    def __init__(self, api: KubeApi, address: str, kubelet_port: int) -> None:
        self.api = api
        self.address = address
        self.kubelet_port = kubelet_port
        self._nodes: dict[str, str] = {}   # name -> uid
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def names(self) -> set[str]:
        with self._lock:
            return set(self._nodes)

    def sync(self, pods: list[dict[str, Any]]) -> bool:
        """Create the pools the pods need; True when a pool was made."""
        nodes, _ = self.api.list(NODES)
        with self._lock:
            for node in nodes:
                if POOL_LABEL in (node["metadata"].get("labels") or {}):
                    self._nodes.setdefault(node["metadata"]["name"], node["metadata"]["uid"])
        made = False
        for pool, shape in plan_pools(pods, nodes):
            log.info("local node pool %s: %d node(s) %s", pool, shape.hosts, shape.labels)
            for index in range(shape.hosts):
                self._create_node(pool, index, shape)
            made = True
        return made

    def _create_node(self, pool: str, index: int, shape: PoolShape) -> None:
        body = build_node(pool, index, shape, self.address, self.kubelet_port)
        try:
            node = self.api.create(NODES, None, body)
        except ApiError as err:
            if err.status != 409:
                raise
            node = self.api.get(NODES, None, body["metadata"]["name"])
            if node is None:
                return
        try:
            # A patch, not a replace: the node controller taints a node the moment it
            # appears (not-ready), so the version just created is already stale.
            node = self.api.patch(NODES, None, node["metadata"]["name"],
                                  {"status": build_node_status(node, shape, time.time())},
                                  "status")
            self._renew(node["metadata"]["name"], node["metadata"]["uid"])
        except BaseException:
            # No node without its status: the next pass makes the pool again.
            self.api.delete(NODES, None, node["metadata"]["name"])
            raise
        with self._lock:
            self._nodes[node["metadata"]["name"]] = node["metadata"]["uid"]

    def _renew(self, name: str, node_uid: str) -> None:
        lease = build_lease(name, node_uid, time.time())
        try:
            self.api.create(LEASES, LEASE_NAMESPACE, lease)
        except ApiError as err:
            if err.status != 409:
                raise
            self.api.patch(LEASES, LEASE_NAMESPACE, name, {"spec": lease["spec"]})

    def start(self) -> NodePools:
        self._thread = threading.Thread(target=self._heartbeats, name="local-node-leases",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _heartbeats(self) -> None:
        api = self.api.session_copy()
        while not self._stop.wait(RENEW_SECONDS):
            with self._lock:
                nodes = dict(self._nodes)
            for name, node_uid in nodes.items():
                try:
                    lease = build_lease(name, node_uid, time.time())
                    api.patch(LEASES, LEASE_NAMESPACE, name, {"spec": lease["spec"]})
                except Exception as err:  # the server stopping: try again next round
                    log.debug("lease of %s not renewed: %s", name, err)
        api.close()
