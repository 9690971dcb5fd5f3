"""Fault injection and restarts: error Status answers with Retry-After, held and dropped
requests, dropped watches that resume from their last resourceVersion, 410 Gone past the kept
history, and a restart that keeps every object. Checked with the official client (retrying as
a careful client does) and with raw HTTP."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import requests
import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tpujob.local.apiserver import ApiServer, Faults

pytestmark = pytest.mark.integration

RETRYABLE = (429, 500, 503, 504)
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def retrying(call: Callable[..., Any], *args: Any, attempts: int = 30, **kwargs: Any) -> Any:
    """`call` until it does not fail with a retryable status, honouring Retry-After."""
    for attempt in range(attempts):
        try:
            return call(*args, **kwargs)
        except ApiException as err:
            if err.status not in RETRYABLE or attempt == attempts - 1:
                raise
            time.sleep(float((err.headers or {}).get("Retry-After", 0)))
    raise AssertionError("unreachable")


def _configmap(name: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name))


@pytest.mark.unit
@pytest.mark.parametrize("fields, says", [
    (dict(error_rate=1.5), "error_rate must be between 0 and 1"),
    (dict(timeout_rate=-0.1), "timeout_rate must be between 0 and 1"),
    (dict(error_rate=0.6, timeout_rate=0.6), "at most 1"),
    (dict(error_codes=[404]), "error_codes must be some of"),
    (dict(error_codes=[]), "error_codes must be some of"),
    (dict(watch_drop_after_s=(2.0, 1.0)), "watch_drop_after_s"),
    (dict(watch_drop_mode="later"), "watch_drop_mode must be one of"),
    (dict(retry_after_s=-1), "must not be negative"),
])
def test_impossible_faults_are_refused(fields, says) -> None:
    with pytest.raises(ValueError, match=says):
        Faults(**fields)


@pytest.mark.unit
def test_faults_accept_lists_and_stay_hashable() -> None:
    faults = Faults(error_rate=0.1, error_codes=[500], verbs=["get", "list"],
                    resources=["pods"], watch_drop_after_s=[0.5, 1.0])
    assert faults.error_codes == (500,) and faults.verbs == frozenset({"get", "list"})
    assert faults.watch_drop_after_s == (0.5, 1.0)
    assert hash(faults) == hash(Faults(error_rate=0.1, error_codes=(500,),
                                       verbs={"list", "get"}, resources={"pods"},
                                       watch_drop_after_s=(0.5, 1.0)))


@pytest.mark.parametrize("code, reason, retry_after", [
    (500, "InternalError", None), (503, "ServiceUnavailable", "1"),
    (429, "TooManyRequests", "1"), (504, "Timeout", "1"),
])
def test_injected_errors_are_kubernetes_status_objects(own_server, own_client, code, reason,
                                                       retry_after) -> None:
    own_server.set_faults(error_rate=1.0, error_codes=[code])
    raw = requests.get(f"{own_server.url}{CONFIGMAPS}/x", timeout=10)
    assert raw.status_code == code
    assert raw.headers["Content-Type"].startswith("application/json")
    assert raw.headers.get("Retry-After") == retry_after
    status = raw.json()
    assert {k: status[k] for k in ("kind", "apiVersion", "status", "code", "reason")} == {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
        "reason": reason}
    assert status["message"] and status["details"]["kind"] == "configmaps"
    assert status["details"]["name"] == "x"
    if retry_after:
        assert status["details"]["retryAfterSeconds"] == 1
    # The official client (urllib3) itself retries a 429 or 503 that carries Retry-After, a
    # few times, before it gives up.
    own_server.set_faults(error_rate=1.0, error_codes=[code], retry_after_s=0)
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(own_client).list_namespaced_config_map("default")
    assert err.value.status == code
    assert f'"reason":"{reason}"' in err.value.body
    # Discovery and other non-resource paths are never failed.
    assert requests.get(own_server.url + "/api/v1", timeout=10).status_code == 200
    assert requests.get(own_server.url + "/version", timeout=10).status_code == 200
    faulted = [(r.fault, r.verb, r.status) for r in own_server.requests() if r.fault]
    assert faulted[0] == ("error", "get", code)
    assert set(faulted[1:]) == {("error", "list", code)}


def test_a_retrying_client_gets_every_object_through_20_percent_failures(
        own_server, own_client) -> None:
    core = client.CoreV1Api(own_client)
    own_server.set_faults(error_rate=0.2, error_codes=[500, 503, 429], retry_after_s=0,
                          seed=7)
    names = [f"cm-{i:02d}" for i in range(40)]
    for name in names:
        retrying(core.create_namespaced_config_map, "default", _configmap(name))
    listed = retrying(core.list_namespaced_config_map, "default")
    assert sorted(i.metadata.name for i in listed.items) == names
    for name in names:
        assert retrying(core.read_namespaced_config_map, name, "default").metadata.name == name
    records = own_server.requests()
    failed = [r for r in records if r.fault == "error"]
    assert {r.status for r in failed} == {500, 503, 429}
    assert all(r.status in (200, 201) for r in records if r.fault is None)
    assert len(records) == 81 + len(failed)
    assert 0.1 < len(failed) / len(records) < 0.3


def test_the_same_seed_gives_the_same_faults(own_server) -> None:
    def statuses() -> list[int]:
        with requests.Session() as session:
            return [session.get(f"{own_server.url}/api/v1/namespaces/default", timeout=10)
                    .status_code for _ in range(40)]

    own_server.set_faults(error_rate=0.5, error_codes=[500, 503], seed=11)
    first = statuses()
    own_server.set_faults(error_rate=0.5, error_codes=[500, 503], seed=11)
    assert statuses() == first
    assert {200, 500, 503} <= set(first)
    own_server.set_faults(error_rate=0.5, error_codes=[500, 503], seed=12)
    assert statuses() != first
    own_server.set_faults()
    assert set(statuses()) == {200} and own_server.faults == Faults()


def test_faults_hit_only_the_verbs_resources_and_clients_named(tmp_path) -> None:
    faults = Faults(error_rate=1.0, error_codes=[500], verbs={"create", "delete"},
                    resources={"configmaps"}, user_agent="victim")
    with ApiServer(faults=faults) as server:
        assert server.faults == faults
        url = server.url + CONFIGMAPS

        def post(agent: str, name: str, path: str = url) -> int:
            return requests.post(path, json={"metadata": {"name": name}}, timeout=10,
                                 headers={"User-Agent": agent}).status_code

        assert post("bystander/1", "a") == 201
        assert post("victim/1", "b") == 500
        assert requests.get(url, headers={"User-Agent": "victim/1"}, timeout=10).ok
        assert post("victim/1", "s", server.url + "/api/v1/namespaces/default/secrets") == 201
        assert requests.delete(f"{url}/a", headers={"User-Agent": "victim/1"},
                               timeout=10).status_code == 500
        changed = server.set_faults(faults, verbs={"get"})
        assert changed.verbs == {"get"} and changed.user_agent == "victim"
        assert post("victim/1", "b") == 201
        assert requests.get(url + "/b", headers={"User-Agent": "victim/1"},
                            timeout=10).status_code == 500


def test_a_held_request_is_dropped_without_an_answer(own_server) -> None:
    own_server.set_faults(timeout_rate=1.0, timeout_hold_s=0.3, verbs={"create"})
    began = time.monotonic()
    with pytest.raises(requests.ConnectionError):
        requests.post(own_server.url + CONFIGMAPS, json={"metadata": {"name": "lost"}},
                      timeout=10)
    assert time.monotonic() - began >= 0.3
    with pytest.raises(requests.ReadTimeout):
        requests.post(own_server.url + CONFIGMAPS, json={"metadata": {"name": "lost"}},
                      timeout=0.1)
    assert requests.get(f"{own_server.url}{CONFIGMAPS}/lost", timeout=10).status_code == 404
    timed_out = [r for r in own_server.requests() if r.fault == "timeout"]
    assert [(r.verb, r.status) for r in timed_out] == [("create", 0)] * 2


def test_a_request_can_time_out_after_its_write_is_stored(own_server) -> None:
    own_server.set_faults(timeout_rate=1.0, timeout_hold_s=0.1, timeout_after_commit=True,
                          verbs={"create"})
    with pytest.raises(requests.ConnectionError):
        requests.post(own_server.url + CONFIGMAPS, json={"metadata": {"name": "kept"}},
                      timeout=10)
    own_server.set_faults()
    stored = requests.get(f"{own_server.url}{CONFIGMAPS}/kept", timeout=10)
    assert stored.status_code == 200
    again = requests.post(own_server.url + CONFIGMAPS, json={"metadata": {"name": "kept"}},
                          timeout=10)
    assert again.status_code == 409 and again.json()["reason"] == "AlreadyExists"


def _create_slowly(server: ApiServer, names: list[str], gap_s: float) -> threading.Thread:
    def create() -> None:
        with requests.Session() as session:
            for name in names:
                response = session.post(server.url + CONFIGMAPS, timeout=10,
                                        json={"metadata": {"name": name}},
                                        headers={"User-Agent": "writer"})
                assert response.status_code == 201, response.text
                time.sleep(gap_s)
    thread = threading.Thread(target=create)
    thread.start()
    return thread


def _watch_resuming(core: client.CoreV1Api, resource_version: str, count: int,
                    deadline_s: float = 20.0) -> tuple[list[str], int]:
    """Names of the first `count` ADDED events from `resource_version`, resuming the watch from
    the last version seen whenever the connection breaks; and how often it broke."""
    seen: list[str] = []
    breaks = 0
    deadline = time.monotonic() + deadline_s
    while len(seen) < count and time.monotonic() < deadline:
        stream = watch.Watch()
        try:
            for event in stream.stream(core.list_namespaced_config_map, "default",
                                       resource_version=resource_version):
                resource_version = event["object"].metadata.resource_version
                if event["type"] == "ADDED":
                    seen.append(event["object"].metadata.name)
                if len(seen) == count:
                    stream.stop()
        except (urllib3.exceptions.HTTPError, ApiException) as err:
            if isinstance(err, ApiException) and err.status not in RETRYABLE:
                raise
            breaks += 1
            time.sleep(0.05)
    return seen, breaks


def test_a_watch_cut_mid_stream_resumes_without_missing_events(own_server, own_client) -> None:
    core = client.CoreV1Api(own_client)
    start = core.list_namespaced_config_map("default").metadata.resource_version
    own_server.set_faults(watch_drop_after_s=(0.1, 0.3), seed=3)
    names = [f"w-{i:02d}" for i in range(20)]
    writer = _create_slowly(own_server, names, gap_s=0.05)
    seen, breaks = _watch_resuming(core, start, len(names))
    writer.join()
    assert seen == names
    assert breaks >= 2
    drops = [r for r in own_server.requests() if r.fault == "watch-drop"]
    assert len(drops) == breaks + 1 and all(r.verb == "watch" for r in drops)


def test_a_watch_ended_early_is_resumed_by_the_client_itself(own_server, own_client) -> None:
    core = client.CoreV1Api(own_client)
    start = core.list_namespaced_config_map("default").metadata.resource_version
    own_server.set_faults(watch_drop_after_s=0.2, watch_drop_mode="end")
    names = [f"e-{i:02d}" for i in range(12)]
    writer = _create_slowly(own_server, names, gap_s=0.08)
    seen, breaks = _watch_resuming(core, start, len(names))
    writer.join()
    assert seen == names and breaks == 0  # a clean end is a server timeout: the client resumes
    assert len([r for r in own_server.requests() if r.verb == "watch"]) >= 3


def test_a_watch_from_a_version_past_the_kept_history_is_410_gone() -> None:
    with ApiServer(watch_history=5) as server:
        url = server.url + CONFIGMAPS
        start = requests.get(url, timeout=10).json()["metadata"]["resourceVersion"]
        versions = [requests.post(url, json={"metadata": {"name": f"h{i}"}}, timeout=10)
                    .json()["metadata"]["resourceVersion"] for i in range(8)]

        def events(resource_version: str) -> list[dict]:
            response = requests.get(url, timeout=10, stream=True, params={
                "watch": "true", "resourceVersion": resource_version, "timeoutSeconds": "0.3"})
            return [json.loads(line) for line in response.iter_lines() if line]

        gone = events(start)
        assert [e["type"] for e in gone] == ["ERROR"]
        assert gone[0]["object"]["kind"] == "Status" and gone[0]["object"]["code"] == 410
        assert gone[0]["object"]["reason"] == "Expired"
        recent = events(versions[4])
        assert [e["object"]["metadata"]["name"] for e in recent] == ["h5", "h6", "h7"]


def test_restart_refuses_connections_then_keeps_every_object(own_server, own_client) -> None:
    core = client.CoreV1Api(own_client)
    before = {n: core.create_namespaced_config_map("default", _configmap(n)).metadata
              for n in ("r1", "r2")}
    list_version = int(core.list_namespaced_config_map("default").metadata.resource_version)
    refused = threading.Event()

    def probe() -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not refused.is_set():
            try:
                requests.get(own_server.url + "/healthz", timeout=0.2)
            except requests.ConnectionError:
                refused.set()
            except requests.Timeout:
                pass  # a connection open as the server went down is closed without an answer
            time.sleep(0.02)

    prober = threading.Thread(target=probe)
    began = time.monotonic()
    restarter = threading.Thread(target=own_server.restart, args=(0.5,))
    restarter.start()
    prober.start()
    restarter.join()
    took = time.monotonic() - began
    prober.join()
    # Down for 0.5 s: never less (no upper bound: a busy machine stretches the restart).
    assert refused.is_set() and took >= 0.5
    for name, meta in before.items():
        after = retrying(core.read_namespaced_config_map, name, "default").metadata
        assert (after.uid, after.resource_version) == (meta.uid, meta.resource_version)
    created = core.create_namespaced_config_map("default", _configmap("r3")).metadata
    assert int(created.resource_version) > list_version


def test_a_watch_cut_by_a_restart_resumes_without_missing_events(own_server,
                                                                 own_client) -> None:
    core = client.CoreV1Api(own_client)
    start = core.list_namespaced_config_map("default").metadata.resource_version
    names = [f"x-{i}" for i in range(6)]
    result: dict[str, Any] = {}

    def follow() -> None:
        result["seen"], result["breaks"] = _watch_resuming(core, start, len(names))

    watcher = threading.Thread(target=follow)
    watcher.start()
    with requests.Session() as session:
        for i, name in enumerate(names):
            if i == 3:
                time.sleep(0.2)
                own_server.restart(down_s=0.3)
            created = session.post(own_server.url + CONFIGMAPS, timeout=10,
                                   json={"metadata": {"name": name}})
            assert created.status_code == 201
    watcher.join()
    assert result["seen"] == names
    assert result["breaks"] >= 1


def test_kopf_handles_a_resource_through_faults_and_every_request_is_logged(own_server) -> None:
    import kopf
    from kopf.testing import KopfRunner

    from tests.apiserver.crds import GROUP, WIDGET_CRD, widget
    from tests.support.apiserver import wait_for

    created = requests.post(own_server.url + "/apis/apiextensions.k8s.io/v1/"
                            "customresourcedefinitions", json=WIDGET_CRD, timeout=10)
    assert created.status_code == 201
    widgets = f"{own_server.url}/apis/{GROUP}/v1/namespaces/default/widgets"
    registry = kopf.OperatorRegistry()
    handled: list[str] = []

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=own_server.url, default_namespace="default")

    @kopf.on.create(GROUP, "v1", "widgets", registry=registry)
    def on_create(body: Any, name: str, patch: Any, **_: Any) -> None:
        handled.append(name)
        patch.status["phase"] = "Seen"
        kopf.info(body, reason="Seen", message="the widget was seen")

    settings = kopf.OperatorSettings()
    settings.watching.server_timeout = 10
    settings.watching.client_timeout = 15
    settings.networking.error_backoffs = [0.1] * 30
    drops = dict(watch_drop_after_s=(0.2, 0.5), user_agent="kopf/", retry_after_s=0)

    def kopf_requests() -> list:
        return [r for r in own_server.requests() if r.user_agent.startswith("kopf/")]

    def faulted(kind: str, verb: str | None = None) -> int:
        return len([r for r in kopf_requests() if r.fault == kind and verb in (None, r.verb)])

    # A fifth of kopf's requests fail and its watches are cut; for a while, every patch fails.
    own_server.set_faults(error_rate=0.2, seed=1, **drops)
    with KopfRunner(["run", "--standalone", "--namespace=default"], registry=registry,
                    settings=settings, timeout=30) as runner:
        wait_for(lambda: faulted("watch-drop") >= 1, timeout=10, message="a watch to drop")
        own_server.set_faults(error_rate=1.0, error_codes=[500, 503], verbs={"patch"}, **drops)
        assert requests.post(widgets, json=widget("w1"), timeout=10).status_code == 201
        wait_for(lambda: faulted("error", "patch") >= 2, timeout=10,
                 message="kopf to retry a failed patch")
        own_server.set_faults(error_rate=0.2, seed=2, **drops)
        wait_for(lambda: (requests.get(f"{widgets}/w1", timeout=10).json().get("status") or {})
                 .get("phase") == "Seen", timeout=20, message="kopf to patch the status")
        wait_for(lambda: faulted("watch-drop") >= 4, timeout=10, message="watches to drop")
    assert runner.exception is None and runner.exit_code == 0
    assert handled == ["w1"]
    records = kopf_requests()
    assert {r.status for r in records if r.fault == "error"} <= {429, 500, 503}
    assert [r for r in records if r.verb == "patch" and r.status == 200]
    # What an RBAC role for this operator must grant (kopf also scans namespaces and CRDs).
    assert {r.rule for r in records if r.is_resource} <= {
        ("", "namespaces", "list"), ("", "namespaces", "watch"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
        (GROUP, "widgets", "list"), (GROUP, "widgets", "watch"), (GROUP, "widgets", "patch"),
        (GROUP, "widgets/status", "patch"), ("", "events", "create")}
    assert {r.rule for r in records if r.status in (200, 201)} >= {
        (GROUP, "widgets", "watch"), (GROUP, "widgets", "patch"), ("", "events", "create")}
