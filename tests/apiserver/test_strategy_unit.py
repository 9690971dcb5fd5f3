"""What a write does to an object, as kube-apiserver does it (pure): the metadata the server
owns on create and update, `generation` bumping on spec changes only, the status subresource,
and metadata refused for its type (400) or its content (422)."""

from __future__ import annotations

import copy

import pytest

from tests.apiserver.crds import WIDGET_CRD, widget
from tpujob.local.apiserver.errors import ApiError
from tpujob.local.apiserver.resources import BUILTINS, CRD_TYPE, types_from_crd
from tpujob.local.apiserver.strategy import _SUFFIX_CHARS, prepare_create, prepare_update

pytestmark = pytest.mark.unit

TYPES = {(t.group, t.plural): t for t in BUILTINS}
CONFIGMAPS, PODS = TYPES[("", "configmaps")], TYPES[("", "pods")]
JOBS, NAMESPACES = TYPES[("batch", "jobs")], TYPES[("", "namespaces")]
SERVICES = TYPES[("", "services")]
WIDGETS = types_from_crd(WIDGET_CRD)[0]                      # status subresource
_NO_STATUS = copy.deepcopy(WIDGET_CRD)
del _NO_STATUS["spec"]["versions"][0]["subresources"]
PLAIN_WIDGETS = types_from_crd(_NO_STATUS)[0]                 # status is part of the spec
NOW = "2026-01-01T00:00:00Z"


def create(rtype, body, namespace="default", rv=7):
    return prepare_create(rtype, copy.deepcopy(body), namespace if rtype.namespaced else None,
                          NOW, rv).obj


def refused(fn, *args, **kwargs) -> ApiError:
    with pytest.raises(ApiError) as err:
        fn(*args, **kwargs)
    return err.value


def test_create_sets_the_metadata_the_server_owns():
    sent = {"metadata": {"name": "c", "namespace": "default", "uid": "mine", "generation": 9,
                         "deletionTimestamp": NOW, "deletionGracePeriodSeconds": 5,
                         "selfLink": "/x", "resourceVersion": "3"}}
    meta = create(CONFIGMAPS, sent)["metadata"]
    assert meta["uid"] != "mine" and meta["creationTimestamp"] == NOW
    assert meta["resourceVersion"] == "7" and meta["namespace"] == "default"
    assert not {"generation", "deletionTimestamp", "deletionGracePeriodSeconds",
                "selfLink"} & set(meta)
    ns = create(NAMESPACES, {"metadata": {"name": "n", "namespace": "default"}}, None)
    assert "namespace" not in ns["metadata"]


def test_generate_name_gives_the_prefix_and_five_random_characters_unless_named():
    named = create(CONFIGMAPS, {"metadata": {"generateName": "job-"}})["metadata"]["name"]
    assert named.startswith("job-") and len(named) == 9
    assert set(named[4:]) <= set(_SUFFIX_CHARS)
    both = {"metadata": {"name": "given", "generateName": "job-"}}
    assert create(CONFIGMAPS, both)["metadata"]["name"] == "given"


@pytest.mark.parametrize(("rtype", "body", "status", "generation"), [
    (CONFIGMAPS, {"metadata": {"name": "c"}, "data": {}}, None, None),
    (PODS, {"metadata": {"name": "p"}, "spec": {}, "status": {"phase": "Running"}},
     {"phase": "Pending"}, None),
    (JOBS, {"metadata": {"name": "j"}, "spec": {}, "status": {"active": 1}}, None, None),
    (SERVICES, {"metadata": {"name": "s"}, "spec": {}, "status": {"loadBalancer": {}}}, None,
     None),
    (CRD_TYPE, WIDGET_CRD, None, 1),
    (WIDGETS, {**widget("w"), "status": {"phase": "Up"}}, None, 1),
    (PLAIN_WIDGETS, {**widget("w"), "status": {"phase": "Up"}}, {"phase": "Up"}, 1),
])
def test_create_drops_a_status_the_subresource_owns_and_counts_generations_of_specs(
        rtype, body, status, generation):
    obj = create(rtype, body)
    assert obj.get("status") == status
    assert obj["metadata"].get("generation") == generation


# (type, the change made by a PUT of the main resource, the generation after)
@pytest.mark.parametrize(("rtype", "change", "generation"), [
    (WIDGETS, lambda o: o["spec"].update(replicas=3), 2),
    (WIDGETS, lambda o: o["metadata"].update(labels={"a": "b"}), 1),
    (WIDGETS, lambda o: o.update(status={"phase": "Up"}), 1),    # status: its subresource's
    (PLAIN_WIDGETS, lambda o: o.update(status={"phase": "Up"}), 2),  # status: part of the spec
])
def test_generation_counts_changes_of_the_spec_only(rtype, change, generation):
    old = create(rtype, widget("w"))
    body = copy.deepcopy(old)
    change(body)
    new = prepare_update(rtype, body, old, None, 8).obj
    assert new["metadata"]["generation"] == generation
    assert new["metadata"]["resourceVersion"] == "8"


def test_the_status_subresource_writes_status_only_and_the_main_resource_everything_else():
    old = create(WIDGETS, widget("w"))
    old["status"] = {"phase": "Up"}
    body = copy.deepcopy(old)
    body["spec"]["replicas"] = 5
    body["status"] = {"phase": "Down"}
    via_status = prepare_update(WIDGETS, body, old, "status", 8).obj
    assert via_status["spec"] == old["spec"] and via_status["status"] == {"phase": "Down"}
    assert via_status["metadata"]["generation"] == 1
    without = copy.deepcopy(old)
    del without["status"]
    assert "status" not in prepare_update(WIDGETS, without, old, "status", 8).obj
    main = prepare_update(WIDGETS, body, old, None, 8).obj
    assert main["spec"]["replicas"] == 5 and main["status"] == {"phase": "Up"}
    fresh = create(WIDGETS, widget("v"))
    assert "status" not in prepare_update(WIDGETS, {**fresh, "status": {"phase": "Up"}},
                                          fresh, None, 8).obj


def test_an_update_keeps_the_metadata_the_server_owns():
    old = create(WIDGETS, widget("w"))
    old["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    old["metadata"]["deletionTimestamp"] = NOW
    body = copy.deepcopy(old)
    body["metadata"].update(uid="other", creationTimestamp="2020-01-01T00:00:00Z",
                            generation=42, deletionGracePeriodSeconds=3)
    del body["metadata"]["managedFields"], body["metadata"]["deletionTimestamp"]
    meta = prepare_update(WIDGETS, body, old, None, 8).obj["metadata"]
    for key in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                "generation", "managedFields"):
        assert meta[key] == old["metadata"][key], key
    assert "deletionGracePeriodSeconds" not in meta
    sent = copy.deepcopy(old)
    sent["metadata"]["managedFields"] = [{"manager": "mine"}]
    assert prepare_update(WIDGETS, sent, old, None, 8).obj["metadata"]["managedFields"] == [
        {"manager": "mine"}]


@pytest.mark.parametrize(("meta", "message"), [
    ({"name": 5}, "metadata.name: expected string, got number"),
    ({"name": "c", "labels": "x"}, "metadata.labels: expected object, got string"),
    ({"name": "c", "generation": True}, "metadata.generation: expected integer, got boolean"),
    ({"name": "c", "ownerReferences": ["x"]},
     "metadata.ownerReferences: expected array of objects, got array"),
    ({"name": "c", "finalizers": "x"}, "metadata.finalizers: expected array, got string"),
])
def test_metadata_of_the_wrong_type_is_a_bad_request(meta, message):
    err = refused(prepare_create, CONFIGMAPS, {"metadata": meta}, "default", NOW, 7)
    assert (err.code, err.message) == (
        400, f'ConfigMap in version "v1" cannot be handled as a ConfigMap: {message}')


def test_metadata_that_is_not_an_object_is_a_bad_request():
    err = refused(prepare_create, CONFIGMAPS, {"metadata": ["c"]}, "default", NOW, 7)
    assert (err.code, err.message) == (400, "metadata must be an object")


REF = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u1"}


@pytest.mark.parametrize(("meta", "cause"), [
    ({"generateName": ""}, "metadata.name: Required value: name or generateName is required"),
    ({"labels": {"a": 1}},
     'metadata.labels: Invalid value: "object": must be a map of string keys to string values'),
    ({"annotations": {"a": None}},
     'metadata.annotations: Invalid value: "object": must be a map of string keys to string '
     "values"),
    ({"ownerReferences": [{**REF, "uid": ""}]},
     'metadata.ownerReferences[0].uid: Invalid value: "": uid must not be empty'),
    ({"ownerReferences": [{**REF, "kind": 5}]},
     "metadata.ownerReferences[0].kind: Invalid value: 5: kind must not be empty"),
    ({"ownerReferences": [{**REF, "controller": "yes"}]},
     'metadata.ownerReferences[0].controller: Invalid value: "yes": must be a boolean'),
    ({"finalizers": ["a", 1]}, 'metadata.finalizers: Invalid value: "array": must be a list of '
                               "strings"),
])
def test_metadata_refused_for_its_content_names_the_field(meta, cause):
    body = {"metadata": {"name": "c", **meta}}
    if "generateName" in meta:
        del body["metadata"]["name"]
    err = refused(prepare_create, CONFIGMAPS, body, "default", NOW, 7)
    assert (err.code, err.reason) == (422, "Invalid")
    assert err.message == f'ConfigMap "{body["metadata"].get("name", "")}" is invalid: {cause}'


@pytest.mark.parametrize("meta", [
    {"labels": {"a": "b"}, "annotations": {"n": "1"}},
    {"ownerReferences": [{**REF, "controller": True, "blockOwnerDeletion": False}]},
    {"finalizers": ["example.com/x"]},
])
def test_metadata_of_the_right_shape_is_kept(meta):
    obj = create(CONFIGMAPS, {"metadata": {"name": "c", **meta}})
    assert {k: obj["metadata"][k] for k in meta} == meta


def test_empty_maps_and_lists_are_left_out_as_go_leaves_them_out():
    obj = create(CONFIGMAPS, {"metadata": {"name": "c", "labels": {}, "annotations": {},
                                           "finalizers": [], "ownerReferences": []},
                              "data": {}, "binaryData": {}})
    assert obj["metadata"].keys() == {"name", "namespace", "uid", "creationTimestamp",
                                      "resourceVersion"}
    assert "data" not in obj and "binaryData" not in obj


def test_a_custom_resource_is_checked_against_its_schema_naming_the_object():
    err = refused(prepare_create, WIDGETS, widget("w", size="huge"), "default", NOW, 7)
    assert (err.code, err.reason) == (422, "Invalid")
    assert err.message.startswith('Widget.contract.tpujob.dev "w" is invalid: spec.size: ')
    old = create(WIDGETS, widget("w"))
    body = copy.deepcopy(old)
    body["spec"]["size"] = "large-2"  # a transition rule: only an update has an old value
    err = refused(prepare_update, WIDGETS, body, old, None, 8)
    assert err.code == 422 and "size is immutable" in err.message


def test_an_update_of_a_custom_resource_must_name_the_version_it_changes():
    old = create(WIDGETS, widget("w"))
    body = copy.deepcopy(old)
    del body["metadata"]["resourceVersion"]
    err = refused(prepare_update, WIDGETS, body, old, None, 8)
    assert err.code == 422 and err.message.endswith("must be specified for an update")
    assert prepare_update(WIDGETS, body, old, None, 8, require_version=False).obj
