"""Watches: events from a resourceVersion, initial events, selectors, bookmarks, timeouts,
410 for a version that is too old, and the official client's Watch helper."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.support.apiserver import Kube, unique_name

pytestmark = pytest.mark.integration


def _events(kube: Kube, path: str, **params) -> list[dict]:
    """All events of a watch that ends by its timeoutSeconds."""
    response = kube.get(path, params={"watch": "true", **params}, stream=True)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    return [json.loads(line) for line in response.iter_lines() if line]


def test_watch_from_resource_version_sees_later_changes(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    tag = unique_name("watch")
    start = kube.get(path).json()["metadata"]["resourceVersion"]
    name = f"{tag}-a"
    kube.request("POST", path, json={"metadata": {"name": name, "labels": {"t": tag}}})
    kube.request("PATCH", f"{path}/{name}", json={"data": {"k": "v"}},
                 headers={"Content-Type": "application/merge-patch+json"})
    kube.request("DELETE", f"{path}/{name}")
    events = _events(kube, path, resourceVersion=start, timeoutSeconds=1,
                     labelSelector=f"t={tag}")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", name), ("MODIFIED", name), ("DELETED", name)]
    assert events[1]["object"]["data"] == {"k": "v"}
    assert events[0]["object"]["kind"] == "ConfigMap"
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[0] > int(start)


def test_watch_without_version_starts_with_current_objects(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    name = unique_name("existing")
    kube.request("POST", path, json={"metadata": {"name": name}})
    events = _events(kube, path, timeoutSeconds=1, fieldSelector=f"metadata.name={name}")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", name)]


def test_watch_live_events_and_timeout(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    name = unique_name("live")
    start = kube.get(path).json()["metadata"]["resourceVersion"]

    def create_later() -> None:
        time.sleep(0.3)
        kube.request("POST", path, json={"metadata": {"name": name}})
    thread = threading.Thread(target=create_later)
    began = time.monotonic()
    thread.start()
    events = _events(kube, path, resourceVersion=start, timeoutSeconds=2,
                     fieldSelector=f"metadata.name={name}")
    thread.join()
    elapsed = time.monotonic() - began
    assert [e["type"] for e in events] == ["ADDED"]
    assert 1.5 < elapsed < 10


def test_bookmarks_are_sent_when_allowed(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    start = kube.get(path).json()["metadata"]["resourceVersion"]
    events = _events(kube, path, resourceVersion=start, timeoutSeconds=3,
                     allowWatchBookmarks="true", fieldSelector="metadata.name=none-such")
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    # Bookmarks are best effort: kube-apiserver sends them about once a minute, the embedded
    # server every `bookmark_interval_s` (1 s here); a client must not rely on either.
    assert bookmarks or not kube.embedded, events
    assert all(b["object"]["kind"] == "ConfigMap" and int(
        b["object"]["metadata"]["resourceVersion"]) >= int(start) for b in bookmarks)
    assert [e for e in events if e["type"] != "BOOKMARK"] == []
    plain = _events(kube, path, resourceVersion=start, timeoutSeconds=1,
                    fieldSelector="metadata.name=none-such")
    assert not [e for e in plain if e["type"] == "BOOKMARK"]


def test_too_old_resource_version_is_410_gone(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    events = _events(kube, path, resourceVersion="1", timeoutSeconds=2)
    if not kube.embedded and (not events or events[0]["type"] != "ERROR"):
        # kube-apiserver serves a watch from any version etcd has not compacted yet (every
        # 5 min): on a young cluster, version 1 is still there. The embedded server keeps a
        # short history and answers 410 at once.
        assert all(e["type"] in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK") for e in events)
        return
    assert events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert status["kind"] == "Status" and status["code"] == 410
    assert status["reason"] in ("Expired", "Gone")


def test_label_change_out_of_selector_is_seen_as_deleted(kube: Kube) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    name = unique_name("relabel")
    start = kube.get(path).json()["metadata"]["resourceVersion"]
    kube.request("POST", path, json={"metadata": {"name": name, "labels": {"grp": name}}})
    kube.request("PATCH", f"{path}/{name}", json={"metadata": {"labels": {"grp": "other"}}},
                 headers={"Content-Type": "application/merge-patch+json"})
    events = _events(kube, path, resourceVersion=start, timeoutSeconds=1,
                     labelSelector=f"grp={name}")
    assert [e["type"] for e in events] == ["ADDED", "DELETED"]


def test_official_client_watch_stream(kube: Kube, kube_client) -> None:
    core = client.CoreV1Api(kube_client)
    name = unique_name("client")
    start = core.list_namespaced_config_map(kube.namespace).metadata.resource_version
    core.create_namespaced_config_map(kube.namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name)))
    seen = []
    stream = watch.Watch().stream(core.list_namespaced_config_map, kube.namespace,
                                  resource_version=start, timeout_seconds=1,
                                  field_selector=f"metadata.name={name}")
    for event in stream:
        seen.append((event["type"], event["object"].metadata.name))
    assert seen == [("ADDED", name)]
    if not kube.embedded:
        return   # version 1 is not compacted yet on a young kube-apiserver (see above)
    with pytest.raises(ApiException) as err:
        for _ in watch.Watch().stream(core.list_namespaced_config_map, kube.namespace,
                                      resource_version="1", timeout_seconds=1):
            pass
    assert err.value.status == 410
