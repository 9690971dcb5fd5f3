"""Server-side printing (pure): ages as kubectl shows them, cell typing, JSONPath subset."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tpujob.local.apiserver import jsonpath
from tpujob.local.apiserver.resources import ResourceType
from tpujob.local.apiserver.table import age, build_table, human_duration, wants_table

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("seconds", "expected"), [
    (-5, "<invalid>"), (-0.5, "0s"), (0, "0s"), (59, "59s"), (119, "119s"), (120, "2m"),
    (185, "3m5s"), (600, "10m"), (3 * 3600 - 1, "179m"), (3 * 3600, "3h"),
    (5 * 3600 + 20 * 60, "5h20m"), (30 * 3600, "30h"), (3 * 86400 + 4 * 3600, "3d4h"),
    (3 * 86400, "3d"), (100 * 86400, "100d"), (800 * 86400, "2y70d"), (10 * 365 * 86400, "10y"),
])
def test_human_duration(seconds: float, expected: str) -> None:
    assert human_duration(seconds) == expected


def test_age_of_timestamps() -> None:
    now = datetime(2026, 1, 1, 0, 1, 0, tzinfo=UTC)
    assert age("2026-01-01T00:00:30Z", now) == "30s"
    assert age("yesterday", now) == "<invalid>"
    assert age(None, now) is None


@pytest.mark.parametrize(("path", "expected"), [
    (".spec.a", [1]),
    (".spec.list[1].n", ["y"]),
    (".spec.list[*].n", ["x", "y"]),
    ('.status.conditions[?(@.type=="Ready")].status', ["True"]),
    ('{.status.conditions[?(@.type!="Ready")].type}', ["Other"]),
    (".spec.missing", []),
])
def test_jsonpath_subset(path: str, expected: list) -> None:
    obj = {"spec": {"a": 1, "list": [{"n": "x"}, {"n": "y"}]},
           "status": {"conditions": [{"type": "Other", "status": "False"},
                                     {"type": "Ready", "status": "True"}]}}
    assert jsonpath.find(obj, path) == expected


@pytest.mark.parametrize(("accept", "expected"), [
    ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json", True),
    ("application/json; as=Table; g=meta.k8s.io; v=v1", True),
    ("application/json", False),
    ("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", False),
])
def test_wants_table(accept: str, expected: bool) -> None:
    assert wants_table(accept) is expected


def test_cells_are_typed_like_the_crd_table_convertor() -> None:
    rtype = ResourceType(group="g", version="v1", kind="K", plural="ks", singular="k",
                         namespaced=True, crd_name="ks.g", printer_columns=(
                             {"name": "S", "type": "string", "jsonPath": ".spec.n"},
                             {"name": "I", "type": "integer", "jsonPath": ".spec.n"},
                             {"name": "B", "type": "boolean", "jsonPath": ".spec.s"},
                             {"name": "N", "type": "number", "jsonPath": ".spec.f"},
                         ))
    obj = {"metadata": {"name": "a"}, "spec": {"n": 3, "s": "yes", "f": 0.5}}
    document = build_table(rtype, [obj], "7", include_object="None")
    assert document["rows"] == [{"cells": ["a", "3", 3, None, 0.5], "object": None}]
    assert document["metadata"] == {"resourceVersion": "7"}
