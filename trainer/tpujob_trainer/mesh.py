"""The device mesh: ICI x DCN parallelism from the config, resolved and checked by
`tpujob_plan.mesh.plan_mesh` before anything compiles, then built in JAX with Auto axes."""

from __future__ import annotations

import math

import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh

from tpujob_plan.mesh import MESH_AXES, MeshPlan, plan_mesh
from tpujob_trainer.config.mesh import MeshConfig
from tpujob_trainer.exits import Reason, TrainerExit

# What jax.experimental.mesh_utils asserts about the devices it lays out on TPU.
_PARTIAL_SLICE_ASSERTIONS = (
    'contains a "hole"',            # coordinates are not a contiguous cuboid
    "one device per chip",          # several cores per chip on a generation that has one
    "cores_per_chip=",              # device count differs from the cuboid's (an `assert`)
)


def physical_dims(devices: list) -> tuple[int, ...] | None:
    """The physical device grid of a TPU slice (with a trailing core axis when a chip has
    several devices), or None where devices have no coordinates (CPU, GPU)."""
    coords = [getattr(d, "coords", None) for d in devices]
    if not coords or any(c is None for c in coords):
        return None
    dims = tuple(max(c[i] for c in coords) + 1 for i in range(len(coords[0])))
    cores = max(getattr(d, "core_on_chip", 0) for d in devices) + 1
    return dims + ((cores,) if cores > 1 else ())


def plan(cfg: MeshConfig, *, num_devices: int, num_slices: int,
         dims: tuple[int, ...] | None = None) -> MeshPlan:
    """Resolve -1 axes and check the layout; raises TrainerExit(MeshMismatch) with the planner's
    message (and its suggestions) when it cannot work."""
    if num_devices % num_slices:
        raise TrainerExit(Reason.MESH_MISMATCH,
                          f"{num_devices} devices do not split into {num_slices} equal slices")
    p = plan_mesh(cfg.ici, cfg.dcn, devices_per_slice=num_devices // num_slices,
                  num_slices=num_slices, physical_dims=dims, field="mesh")
    if not p.valid:
        hint = ""
        if p.suggestions:
            hint = "; layouts that work: " + ", ".join(
                "{" + ", ".join(f"{a}: {n}" for a, n in s.items()) + "}" for s in p.suggestions)
        raise TrainerExit(Reason.MESH_MISMATCH, f"{p.error}{hint}")
    return p


def build_mesh(cfg: MeshConfig, *, num_slices: int = 1, devices: list | None = None) -> tuple[Mesh, MeshPlan]:
    devices = list(jax.devices() if devices is None else devices)
    dims = physical_dims(devices)
    p = plan(cfg, num_devices=len(devices), num_slices=num_slices, dims=dims)
    ici = [p.ici[a] for a in MESH_AXES]
    dcn = [p.dcn[a] for a in MESH_AXES]
    slices = {getattr(d, "slice_index", None) for d in devices}
    processes = {d.process_index for d in devices}
    try:
        if num_slices > 1 and len(slices) == num_slices and None not in slices:
            grid = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices)
        elif num_slices > 1 and len(processes) == num_slices:
            # GPU nodes (and CPU processes): one process per node is the DCN granule, as
            # MaxText lays out a multi-node GPU mesh.
            grid = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices,
                                                        process_is_granule=True)
        elif dims is not None:
            grid = mesh_utils.create_device_mesh([i * d for i, d in zip(ici, dcn, strict=True)], devices)
        else:
            # No physical topology to respect: processes' devices stay contiguous, so each
            # process owns a contiguous block of the batch axes.
            grid = np.array(devices).reshape([i * d for i, d in zip(ici, dcn, strict=True)])
    except (NotImplementedError, ValueError) as e:
        # JAX's own refusals: NotImplementedError when no assignment of the physical mesh to the
        # logical axes exists, ValueError when the shapes do not match the devices.
        raise TrainerExit(Reason.MESH_MISMATCH, f"JAX cannot lay out mesh {p.axes} on these "
                          f"devices: {e}") from e
    except AssertionError as e:
        # JAX reports TPU devices that do not fill a whole cuboid of chips (part of a slice,
        # or several cores per chip where it expects one) as AssertionError; anything else
        # asserted is a bug, not a layout problem, and stays one.
        if not any(s in str(e) for s in _PARTIAL_SLICE_ASSERTIONS):
            raise
        raise TrainerExit(Reason.MESH_MISMATCH, f"JAX cannot lay out mesh {p.axes}: these "
                          f"{len(devices)} devices are not a whole slice ({e})") from e
    assert math.prod(grid.shape) == len(devices)
    return Mesh(grid, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES)), p
