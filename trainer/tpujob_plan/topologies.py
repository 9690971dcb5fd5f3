"""Which topologies each generation offers, and which one a `<prefix>-<N>` name means.

The rules follow xpk (`system_characteristics.py`), whose names are the ones users type:

- 3-D generations: 2x2x1, 2x2x2, 2x2x4, 2x4x4, then every AxBxC with A, B, C multiples of 4 up to
  256 and at most `max_cubes` 4x4x4 cubes; v5p and tpu7x list A <= B <= C only, v4 every order.
- 2-D generations: the fixed list GKE offers.
- Where several topologies share a chip count, xpk's curated default is the most cube-like one
  (smallest A+B+C, first in generation order on a tie); for chip counts outside its curated list
  xpk takes the first topology generated. `_has_curated_default` keeps that choice exactly, so a
  name here means the same node pool topology as in xpk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from math import prod

from tpujob_plan.generations import Generation

_SMALL_3D = ("2x2x1", "2x2x2", "2x2x4", "2x4x4")
_MAX_DIM = 256


@dataclass(frozen=True)
class TopologyRule:
    """How to enumerate a generation's topologies and pick the default for a chip count."""

    extra: tuple[str, ...] = ()            # listed before the generated ones
    fixed: tuple[str, ...] = ()            # 2-D generations: the whole list
    max_cubes: int = 0                     # 3-D: the largest slice, in 4x4x4 cubes
    nondecreasing: bool = True             # 3-D: only A <= B <= C
    has_curated_default: Callable[[int], bool] = lambda chips: True


def parse_topology(topology: str) -> tuple[int, ...]:
    return tuple(int(d) for d in topology.split("x"))


def _generate_3d(rule: TopologyRule) -> list[str]:
    out = [*rule.extra, *_SMALL_3D]
    for x in range(4, _MAX_DIM + 1, 4):
        for y in range(x if rule.nondecreasing else 4, _MAX_DIM + 1, 4):
            for z in range(y if rule.nondecreasing else 4, _MAX_DIM + 1, 4):
                if (x // 4) * (y // 4) * (z // 4) <= rule.max_cubes:
                    out.append(f"{x}x{y}x{z}")
    return out


_2D = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")

RULES: dict[str, TopologyRule] = {
    "v4": TopologyRule(max_cubes=64, nondecreasing=False,
                       has_curated_default=lambda c: c <= 128 or c in {256, 512, 768, 1024, 2048}),
    "v5litepod": TopologyRule(fixed=_2D),
    "v5p": TopologyRule(max_cubes=140, has_curated_default=lambda c: c <= 6144 or c in {6912, 8960}),
    "v6e": TopologyRule(fixed=_2D),
    "tpu7x": TopologyRule(extra=("1x1x1",), max_cubes=144,
                          has_curated_default=lambda c: c <= 6144 or c in {6912, 8192, 8960, 9216}),
}


@cache
def topologies(generation: Generation) -> tuple[str, ...]:
    """Every topology of the generation, in xpk's generation order."""
    rule = RULES[generation.prefix]
    return rule.fixed if rule.fixed else tuple(_generate_3d(rule))


@cache
def default_topologies(generation: Generation) -> dict[int, str]:
    """Chip count -> the topology `<prefix>-<chips x TensorCores per chip>` means."""
    rule = RULES[generation.prefix]
    first: dict[int, str] = {}
    balanced: dict[int, str] = {}
    for topo in topologies(generation):
        dims = parse_topology(topo)
        chips = prod(dims)
        first.setdefault(chips, topo)
        best = balanced.get(chips)
        if best is None or sum(dims) < sum(parse_topology(best)):
            balanced[chips] = topo
    return {
        chips: balanced[chips] if rule.has_curated_default(chips) else first[chips]
        for chips in sorted(first)
    }


def physical_mesh_dims(generation: Generation, topology: str) -> tuple[int, ...]:
    """The device mesh shape JAX builds for one slice: the topology as (x, y, z) (2-D slices
    have z = 1), plus a trailing core dimension where a chip holds several JAX devices."""
    dims = parse_topology(topology)
    if len(dims) == 2:
        dims = (*dims, 1)
    if generation.devices_per_chip > 1:
        dims = (*dims, generation.devices_per_chip)
    return dims
