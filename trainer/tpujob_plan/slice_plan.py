"""A slice plan: how many hosts, containers and JAX processes a job on N slices of one type
needs, and what its pods ask GKE for."""

from __future__ import annotations

from dataclasses import dataclass

from tpujob_plan.catalog import SliceType, resolve_slice
from tpujob_plan.errors import PlanError
from tpujob_plan.generations import MachineType
from tpujob_plan.topologies import physical_mesh_dims

TPU_RESOURCE = "google.com/tpu"
ACCELERATOR_SELECTOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_SELECTOR = "cloud.google.com/gke-tpu-topology"
PLACEMENT_POLICY_SELECTOR = "cloud.google.com/placement-policy-name"
MAX_SLICES = 1024


@dataclass(frozen=True)
class SlicePlan:
    """Everything the builders and the trainer need to know about the hardware of one job."""

    slice_type: SliceType
    machine_type: MachineType
    slices: int
    containers_per_host: int = 1  # 1, or the machine type's parallel layout (tpu7x: 2)

    is_gpu = False

    @property
    def name(self) -> str:
        return self.slice_type.name

    @property
    def topology(self) -> str:
        return self.slice_type.topology

    @property
    def mesh_granule_devices(self) -> int:
        """Devices within one mesh granule (ICI axes): a slice's."""
        return self.slice_type.devices

    @property
    def mesh_granules(self) -> int:
        """Granules the DCN axes span: the slices."""
        return self.slices

    @property
    def memory_generation(self) -> str:
        """What the memory estimate's compiler allowance is looked up by."""
        return self.generation.prefix

    @property
    def generation(self):
        return self.slice_type.generation

    @property
    def hosts(self) -> int:
        """Hosts (VMs, pods) per slice."""
        return self.slice_type.chips // self.machine_type.chips_per_host

    @property
    def chips_per_container(self) -> int:
        return self.machine_type.chips_per_host // self.containers_per_host

    @property
    def devices_per_host(self) -> int:
        return self.machine_type.chips_per_host * self.generation.devices_per_chip

    @property
    def devices_per_process(self) -> int:
        return self.devices_per_host // self.containers_per_host

    @property
    def processes_per_slice(self) -> int:
        return self.hosts * self.containers_per_host

    @property
    def processes(self) -> int:
        """JAX processes in the whole job: hosts x containers per host x slices."""
        return self.processes_per_slice * self.slices

    @property
    def devices(self) -> int:
        """JAX devices in the whole job."""
        return self.slice_type.devices * self.slices

    @property
    def physical_mesh(self) -> tuple[int, ...]:
        return physical_mesh_dims(self.generation, self.slice_type.topology)

    @property
    def workload_policy(self) -> str | None:
        """The Compute Engine workload policy name (xpk's convention), where one is needed."""
        if not (self.generation.needs_workload_policy and self.hosts > 1):
            return None
        return f"{self.slice_type.name}-{self.slice_type.topology}-placement-policy"

    @property
    def node_selector(self) -> dict[str, str]:
        selector = {
            ACCELERATOR_SELECTOR: self.generation.accelerator_label,
            TOPOLOGY_SELECTOR: self.slice_type.topology,
        }
        if self.workload_policy:
            selector[PLACEMENT_POLICY_SELECTOR] = self.workload_policy
        return selector

    @property
    def container_resources(self) -> dict[str, dict[str, str]]:
        """Requests = limits of one trainer container."""
        chips = str(self.chips_per_container)
        return {"requests": {TPU_RESOURCE: chips}, "limits": {TPU_RESOURCE: chips}}

    @property
    def hbm_bytes_per_device(self) -> float:
        return self.generation.hbm_bytes_per_device

    @property
    def peak_tflops_per_device(self) -> float:
        return self.generation.peak_bf16_tflops_per_device


def plan_slice(slice_name: str, *, slices: int = 1, machine_type: str | None = None,
               containers_per_host: int | None = None, field: str = "slice") -> SlicePlan:
    """Plan `slices` slices of `slice_name`. Raises PlanError naming the field at fault.
    `containers_per_host` None or 1 is one container per host with every chip; 2 is the
    opt-in two-container layout where the machine type offers one (tpu7x-standard-4t)."""
    slice_type = resolve_slice(slice_name, field=field)
    if isinstance(slices, bool) or not isinstance(slices, int) or not 1 <= slices <= MAX_SLICES:
        raise PlanError(f"slices must be a whole number from 1 to {MAX_SLICES}, got {slices!r}",
                        field="slices")
    machine = _machine_type(slice_type, machine_type)
    containers = 1 if containers_per_host is None else containers_per_host
    if containers not in machine.layouts:
        valid = " or ".join(str(n) for n in machine.layouts)
        raise PlanError(f"{machine.name} runs {valid} container(s) per host, got {containers}",
                        field="containersPerHost", valid=[str(n) for n in machine.layouts])
    return SlicePlan(slice_type, machine, slices, containers)


def _machine_type(slice_type: SliceType, requested: str | None) -> MachineType:
    gen = slice_type.generation
    offered = gen.machine_types_for(slice_type.topology, slice_type.chips)
    if requested is None:
        return offered[0]
    for m in offered:
        if m.name == requested.strip():
            return m
    names = [m.name for m in offered]
    all_names = [m.name for m in gen.machine_types]
    if requested.strip() in all_names:
        why = f"{requested} cannot form a {slice_type.topology} {gen.prefix} slice"
    else:
        why = f"{requested!r} is not a {gen.prefix} machine type (those are {', '.join(all_names)})"
    raise PlanError(f"{why}; for {slice_type.name} ({slice_type.topology}) use "
                    f"{' or '.join(names)}", field="machineType", valid=names)
