"""Each generation's published figures (tpu-gke-facts: HBM and peak bf16 per chip, devices per
chip, workload policy) and the lookups built on them, as a table a typo in the catalog fails."""

from __future__ import annotations

import pytest

from tpujob_plan.generations import (
    GENERATIONS,
    MachineType,
    find_generation,
    generation_for_device_kind,
    peak_tflops_for_device_kind,
)

pytestmark = pytest.mark.unit

GIB, GB = 1024**3, 1000**3


@pytest.mark.parametrize("prefix, hbm, peak, devices, policy", [
    ("v4", 32 * GIB, 275.0, 1, False),
    ("v5litepod", 16 * GB, 197.0, 1, False),
    ("v5p", 95 * GIB, 459.0, 1, False),
    ("v6e", 32 * GB, 918.0, 1, False),
    ("tpu7x", 192 * GIB, 2307.0, 2, True),
])
def test_published_figures_per_chip_and_per_device(prefix, hbm, peak, devices, policy):
    g = find_generation(prefix)
    assert (g.hbm_bytes_per_chip, g.peak_bf16_tflops_per_chip) == (hbm, peak)
    assert g.devices_per_chip == devices and g.needs_workload_policy is policy
    assert g.hbm_bytes_per_device == hbm / devices
    assert g.peak_bf16_tflops_per_device == peak / devices


@pytest.mark.parametrize("kind, prefix", [
    ("TPU v4", "v4"), ("tpu v4", "v4"), ("  TPU v5 lite ", "v5litepod"), ("TPU v5e", "v5litepod"),
    ("TPU v5p", "v5p"), ("TPU v5", "v5p"), ("TPU v6 lite", "v6e"), ("TPU7x", "tpu7x"),
    ("TPU 7x", "tpu7x"), ("cpu", None), ("TPU v9", None), ("TPU v5 lite extra", None),
])
def test_device_kinds_name_their_generation(kind, prefix):
    g = generation_for_device_kind(kind)
    assert (g.prefix if g else None) == prefix
    peak = peak_tflops_for_device_kind(kind)
    assert peak == (g.peak_bf16_tflops_per_device if g else None)


@pytest.mark.parametrize("machine, topology, chips, serves", [
    (MachineType("m-4t", 4), "2x2", 4, True),
    (MachineType("m-4t", 4), "2x4", 8, True),
    (MachineType("m-4t", 4), "1x1", 1, False),     # a single chip is never a 4-chip host's
    (MachineType("m-4t", 4), "1x2", 2, False),     # not a whole number of hosts
    (MachineType("m-4t", 4), "2x3", 6, False),
    (MachineType("m-1t", 1), "1x2", 2, True),
    (MachineType("m-1t", 1), "1x1", 1, False),     # chips > 1 unless a topology set says so
    (MachineType("m-8t", 8, topologies=frozenset({"2x4"})), "2x4", 8, True),
    (MachineType("m-8t", 8, topologies=frozenset({"2x4"})), "4x4", 16, False),
])
def test_which_topologies_a_machine_type_serves(machine, topology, chips, serves):
    assert machine.serves(topology, chips) is serves


def test_every_generation_is_found_by_prefix_and_alias_in_any_case():
    for g in GENERATIONS:
        for name in (g.prefix, *g.aliases):
            assert find_generation(name.upper()) is g
