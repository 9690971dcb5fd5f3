"""Patch semantics (pure, table-driven): JSON patch, merge patch, strategic merge, apply."""

from __future__ import annotations

import pytest

from tpujob.local.apiserver.patch import (
    PatchError,
    apply_json_patch,
    apply_merge_patch,
    apply_server_side,
    apply_strategic_merge_patch,
)

pytestmark = pytest.mark.unit

DOC = {"metadata": {"finalizers": ["a"], "labels": {"x": "1"}}, "spec": {"n": 1, "l": [1, 2]}}


@pytest.mark.parametrize(("ops", "expected"), [
    ([{"op": "add", "path": "/spec/m", "value": 2}],
     {**DOC, "spec": {"n": 1, "l": [1, 2], "m": 2}}),
    ([{"op": "add", "path": "/spec/l/-", "value": 3}],
     {**DOC, "spec": {"n": 1, "l": [1, 2, 3]}}),
    ([{"op": "add", "path": "/spec/l/0", "value": 0}],
     {**DOC, "spec": {"n": 1, "l": [0, 1, 2]}}),
    ([{"op": "remove", "path": "/spec/n"}], {**DOC, "spec": {"l": [1, 2]}}),
    ([{"op": "replace", "path": "/spec/n", "value": 5}],
     {**DOC, "spec": {"n": 5, "l": [1, 2]}}),
    ([{"op": "test", "path": "/metadata/finalizers", "value": ["a"]},
      {"op": "remove", "path": "/metadata/finalizers/0"}],
     {**DOC, "metadata": {"finalizers": [], "labels": {"x": "1"}}}),
    ([{"op": "move", "from": "/spec/n", "path": "/spec/k"}],
     {**DOC, "spec": {"l": [1, 2], "k": 1}}),
    ([{"op": "copy", "from": "/spec/n", "path": "/spec/k"}],
     {**DOC, "spec": {"n": 1, "l": [1, 2], "k": 1}}),
    ([{"op": "add", "path": "/metadata/labels/a~1b", "value": "y"}],
     {**DOC, "metadata": {"finalizers": ["a"], "labels": {"x": "1", "a/b": "y"}}}),
])
def test_json_patch(ops: list, expected: dict) -> None:
    assert apply_json_patch(DOC, ops) == expected


@pytest.mark.parametrize(("ops", "code"), [
    ([{"op": "test", "path": "/spec/n", "value": 2}], 422),
    ([{"op": "remove", "path": "/spec/missing"}], 422),
    ([{"op": "replace", "path": "/nope/x", "value": 1}], 422),
    ([{"op": "add", "path": "/spec/l/9", "value": 1}], 422),
    ([{"op": "frobnicate", "path": "/spec"}], 400),
    ({"op": "add"}, 400),
])
def test_json_patch_errors(ops, code: int) -> None:
    with pytest.raises(PatchError) as err:
        apply_json_patch(DOC, ops)
    assert err.value.code == code


def test_json_patch_leaves_input_untouched() -> None:
    doc = {"a": {"b": 1}}
    apply_json_patch(doc, [{"op": "replace", "path": "/a/b", "value": 2}])
    assert doc == {"a": {"b": 1}}


@pytest.mark.parametrize(("target", "patch", "expected"), [
    ({"a": 1, "b": {"c": 2}}, {"b": {"d": 3}}, {"a": 1, "b": {"c": 2, "d": 3}}),
    ({"a": 1, "b": 2}, {"a": None}, {"b": 2}),
    ({"l": [1, 2]}, {"l": [3]}, {"l": [3]}),
    ({"a": {"b": 1}}, {"a": 5}, {"a": 5}),
])
def test_merge_patch(target: dict, patch: dict, expected: dict) -> None:
    assert apply_merge_patch(target, patch) == expected


def test_strategic_merge_merges_named_lists() -> None:
    pod = {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}}
    patched = apply_strategic_merge_patch(pod, {"spec": {
        "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
        "containers": [{"name": "b", "image": "z"}, {"name": "a", "$patch": "delete"}]}})
    assert patched == {"spec": {"containers": [{"name": "b", "image": "z"}]}}


def test_server_side_apply_removes_fields_no_longer_applied() -> None:
    live = {"metadata": {"name": "w", "labels": {"a": "1", "b": "2"}},
            "spec": {"x": 1, "y": 2, "z": 3}, "status": {"s": 1}}
    previous = {"metadata": {"name": "w", "labels": {"a": "1"}}, "spec": {"x": 1, "y": 2}}
    applied = {"metadata": {"name": "w"}, "spec": {"x": 5}}
    merged = apply_server_side(live, applied, previous)
    assert merged == {"metadata": {"name": "w", "labels": {"b": "2"}},
                      "spec": {"x": 5, "z": 3}, "status": {"s": 1}}
