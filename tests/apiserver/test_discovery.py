"""Discovery: core and group documents, CRD types appearing and disappearing."""

from __future__ import annotations

import copy

import pytest

from tests.apiserver.crds import GROUP, WIDGET_CRD
from tests.support.apiserver import Kube, wait_for

pytestmark = pytest.mark.integration


def test_core_discovery_lists_v1_and_namespaces(kube: Kube) -> None:
    versions = kube.get("/api").json()
    assert versions["kind"] == "APIVersions" and "v1" in versions["versions"]
    core = kube.get("/api/v1").json()
    assert core["kind"] == "APIResourceList" and core["groupVersion"] == "v1"
    by_name = {r["name"]: r for r in core["resources"]}
    assert by_name["namespaces"]["namespaced"] is False
    assert by_name["namespaces"]["kind"] == "Namespace"
    for plural in ("pods", "pods/status", "events", "configmaps", "secrets", "services"):
        assert plural in by_name, plural
    assert {"create", "get", "list", "watch", "patch", "update", "delete"} <= set(
        by_name["pods"]["verbs"])


def test_group_discovery(kube: Kube) -> None:
    groups = {g["name"]: g for g in kube.get("/apis").json()["groups"]}
    for name in ("batch", "events.k8s.io", "coordination.k8s.io", "apiextensions.k8s.io"):
        assert name in groups, name
    assert groups["batch"]["preferredVersion"]["groupVersion"] == "batch/v1"
    group = kube.get("/apis/batch").json()
    assert group["kind"] == "APIGroup" and group["name"] == "batch"
    jobs = {r["name"]: r for r in kube.get("/apis/batch/v1").json()["resources"]}
    assert jobs["jobs"]["kind"] == "Job" and jobs["jobs"]["namespaced"] is True
    leases = {r["name"] for r in kube.get("/apis/coordination.k8s.io/v1").json()["resources"]}
    assert "leases" in leases


def test_crd_types_are_discoverable(kube: Kube, widgets: str) -> None:
    resources = {r["name"]: r for r in kube.get(f"/apis/{GROUP}/v1").json()["resources"]}
    assert resources["widgets"]["kind"] == "Widget"
    assert resources["widgets"]["shortNames"] == ["wdg"]
    assert resources["widgets"]["singularName"] == "widget"
    assert resources["widgets/status"]["verbs"] == ["get", "patch", "update"]
    assert GROUP in {g["name"] for g in kube.get("/apis").json()["groups"]}


def test_crd_delete_stops_serving(kube: Kube) -> None:
    crd = copy.deepcopy(WIDGET_CRD)
    crd["metadata"]["name"] = f"gadgets.{GROUP}"
    crd["spec"]["names"] = {"kind": "Gadget", "plural": "gadgets", "singular": "gadget"}
    kube.ensure_crd(crd)
    path = f"/apis/{GROUP}/v1/namespaces/{kube.namespace}/gadgets"
    created = kube.request("POST", path, json={"apiVersion": f"{GROUP}/v1", "kind": "Gadget",
                                               "metadata": {"name": "g"},
                                               "spec": {"size": "small-1"}})
    assert created.status_code == 201, created.text
    kube.delete_crd(crd["metadata"]["name"])
    wait_for(lambda: kube.get(path).status_code == 404, message="gadgets to stop being served")
    names = {r["name"] for r in kube.get(f"/apis/{GROUP}/v1").json().get("resources", [])}
    assert "gadgets" not in names
