"""Logical axis names -> mesh axes (MaxText-style rules), and activation sharding constraints.

Parameters carry logical axis names in their `axes` metadata (`nnx.Param(w, axes=("embed", "mlp"))`);
activations are constrained with `shard(x, ("batch", "length", None))`. A logical axis maps to
the mesh axes its rule names, skipping those of size 1, those already used by another dimension,
and those that do not divide the dimension (that dimension is then replicated over them).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

LogicalAxes = Sequence[str | None]

# MaxText's defaults, for the axes this trainer has.
LOGICAL_RULES: dict[str, tuple[str, ...]] = {
    "batch": ("data", "fsdp", "expert"),
    "length": ("context",),
    "embed": ("fsdp",),
    "heads": ("tensor",),
    "kv_heads": ("tensor",),
    "mlp": ("tensor",),
    "vocab": ("tensor",),
    "experts": ("expert",),
}

_active_mesh: Mesh | None = None


def logical_to_spec(axes: LogicalAxes, shape: Sequence[int], mesh: Mesh | None,
                    rules: dict[str, tuple[str, ...]] = LOGICAL_RULES) -> PartitionSpec:
    """The PartitionSpec of an array of `shape` whose dimensions have these logical names."""
    if mesh is None:
        return PartitionSpec()
    used: set[str] = set()
    spec: list[tuple[str, ...] | None] = []
    for name, dim in zip(axes, shape, strict=True):
        chosen: list[str] = []
        for mesh_axis in rules.get(name, ()) if name else ():
            size = mesh.shape.get(mesh_axis, 1)
            if size == 1 or mesh_axis in used:
                continue
            if dim % (math.prod(mesh.shape[a] for a in chosen) * size) == 0:
                chosen.append(mesh_axis)
        used.update(chosen)
        spec.append(tuple(chosen) if chosen else None)
    while spec and spec[-1] is None:
        spec.pop()
    return PartitionSpec(*spec)


def named_sharding(axes: LogicalAxes, shape: Sequence[int], mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, logical_to_spec(axes, shape, mesh))


@contextlib.contextmanager
def activate(mesh: Mesh | None) -> Iterator[None]:
    """Within this block, `shard()` constrains activations on `mesh` (tracing happens here)."""
    global _active_mesh
    previous, _active_mesh = _active_mesh, mesh
    try:
        if mesh is None:
            yield
        else:
            with jax.set_mesh(mesh):
                yield
    finally:
        _active_mesh = previous


def active_mesh() -> Mesh | None:
    """The mesh of the enclosing `activate` block (None outside one)."""
    return _active_mesh


def active_axis(name: str) -> int:
    """The size of the active mesh's axis `name` (1 outside an `activate` block)."""
    return _active_mesh.shape.get(name, 1) if _active_mesh is not None else 1


def target_platform() -> str:
    """The platform the code being traced will run on: that of the active mesh's devices (a
    TPU topology compiled for on a CPU machine is "tpu"), else JAX's default backend."""
    mesh = _active_mesh
    if mesh is not None and mesh.devices.size:
        return mesh.devices.flat[0].platform
    return jax.default_backend()


def local_splits(axes: LogicalAxes, shape: Sequence[int]) -> list[int]:
    """Into how many parts the active mesh splits each dimension of a value with these logical
    axes (all 1 with no mesh active)."""
    mesh = active_mesh()
    splits = [1] * len(shape)
    if mesh is not None:
        for i, names in enumerate(logical_to_spec(axes, shape, mesh)):
            if names:
                names = names if isinstance(names, tuple) else (names,)
                splits[i] = math.prod(mesh.shape[a] for a in names)
    return splits


def shard(x: jax.Array, axes: LogicalAxes) -> jax.Array:
    """Constrain an activation's sharding by logical axis names; a no-op without an active mesh."""
    mesh = _active_mesh
    if mesh is None or mesh.size == 1:
        return x
    return jax.lax.with_sharding_constraint(x, named_sharding(axes, x.shape, mesh))


def param_shardings(abstract_params, mesh: Mesh):
    """A NamedSharding for every parameter of an abstract nnx state, from its `axes` metadata.

    Returns a pure dict (as `nnx.State.to_pure_dict`) of shardings.
    """
    from flax import nnx

    def one(v):
        value = v.get_value()
        axes = v.get_metadata().get("axes") or (None,) * len(value.shape)
        return named_sharding(axes, value.shape, mesh)

    mapped = jax.tree.map(one, abstract_params, is_leaf=lambda x: isinstance(x, nnx.Variable))
    return nnx.to_pure_dict(mapped) if hasattr(nnx, "to_pure_dict") else mapped.to_pure_dict()


def also_over(sharding: NamedSharding, shape: Sequence[int], axis: str) -> NamedSharding:
    """`sharding` split over the mesh axis `axis` as well: on a dimension it already splits,
    where the split stays even (each device's part then lies inside its part under `sharding`),
    else on the first dimension that divides; `sharding` itself where the axis has size 1, is
    used already, or divides no dimension."""
    mesh = sharding.mesh
    size = mesh.shape.get(axis, 1)
    spec = [() if names is None else (names if isinstance(names, tuple) else (names,))
            for names in sharding.spec]
    spec += [()] * (len(shape) - len(spec))
    if size == 1 or any(axis in names for names in spec):
        return sharding
    for dim in sorted(range(len(shape)), key=lambda d: not spec[d]):  # split dimensions first
        if shape[dim] % (math.prod(mesh.shape[a] for a in spec[dim]) * size) == 0:
            spec[dim] = spec[dim] + (axis,)
            while spec and not spec[-1]:
                spec.pop()
            return NamedSharding(mesh, PartitionSpec(*(names or None for names in spec)))
    return sharding


def optimizer_over_data(setting: str, mesh: Mesh) -> bool:
    """Whether the optimizer's state is split over `data` too (`mesh.optimizer_sharding`):
    `over_data`, or `auto` on a mesh of TPU devices; never where `data` is 1."""
    if mesh.shape.get("data", 1) == 1:
        return False
    if setting == "auto":
        return mesh.devices.flat[0].platform == "tpu"
    return setting == "over_data"


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Input batches: rows over the batch axes, the rest replicated."""
    batch_axes = tuple(a for a in LOGICAL_RULES["batch"] if mesh.shape.get(a, 1) > 1)
    return NamedSharding(mesh, PartitionSpec(batch_axes or None, *([None] * (ndim - 1))))


def batch_shards(mesh: Mesh) -> int:
    """How many ways the batch dimension is split."""
    return math.prod(mesh.shape.get(a, 1) for a in LOGICAL_RULES["batch"])
