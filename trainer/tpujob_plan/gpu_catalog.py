"""GKE GPU machine types for multi-node training: what one node (VM) of each holds, and the
network stack its GPUs talk over between nodes.

Sources: xpk's `src/xpk/core/system_characteristics.py` (device types, machine types, the GKE
accelerator labels, 8 GPUs per VM, one VM per "slice") and `src/xpk/core/workload_decorators/`
(TCPX on A3 High, TCPXO on A3 Mega, RDMA on A3 Ultra and A4), at commit 367c838; the Compute
Engine GPU machine pages (GPU NICs); NVIDIA's data sheets (dense bf16 peak, without sparsity);
the memory the NVIDIA driver reports for each GPU (`nvidia-smi`'s total: 81559 MiB on an H100
80GB HBM3, 143771 MiB on an H200, 183359 MiB on a B200), which is what a program can allocate
from, less the CUDA context's few hundred MiB, and above the data sheets' decimal 80, 141 and
180 GB. A name is the Compute Engine machine type or xpk's device type.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tpujob_plan.errors import PlanError

MIB = 1 << 20


class GpuNetwork(StrEnum):
    """How the GPUs of one node reach the GPUs of another (GPUDirect flavour)."""

    TCPX = "tcpx"      # GPUDirect-TCPX: a receive-data-path daemon sidecar per pod
    TCPXO = "tcpxo"    # GPUDirect-TCPXO: the same with the FasTrak daemon
    RDMA = "rdma"      # GPUDirect RDMA over RoCE; NCCL's gIB plugin from the node


@dataclass(frozen=True)
class GpuMachine:
    """One GKE GPU machine type, as a node of a multi-node job."""

    name: str                  # Compute Engine machine type, e.g. a3-megagpu-8g
    device_type: str           # xpk's --device-type for it, e.g. h100-mega-80gb-8
    series: str                # e.g. A3 Mega
    gpu: str                   # e.g. H100 80GB
    accelerator_label: str     # cloud.google.com/gke-accelerator on its nodes
    gpus_per_node: int
    gpu_memory_bytes: int      # HBM per GPU, as the driver reports it
    peak_bf16_tflops_per_gpu: float  # dense
    network: GpuNetwork
    gpu_nics: int              # NICs for GPU-to-GPU traffic between nodes (besides eth0)

    @property
    def aliases(self) -> tuple[str, str]:
        return (self.name, self.device_type)


GPU_MACHINES: tuple[GpuMachine, ...] = (
    GpuMachine("a3-highgpu-8g", "h100-80gb-8", "A3 High", "H100 80GB", "nvidia-h100-80gb",
               8, 81559 * MIB, 989.0, GpuNetwork.TCPX, 4),
    GpuMachine("a3-megagpu-8g", "h100-mega-80gb-8", "A3 Mega", "H100 80GB",
               "nvidia-h100-mega-80gb", 8, 81559 * MIB, 989.0, GpuNetwork.TCPXO, 8),
    GpuMachine("a3-ultragpu-8g", "h200-141gb-8", "A3 Ultra", "H200 141GB", "nvidia-h200-141gb",
               8, 143771 * MIB, 989.0, GpuNetwork.RDMA, 8),
    GpuMachine("a4-highgpu-8g", "b200-8", "A4", "B200 180GB", "nvidia-b200",
               8, 183359 * MIB, 2250.0, GpuNetwork.RDMA, 8),
)
_BY_NAME = {alias: m for m in GPU_MACHINES for alias in m.aliases}
GPU_NAMES: tuple[str, ...] = tuple(m.name for m in GPU_MACHINES)


def is_gpu_name(name: str) -> bool:
    """Whether `name` names a GPU machine type (or xpk's device type for one)."""
    return name.strip().lower() in _BY_NAME


def resolve_gpu(name: str, *, field: str = "slice") -> GpuMachine:
    """The GPU machine type `name` names. Raises PlanError listing the valid names."""
    machine = _BY_NAME.get(name.strip().lower())
    if machine is None:
        raise PlanError(f"{name!r} is not a GPU machine type; use one of "
                        f"{', '.join(GPU_NAMES)} (or xpk's "
                        f"{', '.join(m.device_type for m in GPU_MACHINES)})",
                        field=field, valid=list(GPU_NAMES))
    return machine
