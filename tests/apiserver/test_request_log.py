"""The request log: each request as Kubernetes authorization sees it (RBAC verb, group,
resource/subresource, namespace, name), with status and user agent; counters; reads from other
threads while the server answers."""

from __future__ import annotations

import copy
import threading

import pytest
import requests
from kubernetes import client, watch

from tests.apiserver.crds import GROUP, WIDGET_CRD, widget
from tpujob.local.apiserver.requestlog import request_info

pytestmark = pytest.mark.integration


@pytest.mark.unit
@pytest.mark.parametrize("method, path, query, expected", [
    ("GET", "/api/v1/namespaces/ns/pods/p", {}, ("get", "", "pods", "ns", "p")),
    ("HEAD", "/api/v1/namespaces/ns/pods/p", {}, ("get", "", "pods", "ns", "p")),
    ("GET", "/api/v1/namespaces/ns/pods", {}, ("list", "", "pods", "ns", None)),
    ("GET", "/api/v1/pods", {}, ("list", "", "pods", None, None)),
    ("GET", "/api/v1/namespaces/ns/pods", {"watch": "true"}, ("watch", "", "pods", "ns", None)),
    ("GET", "/api/v1/namespaces/ns/pods", {"watch": "1"}, ("watch", "", "pods", "ns", None)),
    ("GET", "/api/v1/watch/namespaces/ns/pods", {}, ("watch", "", "pods", "ns", None)),
    ("GET", "/api/v1/watch/namespaces/ns/pods/p", {}, ("watch", "", "pods", "ns", "p")),
    ("GET", "/api/v1/namespaces/ns/pods", {"fieldSelector": "metadata.name=p"},
     ("list", "", "pods", "ns", "p")),
    ("GET", "/api/v1/namespaces/ns/pods", {"watch": "true", "fieldSelector":
                                           "status.phase=Running,metadata.name==p"},
     ("watch", "", "pods", "ns", "p")),
    ("GET", "/api/v1/namespaces/ns/pods", {"fieldSelector": "metadata.name!=p"},
     ("list", "", "pods", "ns", None)),
    ("POST", "/apis/batch/v1/namespaces/ns/jobs", {}, ("create", "batch", "jobs", "ns", None)),
    ("PUT", "/apis/batch/v1/namespaces/ns/jobs/j", {}, ("update", "batch", "jobs", "ns", "j")),
    ("PATCH", "/apis/tpujob.dev/v1alpha1/namespaces/ns/tputrainingjobs/j/status", {},
     ("patch", "tpujob.dev", "tputrainingjobs/status", "ns", "j")),
    ("DELETE", "/apis/batch/v1/namespaces/ns/jobs/j", {}, ("delete", "batch", "jobs", "ns", "j")),
    ("DELETE", "/apis/batch/v1/namespaces/ns/jobs", {},
     ("deletecollection", "batch", "jobs", "ns", None)),
    ("GET", "/api/v1/namespaces", {}, ("list", "", "namespaces", None, None)),
    ("GET", "/api/v1/namespaces/ns", {}, ("get", "", "namespaces", "ns", "ns")),
    ("PUT", "/api/v1/namespaces/ns/finalize", {},
     ("update", "", "namespaces/finalize", "ns", "ns")),
    ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {"watch": "true"},
     ("watch", "apiextensions.k8s.io", "customresourcedefinitions", None, None)),
    ("POST", "/apis/events.k8s.io/v1/namespaces/ns/events", {},
     ("create", "events.k8s.io", "events", "ns", None)),
])
def test_request_info_matches_kube_apiserver(method, path, query, expected) -> None:
    info = request_info(method, path, query)
    assert info.is_resource
    assert (info.verb, info.group, info.resource, info.namespace, info.name) == expected


@pytest.mark.unit
@pytest.mark.parametrize("method, path", [
    ("GET", "/"), ("GET", "/api"), ("GET", "/api/v1"), ("GET", "/apis"),
    ("GET", "/apis/batch"), ("GET", "/apis/batch/v1"), ("GET", "/version"),
    ("GET", "/openapi/v3/apis/batch/v1"), ("GET", "/healthz"), ("POST", "/api/v1/watch/pods"),
])
def test_discovery_and_other_paths_are_non_resource_requests(method, path) -> None:
    info = request_info(method, path, {})
    assert not info.is_resource
    assert info.verb == method.lower() and info.resource == ""


def test_every_client_call_is_recorded_as_rbac_sees_it(own_server, own_client) -> None:
    core = client.CoreV1Api(own_client)
    custom = client.CustomObjectsApi(own_client)
    client.ApiextensionsV1Api(own_client).create_custom_resource_definition(
        copy.deepcopy(WIDGET_CRD))
    own_server.reset_requests()

    core.create_namespaced_config_map("default", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="cm")))
    core.read_namespaced_config_map("cm", "default")
    core.list_namespaced_config_map("default", field_selector="metadata.name=cm")
    core.patch_namespaced_config_map("cm", "default", {"data": {"a": "1"}})
    current = core.read_namespaced_config_map("cm", "default")
    core.replace_namespaced_config_map("cm", "default", current)
    list(watch.Watch().stream(core.list_config_map_for_all_namespaces, timeout_seconds=1))
    core.delete_namespaced_config_map("cm", "default")
    core.delete_collection_namespaced_config_map("default")
    custom.create_namespaced_custom_object(GROUP, "v1", "default", "widgets", widget("w"))
    custom.patch_namespaced_custom_object_status(GROUP, "v1", "default", "widgets", "w",
                                                 {"status": {"phase": "Up"}})
    with pytest.raises(client.ApiException):
        custom.get_namespaced_custom_object(GROUP, "v1", "default", "widgets", "none-such")

    seen = [(r.verb, r.group, r.resource, r.namespace, r.name, r.status)
            for r in own_server.requests()]
    assert seen == [
        ("create", "", "configmaps", "default", None, 201),
        ("get", "", "configmaps", "default", "cm", 200),
        ("list", "", "configmaps", "default", "cm", 200),
        ("patch", "", "configmaps", "default", "cm", 200),
        ("get", "", "configmaps", "default", "cm", 200),
        ("update", "", "configmaps", "default", "cm", 200),
        ("watch", "", "configmaps", None, None, 200),
        ("delete", "", "configmaps", "default", "cm", 200),
        ("deletecollection", "", "configmaps", "default", None, 200),
        ("create", GROUP, "widgets", "default", None, 201),
        ("patch", GROUP, "widgets/status", "default", "w", 200),
        ("get", GROUP, "widgets", "default", "none-such", 404),
    ]
    records = own_server.requests()
    assert all(r.user_agent.startswith("OpenAPI-Generator/") for r in records)
    assert all(r.fault is None and r.is_resource for r in records)
    assert records[0].method == "POST" and records[0].path == "/api/v1/namespaces/default/configmaps"
    assert records[0].rule == ("", "configmaps", "create")
    ats = [r.at for r in records]
    assert ats == sorted(ats)
    counts = own_server.request_counts()
    assert counts[("get", "", "configmaps")] == 2
    assert counts[("patch", GROUP, "widgets/status")] == 1
    assert sum(counts.values()) == len(records) == 12


def test_records_are_frozen_and_reset_clears_them(own_server) -> None:
    requests.get(own_server.url + "/version", headers={"User-Agent": "probe/1"}, timeout=10)
    record = own_server.requests()[-1]
    assert (record.verb, record.is_resource, record.path, record.user_agent, record.status) == \
        ("get", False, "/version", "probe/1", 200)
    with pytest.raises(AttributeError):
        record.status = 500  # type: ignore[misc]
    own_server.reset_requests()
    assert own_server.requests() == [] and not own_server.request_counts()
    requests.get(own_server.url + "/nowhere", timeout=10)
    assert [(r.path, r.status) for r in own_server.requests()] == [("/nowhere", 404)]


def test_log_is_consistent_while_threads_request_and_read(own_server) -> None:
    path = own_server.url + "/api/v1/namespaces/default/configmaps"
    own_server.reset_requests()
    threads, per_thread = 4, 25
    reads: list[int] = []
    stop = threading.Event()

    def send(index: int) -> None:
        with requests.Session() as session:
            for i in range(per_thread):
                session.post(path, json={"metadata": {"name": f"t{index}-{i}"}}, timeout=10)

    def read() -> None:
        while not stop.is_set():
            records = own_server.requests()
            assert all(r.verb == "create" for r in records)
            reads.append(len(records))

    reader = threading.Thread(target=read)
    reader.start()
    senders = [threading.Thread(target=send, args=(i,)) for i in range(threads)]
    for thread in senders:
        thread.start()
    for thread in senders:
        thread.join()
    stop.set()
    reader.join()
    records = own_server.requests()
    assert len(records) == threads * per_thread
    assert {r.name for r in records} == {None} and {r.status for r in records} == {201}
    assert own_server.request_counts() == {("create", "", "configmaps"): threads * per_thread}
    assert reads == sorted(reads)  # the reader saw the log grow, never a torn state


def test_log_keeps_the_newest_records_and_counts_all(tmp_path) -> None:
    from tpujob.local.apiserver import ApiServer
    with ApiServer(request_log_size=3) as server:
        for _ in range(5):
            requests.get(server.url + "/api/v1/namespaces", timeout=10)
        requests.get(server.url + "/api/v1/namespaces/default", timeout=10)
        assert [r.verb for r in server.requests()] == ["list", "list", "get"]
        assert server.request_counts() == {("list", "", "namespaces"): 5,
                                           ("get", "", "namespaces"): 1}
