"""Patch semantics (pure, table-driven): JSON patch, merge patch, apply (strategic merge:
test_strategic_unit.py)."""

from __future__ import annotations

import pytest

from tpujob.local.apiserver.patch import (
    PatchError,
    apply_conflicts,
    apply_json_patch,
    apply_merge_patch,
    apply_server_side,
    conflict_message,
    forget_fields,
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


def test_server_side_apply_removes_fields_no_longer_applied() -> None:
    live = {"metadata": {"name": "w", "labels": {"a": "1", "b": "2"}},
            "spec": {"x": 1, "y": 2, "z": 3}, "status": {"s": 1}}
    previous = {"metadata": {"name": "w", "labels": {"a": "1"}}, "spec": {"x": 1, "y": 2}}
    applied = {"metadata": {"name": "w"}, "spec": {"x": 5}}
    merged = apply_server_side(live, applied, previous)
    assert merged == {"metadata": {"name": "w", "labels": {"b": "2"}},
                      "spec": {"x": 5, "z": 3}, "status": {"s": 1}}


# RFC 7386, Appendix A: every example, as the RFC gives it.
@pytest.mark.parametrize(("target", "patch", "expected"), [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
])
def test_merge_patch_rfc7386_examples(target, patch, expected) -> None:
    before = repr(target)
    assert apply_merge_patch(target, patch) == expected
    assert repr(target) == before  # the stored object is not patched in place


# RFC 6902, Appendix A (A.1-A.16, those that are not about JSON syntax), and RFC 6901's pointers.
@pytest.mark.parametrize(("doc", "ops", "expected"), [
    ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}],
     {"baz": "qux", "foo": "bar"}),                                                     # A.1
    ({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}],
     {"foo": ["bar", "qux", "baz"]}),                                                   # A.2
    ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),  # A.3
    ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}],
     {"foo": ["bar", "baz"]}),                                                          # A.4
    ({"baz": "qux", "foo": "bar"}, [{"op": "replace", "path": "/baz", "value": "boo"}],
     {"baz": "boo", "foo": "bar"}),                                                     # A.5
    ({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
     [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
     {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}),              # A.6
    ({"foo": ["all", "grass", "cows", "eat"]}, [{"op": "move", "from": "/foo/1",
                                                 "path": "/foo/3"}],
     {"foo": ["all", "cows", "eat", "grass"]}),                                         # A.7
    ({"baz": "qux", "foo": ["a", 2, "c"]},
     [{"op": "test", "path": "/baz", "value": "qux"},
      {"op": "test", "path": "/foo/1", "value": 2}], {"baz": "qux", "foo": ["a", 2, "c"]}),  # A.8
    ({"foo": "bar"}, [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
     {"foo": "bar", "child": {"grandchild": {}}}),                                      # A.10
    ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}],
     {"foo": "bar", "baz": "qux"}),                                                     # A.11
    ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}],
     {"/": 9, "~1": 10}),                                                               # A.14
    ({"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
     {"foo": ["bar", ["abc", "def"]]}),                                                 # A.16
    ({"a": {"b": [{"c": 1}]}}, [{"op": "replace", "path": "/a/b/0/c", "value": 2}],
     {"a": {"b": [{"c": 2}]}}),                                  # through an array element
    ({"a": [1, 2]}, [{"op": "add", "path": "/a/2", "value": 3}], {"a": [1, 2, 3]}),  # at the end
    ({"a": 1}, [{"op": "add", "path": "", "value": {"b": 2}}], {"b": 2}),   # the whole document
    ({"a": 1}, [{"op": "replace", "path": "", "value": [3]}], [3]),
    ({"a": {"b": 1}}, [{"op": "copy", "from": "/a", "path": "/c"},
                       {"op": "replace", "path": "/c/b", "value": 2}],
     {"a": {"b": 1}, "c": {"b": 2}}),                            # a copy, not the same object
    ({"a": {"b": 1}}, [{"op": "test", "path": "", "value": {"a": {"b": 1}}}], {"a": {"b": 1}}),
    ({"l": [1, True]}, [{"op": "test", "path": "/l", "value": [1.0, True]}], {"l": [1, True]}),
])
def test_json_patch_rfc6902_examples(doc, ops, expected) -> None:
    before = repr(doc)
    assert apply_json_patch(doc, ops) == expected
    assert repr(doc) == before


@pytest.mark.parametrize(("doc", "ops", "code"), [
    ({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}], 422),            # A.9
    ({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}], 422),         # A.12
    ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": "10"}], 422),         # A.15
    ({"n": 1}, [{"op": "test", "path": "/n", "value": True}], 422),       # true is not 1
    ({"n": True}, [{"op": "test", "path": "/n", "value": 1}], 422),
    ({"m": {"a": 1}}, [{"op": "test", "path": "/m", "value": {"a": 1, "b": 2}}], 422),
    ({"l": [1]}, [{"op": "test", "path": "/l", "value": [1, 2]}], 422),
    ({"m": {"a": 1}}, [{"op": "test", "path": "/m", "value": ["a"]}], 422),  # a map, no array
    ({"l": ["a", "b"]}, [{"op": "test", "path": "/l", "value": "ab"}], 422),  # no string
    ({"l": [1]}, [{"op": "test", "path": "/l/1", "value": 1}], 422),      # past the end
    ({"l": [1]}, [{"op": "test", "path": "/m", "value": 1}], 422),
    ({"l": [1, 2]}, [{"op": "remove", "path": "/l/-"}], 422),             # "-" names no element
    ({"l": [1, 2]}, [{"op": "remove", "path": "/l/01"}], 422),            # no leading zeros
    ({"l": [1, 2]}, [{"op": "remove", "path": "/l/x"}], 422),
    ({"l": [1, 2]}, [{"op": "remove", "path": "/l/2"}], 422),
    ({"l": [1, 2]}, [{"op": "replace", "path": "/l/2", "value": 0}], 422),
    ({"l": [1, 2]}, [{"op": "replace", "path": "/m", "value": 0}], 422),   # replace needs it
    ({"l": [[1]]}, [{"op": "add", "path": "/l/1/0", "value": 0}], 422),   # no element 1
    ({"l": "s"}, [{"op": "add", "path": "/l/0", "value": 0}], 422),       # into a string
    ({"l": "s"}, [{"op": "remove", "path": "/l/0"}], 422),
    ({"a": 1}, [{"op": "remove", "path": ""}], 422),
    ({"a": 1}, [{"op": "remove", "path": "a"}], 422),                     # a pointer starts /
    ({"a": 1}, [{"op": "add", "path": "/b"}], 400),                       # no value
    ({"a": 1}, [{"op": "replace", "path": "/a"}], 400),
    ({"a": 1}, [{"op": "test", "path": "/a"}], 400),
    ({"a": 1}, [{"path": "/a"}], 400),
    ({"a": 1}, [{"op": "remove"}], 400),
    ({"a": 1}, ["remove /a"], 400),
])
def test_json_patch_refusals(doc, ops, code: int) -> None:
    with pytest.raises(PatchError) as err:
        apply_json_patch(doc, ops)
    assert err.value.code == code


def test_a_json_patch_that_fails_changes_nothing() -> None:
    doc = {"a": 1, "l": [1]}
    with pytest.raises(PatchError):
        apply_json_patch(doc, [{"op": "add", "path": "/b", "value": 2},
                               {"op": "test", "path": "/a", "value": 5}])
    assert doc == {"a": 1, "l": [1]}


@pytest.mark.parametrize(("live", "previous", "applied", "expected"), [
    # A field this manager applied before and no longer applies goes; others' fields stay.
    ({"spec": {"x": 1, "y": 2, "z": 3}}, {"spec": {"x": 1, "y": 2}}, {"spec": {"x": 1}},
     {"spec": {"x": 1, "z": 3}}),
    # Nothing applied before: a merge only.
    ({"spec": {"x": 1, "y": 2}}, None, {"spec": {"x": 5}}, {"spec": {"x": 5, "y": 2}}),
    # A field now applied whole (its parent a leaf) is not pruned below it.
    ({"spec": {"m": {"a": 1, "b": 2}}}, {"spec": {"m": {"a": 1, "b": 2}}}, {"spec": {"m": {}}},
     {"spec": {"m": {"a": 1, "b": 2}}}),
    # Labels, annotations and finalizers this manager applied are pruned (kube-apiserver:
    # finalizers are a set, each owned by who applied it); the rest of metadata never is.
    ({"metadata": {"name": "w", "finalizers": ["f"], "labels": {"a": "1"},
                   "annotations": {"n": "1"}, "generateName": "g"}},
     {"metadata": {"name": "w", "finalizers": ["f"], "labels": {"a": "1"},
                   "annotations": {"n": "1"}, "generateName": "g"}},
     {"metadata": {"name": "w"}},
     {"metadata": {"name": "w", "finalizers": [], "labels": {}, "annotations": {},
                   "generateName": "g"}}),
    # A whole section dropped from the applied object goes with its fields.
    ({"spec": {"x": 1}, "data": {"k": "v"}}, {"spec": {"x": 1}, "data": {"k": "v"}},
     {"spec": {"x": 1}}, {"spec": {"x": 1}, "data": {}}),
    # Lists are atomic: the applied list replaces the live one.
    ({"spec": {"l": [1, 2, 3]}}, {"spec": {"l": [1, 2, 3]}}, {"spec": {"l": [4]}},
     {"spec": {"l": [4]}}),
    # A field whose applied value changes kind: the applied value, whole.
    ({"spec": {"x": {"a": 1}}}, None, {"spec": {"x": 5}}, {"spec": {"x": 5}}),
    ({"spec": {"x": 5}}, None, {"spec": {"x": {"a": 1}}}, {"spec": {"x": {"a": 1}}}),
    # Nothing applied any more: every field applied before goes.
    ({"data": {"k": "v"}}, {"data": {"k": "v"}}, {}, {"data": {}}),
    # A path already gone from the live object is no error.
    ({"spec": {}}, {"spec": {"x": {"y": 1}}}, {"spec": {}}, {"spec": {}}),
])
def test_server_side_apply(live, previous, applied, expected) -> None:
    before = repr(live)
    assert apply_server_side(live, applied, previous) == expected
    assert repr(live) == before


def test_fields_v1_names_every_applied_field() -> None:
    from tpujob.local.apiserver.patch import fields_v1

    applied = {"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "c", "labels": {"a": "1"}}, "data": {"k": "v"}}
    assert fields_v1(applied) == {"f:metadata": {"f:name": {}, "f:labels": {"f:a": {}}},
                                  "f:data": {"f:k": {}}}
    assert fields_v1(["not", "a", "map"]) == {}


# Server-side apply between managers, as kube-apiserver v1.35.4 answers (tests/conformance).
def test_a_field_another_manager_applied_conflicts_unless_the_value_is_the_same() -> None:
    live = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "data": {"a": "1", "c": "3"}}
    others = {"one": {"data": {"a": "1"}}, "three": {"data": {"c": "3"}}}
    applied = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    assert apply_conflicts(live, {**applied, "data": {"a": "1"}}, others) == []
    assert apply_conflicts(live, {**applied, "data": {"a": "2"}}, others) == [("one", ".data.a")]
    both = apply_conflicts(live, {**applied, "data": {"a": "2", "c": "4"}}, others)
    assert both == [("one", ".data.a"), ("three", ".data.c")]
    assert conflict_message(both[:1]) == \
        'Apply failed with 1 conflict: conflict with "one": .data.a'
    assert conflict_message(both) == ('Apply failed with 2 conflicts: conflicts with "one":\n'
                                      '- .data.a\nconflicts with "three":\n- .data.c')
    assert forget_fields({"data": {"a": "1", "b": "2"}}, [".data.a"]) == {"data": {"b": "2"}}


def test_finalizers_applied_by_two_managers_are_a_set() -> None:
    live = {"metadata": {"name": "c", "finalizers": ["x.io/one"]}}
    two = {"metadata": {"name": "c", "finalizers": ["x.io/two"]}}
    merged = apply_server_side(live, two, None, [{"metadata": {"finalizers": ["x.io/one"]}}])
    assert merged["metadata"]["finalizers"] == ["x.io/one", "x.io/two"]
    # one stops applying its finalizer: it goes; two's stays
    dropped = apply_server_side(merged, {"metadata": {"name": "c", "finalizers": []}},
                                {"metadata": {"finalizers": ["x.io/one"]}}, [two])
    assert dropped["metadata"]["finalizers"] == ["x.io/two"]
    # a finalizer both apply stays while either does
    shared = apply_server_side(merged, {"metadata": {"name": "c", "finalizers": []}},
                               {"metadata": {"finalizers": ["x.io/one"]}},
                               [{"metadata": {"finalizers": ["x.io/one", "x.io/two"]}}])
    assert shared["metadata"]["finalizers"] == ["x.io/one", "x.io/two"]
