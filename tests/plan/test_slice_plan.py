"""Slice plans: hosts, containers, processes, selectors and requests per slice type."""

import pytest

from tpujob_plan.errors import PlanError
from tpujob_plan.slice_plan import plan_slice

pytestmark = pytest.mark.unit

ACC = "cloud.google.com/gke-tpu-accelerator"
TOPO = "cloud.google.com/gke-tpu-topology"
POLICY = "cloud.google.com/placement-policy-name"


@pytest.mark.parametrize(
    "name, slices, machine, expected",
    [
        # name, slices, machine type, (machine type, hosts, containers/host, chips/container,
        #                              devices/host, processes, total devices, physical mesh)
        ("v4-8", 1, None, ("ct4p-hightpu-4t", 1, 1, 4, 4, 1, 4, (2, 2, 1))),
        ("v4-32", 1, None, ("ct4p-hightpu-4t", 4, 1, 4, 4, 4, 16, (2, 2, 4))),
        ("v5litepod-1", 1, None, ("ct5lp-hightpu-1t", 1, 1, 1, 1, 1, 1, (1, 1, 1))),
        ("v5litepod-8", 1, None, ("ct5lp-hightpu-4t", 2, 1, 4, 4, 2, 8, (2, 4, 1))),
        ("v5e-8", 1, "ct5lp-hightpu-8t", ("ct5lp-hightpu-8t", 1, 1, 8, 8, 1, 8, (2, 4, 1))),
        ("v5litepod-16", 1, None, ("ct5lp-hightpu-4t", 4, 1, 4, 4, 4, 16, (4, 4, 1))),
        ("v5p-8", 1, None, ("ct5p-hightpu-4t", 1, 1, 4, 4, 1, 4, (2, 2, 1))),
        ("v5p-128", 1, None, ("ct5p-hightpu-4t", 16, 1, 4, 4, 16, 64, (4, 4, 4))),
        ("v5p-128", 4, None, ("ct5p-hightpu-4t", 16, 1, 4, 4, 64, 256, (4, 4, 4))),
        ("v6e-1", 1, None, ("ct6e-standard-1t", 1, 1, 1, 1, 1, 1, (1, 1, 1))),
        ("v6e-4", 1, None, ("ct6e-standard-4t", 1, 1, 4, 4, 1, 4, (2, 2, 1))),
        ("v6e-8", 1, None, ("ct6e-standard-4t", 2, 1, 4, 4, 2, 8, (2, 4, 1))),
        ("v6e-8", 1, "ct6e-standard-8t", ("ct6e-standard-8t", 1, 1, 8, 8, 1, 8, (2, 4, 1))),
        ("v6e-16", 1, None, ("ct6e-standard-4t", 4, 1, 4, 4, 4, 16, (4, 4, 1))),
        ("v6e-16", 2, None, ("ct6e-standard-4t", 4, 1, 4, 4, 8, 32, (4, 4, 1))),
        ("v6e-256", 1, None, ("ct6e-standard-4t", 64, 1, 4, 4, 64, 256, (16, 16, 1))),
        ("tpu7x-2", 1, None, ("tpu7x-standard-1t", 1, 1, 1, 2, 1, 2, (1, 1, 1, 2))),
        # tpu7x: one container with all 4 chips per host by default, as xpk 1.16.
        ("tpu7x-8", 1, None, ("tpu7x-standard-4t", 1, 1, 4, 8, 1, 8, (2, 2, 1, 2))),
        ("tpu7x-64", 1, None, ("tpu7x-standard-4t", 8, 1, 4, 8, 8, 64, (2, 4, 4, 2))),
        ("tpu7x-64", 2, None, ("tpu7x-standard-4t", 8, 1, 4, 8, 16, 128, (2, 4, 4, 2))),
    ],
)
def test_slice_plans(name, slices, machine, expected):
    p = plan_slice(name, slices=slices, machine_type=machine)
    got = (p.machine_type.name, p.hosts, p.containers_per_host, p.chips_per_container,
           p.devices_per_host, p.processes, p.devices, p.physical_mesh)
    assert got == expected
    # Invariants every plan keeps.
    assert p.hosts * p.machine_type.chips_per_host == p.slice_type.chips
    assert p.devices_per_process * p.processes == p.devices


@pytest.mark.parametrize(
    "name, slices, containers, expected",
    [
        # The opt-in layout: two containers of 2 chips per tpu7x-standard-4t host.
        ("tpu7x-8", 1, 2, (1, 2, 2, 8, 2, 8)),
        ("tpu7x-64", 1, 2, (8, 2, 2, 8, 16, 64)),
        ("tpu7x-64", 2, 2, (8, 2, 2, 8, 32, 128)),
        ("tpu7x-64", 1, 1, (8, 1, 4, 8, 8, 64)),
    ],
)
def test_container_layouts(name, slices, containers, expected):
    p = plan_slice(name, slices=slices, containers_per_host=containers)
    got = (p.hosts, p.containers_per_host, p.chips_per_container, p.devices_per_host,
           p.processes, p.devices)
    assert got == expected
    assert p.devices_per_process * p.processes == p.devices


@pytest.mark.parametrize(
    "name, machine, containers, message",
    [
        ("v6e-16", None, 2, "ct6e-standard-4t runs 1 container(s) per host, got 2"),
        ("tpu7x-64", None, 4, "tpu7x-standard-4t runs 1 or 2 container(s) per host, got 4"),
        ("tpu7x-2", None, 2, "tpu7x-standard-1t runs 1 container(s) per host, got 2"),
    ],
)
def test_container_layout_refused(name, machine, containers, message):
    with pytest.raises(PlanError) as err:
        plan_slice(name, machine_type=machine, containers_per_host=containers)
    assert err.value.field == "containersPerHost" and message in err.value.message


@pytest.mark.parametrize(
    "name, selector, tpu, policy",
    [
        ("v6e-16", {ACC: "tpu-v6e-slice", TOPO: "4x4"}, "4", None),
        ("v5p-128", {ACC: "tpu-v5p-slice", TOPO: "4x4x4"}, "4", None),
        ("v4-8", {ACC: "tpu-v4-podslice", TOPO: "2x2x1"}, "4", None),
        ("v5e-16", {ACC: "tpu-v5-lite-podslice", TOPO: "4x4"}, "4", None),
        # tpu7x single-host slices need no workload policy; multi-host ones do.
        ("tpu7x-8", {ACC: "tpu7x", TOPO: "2x2x1"}, "4", None),
        ("tpu7x-64", {ACC: "tpu7x", TOPO: "2x4x4", POLICY: "tpu7x-64-2x4x4-placement-policy"},
         "4", "tpu7x-64-2x4x4-placement-policy"),
        ("tpu7x-4x4x4", {ACC: "tpu7x", TOPO: "4x4x4", POLICY: "tpu7x-128-4x4x4-placement-policy"},
         "4", "tpu7x-128-4x4x4-placement-policy"),
    ],
)
def test_selectors_resources_and_policy(name, selector, tpu, policy):
    p = plan_slice(name)
    assert p.node_selector == selector
    assert p.container_resources == {"requests": {"google.com/tpu": tpu},
                                     "limits": {"google.com/tpu": tpu}}
    assert p.workload_policy == policy


@pytest.mark.parametrize(
    "name, slices, machine, field, says",
    [
        ("v6e-16", 0, None, "slices", "from 1 to 1024"),
        ("v6e-16", -2, None, "slices", "from 1 to 1024"),
        ("v6e-16", 5000, None, "slices", "from 1 to 1024"),
        ("v6e-16", True, None, "slices", "whole number"),
        ("v6e-16", 1, "ct6e-standard-8t", "machineType", "ct6e-standard-8t cannot form a 4x4"),
        ("v6e-16", 1, "ct5p-hightpu-4t", "machineType", "is not a v6e machine type"),
        ("v6e-12", 1, None, "slice", "no slice of 12"),
    ],
)
def test_bad_plans(name, slices, machine, field, says):
    with pytest.raises(PlanError) as caught:
        plan_slice(name, slices=slices, machine_type=machine)
    assert caught.value.field == field
    assert says in caught.value.message


def test_per_device_figures():
    # tpu7x: 192 GiB and 2307 TFLOP/s per chip, two JAX devices per chip.
    p = plan_slice("tpu7x-64")
    assert p.hbm_bytes_per_device == 96 * 2**30
    assert p.peak_tflops_per_device == pytest.approx(1153.5)
    p = plan_slice("v6e-16")
    assert p.hbm_bytes_per_device == 32e9 and p.peak_tflops_per_device == 918


@pytest.mark.parametrize("slices, ok", [(1, True), (1024, True), (1025, False), (0, False)])
def test_slices_run_from_1_to_1024(slices, ok):
    from tpujob_plan.errors import PlanError
    from tpujob_plan.slice_plan import plan_slice
    if ok:
        assert plan_slice("v6e-16", slices=slices).slices == slices
    else:
        with pytest.raises(PlanError, match="from 1 to 1024"):
            plan_slice("v6e-16", slices=slices)


def test_a_plan_is_a_value_with_one_container_per_host_by_default():
    from dataclasses import FrozenInstanceError

    from tpujob_plan.slice_plan import plan_slice
    plan = plan_slice("tpu7x-64")
    assert plan.containers_per_host == 1
    with pytest.raises(FrozenInstanceError):
        plan.slices = 2
