"""The slice catalog: names of every generation resolve to the right shape; bad names fail
with a message that says what is wrong and what exists."""

from math import prod

import pytest

from tests.plan.xpk_defaults import TPU7X_DEFAULTS, V4_DEFAULTS, V5P_DEFAULTS
from tpujob_plan.catalog import all_slice_names, resolve_slice, valid_size_names
from tpujob_plan.errors import PlanError
from tpujob_plan.generations import find_generation
from tpujob_plan.topologies import default_topologies, topologies

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "name, canonical, topology, chips, devices",
    [
        ("v4-8", "v4-8", "2x2x1", 4, 4),
        ("v4-16", "v4-16", "2x2x2", 8, 8),
        ("v4-128", "v4-128", "4x4x4", 64, 64),
        ("v4-4x4x8", "v4-256", "4x4x8", 128, 128),
        ("v4-8x4x4", "v4-256", "8x4x4", 128, 128),       # v4 takes every axis order
        ("v4-768", "v4-768", "4x4x24", 384, 384),        # xpk: first generated when not curated
        ("v4-4096", "v4-4096", "8x16x16", 2048, 2048),
        ("v5litepod-1", "v5litepod-1", "1x1", 1, 1),
        ("v5litepod-4", "v5litepod-4", "2x2", 4, 4),
        ("v5litepod-16", "v5litepod-16", "4x4", 16, 16),
        ("v5e-16", "v5litepod-16", "4x4", 16, 16),       # alias
        ("V5E-256", "v5litepod-256", "16x16", 256, 256),  # case-insensitive
        ("v5litepod-2x4", "v5litepod-8", "2x4", 8, 8),
        ("v5p-8", "v5p-8", "2x2x1", 4, 4),
        ("v5p-128", "v5p-128", "4x4x4", 64, 64),
        ("v5p-256", "v5p-256", "4x4x8", 128, 128),
        ("v5p-512", "v5p-512", "4x8x8", 256, 256),
        ("v5p-1024", "v5p-1024", "8x8x8", 512, 512),
        ("v5p-2048", "v5p-2048", "8x8x16", 1024, 1024),
        ("v5p-4x4x16", "v5p-512", "4x4x16", 256, 256),   # not the default of its size, still valid
        ("v5p-12544", "v5p-12544", "4x8x196", 6272, 6272),
        ("v5p-17920", "v5p-17920", "16x20x28", 8960, 8960),
        ("v6e-1", "v6e-1", "1x1", 1, 1),
        ("v6e-4", "v6e-4", "2x2", 4, 4),
        ("v6e-8", "v6e-8", "2x4", 8, 8),
        ("v6e-16", "v6e-16", "4x4", 16, 16),
        ("v6e-256", "v6e-256", "16x16", 256, 256),
        ("v6e-8x16", "v6e-128", "8x16", 128, 128),
        ("tpu7x-2", "tpu7x-2", "1x1x1", 1, 2),
        ("tpu7x-8", "tpu7x-8", "2x2x1", 4, 8),
        ("tpu7x-64", "tpu7x-64", "2x4x4", 32, 64),
        ("tpu7x-128", "tpu7x-128", "4x4x4", 64, 128),
        ("tpu7x-4x4x20", "tpu7x-640", "4x4x20", 320, 640),
        ("tpu7x-18432", "tpu7x-18432", "16x24x24", 9216, 18432),
        (" v6e-16 ", "v6e-16", "4x4", 16, 16),
    ],
)
def test_names_resolve(name, canonical, topology, chips, devices):
    s = resolve_slice(name)
    assert (s.name, s.topology, s.chips, s.devices) == (canonical, topology, chips, devices)


@pytest.mark.parametrize(
    "name, says",
    [
        # The size's unit as the docs give it: chips on v5e and v6e (one TensorCore a chip),
        # TensorCores where a chip has two.
        ("v6e-12", ["no slice of 12 chips", "nearest: v6e-8 or v6e-16",
                    "Valid v6e sizes: v6e-1, v6e-4, v6e-8, v6e-16"]),
        ("v5e-12", ["no slice of 12 chips"]),
        ("v5p-12", ["no slice of 12 TensorCores", "nearest: v5p-8 or v5p-16"]),
        ("v5p-7", ["counts TensorCores, 2 per chip", "Valid v5p sizes: v5p-8"]),
        ("tpu7x-3", ["multiple of 2", "Valid tpu7x sizes: tpu7x-2, tpu7x-8"]),
        ("v9-8", ["unknown TPU generation 'v9'", "v6e", "tpu7x", "v5e"]),
        ("v6e-", ["missing its size", "Valid v6e sizes"]),
        ("", ["empty"]),
        ("   ", ["empty"]),
        ("v6e", ["has no size"]),
        ("v6e-abc", ["malformed size 'abc'; expected a number of chips"]),
        ("v5p-abc", ["expected a number of TensorCores"]),
        ("v5p-99999999999999999999", ["the largest is v5p-17920"]),
        ("v5p-1000000", ["the largest is v5p-17920"]),
        ("v6e-512", ["the largest is v6e-256"]),
        ("v6e-0", ["no slice of 0"]),
        ("v6e-4x4x4", ["2-D", "not 3-D"]),
        ("v5p-4x4", ["3-D", "not 2-D"]),
        ("v5p-8x4x4", ["did you mean v5p-4x4x8?"]),
        ("v5p-3x3x3", ["offers no 3x3x3 topology", "multiples of 4"]),
        ("v6e-3x3", ["offers no 3x3 topology"]),
        ("v4-264x4x4", ["offers no 264x4x4"]),
        ("v6e--16", ["malformed size '-16'"]),
        ("v6e-16; rm -rf /", ["malformed size"]),
        # The example of the right form follows the generation's rank.
        ("v6e-4x4x4", ["(like 4x4)"]),
        ("v5p-4x4", ["(like 4x4x4)"]),
        ("v5p-4y4", ["a topology like 4x4x4."]),
        ("v6e-4y4", ["a topology like 4x4."]),
        # Below the smallest size the nearest is the smallest alone.
        ("v5p-6", ["(nearest: v5p-8)."]),
        ("v6e-2", ["(nearest: v6e-1 or v6e-4)."]),
        # Up to 9 digits is a number (an odd v5p count is not a multiple of 2); longer is a typo.
        ("v5p-100000001", ["N is a multiple of 2"]),
        ("v5p-1000000001", ["the largest is v5p-17920"]),
        # The A <= B <= C rule holds for v5p, not v4 (whose topologies need no order).
        ("v5p-3x3x3", ["multiples of 4 and A <= B <= C."]),
        ("v4-3x3x3", ["multiples of 4."]),
    ],
)
def test_bad_names_explain(name, says):
    with pytest.raises(PlanError) as caught:
        resolve_slice(name)
    assert caught.value.field == "slice"
    for fragment in says:
        assert fragment in caught.value.message


def test_bad_name_lists_every_valid_size_of_its_generation():
    with pytest.raises(PlanError) as caught:
        resolve_slice("v5p-7")
    v5p = find_generation("v5p")
    assert caught.value.valid == valid_size_names(v5p)
    assert all(n in caught.value.message for n in valid_size_names(v5p))


@pytest.mark.parametrize("prefix, curated", [("v5p", V5P_DEFAULTS), ("tpu7x", TPU7X_DEFAULTS),
                                             ("v4", V4_DEFAULTS)])
def test_defaults_match_xpk_curated_choices(prefix, curated):
    gen = find_generation(prefix)
    defaults = default_topologies(gen)
    for topo in curated:
        chips = prod(int(d) for d in topo.split("x"))
        assert defaults[chips] == topo, f"{prefix}: {chips} chips"


@pytest.mark.parametrize("prefix, count, max_chips", [
    ("v4", 800, 64 * 64),            # every axis order, up to 64 cubes of 4x4x4
    ("v5p", 414, 140 * 64),          # A <= B <= C, up to 140 cubes
    ("tpu7x", 433, 144 * 64),        # A <= B <= C, up to 144 cubes, plus 1x1x1
    ("v5litepod", 8, 256),
    ("v6e", 8, 256),
])
def test_topology_counts_follow_the_rules(prefix, count, max_chips):
    topos = topologies(find_generation(prefix))
    assert len(topos) == len(set(topos)) == count
    sizes = [tuple(int(d) for d in t.split("x")) for t in topos]
    assert max(prod(d) for d in sizes) == max_chips
    for dims in sizes:
        if prod(dims) >= 64 and len(dims) == 3:
            assert all(d % 4 == 0 and d <= 256 for d in dims), dims


def test_every_catalog_name_resolves_to_itself():
    names = all_slice_names()
    assert 2000 <= len(names) <= 2200
    for name in names:
        s = resolve_slice(name)
        assert s.generation.prefix in name or "v5e" in name
        # The N form of a default topology round-trips; topology forms name their topology.
        if "x" in name.split("-", 1)[1]:
            assert s.topology == name.split("-", 1)[1]
        else:
            assert s.name.split("-", 1)[1] == name.split("-", 1)[1]


def test_tensorcore_counting():
    # `tpu7x-N` counts TensorCores: tpu7x-64 is 32 chips and 64 JAX devices.
    s = resolve_slice("tpu7x-64")
    assert (s.tensorcores, s.chips, s.devices) == (64, 32, 64)
    # v5p counts TensorCores too, but megacore makes one JAX device per chip.
    s = resolve_slice("v5p-128")
    assert (s.tensorcores, s.chips, s.devices) == (128, 64, 64)


def test_slice_types_are_values_and_know_which_topology_a_size_means():
    # v4 offers 4x4x8, 4x8x4 and 8x4x4 for 128 chips; v4-256 means exactly one of them.
    shapes = [resolve_slice(f"v4-{t}") for t in ("4x4x8", "4x8x4", "8x4x4")]
    assert {s.chips for s in shapes} == {128}
    default = resolve_slice("v4-256")
    assert [s.topology for s in shapes if s.is_default_for_size] == [default.topology]
    assert default.is_default_for_size
    with pytest.raises(AttributeError):
        default.topology = "8x8x8"  # frozen: a slice type is a value
    assert len({resolve_slice("v4-256"), resolve_slice("v4-256"), default}) == 1


def test_topology_rules_are_values():
    from dataclasses import FrozenInstanceError

    from tpujob_plan.topologies import RULES
    with pytest.raises(FrozenInstanceError):
        RULES["v5p"].max_cubes = 1
