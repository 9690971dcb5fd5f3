"""The shapes of the embedded server's answers where kube-apiserver's differ from the obvious
(pure, table-driven): Status bodies, option errors, list items, pages, watch events leaving a
selector, field selector words, deletion answers and policies. Each expected answer is
kube-apiserver v1.35.4's, as tests/conformance records it."""

from __future__ import annotations

import pytest
from multidict import MultiDict

from tpujob.local.apiserver import errors
from tpujob.local.apiserver.deletes import RETURNS_OBJECT, default_propagation
from tpujob.local.apiserver.errors import OMITTED, ApiError, FieldError
from tpujob.local.apiserver.reads import list_items, paginate
from tpujob.local.apiserver.resources import BUILTINS, ResourceType, name_errors
from tpujob.local.apiserver.selectors import parse_field_selector, unsupported_field
from tpujob.local.apiserver.store import Event
from tpujob.local.apiserver.strategy import builtin_schema, omit_empty
from tpujob.local.apiserver.table import build_table
from tpujob.local.apiserver.watch import WatchRequest, _translate

pytestmark = pytest.mark.unit

KINDS = {(t.group, t.plural): t for t in BUILTINS}
CONFIGMAPS, JOBS = KINDS[("", "configmaps")], KINDS[("batch", "jobs")]
WIDGETS = ResourceType(group="g", version="v1", kind="Widget", plural="widgets",
                       singular="widget", namespaced=True, crd_name="widgets.g")


def test_a_status_leaves_out_empty_details_and_an_empty_reason() -> None:
    body = errors.not_found("configmaps", "", "x").status()
    assert body["details"] == {"name": "x", "kind": "configmaps"}
    internal = ApiError(500, "", "boom").status()
    assert "reason" not in internal and internal["code"] == 500


def test_an_unsupported_option_is_422_on_its_options_kind() -> None:
    err = errors.unsupported_option("DeleteOptions", "propagationPolicy", '"Sideways"',
                                    '"Foreground", "Background", "Orphan", "nil"')
    assert (err.code, err.reason) == (422, "Invalid")
    assert err.message == ('DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: '
                           'Unsupported value: "Sideways": supported values: "Foreground", '
                           '"Background", "Orphan", "nil"')
    assert err.details == {"group": "meta.k8s.io", "kind": "DeleteOptions", "causes": [
        {"reason": "FieldValueNotSupported", "field": "propagationPolicy",
         "message": 'Unsupported value: "Sideways": supported values: "Foreground", '
                    '"Background", "Orphan", "nil"'}]}


@pytest.mark.parametrize(("value", "body"), [
    ("v6e-16", 'Invalid value: "v6e-16": immutable'),
    (2, "Invalid value: 2: immutable"),
    (OMITTED, "Invalid value: immutable"),
])
def test_a_field_error_shows_a_value_or_leaves_it_out(value, body) -> None:
    assert FieldError("Invalid", "spec.x", value, "immutable").body() == body


def test_list_items_of_a_built_in_kind_carry_no_kind() -> None:
    item = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}
    assert list_items(CONFIGMAPS, [item]) == [{"metadata": {"name": "a"}}]
    assert list_items(WIDGETS, [item]) == [item]


@pytest.mark.parametrize(("query", "remaining"), [
    ({"limit": "1"}, 2),
    ({"limit": "1", "labelSelector": "a=b"}, None),
    ({"limit": "1", "fieldSelector": "metadata.name=x"}, None),
])
def test_remaining_items_are_counted_only_without_a_selector(query, remaining) -> None:
    items, meta = paginate([{"n": i} for i in range(3)], MultiDict(query), {})
    assert items == [{"n": 0}] and "continue" in meta
    assert meta.get("remainingItemCount") == remaining


def test_an_object_leaving_the_selector_is_deleted_as_it_last_matched() -> None:
    old = {"metadata": {"name": "a", "resourceVersion": "5", "labels": {"c": "in"}}}
    new = {"metadata": {"name": "a", "resourceVersion": "6", "labels": {"c": "out"}}}
    request = WatchRequest(CONFIGMAPS, None, lambda o: o["metadata"]["labels"]["c"] == "in",
                           "", None, False, False)
    kind, obj = _translate(request, Event(6, "MODIFIED", new, old))
    assert kind == "DELETED"
    assert obj["metadata"] == {"name": "a", "resourceVersion": "6", "labels": {"c": "in"}}
    back = _translate(request, Event(7, "MODIFIED", old, new))
    assert back[0] == "ADDED"


@pytest.mark.parametrize(("kind", "message"), [
    (("", "configmaps", "ConfigMap"),
     '"data.a" is not a known field selector: only "metadata.name", "metadata.namespace"'),
    (("", "serviceaccounts", "ServiceAccount"),
     '"data.a" is not a known field selector: only "metadata.name", "metadata.namespace"'),
    (("batch", "jobs", "Job"), 'field label "data.a" not supported for Job'),
    (("", "pods", "Pod"), "field label not supported: data.a"),
    (("g", "widgets", "Widget"), "field label not supported: data.a"),
])
def test_each_kind_refuses_a_field_selector_in_its_own_words(kind, message) -> None:
    assert unsupported_field(*kind, "data.a") == message
    with pytest.raises(ValueError, match="data.a"):
        parse_field_selector("data.a=1", frozenset({"metadata.name"}),
                             lambda key: unsupported_field(*kind, key))


def test_deletion_answers_and_policies() -> None:
    assert default_propagation(JOBS) == "Background"  # kube-apiserver: Orphan (docs)
    assert default_propagation(CONFIGMAPS) == "Background"
    assert ("", "pods") in RETURNS_OBJECT and ("", "configmaps") not in RETURNS_OBJECT


def test_built_in_kinds_know_their_top_level_fields_and_omit_empty_maps() -> None:
    known = builtin_schema(CONFIGMAPS)
    assert set(known["properties"]) == {"data", "binaryData", "immutable"}
    assert builtin_schema(WIDGETS) is None
    obj = {"metadata": {"labels": {}, "finalizers": []}, "data": {}}
    omit_empty(CONFIGMAPS, obj)
    assert obj == {"metadata": {}}
    custom = {"metadata": {"annotations": {}}, "data": {}}
    omit_empty(WIDGETS, custom)
    assert custom == {"metadata": {}, "data": {}}


def test_a_configmap_table_counts_its_data() -> None:
    table = build_table(CONFIGMAPS, [{"metadata": {"name": "c"}, "data": {"a": "1"},
                                      "binaryData": {"b": ""}}], "1", "None")
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert table["columnDefinitions"][2]["type"] == "string"
    assert table["rows"][0]["cells"][:2] == ["c", 2] and table["rows"][0]["object"] is None


SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
             "'-' or '.', and must start and end with an alphanumeric character (e.g. "
             "'example.com', regex used for validation is "
             "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
         "and must start and end with an alphanumeric character (e.g. 'my-name',  or "
         "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")


@pytest.mark.parametrize(("plural", "name", "found"), [
    ("configmaps", "Create_Errors", [SUBDOMAIN]),
    ("configmaps", "a.b-c", []),
    ("configmaps", "a" * 254, ["must be no more than 253 characters"]),
    ("configmaps", "a" * 253, []),
    ("services", "a.b", [LABEL]),
    ("services", "a" * 64, ["must be no more than 63 characters"]),
    ("services", "a" * 63, []),
])
def test_name_errors_in_kube_apiservers_words(plural, name, found) -> None:
    assert name_errors(KINDS[("", plural)], name) == found
