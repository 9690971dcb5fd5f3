"""Bad requests get 4xx Status answers and never take the server down."""

from __future__ import annotations

import copy

import pytest

from tests.apiserver.crds import GROUP, WIDGET_CRD
from tests.support.apiserver import Kube, unique_name

pytestmark = pytest.mark.integration


def _status(response, code: int, reason: str | None = None) -> dict:
    assert response.status_code == code, response.text
    body = response.json()
    assert body["kind"] == "Status" and body["status"] == "Failure" and body["code"] == code
    if reason:
        assert body["reason"] == reason
    return body


def _still_serving(kube: Kube) -> None:
    assert kube.get("/api/v1/namespaces").status_code == 200


def test_malformed_json_is_400(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    _status(kube.request("POST", path, data="{not json",
                         headers={"Content-Type": "application/json"}), 400, "BadRequest")
    # An existing object's malformed patch is 400; a missing object's is 404 first, as
    # kube-apiserver reads the object before it decodes the patch.
    name = unique_name("cm")
    assert kube.request("POST", path, json={"metadata": {"name": name}}).status_code == 201
    _status(kube.request("PATCH", f"{path}/{name}", data="{not json",
                         headers={"Content-Type": "application/merge-patch+json"}), 400)
    _status(kube.request("PATCH", f"{path}/x", data="{not json",
                         headers={"Content-Type": "application/merge-patch+json"}), 404,
            "NotFound")
    _still_serving(kube)


def test_wrong_content_type_is_415(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    _status(kube.request("POST", path, data="metadata: {name: x}",
                         headers={"Content-Type": "text/plain"}), 415, "UnsupportedMediaType")
    name = unique_name("cm")
    kube.request("POST", path, json={"metadata": {"name": name}})
    _status(kube.request("PATCH", f"{path}/{name}", data='{"data":{}}',
                         headers={"Content-Type": "application/json"}), 415)
    _still_serving(kube)


def test_unknown_resources_are_404(kube: Kube) -> None:
    for path in ("/api/v1/nonsense", f"/api/v1/namespaces/{kube.namespace}/nonsense",
                 "/apis/batch/v9"):
        _status(kube.get(path), 404, "NotFound")
    # A group no one serves: kube-apiserver's mux answers in plain text, with no Status.
    for method, path in (("GET", "/apis/no.such.group/v1/things"),
                         ("GET", "/apis/no.such.group"),
                         ("POST", "/apis/no.such.group/v1/namespaces/default/things")):
        response = kube.request(method, path, json={} if method == "POST" else None)
        assert (response.status_code, response.text) == (404, "404 page not found\n")
        assert response.headers["Content-Type"].startswith("text/plain")
    _still_serving(kube)


def test_oversize_body_is_413(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    big = {"metadata": {"name": unique_name("big")}, "data": {"blob": "x" * (3 * 1024 * 1024)}}
    response = kube.request("POST", path, json=big)
    assert response.status_code == 413, response.text[:300]
    if response.headers.get("Content-Type", "").startswith("application/json"):
        assert response.json()["kind"] == "Status"
    _still_serving(kube)


def test_wrong_kind_and_mismatched_identity_are_400(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    _status(kube.request("POST", path, json={"apiVersion": "v1", "kind": "Secret",
                                             "metadata": {"name": "x"}}), 400, "BadRequest")
    _status(kube.request("POST", path, json={"metadata": {"name": "x",
                                                          "namespace": "elsewhere"}}), 400)
    name = unique_name("cm")
    kube.request("POST", path, json={"metadata": {"name": name}})
    _status(kube.request("PUT", f"{path}/{name}", json={"metadata": {"name": "other"}}), 400)
    _status(kube.request("POST", path, json=["not", "an", "object"]), 400)
    _still_serving(kube)


def test_invalid_names_are_422(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    body = _status(kube.request("POST", path, json={"metadata": {"name": "Not_Valid"}}), 422,
                   "Invalid")
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    _status(kube.request("POST", path, json={"metadata": {}}), 422, "Invalid")


def test_wrong_methods_are_405(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    assert kube.request("PUT", path, json={}).status_code == 405
    assert kube.request("POST", "/api/v1", json={}).status_code == 405
    _still_serving(kube)


def test_metadata_of_the_wrong_type_is_400(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    for metadata in ({"name": 5}, {"generateName": ["x"]}, {"name": "x", "uid": 7},
                     {"name": "x", "ownerReferences": "x"}, {"name": "x", "finalizers": "x"},
                     {"name": "x", "managedFields": [1]}, {"name": "x", "generation": "1"}):
        _status(kube.request("POST", path, json={"metadata": metadata}), 400, "BadRequest")
    _still_serving(kube)


def test_incomplete_owner_references_are_422(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    body = _status(kube.request("POST", path, json={"metadata": {
        "name": unique_name("owned"), "ownerReferences": [{"kind": "ConfigMap", "name": "x"}]}}),
        422, "Invalid")
    fields = {c["field"] for c in body["details"]["causes"]}
    assert "metadata.ownerReferences[0].uid" in fields or \
        "metadata.ownerReferences.uid" in fields  # kube-apiserver leaves out the index
    _still_serving(kube)


def _with_value(name: str, value: str) -> str:
    """A JSON object named `name` with `value` (raw JSON text) under `x`."""
    return '{"metadata": {"name": "' + name + '"}, "x": ' + value + "}"


def test_nan_and_infinity_are_not_json(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    for number in ("NaN", "Infinity", "-Infinity"):
        _status(kube.request("POST", path, data=_with_value("n", number),
                             headers={"Content-Type": "application/json"}), 400, "BadRequest")
    _still_serving(kube)


def test_bodies_too_deep_or_expanding_too_far_are_refused(embedded_kube: Kube) -> None:
    # The embedded server's own limits (kube-apiserver's are far higher): embedded only.
    kube = embedded_kube
    kube.ensure_crd(copy.deepcopy(WIDGET_CRD))
    widgets = f"/apis/{GROUP}/v1/namespaces/{kube.namespace}/widgets"
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    json_type = {"Content-Type": "application/json"}
    for depth in (250, 100_000):
        deep = '{"a":' * depth + "1" + "}" * depth
        _status(kube.request("POST", path, data=_with_value("d", deep), headers=json_type),
                400, "BadRequest")
    _status(kube.request("POST", path, data="[" * 100_000 + "]" * 100_000, headers=json_type),
            400, "BadRequest")
    for yaml_text in ("a: " + "[" * 100_000, "- " * 100_000 + "x"):
        _status(kube.request("POST", path, data=yaml_text,
                             headers={"Content-Type": "application/yaml"}), 400, "BadRequest")
    # Seven levels of ten aliases each: 10 million strings once expanded.
    levels = ["a: &a [x, x, x, x, x, x, x, x, x, x]"] + [
        f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]" for p, c in zip("abcdef", "bcdefg",
                                                                     strict=True)]
    bomb = "metadata: {name: bomb}\ndata:\n" + "".join(f"  {line}\n" for line in levels)
    _status(kube.request("POST", path, data=bomb, headers={"Content-Type": "application/yaml"}),
            413, "RequestEntityTooLarge")
    nested = '{"a":' * 150 + "1" + "}" * 150  # deep, but within the limit
    body = '{"metadata": {"name": "' + unique_name("deep") + '"}, "spec": {"size": ' \
        '"small-1", "extra": ' + nested + "}}"
    created = kube.request("POST", widgets, data=body, headers=json_type)
    assert created.status_code == 201, created.text
    _still_serving(kube)
