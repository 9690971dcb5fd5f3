"""Mesh planning: -1 filling, product checks, and the physical-topology check, which must agree
with JAX's own `create_device_mesh` rule."""

import itertools
import math

import numpy as np
import pytest

from tpujob_plan.errors import PlanError
from tpujob_plan.mesh import MESH_AXES, assign_to_physical, parse_axes, plan_mesh
from tpujob_plan.slice_plan import plan_slice

pytestmark = pytest.mark.unit


def _plan(slice_name, ici, dcn=None, slices=1):
    p = plan_slice(slice_name, slices=slices)
    return plan_mesh(ici, dcn, devices_per_slice=p.slice_type.devices, num_slices=slices,
                     physical_dims=p.physical_mesh)


@pytest.mark.parametrize(
    "slice_name, ici, dcn, slices, axes",
    [
        ("v6e-16", None, None, 1, {"fsdp": 16}),                       # MaxText default
        ("v6e-16", {"fsdp": -1, "tensor": 4}, None, 1, {"fsdp": 4, "tensor": 4}),
        ("tpu7x-64", {"fsdp": 16, "tensor": 4}, None, 1, {"fsdp": 16, "tensor": 4}),
        ("tpu7x-64", {"data": -1, "tensor": 8}, None, 1, {"data": 8, "tensor": 8}),
        ("v5p-128", {"fsdp": -1, "expert": 4}, None, 1, {"fsdp": 16, "expert": 4}),
        ("v6e-16", {"fsdp": -1}, None, 2, {"data": 2, "fsdp": 16}),       # dcn default data
        ("v6e-16", {"fsdp": 4, "tensor": 4}, {"fsdp": -1}, 4, {"fsdp": 16, "tensor": 4}),
        ("v5p-8", {"tensor": 4}, None, 1, {"tensor": 4}),
        ("v5p-16", {"data": 2, "fsdp": 2, "tensor": 2}, None, 1,       # 2x2x2 takes any layout
         {"data": 2, "fsdp": 2, "tensor": 2}),
        ("v6e-8", {"fsdp": 8}, None, 1, {"fsdp": 8}),
    ],
)
def test_valid_layouts(slice_name, ici, dcn, slices, axes):
    m = _plan(slice_name, ici, dcn, slices)
    assert m.valid, m.error
    assert {a: s for a, s in m.axes.items() if s > 1} == axes
    assert list(m.axes) == list(MESH_AXES)


@pytest.mark.parametrize(
    "slice_name, ici, dcn, slices, field, says",
    [
        # The reported case: fails in JAX after a long compile.
        ("tpu7x-64", {"fsdp": 8, "tensor": 4, "context": 2}, None, 1, "parallelism.ici",
         "context=2 cannot be placed on the physical mesh 2x4x4x2"),
        ("v6e-16", {"fsdp": 8}, None, 1, "parallelism.ici", "multiply to 8 but there are 16"),
        ("v6e-16", {"fsdp": 3, "tensor": -1}, None, 1, "parallelism.ici", "does not divide"),
        ("v6e-16", {"fsdp": -1, "tensor": -1}, None, 1, "parallelism.ici", "only one axis"),
        ("v6e-16", {"pipeline": 4}, None, 1, "parallelism.ici", "unknown mesh axis 'pipeline'"),
        ("v6e-16", {"fsdp": 0}, None, 1, "parallelism.ici.fsdp", "positive whole number or -1"),
        ("v6e-16", {"fsdp": -3}, None, 1, "parallelism.ici.fsdp", "positive whole number or -1"),
        ("v6e-16", {"fsdp": 16}, {"data": 3}, 2, "parallelism.dcn", "multiply to 3 but there are 2"),
        ("v5p-128", {"fsdp": 8, "tensor": 8}, None, 1, "parallelism.ici", "tensor=8"),
        ("v6e-32", {"fsdp": 2, "tensor": 16}, None, 1, "parallelism.ici", "tensor=16"),
    ],
)
def test_invalid_layouts_name_the_field(slice_name, ici, dcn, slices, field, says):
    m = _plan(slice_name, ici, dcn, slices)
    assert not m.valid
    assert m.field == field
    assert says in m.error


def test_invalid_layout_suggests_valid_ones():
    m = _plan("tpu7x-64", {"fsdp": 8, "tensor": 4, "context": 2})
    assert m.suggestions[0] == {"fsdp": 16, "tensor": 4}
    for s in m.suggestions:
        assert _plan("tpu7x-64", s).valid


def test_parse_axes():
    assert parse_axes("fsdp=8, tensor=4", field="--ici") == {"fsdp": 8, "tensor": 4}
    assert parse_axes("fsdp=-1", field="--ici") == {"fsdp": -1}
    for bad in ("fsdp", "fsdp=x", "fsdp=1.5"):
        with pytest.raises(PlanError) as caught:
            parse_axes(bad, field="--ici")
        assert caught.value.field == "--ici"


# The physical-topology check must agree with JAX's own assignment rule, layout for layout.
_PHYSICAL = [(2, 2, 1), (4, 4, 1), (2, 4, 1), (4, 4, 4), (4, 4, 8), (2, 4, 4, 2), (4, 4, 4, 2),
             (8, 16, 1), (2, 2, 4)]


def _layouts(total):
    divisors = [d for d in range(1, total + 1) if total % d == 0]
    for sizes in itertools.product(divisors, repeat=3):
        if math.prod(sizes) == total:
            yield dict(zip(("fsdp", "tensor", "expert"), sizes, strict=True))
    for sizes in itertools.product(divisors, repeat=3):
        if math.prod(sizes) == total:
            yield dict(zip(("data", "context", "tensor"), sizes, strict=True))


@pytest.mark.parametrize("physical", _PHYSICAL, ids=lambda p: "x".join(map(str, p)))
def test_agrees_with_jax_create_device_mesh_rule(physical):
    mesh_utils = pytest.importorskip("jax._src.mesh_utils")
    devices = np.arange(math.prod(physical)).reshape(physical)
    checked = 0
    for layout in _layouts(devices.size):
        logical = {a: layout.get(a, 1) for a in MESH_AXES}
        ours = assign_to_physical(physical, logical)[1] is None
        try:
            mesh_utils._create_device_mesh_for_nd_torus(devices, list(logical.values()))
            theirs = True
        except NotImplementedError:
            theirs = False
        assert ours == theirs, (physical, logical)
        checked += 1
    assert checked > 5


def test_suggestions_keep_the_tensor_axis_asked_for():
    m = _plan("v6e-16", {"fsdp": 8, "tensor": 2})
    assert not m.valid and "expert=1" not in m.error
    assert m.suggestions[0] == {"fsdp": 4, "tensor": 4}


# The whole check (small-slice rules included) against JAX's create_device_mesh itself, on fake
# TPU devices of each generation: JAX builds the mesh exactly when the plan says it is valid.
def _layouts4(total):
    divisors = [d for d in range(1, total + 1) if total % d == 0]
    for sizes in itertools.product(divisors, repeat=4):
        if math.prod(sizes) == total:
            yield dict(zip(("data", "fsdp", "tensor", "expert"), sizes, strict=True))


def _layouts5(total):
    """Every layout over all five axes: the small slices' ring orders take some that no torus
    assignment could (five axes of 2 on tpu7x's 2x2x4x2), so 3 and 4 axes are not enough."""
    divisors = [d for d in range(1, total + 1) if total % d == 0]
    for sizes in itertools.product(divisors, repeat=len(MESH_AXES)):
        if math.prod(sizes) == total:
            yield dict(zip(MESH_AXES, sizes, strict=True))


class _FakeTpu:
    platform = "tpu"
    process_index = 0
    slice_index = 0

    def __init__(self, i: int, kind: str, coords: tuple[int, int, int], core: int):
        self.id, self.device_kind, self.coords, self.core_on_chip = i, kind, coords, core

    def __repr__(self) -> str:
        return f"TPU({self.id})"


_KINDS = {"v6e": "TPU v6 lite", "v5litepod": "TPU v5 lite", "v5p": "TPU v5p", "tpu7x": "TPU7x"}


def _fake_devices(slice_name: str) -> tuple[list[_FakeTpu], tuple[int, ...]]:
    p = plan_slice(slice_name)
    physical = p.physical_mesh
    x, y, z = physical[:3]
    cores = physical[3] if len(physical) == 4 else 1
    kind = _KINDS[p.slice_type.generation.prefix]
    devices = [_FakeTpu(0, kind, (i, j, k), c) for k in range(z) for j in range(y)
               for i in range(x) for c in range(cores)]
    for n, d in enumerate(devices):
        d.id = n
    return devices, physical


@pytest.mark.parametrize("slice_name", ["v6e-4", "v6e-8", "v6e-16", "v6e-32", "v5e-8",
                                        "v5p-8", "v5p-16", "v5p-32", "v5p-64", "tpu7x-8",
                                        "v5p-128", "tpu7x-16", "tpu7x-32", "tpu7x-64",
                                        "tpu7x-128"])
def test_valid_exactly_when_jax_create_device_mesh_builds_it(slice_name):
    from jax._src import mesh_utils  # the trainer extra, which the tests install
    devices, physical = _fake_devices(slice_name)
    agreed = {True: 0, False: 0}
    for layout in itertools.chain(_layouts(len(devices)), _layouts4(len(devices)),
                                  _layouts5(len(devices))):
        logical = {a: layout.get(a, 1) for a in MESH_AXES}
        ours = plan_mesh(logical, devices_per_slice=len(devices), physical_dims=physical).valid
        try:
            mesh_utils.create_device_mesh(list(logical.values()), devices)
            theirs = True
        except NotImplementedError:
            theirs = False
        assert ours == theirs, (slice_name, physical, logical)
        agreed[theirs] += 1
    assert agreed[True] > 0


@pytest.mark.parametrize("sizes, text", [
    ({"fsdp": 16, "tensor": 4, "data": 1}, "fsdp=16,tensor=4"),
    ({"data": 2, "fsdp": 1, "expert": 4}, "data=2,expert=4"),
    ({"data": 1, "fsdp": 1}, "(all 1)"),
    ({}, "(all 1)"),
])
def test_format_axes_leaves_out_size_one(sizes, text):
    from tpujob_plan.mesh import format_axes
    assert format_axes(sizes) == text


@pytest.mark.parametrize("batch, accum, axes, says", [
    (8, 1, {"fsdp": 4}, None),
    (6, 1, {"fsdp": 4}, "a batch of 6 sequences (global_batch / grad_accum) must split evenly "
                        "over the 4 batch shards (data x fsdp x expert = fsdp=4); use a "
                        "multiple of 4"),
    (16, 2, {"data": 2, "fsdp": 2, "expert": 2}, None),
    (16, 4, {"data": 2, "fsdp": 2, "expert": 2}, "a batch of 4 sequences"),
    (12, 0, {"fsdp": 4}, None),                 # grad_accum 0 counts as 1
    (4, 1, {"tensor": 8, "context": 2}, None),  # model axes do not split the batch
    (3, 1, {"data": 3, "tensor": 2}, None),
    (2, 1, {"data": 3}, "over the 3 batch shards (data x fsdp x expert = data=3)"),
])
def test_batch_split_error_counts_data_fsdp_and_expert(batch, accum, axes, says):
    from tpujob_plan.mesh import batch_split_error
    got = batch_split_error(batch, accum, axes)
    assert (got is None) == (says is None), got
    if says:
        assert says in got


def test_the_whole_mesh_multiplies_ici_by_dcn():
    m = _plan("v6e-16", {"fsdp": 4, "tensor": 4}, {"data": 2, "fsdp": 2}, slices=4)
    assert m.valid and m.axes == {"data": 2, "fsdp": 8, "context": 1, "tensor": 4, "expert": 1}
    assert m.to_dict()["axes"] == m.axes and m.to_dict()["valid"] is True


def test_a_refused_layout_says_which_physical_axes_were_left_and_keeps_what_was_asked():
    m = _plan("tpu7x-64", {"fsdp": 8, "tensor": 4, "context": 2})
    assert "once tensor=4 on 2x2 took its physical axes: the free physical axes are [4, 4]," \
        in m.error
    assert "logical_axis_index 2 of size 2" in m.error
    bad = _plan("v6e-16", {"fsdp": 8})
    assert not bad.valid
    assert bad.to_dict()["axes"] == {"data": 1, "fsdp": 8, "context": 1, "tensor": 1,
                                     "expert": 1}
    from dataclasses import FrozenInstanceError
    with pytest.raises(FrozenInstanceError):
        bad.valid = True


def test_one_slice_unless_told():
    m = plan_mesh({"fsdp": 4, "tensor": 4}, devices_per_slice=16)
    assert m.valid and m.dcn == {a: 1 for a in MESH_AXES}
    assert m.axes == {"data": 1, "fsdp": 4, "context": 1, "tensor": 4, "expert": 1}


@pytest.mark.parametrize("slice_name, ici", [
    ("tpu7x-64", {"fsdp": 8, "tensor": 4, "context": 2}),
    ("v6e-16", {"fsdp": 8, "tensor": 2}),
    ("v6e-32", {"data": 2, "fsdp": 16}),
    ("v5p-128", {"fsdp": 8, "tensor": 8}),
])
def test_suggestions_use_only_the_axes_asked_for(slice_name, ici):
    m = _plan(slice_name, ici)
    assert not m.valid and m.suggestions
    for s in m.suggestions:
        assert set(s) <= set(ici), s
        assert _plan(slice_name, s).valid


def test_with_no_axis_asked_for_suggestions_put_everything_on_fsdp():
    from tpujob_plan.mesh import suggest_layouts
    assert suggest_layouts((4, 4, 1), {}) == [{"fsdp": 16}]
