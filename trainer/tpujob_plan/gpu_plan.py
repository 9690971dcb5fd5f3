"""A GPU node-pool plan: how many nodes, GPUs and processes a job on N nodes of one GKE GPU
machine type needs, and what its pods ask GKE for.

It answers the questions a slice plan answers for TPUs, under the same names, so the builders,
the mesh check and the status take either: a job of N GPU nodes is one Job of N pods (xpk's
shape: `parallelism = completions = nodes`), one trainer container per pod holding every GPU of
its node. The processes in that container depend on the launcher: one JAX process per node
(JAX sees the node's GPUs as its local devices), or one process per GPU started by torchrun or
Accelerate. For the mesh, as in MaxText on GPUs, a node is what a slice is on TPUs: ICI axes
within a node (NVLink), DCN axes across nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tpujob_plan.errors import PlanError
from tpujob_plan.gpu_catalog import GpuMachine, resolve_gpu

GPU_RESOURCE = "nvidia.com/gpu"
GPU_ACCELERATOR_SELECTOR = "cloud.google.com/gke-accelerator"
MAX_NODES = 1024


class Launcher(StrEnum):
    """What starts the processes of one node."""

    JAX = "jax"                # the command itself, once per node: one JAX process per node
    TORCHRUN = "torchrun"      # torchrun, one process per GPU
    ACCELERATE = "accelerate"  # accelerate launch (its DeepSpeed and FSDP plugins too), one per GPU

    @property
    def process_per_gpu(self) -> bool:
        return self is not Launcher.JAX


@dataclass(frozen=True)
class GpuPlan:
    """Everything the builders need to know about the hardware of a GPU job."""

    machine: GpuMachine
    nodes: int
    launcher: Launcher = Launcher.JAX

    is_gpu = True
    slices = 1               # one Job of `nodes` pods
    containers_per_host = 1  # one container with every GPU of the node
    workload_policy = None   # no Compute Engine workload policy for GPU node pools

    @property
    def name(self) -> str:
        return self.machine.name

    @property
    def hosts(self) -> int:
        """Nodes (VMs, pods) of the job."""
        return self.nodes

    @property
    def topology(self) -> str:
        """nodes x GPUs per node, e.g. 2x8."""
        return f"{self.nodes}x{self.machine.gpus_per_node}"

    @property
    def processes_per_node(self) -> int:
        return self.machine.gpus_per_node if self.launcher.process_per_gpu else 1

    @property
    def processes(self) -> int:
        """Processes of the whole job: the launcher's world size."""
        return self.nodes * self.processes_per_node

    @property
    def devices(self) -> int:
        """GPUs of the whole job."""
        return self.nodes * self.machine.gpus_per_node

    @property
    def devices_per_host(self) -> int:
        return self.machine.gpus_per_node

    @property
    def devices_per_process(self) -> int:
        return self.devices_per_host // self.processes_per_node

    @property
    def mesh_granule_devices(self) -> int:
        """Devices within one mesh granule (ICI axes): a node's GPUs."""
        return self.machine.gpus_per_node

    @property
    def mesh_granules(self) -> int:
        """Granules the DCN axes span: the nodes."""
        return self.nodes

    @property
    def physical_mesh(self) -> None:
        """None: a node's GPUs are all-to-all over NVLink (NVSwitch), so any layout of the
        ICI axes over them maps (JAX's `create_device_mesh` makes no topology check on GPUs)."""
        return None

    @property
    def node_selector(self) -> dict[str, str]:
        return {GPU_ACCELERATOR_SELECTOR: self.machine.accelerator_label}

    @property
    def container_resources(self) -> dict[str, dict[str, str]]:
        """Requests = limits of the trainer container: every GPU of its node."""
        gpus = str(self.machine.gpus_per_node)
        return {"requests": {GPU_RESOURCE: gpus}, "limits": {GPU_RESOURCE: gpus}}

    @property
    def hbm_bytes_per_device(self) -> float:
        return float(self.machine.gpu_memory_bytes)

    @property
    def peak_tflops_per_device(self) -> float:
        return self.machine.peak_bf16_tflops_per_gpu

    @property
    def memory_generation(self) -> None:
        """The memory estimate's compiler allowance is fitted on TPUs: none for a GPU, so the
        estimate takes the largest (the cautious side)."""
        return None


def plan_gpu(name: str, *, nodes: int = 1, launcher: Launcher | str = Launcher.JAX,
             field: str = "slice", nodes_field: str = "nodes") -> GpuPlan:
    """Plan `nodes` nodes of the GPU machine type `name`. Raises PlanError naming the field."""
    machine = resolve_gpu(name, field=field)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
        raise PlanError(f"nodes must be a whole number from 1 to {MAX_NODES}, got {nodes!r}",
                        field=nodes_field)
    try:
        launcher = Launcher(launcher)
    except ValueError:
        valid = [v.value for v in Launcher]
        raise PlanError(f"unknown launcher {launcher!r}; use one of {', '.join(valid)}",
                        field="launcher", valid=valid) from None
    return GpuPlan(machine, nodes, launcher)
