"""OpenAPI: the v3 index and group-version documents kubectl reads (fieldValidation support,
patch types, schemas with their group-version-kind), and the JSON v2 document."""

from __future__ import annotations

import pytest

from tests.apiserver.crds import GROUP
from tests.support.apiserver import Kube

pytestmark = pytest.mark.integration


def test_openapi_v3_index_lists_group_versions(kube: Kube, widgets: str) -> None:
    index = kube.get("/openapi/v3").json()["paths"]
    assert "api/v1" in index and f"apis/{GROUP}/v1" in index
    assert index[f"apis/{GROUP}/v1"]["serverRelativeURL"].startswith(f"/openapi/v3/apis/{GROUP}/v1")


def test_openapi_v3_document_for_a_crd(kube: Kube, widgets: str) -> None:
    url = kube.get("/openapi/v3").json()["paths"][f"apis/{GROUP}/v1"]["serverRelativeURL"]
    document = kube.get(url).json()
    item = document["paths"][f"/apis/{GROUP}/v1/namespaces/{{namespace}}/widgets/{{name}}"]
    patch = item["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": GROUP, "version": "v1",
                                                       "kind": "Widget"}
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    assert "application/merge-patch+json" in patch["requestBody"]["content"]
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]
    schemas = document["components"]["schemas"]
    widget = next(s for s in schemas.values()
                  if {"group": GROUP, "version": "v1", "kind": "Widget"} in
                  s.get("x-kubernetes-group-version-kind", []))
    assert widget["properties"]["spec"]["required"] == ["size"]


def test_openapi_v3_core_document(kube: Kube) -> None:
    document = kube.get("/openapi/v3/api/v1").json()
    assert "/api/v1/namespaces/{namespace}/configmaps/{name}" in document["paths"]


def test_openapi_v2_json(kube: Kube) -> None:
    response = kube.get("/openapi/v2", headers={"Accept": "application/json"})
    assert response.status_code == 200
    assert response.json()["swagger"] == "2.0"
    assert response.json()["definitions"]
