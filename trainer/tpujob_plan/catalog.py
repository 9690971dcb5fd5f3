"""The TPU slice catalog: turns a slice name (`v6e-16`, `tpu7x-4x4x4`, `v5e-8`) into a SliceType,
or into a PlanError that says what is wrong and lists the sizes that exist."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from functools import cache
from math import prod

from tpujob_plan.errors import PlanError
from tpujob_plan.generations import GENERATIONS, Generation, find_generation, generation_names
from tpujob_plan.topologies import default_topologies, parse_topology, topologies

_NAME = re.compile(r"^(?P<prefix>[A-Za-z0-9]+)-(?P<size>.*)$")
_TOPOLOGY = re.compile(r"^[0-9]+(x[0-9]+)+$")
_MAX_DIGITS = 9  # no slice has a billion TensorCores; longer numbers are typos


@dataclass(frozen=True)
class SliceType:
    """One slice shape of one generation: a topology, with the numbers derived from it."""

    generation: Generation
    topology: str

    @property
    def dims(self) -> tuple[int, ...]:
        return parse_topology(self.topology)

    @property
    def chips(self) -> int:
        return prod(self.dims)

    @property
    def tensorcores(self) -> int:
        return self.chips * self.generation.tensorcores_per_chip

    @property
    def devices(self) -> int:
        return self.chips * self.generation.devices_per_chip

    @property
    def name(self) -> str:
        """The `<prefix>-<N>` form (N counts TensorCores, as xpk and gcloud do)."""
        return f"{self.generation.prefix}-{self.tensorcores}"

    @property
    def topology_name(self) -> str:
        return f"{self.generation.prefix}-{self.topology}"

    @property
    def is_default_for_size(self) -> bool:
        """Whether `self.name` means this topology (several topologies can share a size)."""
        return default_topologies(self.generation).get(self.chips) == self.topology


def resolve_slice(name: str, *, field: str = "slice") -> SliceType:
    """The slice a name means. Raises PlanError naming `field` and listing what would be valid."""
    text = (name or "").strip()
    if not text:
        raise PlanError("slice name is empty; expected <generation>-<size> such as v6e-16, "
                        "v5p-128, tpu7x-64 or v5p-4x4x4", field=field)
    match = _NAME.match(text)
    if not match:
        raise PlanError(f"slice name {text!r} has no size; expected <generation>-<N> or "
                        f"<generation>-<topology>, e.g. v6e-16 or v6e-4x4", field=field)
    generation = find_generation(match["prefix"])
    if generation is None:
        raise PlanError(f"unknown TPU generation {match['prefix']!r} in {text!r}; known: "
                        f"{', '.join(generation_names())}", field=field,
                        valid=generation_names())
    size = match["size"].lower()
    if not size:
        raise PlanError(f"slice name {text!r} is missing its size after '-'. "
                        f"{_valid_sizes_sentence(generation)}", field=field,
                        valid=valid_size_names(generation))
    if size.isdigit():
        return _resolve_count(text, generation, size, field)
    if _TOPOLOGY.match(size):
        return _resolve_topology(text, generation, size, field)
    raise PlanError(f"slice name {text!r} has a malformed size {size!r}; expected a number of "
                    f"{size_unit(generation)} or a topology like "
                    f"{'4x4x4' if generation.topology_rank == 3 else '4x4'}. "
                    f"{_valid_sizes_sentence(generation)}", field=field,
                    valid=valid_size_names(generation))


def size_unit(generation: Generation) -> str:
    """What the N of `<prefix>-N` counts, in the docs' words: TensorCores, or chips where a
    chip has one TensorCore (v5e, v6e)."""
    return "TensorCores" if generation.tensorcores_per_chip > 1 else "chips"


def _resolve_count(text: str, generation: Generation, size: str, field: str) -> SliceType:
    tc = generation.tensorcores_per_chip
    count = int(size) if len(size.lstrip("0")) <= _MAX_DIGITS else None
    defaults = default_topologies(generation)
    counts = sorted(c * tc for c in defaults)
    if count is not None and count % tc == 0 and count // tc in defaults:
        return SliceType(generation, defaults[count // tc])
    why = f"{generation.prefix} has no slice of {size} {size_unit(generation)}"
    if count is not None and count % tc:
        why += (f" (the N in {generation.prefix}-N counts TensorCores, {tc} per chip, "
                f"so N is a multiple of {tc})")
    elif count is None or count > counts[-1]:
        why += f" (the largest is {generation.prefix}-{counts[-1]})"
    else:
        i = bisect.bisect_left(counts, count)
        near = [f"{generation.prefix}-{c}" for c in counts[max(i - 1, 0):i + 1]]
        why += f" (nearest: {' or '.join(near)})"
    raise PlanError(f"{text!r}: {why}. {_valid_sizes_sentence(generation)}", field=field,
                    valid=valid_size_names(generation))


def _resolve_topology(text: str, generation: Generation, size: str, field: str) -> SliceType:
    dims = parse_topology(size)
    rank = generation.topology_rank
    if len(dims) != rank:
        example = "4x4x4" if rank == 3 else "4x4"
        raise PlanError(f"{text!r}: {generation.prefix} topologies are {rank}-D (like {example}), "
                        f"not {len(dims)}-D. {_valid_sizes_sentence(generation)}", field=field,
                        valid=valid_size_names(generation))
    offered = _topology_set(generation)
    if size in offered:
        return SliceType(generation, size)
    hint = ""
    canonical = "x".join(str(d) for d in sorted(dims))
    if canonical in offered:
        hint = f" (did you mean {generation.prefix}-{canonical}?)"
    raise PlanError(f"{text!r}: {generation.prefix} offers no {size} topology{hint}. "
                    f"{_topology_rule(generation)} {_valid_sizes_sentence(generation)}",
                    field=field, valid=valid_size_names(generation))


@cache
def _topology_set(generation: Generation) -> frozenset[str]:
    return frozenset(topologies(generation))


def _topology_rule(generation: Generation) -> str:
    if generation.topology_rank == 2:
        return f"Its topologies are {', '.join(topologies(generation))}."
    return ("Its topologies are 2x2x1, 2x2x2, 2x2x4, 2x4x4 and AxBxC with A, B, C multiples "
            "of 4" + (" and A <= B <= C." if generation.prefix != "v4" else "."))


@cache
def valid_size_names(generation: Generation) -> list[str]:
    """Every `<prefix>-<N>` name of the generation, smallest first."""
    tc = generation.tensorcores_per_chip
    return [f"{generation.prefix}-{c * tc}" for c in default_topologies(generation)]


def _valid_sizes_sentence(generation: Generation) -> str:
    return f"Valid {generation.prefix} sizes: {', '.join(valid_size_names(generation))}."


@cache
def all_slice_names() -> tuple[str, ...]:
    """Every name the catalog resolves: N forms, topology forms and alias forms."""
    names: list[str] = []
    for g in GENERATIONS:
        prefixes = (g.prefix, *g.aliases)
        sizes = [n.split("-", 1)[1] for n in valid_size_names(g)] + list(topologies(g))
        names.extend(f"{p}-{s}" for p in prefixes for s in sizes)
    return tuple(names)
