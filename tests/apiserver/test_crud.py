"""Create, read, update, patch and list, as the official client and raw HTTP see them."""

from __future__ import annotations

import re

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.apiserver.crds import GROUP, widget
from tests.support.apiserver import Kube, unique_name

pytestmark = pytest.mark.integration

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def test_create_returns_201_with_server_fields(kube: Kube, kube_client) -> None:
    core = client.CoreV1Api(kube_client)
    name = unique_name("cm")
    created = core.create_namespaced_config_map(
        kube.namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name),
                                           data={"a": "1"}))
    assert created is not None
    assert created.metadata.uid and created.metadata.resource_version
    assert created.metadata.creation_timestamp is not None
    assert created.metadata.namespace == kube.namespace
    raw = kube.request("POST", f"/api/v1/namespaces/{kube.namespace}/configmaps",
                       json={"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": unique_name("cm")}})
    assert raw.status_code == 201
    assert raw.json()["metadata"]["namespace"] == kube.namespace
    assert RFC3339.match(raw.json()["metadata"]["creationTimestamp"])


def test_custom_resource_create_sets_generation_and_namespace(kube: Kube, widgets: str,
                                                               kube_client) -> None:
    api = client.CustomObjectsApi(kube_client)
    created = api.create_namespaced_custom_object(GROUP, "v1", kube.namespace, "widgets",
                                                  widget(unique_name("w")))
    meta = created["metadata"]
    assert meta["generation"] == 1 and meta["uid"] and meta["resourceVersion"]
    assert meta["namespace"] == kube.namespace and RFC3339.match(meta["creationTimestamp"])


def test_generate_name(kube: Kube) -> None:
    response = kube.request("POST", f"/api/v1/namespaces/{kube.namespace}/configmaps",
                            json={"metadata": {"generateName": "gen-"}})
    assert response.status_code == 201
    assert re.match(r"^gen-[a-z0-9]{5}$", response.json()["metadata"]["name"])


def test_create_twice_is_409_already_exists(kube: Kube, kube_client) -> None:
    core = client.CoreV1Api(kube_client)
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=unique_name("cm")))
    core.create_namespaced_config_map(kube.namespace, body)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(kube.namespace, body)
    assert err.value.status == 409


def test_status_bodies_for_409_and_404(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    name = unique_name("cm")
    assert kube.request("POST", path, json={"metadata": {"name": name}}).status_code == 201
    again = kube.request("POST", path, json={"metadata": {"name": name}})
    assert again.status_code == 409
    status = again.json()
    assert status["kind"] == "Status" and status["apiVersion"] == "v1"
    assert status["status"] == "Failure" and status["reason"] == "AlreadyExists"
    assert status["code"] == 409 and status["details"]["name"] == name
    assert status["details"]["kind"] == "configmaps"
    missing = kube.get(f"{path}/nope")
    assert missing.status_code == 404
    assert missing.json()["reason"] == "NotFound"
    assert missing.json()["message"] == 'configmaps "nope" not found'
    assert missing.json()["details"] == {"name": "nope", "kind": "configmaps"} or \
        missing.json()["details"]["name"] == "nope"


def test_custom_resource_404_names_group(kube: Kube, widgets: str) -> None:
    response = kube.get(f"{widgets}/absent")
    assert response.status_code == 404
    assert response.json()["message"] == f'widgets.{GROUP} "absent" not found'
    assert response.json()["details"]["group"] == GROUP


def test_create_in_missing_namespace_is_404(kube: Kube) -> None:
    response = kube.request("POST", "/api/v1/namespaces/no-such-ns/configmaps",
                            json={"metadata": {"name": "x"}})
    assert response.status_code == 404
    assert response.json()["details"]["kind"] == "namespaces"


def test_get_and_list_carry_kind_and_api_version(kube: Kube, widgets: str) -> None:
    name = unique_name("w")
    kube.request("POST", widgets, json=widget(name))
    obj = kube.get(f"{widgets}/{name}").json()
    assert obj["kind"] == "Widget" and obj["apiVersion"] == f"{GROUP}/v1"
    listing = kube.get(widgets).json()
    assert listing["kind"] == "WidgetList" and listing["apiVersion"] == f"{GROUP}/v1"
    assert listing["metadata"]["resourceVersion"]
    assert name in {i["metadata"]["name"] for i in listing["items"]}
    core = kube.get(f"/api/v1/namespaces/{kube.namespace}/configmaps").json()
    assert core["kind"] == "ConfigMapList" and core["apiVersion"] == "v1"


def test_list_pagination(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    prefix = unique_name("page")
    for index in range(3):
        kube.request("POST", path, json={"metadata": {"name": f"{prefix}-{index}",
                                                      "labels": {"page": prefix}}})
    first = kube.get(path, params={"labelSelector": f"page={prefix}", "limit": 2}).json()
    assert len(first["items"]) == 2 and first["metadata"]["continue"]
    rest = kube.get(path, params={"labelSelector": f"page={prefix}", "limit": 2,
                                  "continue": first["metadata"]["continue"]}).json()
    names = [i["metadata"]["name"] for i in first["items"] + rest["items"]]
    assert sorted(names) == [f"{prefix}-{i}" for i in range(3)]


def test_label_and_field_selectors(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    tag = unique_name("sel")
    for name, labels in [("a", {"app": "web", "tier": "front"}), ("b", {"app": "db"}),
                         ("c", {"app": "web"})]:
        kube.request("POST", path, json={"metadata": {"name": f"{tag}-{name}",
                                                      "labels": {**labels, "t": tag}}})

    def names(**params: str) -> list[str]:
        response = kube.get(path, params=params)
        assert response.status_code == 200, response.text
        return sorted(i["metadata"]["name"].rsplit("-", 1)[1]
                      for i in response.json()["items"])
    base = f"t={tag}"
    assert names(labelSelector=f"{base},app=web") == ["a", "c"]
    assert names(labelSelector=f"{base},app==web") == ["a", "c"]
    assert names(labelSelector=f"{base},app!=web") == ["b"]
    assert names(labelSelector=f"{base},app in (db,cache)") == ["b"]
    assert names(labelSelector=f"{base},app notin (db)") == ["a", "c"]
    assert names(labelSelector=f"{base},tier") == ["a"]
    assert names(labelSelector=f"{base},!tier") == ["b", "c"]
    assert names(labelSelector=base, fieldSelector=f"metadata.name={tag}-b") == ["b"]
    assert names(labelSelector=base, fieldSelector=f"metadata.name!={tag}-b") == ["a", "c"]
    assert names(labelSelector=base, fieldSelector=f"metadata.namespace={kube.namespace}") == \
        ["a", "b", "c"]


def test_bad_selectors_are_400(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    assert kube.get(path, params={"labelSelector": "app in web"}).status_code == 400
    bad_field = kube.get(path, params={"fieldSelector": "spec.nonsense=1"})
    assert bad_field.status_code == 400 and bad_field.json()["reason"] == "BadRequest"


def test_put_with_stale_resource_version_is_409(kube: Kube, kube_client) -> None:
    core = client.CoreV1Api(kube_client)
    name = unique_name("cm")
    first = core.create_namespaced_config_map(
        kube.namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name),
                                           data={"v": "1"}))
    first.data = {"v": "2"}
    updated = core.replace_namespaced_config_map(name, kube.namespace, first)
    assert updated.data == {"v": "2"}
    assert updated.metadata.resource_version != first.metadata.resource_version
    first.data = {"v": "3"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map(name, kube.namespace, first)
    assert err.value.status == 409
    assert '"Conflict"' in err.value.body


def test_custom_resource_put_requires_resource_version(kube: Kube, widgets: str) -> None:
    name = unique_name("w")
    kube.request("POST", widgets, json=widget(name))
    response = kube.request("PUT", f"{widgets}/{name}", json=widget(name))
    assert response.status_code == 422
    assert response.json()["details"]["causes"][0]["field"] == "metadata.resourceVersion"


def test_patches(kube: Kube, widgets: str) -> None:
    name = unique_name("w")
    kube.request("POST", widgets, json=widget(name, replicas=2, tags=["a"]))
    path = f"{widgets}/{name}"
    merge = kube.request("PATCH", path, data='{"spec":{"replicas":3,"tags":null}}',
                         headers={"Content-Type": "application/merge-patch+json"})
    assert merge.status_code == 200, merge.text
    assert merge.json()["spec"]["replicas"] == 3 and "tags" not in merge.json()["spec"]
    json_patch = kube.request(
        "PATCH", path, json=[{"op": "test", "path": "/spec/replicas", "value": 3},
                             {"op": "replace", "path": "/spec/replicas", "value": 4}],
        headers={"Content-Type": "application/json-patch+json"})
    assert json_patch.status_code == 200 and json_patch.json()["spec"]["replicas"] == 4
    failed = kube.request("PATCH", path, json=[{"op": "test", "path": "/spec/replicas",
                                                "value": 99}],
                          headers={"Content-Type": "application/json-patch+json"})
    assert failed.status_code == 422 and failed.json()["kind"] == "Status"
    assert kube.get(path).json()["spec"]["replicas"] == 4
    stale = kube.request("PATCH", path, json={"metadata": {"resourceVersion": "1"},
                                              "spec": {"replicas": 5}},
                         headers={"Content-Type": "application/merge-patch+json"})
    assert stale.status_code == 409


def test_strategic_merge_patch_on_core_objects(kube: Kube) -> None:
    name = unique_name("pod")
    path = f"/api/v1/namespaces/{kube.namespace}/pods"
    kube.request("POST", path, json={"metadata": {"name": name}, "spec": {"containers": [
        {"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}})
    patched = kube.request("PATCH", f"{path}/{name}",
                           json={"spec": {"containers": [{"name": "b", "image": "z"}]}},
                           headers={"Content-Type": "application/strategic-merge-patch+json"})
    assert patched.status_code == 200, patched.text
    assert [(c["name"], c["image"]) for c in patched.json()["spec"]["containers"]] == [
        ("a", "x"), ("b", "z")]


def test_generation_bumps_on_spec_changes_only(kube: Kube, widgets: str) -> None:
    name = unique_name("w")
    path = f"{widgets}/{name}"
    assert kube.request("POST", widgets, json=widget(name)).json()["metadata"]["generation"] == 1
    merge = {"Content-Type": "application/merge-patch+json"}
    labels = kube.request("PATCH", path, json={"metadata": {"labels": {"x": "y"}}},
                          headers=merge).json()
    assert labels["metadata"]["generation"] == 1
    status = kube.request("PATCH", f"{path}/status", json={"status": {"phase": "Running"}},
                          headers=merge).json()
    assert status["metadata"]["generation"] == 1
    spec = kube.request("PATCH", path, json={"spec": {"replicas": 7}}, headers=merge).json()
    assert spec["metadata"]["generation"] == 2
    same = kube.request("PATCH", path, json={"spec": {"replicas": 7}}, headers=merge).json()
    assert same["metadata"]["generation"] == 2
    assert same["metadata"]["resourceVersion"] == spec["metadata"]["resourceVersion"]


def test_status_subresource_is_isolated_both_ways(kube: Kube, widgets: str) -> None:
    name = unique_name("w")
    path = f"{widgets}/{name}"
    merge = {"Content-Type": "application/merge-patch+json"}
    kube.request("POST", widgets, json={**widget(name), "status": {"phase": "Ignored"}})
    assert "status" not in kube.get(path).json()
    # A write to the main resource cannot change status ...
    main = kube.request("PATCH", path, json={"spec": {"replicas": 2},
                                             "status": {"phase": "Sneaky"}}, headers=merge)
    assert main.status_code == 200 and "status" not in main.json()
    # ... and a write to /status changes status only.
    status = kube.request("PATCH", f"{path}/status",
                          json={"spec": {"replicas": 9}, "metadata": {"labels": {"l": "v"}},
                                "status": {"phase": "Running"}}, headers=merge)
    assert status.status_code == 200, status.text
    body = status.json()
    assert body["status"] == {"phase": "Running"} and body["spec"]["replicas"] == 2
    assert "labels" not in body["metadata"]
    current = kube.get(path).json()
    current["status"] = {"phase": "Done"}
    put = kube.request("PUT", f"{path}/status", json=current)
    assert put.status_code == 200 and put.json()["status"] == {"phase": "Done"}
    assert kube.get(f"{path}/status").json()["status"] == {"phase": "Done"}


def test_server_side_apply(kube: Kube, widgets: str) -> None:
    name = unique_name("w")
    path = f"{widgets}/{name}"
    headers = {"Content-Type": "application/apply-patch+yaml"}
    manifest = (f"apiVersion: {GROUP}/v1\nkind: Widget\nmetadata:\n  name: {name}\n"
                "  labels: {a: '1'}\nspec:\n  size: small-1\n  replicas: 2\n")
    created = kube.request("PATCH", path, data=manifest, headers=headers,
                           params={"fieldManager": "contract-test"})
    assert created.status_code == 201, created.text
    assert created.json()["spec"]["replicas"] == 2
    managers = {m["manager"]: m for m in created.json()["metadata"]["managedFields"]}
    assert managers["contract-test"]["operation"] == "Apply"
    reapplied = kube.request("PATCH", path, headers=headers,
                             data=manifest.replace("  labels: {a: '1'}\n", "")
                             .replace("replicas: 2", "replicas: 3"),
                             params={"fieldManager": "contract-test"})
    assert reapplied.status_code == 200, reapplied.text
    assert reapplied.json()["spec"]["replicas"] == 3
    assert "a" not in (reapplied.json()["metadata"].get("labels") or {})
    assert reapplied.json()["metadata"]["generation"] == 2
    missing_manager = kube.request("PATCH", path, data=manifest, headers=headers)
    assert missing_manager.status_code == 422, missing_manager.text
    status = missing_manager.json()
    assert (status["reason"], status["details"]["kind"]) == ("Invalid", "PatchOptions")
    assert [c["field"] for c in status["details"]["causes"]] == ["fieldManager"]
