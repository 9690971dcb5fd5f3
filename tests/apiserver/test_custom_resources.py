"""Custom resources through their CRD's schema: 422 with field paths, defaulting, pruning,
strict field validation, CEL transition rules, printer columns, and JobSet's real CRD."""

from __future__ import annotations

import re

import pytest

from tests.apiserver.crds import GROUP, widget
from tests.support.apiserver import Kube, jobset_crd, unique_name

pytestmark = pytest.mark.integration

MERGE = {"Content-Type": "application/merge-patch+json"}


def _causes(response) -> dict[str, str]:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["kind"] == "Status" and body["reason"] == "Invalid"
    return {c["field"]: c["reason"] for c in body["details"]["causes"]}


@pytest.mark.parametrize(("spec", "field", "reason"), [
    ({"replicas": -1}, "spec.replicas", "FieldValueInvalid"),
    ({"replicas": "two"}, "spec.replicas", "FieldValueTypeInvalid"),   # as kube-openapi
    ({"size": "huge"}, "spec.size", "FieldValueInvalid"),
    ({"mode": "slow"}, "spec.mode", "FieldValueNotSupported"),
    ({"tags": ["a", "a"]}, "spec.tags[1]", "FieldValueDuplicate"),
    ({"size": None}, "spec.size", "FieldValueRequired"),
])
def test_schema_violations_are_422_with_field_paths(kube: Kube, widgets: str, spec: dict,
                                                    field: str, reason: str) -> None:
    body = widget(unique_name("w"))
    body["spec"].update(spec)
    if spec.get("size", "") is None:
        del body["spec"]["size"]
    response = kube.request("POST", widgets, json=body)
    assert _causes(response).get(field) == reason, response.text
    assert field in response.json()["message"]
    assert response.json()["details"]["kind"] == "Widget"
    assert response.json()["details"]["group"] == GROUP


def test_invalid_update_is_refused_and_leaves_the_object(kube: Kube, widgets: str) -> None:
    name = unique_name("w")
    kube.request("POST", widgets, json=widget(name))
    response = kube.request("PATCH", f"{widgets}/{name}", json={"spec": {"replicas": 0}},
                            headers=MERGE)
    assert "spec.replicas" in _causes(response)
    assert kube.get(f"{widgets}/{name}").json()["spec"]["replicas"] == 1


def test_defaults_are_applied(kube: Kube, widgets: str) -> None:
    created = kube.request("POST", widgets, json=widget(unique_name("w"))).json()
    assert created["spec"] == {"size": "small-1", "replicas": 1, "mode": "safe",
                               "nested": {"level": 3}}


def test_unknown_fields_are_pruned_with_a_warning(kube: Kube, widgets: str) -> None:
    body = widget(unique_name("w"), color="red", extra={"free": {"form": 1}})
    body["metadata"]["bogus"] = "x"
    response = kube.request("POST", widgets, json=body)
    assert response.status_code == 201
    spec = response.json()["spec"]
    assert "color" not in spec and spec["extra"] == {"free": {"form": 1}}
    assert "bogus" not in response.json()["metadata"]
    assert 'unknown field \\"spec.color\\"' in response.headers.get("Warning", "")


def test_strict_field_validation_refuses_unknown_fields(kube: Kube, widgets: str) -> None:
    name = unique_name("w")
    response = kube.request("POST", widgets, json=widget(name, color="red"),
                            params={"fieldValidation": "Strict"})
    assert response.status_code == 400, response.text
    assert response.json()["reason"] == "BadRequest"
    assert 'unknown field "spec.color"' in response.json()["message"]
    assert kube.get(f"{widgets}/{name}").status_code == 404
    ignored = kube.request("POST", widgets, json=widget(name, color="red"),
                           params={"fieldValidation": "Ignore"})
    assert ignored.status_code == 201 and "Warning" not in ignored.headers


def test_cel_transition_rule_makes_a_field_immutable(kube: Kube, widgets: str) -> None:
    name = unique_name("w")
    kube.request("POST", widgets, json=widget(name, size="small-1"))
    response = kube.request("PATCH", f"{widgets}/{name}", json={"spec": {"size": "large-1"}},
                            headers=MERGE)
    assert _causes(response) == {"spec.size": "FieldValueInvalid"}
    assert "size is immutable" in response.json()["message"]
    same = kube.request("PATCH", f"{widgets}/{name}", json={"spec": {"replicas": 2}},
                        headers=MERGE)
    assert same.status_code == 200


def test_short_names_and_list_kind(kube: Kube, widgets: str) -> None:
    listing = kube.get(widgets).json()
    assert listing["kind"] == "WidgetList"


def test_server_side_table_uses_printer_columns(kube: Kube, widgets: str) -> None:
    name = unique_name("w")
    kube.request("POST", widgets, json=widget(name, size="medium-2", replicas=3))
    kube.request("PATCH", f"{widgets}/{name}/status", headers=MERGE, json={"status": {
        "phase": "Running", "conditions": [{"type": "Other", "status": "False"},
                                           {"type": "Ready", "status": "True"}]}})
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    table = kube.get(widgets, headers={"Accept": accept}).json()
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "Size", "Replicas", "Phase", "Ready", "Age"]
    assert table["columnDefinitions"][-1]["type"] == "date"
    row = next(r for r in table["rows"] if r["cells"][0] == name)
    assert row["cells"][1:5] == ["medium-2", 3, "Running", "True"]
    assert re.fullmatch(r"\d+s", row["cells"][5]), row["cells"][5]
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"]["name"] == name
    one = kube.get(f"{widgets}/{name}", headers={"Accept": accept}).json()
    assert one["kind"] == "Table" and len(one["rows"]) == 1


def test_jobset_is_served_from_its_crd(kube: Kube) -> None:
    kube.ensure_crd(jobset_crd(), keep=True)
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{kube.namespace}/jobsets"
    name = unique_name("js")
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": name},
              "spec": {"successPolicy": {"operator": "All"}, "replicatedJobs": [{
                  "name": "slice", "replicas": 1, "template": {
                      "metadata": {"labels": {"kept": "yes"}},
                      "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
                          "restartPolicy": "Never",
                          "containers": [{"name": "c", "image": "trainer"}]}}}}}]}}
    created = kube.request("POST", path, json=jobset)
    assert created.status_code == 201, created.text
    template = created.json()["spec"]["replicatedJobs"][0]["template"]
    assert template["metadata"]["labels"] == {"kept": "yes"}
    bad = dict(jobset, metadata={"name": unique_name("js")})
    bad["spec"] = dict(jobset["spec"], successPolicy={"operator": "Most"})
    assert "spec.successPolicy.operator" in _causes(kube.request("POST", path, json=bad))
    immutable = kube.request("PATCH", f"{path}/{name}", headers=MERGE,
                             json={"spec": {"successPolicy": {"operator": "Any"}}})
    assert "spec.successPolicy" in _causes(immutable)
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
    columns = kube.get(path, headers={"Accept": accept}).json()["columnDefinitions"]
    assert [c["name"] for c in columns] == ["Name", "TerminalState", "Restarts", "Completed",
                                            "Suspended", "Age"]
