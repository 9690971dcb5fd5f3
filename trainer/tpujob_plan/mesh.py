"""Mesh planning, MaxText-style: ICI axes within a slice, DCN axes across slices, one -1 axis
filled in; and the check JAX's `create_device_mesh` makes, done before anything is launched.

JAX maps each logical axis (from the most network-intensive, the last, to the first) onto a
subset of the remaining physical mesh axes whose sizes multiply to exactly the logical size,
trying subsets of more axes first; it never splits a physical axis. A layout that fails this
fails after a long compile with "Failed to find assignment for logical_axis_index". Small
slices whose devices JAX orders as rings take any layout (`_accepts_any_layout`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field

from tpujob_plan.errors import PlanError

# Logical mesh axes, ordered by increasing network intensity (the order JAX assigns in reverse).
MESH_AXES: tuple[str, ...] = ("data", "fsdp", "context", "tensor", "expert")
_SUGGESTION_BUDGET = 20000


@dataclass(frozen=True)
class MeshPlan:
    """The outcome of planning a mesh. When `valid` is false, `error` says why and
    `suggestions` hold valid ICI layouts close to the one asked for."""

    valid: bool
    ici: dict[str, int]
    dcn: dict[str, int]
    error: str | None = None
    field: str | None = None
    suggestions: list[dict[str, int]] = dataclass_field(default_factory=list)
    # Logical axis -> the physical mesh axes (indices) it was mapped to, when checked.
    assignment: dict[str, tuple[int, ...]] = dataclass_field(default_factory=dict)

    @property
    def axes(self) -> dict[str, int]:
        """The whole mesh: ICI x DCN size of every axis, in MESH_AXES order."""
        return {a: self.ici.get(a, 1) * self.dcn.get(a, 1) for a in MESH_AXES}

    def to_dict(self) -> dict:
        return {"valid": self.valid, "axes": self.axes, "ici": self.ici, "dcn": self.dcn,
                "error": self.error, "suggestions": self.suggestions}


def parse_axes(text: str, *, field: str) -> dict[str, int]:
    """`fsdp=8,tensor=4` -> {"fsdp": 8, "tensor": 4}. Raises PlanError naming `field`."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep:
            raise PlanError(f"{field}: expected AXIS=SIZE, got {part!r}", field=field)
        try:
            out[name] = int(value)
        except ValueError:
            raise PlanError(f"{field}: size of {name!r} must be a whole number or -1, "
                            f"got {value.strip()!r}", field=field) from None
    return out


def resolve_axes(requested: Mapping[str, int] | None, total: int, *, field: str,
                 default_fill: str, what: str) -> dict[str, int]:
    """Sizes for every axis in MESH_AXES whose product is `total`, with one -1 filled in.
    An empty request puts everything on `default_fill` (MaxText's default)."""
    requested = dict(requested or {})
    unknown = [a for a in requested if a not in MESH_AXES]
    if unknown:
        raise PlanError(f"{field}: unknown mesh axis {unknown[0]!r}; valid axes: "
                        f"{', '.join(MESH_AXES)}", field=field, valid=list(MESH_AXES))
    for name, size in requested.items():
        if isinstance(size, bool) or not isinstance(size, int) or (size < 1 and size != -1):
            raise PlanError(f"{field}.{name}: must be a positive whole number or -1 (fill in), "
                            f"got {size!r}", field=f"{field}.{name}")
    fill = [a for a, s in requested.items() if s == -1]
    if len(fill) > 1:
        raise PlanError(f"{field}: only one axis may be -1, got {', '.join(fill)}", field=field)
    if not requested:
        requested, fill = {default_fill: -1}, [default_fill]
    known = math.prod(s for s in requested.values() if s != -1)
    sizes = {a: requested.get(a, 1) for a in MESH_AXES}
    if fill:
        if total % known:
            raise PlanError(f"{field}: the fixed axes multiply to {known}, which does not divide "
                            f"the {total} {what}; choose sizes whose product divides {total}",
                            field=field)
        sizes[fill[0]] = total // known
    elif known != total:
        raise PlanError(f"{field}: axes multiply to {known} but there are {total} {what}; make "
                        f"the product {total} or set one axis to -1", field=field)
    return sizes


def assign_to_physical(physical: tuple[int, ...], logical: Mapping[str, int]
                       ) -> tuple[dict[str, tuple[int, ...]], str | None]:
    """JAX's assignment of logical axes to physical axes, without splitting a physical axis.
    Returns (assignment, error) where error is None when every axis found a place."""
    remaining = list(physical)
    assignment: dict[str, tuple[int, ...]] = {}
    order = [a for a in MESH_AXES if a in logical]
    for index in reversed(range(len(order))):
        name, size = order[index], logical[order[index]]
        found: tuple[int, ...] | None = None
        for count in range(len(remaining), 0, -1):
            for combo in itertools.combinations(range(len(remaining)), count):
                if math.prod(remaining[i] for i in combo) == size:
                    found = combo
                    break
            if found:
                break
        if found:
            assignment[name] = found
            remaining = [0 if i in found else v for i, v in enumerate(remaining)]
        elif size > 1:
            left = [v for v in remaining if v]
            placed = ", ".join(f"{a}={logical[a]} on {'x'.join(str(physical[i]) for i in axes)}"
                               for a, axes in assignment.items() if logical[a] > 1)
            return assignment, (
                f"ici {name}={size} cannot be placed on the physical mesh "
                f"{'x'.join(map(str, physical))}"
                + (f" once {placed} took its physical axes" if placed else "")
                + f": the free physical axes are {left or 'none'}, and a logical axis must equal "
                f"the product of some of them (JAX fails with 'Failed to find assignment for "
                f"logical_axis_index {index} of size {size}', after compiling)")
    return assignment, None


def _accepts_any_layout(physical: tuple[int, ...], ici: Mapping[str, int]) -> bool:
    """Small slices where JAX orders devices as rings and reshapes to any logical layout."""
    devices = math.prod(physical)
    if len(physical) == 4:  # tpu7x: (x, y, z, cores)
        return devices % 8 == 0 and devices <= 32 and physical[0] <= 2 and physical[1] <= 2
    x, y, z = physical
    if z == 1 and (x, y) in {(2, 2), (2, 4)}:       # v5e / v6e 2x2 and 2x4
        return True
    if z == 1 and (x, y) == (4, 4):                  # v5e / v6e 4x4, one 16-way axis
        return max(ici.values()) == 16
    return (x, y, z) == (2, 2, 2)                    # v5p 2x2x2


def plan_mesh(ici: Mapping[str, int] | None, dcn: Mapping[str, int] | None = None, *,
              devices_per_slice: int, num_slices: int = 1,
              physical_dims: tuple[int, ...] | None = None,
              field: str = "parallelism") -> MeshPlan:
    """Resolve and check a mesh. Never raises for a bad layout: the plan says what is wrong."""
    try:
        ici_sizes = resolve_axes(ici, devices_per_slice, field=f"{field}.ici",
                                 default_fill="fsdp", what="devices in a slice")
        dcn_sizes = resolve_axes(dcn, num_slices, field=f"{field}.dcn",
                                 default_fill="data", what="slices")
    except PlanError as err:
        return MeshPlan(False, dict(ici or {}), dict(dcn or {}), error=err.message,
                        field=err.field)
    if physical_dims is None or _accepts_any_layout(physical_dims, ici_sizes):
        return MeshPlan(True, ici_sizes, dcn_sizes)
    assignment, error = assign_to_physical(physical_dims, ici_sizes)
    if error is None:
        return MeshPlan(True, ici_sizes, dcn_sizes, assignment=assignment)
    return MeshPlan(False, ici_sizes, dcn_sizes, error=error, field=f"{field}.ici",
                    suggestions=suggest_layouts(physical_dims, ici_sizes))


def suggest_layouts(physical: tuple[int, ...], ici: Mapping[str, int], limit: int = 3
                    ) -> list[dict[str, int]]:
    """Valid layouts over the axes the request used, closest first: keeping the model-sharding
    axes (tensor, expert) asked for, then the fewest doublings and halvings, then the fewest
    changes to tensor and expert, then the fewest axes."""
    named = [a for a in MESH_AXES if ici.get(a, 1) > 1] or ["fsdp"]
    total = math.prod(physical)
    candidates: list[tuple[tuple, dict[str, int]]] = []
    for sizes in itertools.islice(_factorizations(total, len(named)), _SUGGESTION_BUDGET):
        layout = {a: 1 for a in MESH_AXES} | dict(zip(named, sizes, strict=True))
        if _accepts_any_layout(physical, layout) or assign_to_physical(physical, layout)[1] is None:
            distance = sum(abs(math.log2(layout[a] / ici.get(a, 1))) for a in named)
            model = [a for a in ("tensor", "expert") if ici.get(a, 1) > 1]
            model_dropped = sum(layout[a] == 1 for a in model)
            model_moved = sum(layout[a] != ici.get(a, 1) for a in model)
            used = sum(s > 1 for s in layout.values())
            candidates.append(((model_dropped, round(distance, 6), model_moved, used), layout))
    candidates.sort(key=lambda c: c[0])
    return [{a: s for a, s in layout.items() if s > 1} for _, layout in candidates[:limit]]


def _factorizations(total: int, parts: int):
    """Ordered tuples of `parts` positive integers whose product is `total`."""
    if parts == 1:
        yield (total,)
        return
    for d in _divisors(total):
        for rest in _factorizations(total // d, parts - 1):
            yield (d, *rest)


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def format_axes(sizes: Mapping[str, int]) -> str:
    """{"fsdp": 16, "tensor": 4, "data": 1} -> "fsdp=16,tensor=4" (axes of size 1 left out)."""
    shown = [f"{a}={s}" for a, s in sizes.items() if s != 1]
    return ",".join(shown) or "(all 1)"


def batch_split_error(global_batch: int, grad_accum: int, axes: Mapping[str, int]) -> str | None:
    """Why a batch cannot be split over the mesh's batch shards (data x fsdp x expert), or None:
    each step's (micro)batch of global_batch / grad_accum sequences must split evenly. The
    operator refuses such a job and `tpujob plan` says the same."""
    shards = {a: int(axes.get(a, 1)) for a in ("data", "fsdp", "expert")}
    batch_shards = shards["data"] * shards["fsdp"] * shards["expert"]
    micro_batch = global_batch // max(grad_accum, 1)
    if micro_batch % batch_shards == 0:
        return None
    return (f"a batch of {micro_batch} sequences (global_batch / grad_accum) must split evenly "
            f"over the {batch_shards} batch shards (data x fsdp x expert = "
            f"{format_axes(shards)}); use a multiple of {batch_shards}")
