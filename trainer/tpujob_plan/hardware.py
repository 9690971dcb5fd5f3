"""One entry for both kinds of hardware a job names: a TPU slice (`v6e-16`) or a GPU machine
type (`a3-megagpu-8g`), planned by its own planner and answered under the same names."""

from __future__ import annotations

from tpujob_plan.errors import PlanError
from tpujob_plan.gpu_catalog import is_gpu_name
from tpujob_plan.gpu_plan import GpuPlan, Launcher, plan_gpu
from tpujob_plan.slice_plan import SlicePlan, plan_slice

HardwarePlan = SlicePlan | GpuPlan


def plan_hardware(name: str, *, slices: int = 1, nodes: int | None = None,
                  machine_type: str | None = None, containers_per_host: int | None = None,
                  launcher: Launcher | str = Launcher.JAX, field: str = "slice"
                  ) -> HardwarePlan:
    """Plan a TPU slice or GPU nodes. The fields that belong to the other kind are refused
    with what to use instead (PlanError names `slices`, `nodes`, `machineType`,
    `containersPerHost` or `launcher`)."""
    if is_gpu_name(name):
        if slices != 1:
            raise PlanError(f"{name} is a GPU machine type: count its nodes with nodes, not "
                            f"slices", field="slices")
        if machine_type is not None:
            raise PlanError(f"{name} is itself the machine type of GPU nodes; remove "
                            f"machineType", field="machineType")
        if containers_per_host not in (None, 1):
            raise PlanError(f"a {name} node runs one trainer container with every GPU; "
                            f"containersPerHost must be 1", field="containersPerHost",
                            valid=["1"])
        return plan_gpu(name, nodes=1 if nodes is None else nodes, launcher=launcher,
                        field=field)
    if nodes is not None:
        raise PlanError(f"nodes counts GPU nodes; a TPU slice's hosts follow from its size "
                        f"({name}); remove nodes, or use slices for several slices",
                        field="nodes")
    if str(getattr(launcher, "value", launcher)) != Launcher.JAX.value:
        raise PlanError(f"launcher {getattr(launcher, 'value', launcher)} starts processes on "
                        f"GPU nodes; a TPU slice runs JAX processes (launcher: jax)",
                        field="launcher", valid=[Launcher.JAX.value])
    return plan_slice(name, slices=slices, machine_type=machine_type,
                      containers_per_host=containers_per_host, field=field)
