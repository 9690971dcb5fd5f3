"""Deletion: finalizers and deletionTimestamp, ownerReference cascade, namespaces."""

from __future__ import annotations

import pytest

from tests.apiserver.crds import widget
from tests.support.apiserver import Kube, unique_name, wait_for

pytestmark = pytest.mark.integration

MERGE = {"Content-Type": "application/merge-patch+json"}


def test_delete_without_finalizers_removes_the_object(kube: Kube, widgets: str) -> None:
    name = unique_name("w")
    kube.request("POST", widgets, json=widget(name))
    response = kube.request("DELETE", f"{widgets}/{name}")
    assert response.status_code in (200, 202)
    wait_for(lambda: kube.get(f"{widgets}/{name}").status_code == 404, message="deletion")


def test_finalizers_hold_deletion_until_removed(kube: Kube, widgets: str) -> None:
    name = unique_name("w")
    body = widget(name)
    body["metadata"]["finalizers"] = ["contract.tpujob.dev/hold"]
    kube.request("POST", widgets, json=body)
    response = kube.request("DELETE", f"{widgets}/{name}")
    assert response.status_code in (200, 202)
    held = kube.get(f"{widgets}/{name}")
    assert held.status_code == 200
    assert held.json()["metadata"]["deletionTimestamp"]
    added = kube.request("PATCH", f"{widgets}/{name}", headers=MERGE, json={
        "metadata": {"finalizers": ["contract.tpujob.dev/hold", "another/one"]}})
    assert added.status_code == 422
    released = kube.request(
        "PATCH", f"{widgets}/{name}", headers={"Content-Type": "application/json-patch+json"},
        json=[{"op": "test", "path": "/metadata/finalizers",
               "value": ["contract.tpujob.dev/hold"]},
              {"op": "remove", "path": "/metadata/finalizers"}])
    assert released.status_code == 200, released.text
    wait_for(lambda: kube.get(f"{widgets}/{name}").status_code == 404, message="deletion")


def test_owner_reference_cascade_deletion(kube: Kube, widgets: str) -> None:
    owner = kube.request("POST", widgets, json=widget(unique_name("owner"))).json()
    ref = {"apiVersion": owner["apiVersion"], "kind": "Widget",
           "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
           "controller": True, "blockOwnerDeletion": True}
    cm_path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    child = unique_name("child")
    other = unique_name("unowned")
    kube.request("POST", cm_path, json={"metadata": {"name": child, "ownerReferences": [ref]}})
    kube.request("POST", cm_path, json={"metadata": {"name": other}})
    grandchild = unique_name("grandchild")
    child_obj = kube.get(f"{cm_path}/{child}").json()
    kube.request("POST", f"/api/v1/namespaces/{kube.namespace}/secrets", json={
        "metadata": {"name": grandchild, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": child,
            "uid": child_obj["metadata"]["uid"]}]}})
    kube.request("DELETE", f"{widgets}/{owner['metadata']['name']}",
                 json={"propagationPolicy": "Background"})
    # kube-controller-manager's garbage collector learns of a new CRD's kind at its next
    # discovery resync, every 30 s: the Widget CRD may be younger than that.
    wait_for(lambda: kube.get(f"{cm_path}/{child}").status_code == 404, timeout=90,
             message="the owned ConfigMap to be collected")
    wait_for(lambda: kube.get(f"/api/v1/namespaces/{kube.namespace}/secrets/{grandchild}")
             .status_code == 404, timeout=30, message="the grandchild to be collected")
    assert kube.get(f"{cm_path}/{other}").status_code == 200


def test_orphan_propagation_keeps_dependents(kube: Kube, widgets: str) -> None:
    owner = kube.request("POST", widgets, json=widget(unique_name("owner"))).json()
    ref = {"apiVersion": owner["apiVersion"], "kind": "Widget",
           "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}
    cm_path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    child = unique_name("child")
    kube.request("POST", cm_path, json={"metadata": {"name": child, "ownerReferences": [ref]}})
    kube.request("DELETE", f"{widgets}/{owner['metadata']['name']}",
                 params={"propagationPolicy": "Orphan"})
    wait_for(lambda: kube.get(f"{widgets}/{owner['metadata']['name']}").status_code == 404,
             timeout=30, message="the owner to go")
    def orphaned() -> dict | None:
        reply = kube.get(f"{cm_path}/{child}")
        # A 404 (the dependent deleted) is the opposite of orphaning: it must not end the wait.
        assert reply.status_code == 200, reply.text
        return reply.json() if not reply.json()["metadata"].get("ownerReferences") else None
    kept = wait_for(orphaned, timeout=30, message="the owner reference to be dropped")
    assert kept["metadata"]["name"] == child


def test_namespace_deletion_removes_its_contents(kube: Kube) -> None:
    namespace = unique_name("ns")
    created = kube.request("POST", "/api/v1/namespaces", json={"metadata": {"name": namespace}})
    assert created.status_code == 201
    assert created.json()["status"]["phase"] == "Active"
    cm = f"/api/v1/namespaces/{namespace}/configmaps"
    assert kube.request("POST", cm, json={"metadata": {"name": "x"}}).status_code == 201
    deleted = kube.request("DELETE", f"/api/v1/namespaces/{namespace}")
    assert deleted.status_code in (200, 202)
    wait_for(lambda: kube.get(f"/api/v1/namespaces/{namespace}").status_code == 404,
             timeout=60, message="the namespace to be deleted")
    assert kube.get(f"{cm}/x").status_code == 404
