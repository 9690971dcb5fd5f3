"""The API's slice-name syntax and the slice catalog name the same generations: a generation added
to the catalog and not to `spec.slice`'s pattern (which `kubectl apply` enforces through the CRD)
would be refused before the operator ever saw it, and one in the pattern the catalog does not know
would pass the schema only to be refused later."""

from __future__ import annotations

import re

import pytest
from pydantic import TypeAdapter, ValidationError

from tpujob.api.crd import build_crd
from tpujob.api.patterns import SLICE_PATTERN, SliceName
from tpujob_plan.catalog import all_slice_names
from tpujob_plan.generations import GENERATIONS, generation_names
from tpujob_plan.gpu_catalog import GPU_MACHINES

pytestmark = pytest.mark.unit


def _pattern_generations(pattern: str) -> list[str]:
    match = re.fullmatch(r"\^\(\((?P<names>[a-z0-9]+(\|[a-z0-9]+)*)\)-.*", pattern)
    assert match, f"the slice pattern no longer starts with ((gen|gen|...)-: {pattern}"
    return match["names"].split("|")


def _pattern_gpu_names(pattern: str) -> list[str]:
    match = re.fullmatch(r".*\)\|(?P<names>[a-z0-9-]+(\|[a-z0-9-]+)*)\)\$", pattern)
    assert match, f"the slice pattern no longer ends with |gpu|gpu...)$: {pattern}"
    return match["names"].split("|")


def test_the_pattern_names_every_gpu_machine_type_and_xpk_device_type_and_no_other():
    assert sorted(_pattern_gpu_names(SLICE_PATTERN)) == sorted(
        alias for m in GPU_MACHINES for alias in m.aliases)
    adapter = TypeAdapter(SliceName)
    for m in GPU_MACHINES:
        for alias in m.aliases:
            assert adapter.validate_python(alias) == alias
    for near in ("a3-megagpu-4g", "a3-megagpu", "h100-80gb-4", "a3-megagpu-8g-2"):
        with pytest.raises(ValidationError):
            adapter.validate_python(near)


def test_the_pattern_names_every_generation_and_alias_of_the_catalog_and_no_other():
    assert sorted(_pattern_generations(SLICE_PATTERN)) == sorted(generation_names())


def test_the_refusal_lists_the_same_generations():
    with pytest.raises(ValidationError) as refused:
        TypeAdapter(SliceName).validate_python("v9z-8")
    listed = re.search(r"generation one of ([a-z0-9, ]+?) \(", str(refused.value))
    assert listed, str(refused.value)
    assert sorted(listed[1].split(", ")) == sorted(generation_names())


def test_every_name_the_catalog_resolves_passes_the_api_and_the_crd():
    crd_pattern = (build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
                   ["properties"]["spec"]["properties"]["slice"]["pattern"])
    assert crd_pattern == SLICE_PATTERN
    names = all_slice_names()
    assert {n.split("-", 1)[0] for n in names} == {p for g in GENERATIONS
                                                   for p in (g.prefix, *g.aliases)}
    adapter = TypeAdapter(SliceName)
    refused = [n for n in names if not re.fullmatch(SLICE_PATTERN, n)]
    assert not refused, refused[:10]
    for name in names:
        adapter.validate_python(name)
