"""Strategic merge patch (pure, table-driven): each list merged or replaced as its Go field
declares, the directives carried out, and the merged list ordered as kube-apiserver orders it.
The expected answers are kube-apiserver v1.35.4's (tests/conformance sends the same patches to
it)."""

from __future__ import annotations

import pytest

from tpujob.local.apiserver.patch import PatchError
from tpujob.local.apiserver.strategic import (
    OBJECT_META,
    apply_strategic_merge_patch,
    fields_of,
)

pytestmark = pytest.mark.unit

POD_FIELDS = fields_of("", "Pod")


def test_strategic_merge_merges_named_lists() -> None:
    pod = {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}}
    patched = apply_strategic_merge_patch(pod, {"spec": {
        "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
        "containers": [{"name": "b", "image": "z"}, {"name": "a", "$patch": "delete"}]}},
        POD_FIELDS)
    assert patched == {"spec": {"containers": [{"name": "b", "image": "z"}]}}


POD = {"metadata": {"name": "p", "labels": {"a": "1"}},
       "spec": {"containers": [
           {"name": "main", "image": "x:1", "args": ["--a"],
            "ports": [{"containerPort": 80, "name": "http"}],
            "volumeMounts": [{"mountPath": "/data", "name": "d"}],
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
           {"name": "side", "image": "y:1"}]}}


def _main(pod: dict) -> dict:
    return pod["spec"]["containers"][0]


# Strategic merge patch as Kubernetes applies it to a pod: lists of objects merge by their
# merge key (containers and env by name, ports by containerPort, volumeMounts by mountPath),
# lists of scalars and maps without a key are replaced, null and `$patch: delete` remove,
# `$patch: replace` replaces a map or a list, and kubectl's ordering hints change nothing.
@pytest.mark.parametrize(("patch", "check"), [
    ({"spec": {"containers": [{"name": "main", "image": "x:2"}]}},
     lambda p: (_main(p)["image"], _main(p)["args"], p["spec"]["containers"][1]["image"])
     == ("x:2", ["--a"], "y:1")),
    ({"spec": {"containers": [{"name": "new", "image": "z:1"}]}},
     # a new item goes before the live ones (mergeSortedSlice: patch items first unless both
     # are in the live list)
     lambda p: [c["name"] for c in p["spec"]["containers"]] == ["new", "main", "side"]),
    ({"spec": {"containers": [{"name": "side", "$patch": "delete"}]}},
     lambda p: [c["name"] for c in p["spec"]["containers"]] == ["main"]),
    ({"spec": {"containers": [{"name": "gone", "$patch": "delete"}]}},
     lambda p: len(p["spec"]["containers"]) == 2),
    ({"spec": {"containers": [{"name": "main", "ports": [{"containerPort": 80, "name": "web"},
                                                         {"containerPort": 81}]}]}},
     lambda p: _main(p)["ports"] == [{"containerPort": 80, "name": "web"},
                                     {"containerPort": 81}]),
    ({"spec": {"containers": [{"name": "main", "volumeMounts": [
        {"mountPath": "/data", "readOnly": True}]}]}},
     lambda p: _main(p)["volumeMounts"] == [{"mountPath": "/data", "name": "d",
                                             "readOnly": True}]),
    ({"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "3"}]}]}},
     lambda p: _main(p)["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}]),
    ({"spec": {"containers": [{"name": "main", "args": ["--b"]}]}},
     lambda p: _main(p)["args"] == ["--b"]),
    ({"spec": {"containers": [{"name": "only", "image": "o:1"}, {"$patch": "replace"}]}},
     lambda p: p["spec"]["containers"] == [{"name": "only", "image": "o:1"}]),
    ({"metadata": {"labels": {"$patch": "replace", "b": "2"}}},
     lambda p: p["metadata"]["labels"] == {"b": "2"}),
    # an empty map (the server then leaves it out, as Go's omitempty does)
    ({"metadata": {"labels": {"$patch": "delete"}}}, lambda p: p["metadata"]["labels"] == {}),
    ({"metadata": {"labels": {"a": None, "c": "3"}}},
     lambda p: p["metadata"]["labels"] == {"c": "3"}),
    # $setElementOrder orders the merged list (strategicpatch: order list > patch > live).
    ({"spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "main"}],
               "containers": [{"name": "main", "image": "x:3"}]}},
     lambda p: [c["name"] for c in p["spec"]["containers"]] == ["side", "main"]
     and "$setElementOrder/containers" not in p["spec"]),
    ({"spec": {"nodeName": "n1"}}, lambda p: p["spec"]["nodeName"] == "n1"
     and len(p["spec"]["containers"]) == 2),
    ({"status": {"phase": "Running"}}, lambda p: p["status"] == {"phase": "Running"}),
])
def test_strategic_merge_patch_on_a_pod(patch: dict, check) -> None:
    before = repr(POD)
    assert check(apply_strategic_merge_patch(POD, patch, POD_FIELDS))
    assert repr(POD) == before


def test_strategic_merge_patch_of_a_scalar_or_onto_nothing() -> None:
    assert apply_strategic_merge_patch({"a": 1}, "x") == "x"
    assert apply_strategic_merge_patch(None, {"a": {"$patch": "replace", "b": 1}}) == {"a": {"b": 1}}
    # A list the object lacks: the patch's items without their directives, deletions dropped.
    assert apply_strategic_merge_patch({}, {"containers": [
        {"name": "n", "$patch": "merge"}, {"name": "gone", "$patch": "delete"}]}) == \
        {"containers": [{"name": "n"}]}
    assert apply_strategic_merge_patch({"args": "x"}, {"args": ["--a"]}) == {"args": ["--a"]}


# metadata of every kind: finalizers merge as a set, ownerReferences by uid.
@pytest.mark.parametrize(("live", "patch", "expected"), [
    # a new finalizer goes first (a patch item not in the live list), the live ones keep order
    (["one"], ["two"], ["two", "one"]),
    (["two", "one"], ["one"], ["two", "one"]),
    (["a", "b"], ["b", "c"], ["a", "b", "c"]),
])
def test_finalizers_merge_as_a_set(live: list, patch: list, expected: list) -> None:
    patched = apply_strategic_merge_patch({"metadata": {"finalizers": live}},
                                          {"metadata": {"finalizers": patch}})
    assert patched["metadata"]["finalizers"] == expected


def test_delete_from_primitive_list_and_set_element_order() -> None:
    live = {"metadata": {"finalizers": ["two", "one"]}}
    gone = apply_strategic_merge_patch(live, {"metadata": {
        "$deleteFromPrimitiveList/finalizers": ["one", "absent"]}})
    assert gone == {"metadata": {"finalizers": ["two"]}}
    ordered = apply_strategic_merge_patch(gone, {"metadata": {
        "$setElementOrder/finalizers": ["three", "two"], "finalizers": ["three"]}})
    assert ordered == {"metadata": {"finalizers": ["three", "two"]}}


def test_owner_references_merge_by_uid_not_by_name() -> None:
    owners = [{"kind": "ConfigMap", "name": "o", "uid": "1"},
              {"kind": "Secret", "name": "o", "uid": "2"}]
    patched = apply_strategic_merge_patch({"metadata": {"ownerReferences": owners}}, {
        "metadata": {"ownerReferences": [{**owners[1], "blockOwnerDeletion": False}]}})
    assert patched["metadata"]["ownerReferences"] == [
        owners[0], {**owners[1], "blockOwnerDeletion": False}]
    dropped = apply_strategic_merge_patch(patched, {"metadata": {"ownerReferences": [
        {"uid": "1", "$patch": "delete"}]}})
    assert [r["uid"] for r in dropped["metadata"]["ownerReferences"]] == ["2"]


def test_service_ports_merge_by_port() -> None:
    live = {"spec": {"ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]}}
    patched = apply_strategic_merge_patch(live, {"spec": {"ports": [{"name": "c", "port": 80}]}},
                                          fields_of("", "Service"))
    assert patched["spec"]["ports"] == [{"name": "c", "port": 80}, {"name": "b", "port": 81}]


def test_a_list_without_a_strategy_is_replaced() -> None:
    live = {"spec": {"tolerations": [{"key": "a"}], "containers": [{"name": "m"}]}}
    patched = apply_strategic_merge_patch(live, {"spec": {"tolerations": [{"key": "b"}]}},
                                          POD_FIELDS)
    assert patched["spec"]["tolerations"] == [{"key": "b"}]
    # and a kind with no declarations of its own merges only its metadata's lists
    assert fields_of("", "ConfigMap") is OBJECT_META


@pytest.mark.parametrize(("patch", "expected"), [
    ({"data": {"$retainKeys": ["a", "b", "d"], "d": "4"}}, {"a": "1", "b": "2", "d": "4"}),
    ({"data": {"$patch": "replace", "z": "9"}}, {"z": "9"}),
    ({"data": {"$patch": "delete"}}, {}),
    ({"data": {"a": None}}, {"b": "2", "c": "3"}),
])
def test_map_directives(patch: dict, expected: dict) -> None:
    live = {"data": {"a": "1", "b": "2", "c": "3"}}
    assert apply_strategic_merge_patch(live, patch)["data"] == expected


@pytest.mark.parametrize(("patch", "code", "message"), [
    # a key outside $retainKeys: mergepatch.ErrBadPatchFormatForRetainKeys, 400
    ({"data": {"$retainKeys": ["a"], "e": "5"}}, 400, "invalid patch format of retainKeys"),
    # an unknown $patch: ErrBadPatchType, not an API error, so kube-apiserver answers 500
    ({"metadata": {"labels": {"$patch": "bogus"}}}, 500,
     "unknown patch type: bogus in map: map[$patch:bogus]"),
    ({"spec": {"containers": [{"$patch": "delete"}]}}, 400,
     "map: map[$patch:delete] does not contain declared merge key: name"),
    ({"spec": {"containers": [{"name": "m", "$patch": "bogus"}]}}, 500,
     "unknown patch type: bogus in map: map[$patch:bogus name:m]"),
])
def test_malformed_directives_are_refused(patch: dict, code: int, message: str) -> None:
    live = {"metadata": {"labels": {"x": "1"}}, "data": {"a": "1"},
            "spec": {"containers": [{"name": "m"}]}}
    with pytest.raises(PatchError) as refused:
        apply_strategic_merge_patch(live, patch, POD_FIELDS)
    assert (refused.value.code, str(refused.value)) == (code, message)


def test_set_element_order_alone_reorders_the_live_list() -> None:
    live = {"metadata": {"finalizers": ["a", "b"]}}
    patched = apply_strategic_merge_patch(live, {"metadata": {
        "$setElementOrder/finalizers": ["b", "a"]}})
    assert patched == {"metadata": {"finalizers": ["b", "a"]}}


@pytest.mark.parametrize(("live", "patch", "expected"), [
    ([], [], []),
    ([], ["a"], ["a"]),
    (["a"], [], ["a"]),
    (["a", "b"], ["b"], ["a", "b"]),
])
def test_merging_empty_and_overlapping_sets(live: list, patch: list, expected: list) -> None:
    patched = apply_strategic_merge_patch({"metadata": {"finalizers": live}},
                                          {"metadata": {"finalizers": patch}})
    assert patched["metadata"]["finalizers"] == expected


@pytest.mark.parametrize(("live", "patch", "expected"), [
    # a value of another type replaces the live one, whatever its strategy
    ({"spec": {"containers": {"a": 1}}}, {"spec": {"containers": [{"name": "m"}]}},
     {"spec": {"containers": [{"name": "m"}]}}),
    ({"spec": {"containers": [{"name": "m"}]}}, {"spec": {"containers": {"a": 1}}},
     {"spec": {"containers": {"a": 1}}}),
    # $deleteFromPrimitiveList of a list without the merge strategy: strategicpatch's
    # mergeSliceHandler takes the patch's list as it is
    ({"spec": {"args": ["a", "b"]}}, {"spec": {"$deleteFromPrimitiveList/args": ["a"]}},
     {"spec": {"args": ["a"]}}),
    # ... of something that is not a list: nothing happens
    ({"metadata": {"finalizers": ["a"]}},
     {"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}},
     {"metadata": {"finalizers": ["a"]}}),
    # ... of a list the object lacks: nothing either
    ({"metadata": {}}, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}},
     {"metadata": {}}),
])
def test_types_that_do_not_match(live: dict, patch: dict, expected: dict) -> None:
    assert apply_strategic_merge_patch(live, patch, POD_FIELDS) == expected


@pytest.mark.parametrize(("patch", "message"), [
    ({"metadata": {"finalizers": [{"a": 1}]}}, "cannot merge lists without merge key"),
    ({"spec": {"containers": [{"image": "x"}]}},
     "map: map[image:x] does not contain declared merge key: name"),
    ({"spec": {"containers": ["x"]}}, "map: x does not contain declared merge key: name"),
])
def test_lists_that_cannot_merge_are_400(patch: dict, message: str) -> None:
    live = {"metadata": {"finalizers": ["f"]}, "spec": {"containers": [{"name": "m"}]}}
    with pytest.raises(PatchError) as refused:
        apply_strategic_merge_patch(live, patch, POD_FIELDS)
    assert (refused.value.code, str(refused.value)) == (400, message)


def test_an_unknown_patch_type_names_the_map_as_go_prints_it() -> None:
    with pytest.raises(PatchError) as refused:
        apply_strategic_merge_patch({"spec": {}}, {"spec": {
            "$patch": "bogus", "l": [1, None, True], "m": {"b": "x", "a": 2}}})
    assert (refused.value.code, str(refused.value)) == (
        500, "unknown patch type: bogus in map: map[$patch:bogus l:[1 <nil> true] m:map[a:2 b:x]]")


def test_declarations_are_frozen() -> None:
    from dataclasses import FrozenInstanceError

    from tpujob.local.apiserver.strategic import Field
    with pytest.raises(FrozenInstanceError):
        Field().merge = True  # type: ignore[misc]
