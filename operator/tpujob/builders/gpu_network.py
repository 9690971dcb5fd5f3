"""The pieces a GPU node's network stack needs in a trainer pod, as xpk renders them for each
machine type (xpk at commit 367c838: src/xpk/core/workload_decorators/tcpx_decorator.py,
tcpxo_decorator.py, rdma_decorator.py, and the A3 workload template in commands/workload.py):

- every GPU pod: the GPU taint's toleration (GKE taints GPU nodes `nvidia.com/gpu`), xpk's
  `user-workload=true:NoSchedule` toleration (its node pools carry that taint), the pod's
  network interfaces (`networking.gke.io/interfaces`: eth0 on the default network, then one per
  GPU NIC on the cluster's GPU networks) and the NVIDIA libraries from the node;
- TCPX (A3 High): the receive-data-path daemon as a sidecar (`tcpx-daemon`), its devices
  annotation, and the socket folder it shares with the trainer (mounted at /tmp, where NCCL's
  TCPX plugin looks);
- TCPXO (A3 Mega): the FasTrak daemon as a sidecar (`tcpxo-daemon`), its devices annotation
  and the aperture devices for NCCL;
- RDMA (A3 Ultra, A4): no sidecar; NCCL's gIB plugin from the node (/home/kubernetes/bin/gib).

Where tpujob differs from xpk, on purpose: the trainer container is not privileged (none of
the three stacks needs it in the trainer: the daemons hold the capabilities), and the network
names are the job's (`spec.gpuNetworks`) with GKE's documented names as the default, where xpk
reads them from the cluster's GKENetworkParamSets at submission.
"""

from __future__ import annotations

import json
from typing import Any

from tpujob_plan.gpu_catalog import GpuMachine, GpuNetwork

NVIDIA_LIB = "/usr/local/nvidia/lib64"
TCPX_IMAGE = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.11"
TCPXO_IMAGE = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.12"
NODE_DAEMON_IMAGES = (TCPX_IMAGE, TCPXO_IMAGE)
APERTURE = "/dev/aperture_devices"
USER_WORKLOAD_TAINT = "user-workload"
# GKE's documented names of the GPU NICs' networks (the GPUDirect set-up guides for each
# machine type); a cluster that named them otherwise says so in spec.gpuNetworks.
DEFAULT_NETWORKS = {
    GpuNetwork.TCPX: tuple(f"vpc{i}" for i in range(1, 5)),
    GpuNetwork.TCPXO: tuple(f"vpc{i}" for i in range(1, 9)),
    GpuNetwork.RDMA: tuple(f"rdma-{i}" for i in range(8)),
}


def default_networks(machine: GpuMachine) -> tuple[str, ...]:
    return DEFAULT_NETWORKS[machine.network]


def build_interfaces(networks: tuple[str, ...] | list[str]) -> str:
    """The `networking.gke.io/interfaces` value: eth0 on the default network, then one
    interface per GPU network."""
    interfaces = [{"interfaceName": "eth0", "network": "default"}]
    interfaces += [{"interfaceName": f"eth{i + 1}", "network": n} for i, n in enumerate(networks)]
    return json.dumps(interfaces)


def _devices(extra: tuple[str, ...] = ()) -> str:
    """A sidecar's `devices.gke.io/container.<name>` annotation: the GPUs and the driver's."""
    paths = [*(f"/dev/nvidia{i}" for i in range(8)), "/dev/nvidiactl", "/dev/nvidia-uvm", *extra]
    return "".join(f"- path: {p}\n" for p in paths)


def _host(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path}}


def _mount(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "mountPath": path}


def _tcpx_sidecar() -> dict[str, Any]:
    return {
        "name": "tcpx-daemon", "image": TCPX_IMAGE, "restartPolicy": "Always",
        "command": ["/tcpgpudmarxd/build/app/tcpgpudmarxd", "--gpu_nic_preset", "a3vm",
                    "--gpu_shmem_type", "fd", "--uds_path", "/run/tcpx",
                    "--setup_param", '"--verbose 128 2 0 "'],
        "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}},
        "volumeMounts": [_mount("libraries", NVIDIA_LIB), _mount("tcpx-socket", "/run/tcpx"),
                         _mount("sys", "/hostsysfs"), _mount("proc-sys", "/hostprocsysfs")],
        "env": [{"name": "LD_LIBRARY_PATH", "value": NVIDIA_LIB}],
    }


def _tcpxo_sidecar(nics: int) -> dict[str, Any]:
    return {
        "name": "tcpxo-daemon", "image": TCPXO_IMAGE, "restartPolicy": "Always",
        "command": ["/bin/sh", "-c"],
        "args": ["set -ex\nchmod 755 /fts/entrypoint_rxdm_container.sh\n"
                 f"/fts/entrypoint_rxdm_container.sh --num_hops=2 --num_nics={nics} --uid= "
                 "--alsologtostderr"],
        "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_BIND_SERVICE"]}},
        "volumeMounts": [_mount("libraries", "/usr/local/nvidia"), _mount("sys", "/hostsysfs"),
                         _mount("proc-sys", "/hostprocsysfs")],
        "env": [{"name": "LD_LIBRARY_PATH", "value": NVIDIA_LIB}],
    }


def decorate_gpu_pod(pod: dict[str, Any], annotations: dict[str, str], machine: GpuMachine,
                     networks: tuple[str, ...] | list[str] | None = None) -> None:
    """Add `machine`'s network pieces to a trainer pod spec and its template annotations (in
    place: the builder's own dicts, before anything is created)."""
    networks = tuple(networks or default_networks(machine))
    annotations["networking.gke.io/default-interface"] = "eth0"
    annotations["networking.gke.io/interfaces"] = build_interfaces(networks)
    pod["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": USER_WORKLOAD_TAINT, "operator": "Equal", "value": "true",
         "effect": "NoSchedule"},
        *pod.get("tolerations", []),
    ]
    env = [{"name": "LD_LIBRARY_PATH", "value": NVIDIA_LIB},
           {"name": "USE_GPUDIRECT", "value": machine.network.value}]
    if machine.network is GpuNetwork.TCPX:
        volumes = [_host("libraries", "/home/kubernetes/bin/nvidia/lib64"), _host("sys", "/sys"),
                   _host("proc-sys", "/proc/sys"), _host("tcpx-socket", "/run/tcpx")]
        mounts = [_mount("tcpx-socket", "/tmp"), _mount("libraries", NVIDIA_LIB)]
        pod["initContainers"] = [*pod.get("initContainers", []), _tcpx_sidecar()]
        annotations["devices.gke.io/container.tcpx-daemon"] = _devices()
    elif machine.network is GpuNetwork.TCPXO:
        volumes = [_host("libraries", "/home/kubernetes/bin/nvidia"), _host("sys", "/sys"),
                   _host("proc-sys", "/proc/sys"), _host("aperture-devices", APERTURE)]
        mounts = [_mount("aperture-devices", APERTURE), _mount("libraries", "/usr/local/nvidia")]
        pod["initContainers"] = [*pod.get("initContainers", []),
                                 _tcpxo_sidecar(len(networks))]
        annotations["devices.gke.io/container.tcpxo-daemon"] = _devices(
            ("/dev/dmabuf_import_helper",))
        env.append({"name": "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY", "value": APERTURE})
    else:
        volumes = [_host("library-dir-host", "/home/kubernetes/bin/nvidia"),
                   _host("gib", "/home/kubernetes/bin/gib")]
        mounts = [_mount("library-dir-host", "/usr/local/nvidia"), _mount("gib", "/usr/local/gib")]
    pod["volumes"] = [*pod.get("volumes", []), *volumes]
    for container in pod["containers"]:
        container["volumeMounts"] = [*container.get("volumeMounts", []), *mounts]
        taken = {e["name"] for e in container.get("env", [])}
        container["env"] = [*container.get("env", []), *(e for e in env if e["name"] not in taken)]
