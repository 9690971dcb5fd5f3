"""The operator's Kubernetes calls (`KubeApi`) over real HTTP: against the embedded API server
(with its fault injection) for what each call does, and against a bare HTTP server for answers
no API server of ours gives (a proxy's 502, a body that is not a Status). Every failure must
come out as ApiUnavailable (retry later, with the server's Retry-After) or ApiRefused (will not
pass), with what was being done and the server's own words."""

from __future__ import annotations

import http.server
import json
import logging
import threading
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from tests.operator.conftest import JOBS, JOBSETS, Cluster
from tpujob.controller.kube import ApiRefused, ApiUnavailable, KubeApi, _translate
from tpujob.local.apiserver.podlogs import ContainerLog

pytestmark = pytest.mark.integration
CONFIGMAPS = "/api/v1/namespaces/{ns}/configmaps"
BATCH_JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"
PODS = "/api/v1/namespaces/{ns}/pods"


def sent(c: Cluster) -> list[tuple[str, str, int]]:
    """(verb, resource, status) of KubeApi's requests in the test's namespace."""
    return [(r.verb, r.resource, r.status) for r in c.server.requests()
            if r.namespace == c.namespace and "OpenAPI-Generator" in r.user_agent]


def jobset_body(c: Cluster, name: str, job: dict | None = None) -> dict:
    """A JobSet as the operator builds one, owned by `job` when given."""
    meta: dict = {"name": name, "namespace": c.namespace}
    if job is not None:
        meta["ownerReferences"] = [{"apiVersion": job["apiVersion"], "kind": job["kind"],
                                    "name": job["metadata"]["name"],
                                    "uid": job["metadata"]["uid"], "controller": True}]
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
            "spec": {"replicatedJobs": [{"name": "slice", "replicas": 1, "template": {
                "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                    {"name": "trainer", "image": "trainer:1"}]}}}}}]}}


def config_map(c: Cluster, name: str, data: dict) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": c.namespace}, "data": data}


# -- errors: retry later, or never --------------------------------------------------------------

class Answers:
    """A bare HTTP server answering every request with `status`, `headers` and `body`."""

    def __init__(self):
        self.reply: tuple[int, dict, bytes] = (200, {}, b"{}")
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                status, headers, body = outer.reply
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response_only(status, http.server.BaseHTTPRequestHandler.responses
                                        .get(status, ("",))[0])
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PATCH = do_POST = _answer  # noqa: N815 (the base class's names)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        cfg = client.Configuration()
        cfg.host = f"http://127.0.0.1:{self.httpd.server_port}"
        self.kube = KubeApi(client.ApiClient(cfg))


@pytest.fixture(scope="module")
def answers():
    a = Answers()
    yield a
    a.httpd.shutdown()


def status_body(message: str | None) -> bytes:
    doc = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
    return json.dumps(doc | ({"message": message} if message else {})).encode()


JSON = {"Content-Type": "application/json"}
TEXT = {"Content-Type": "text/plain"}


@pytest.mark.parametrize("status, headers, body, error, retry_after, words", [
    (409, JSON, status_body("the object has been modified"), ApiUnavailable, None,
     "409 the object has been modified"),
    (429, JSON | {"Retry-After": "7"}, status_body("slow down"), ApiUnavailable, 7.0,
     "429 slow down"),
    (500, JSON, status_body("etcd is down"), ApiUnavailable, None, "500 etcd is down"),
    (502, TEXT, b"<html>bad gateway</html>", ApiUnavailable, None, "502 Bad Gateway"),
    (503, JSON | {"Retry-After": "soon"}, status_body("later"), ApiUnavailable, None,
     "503 later"),
    (504, JSON | {"Retry-After": "2"}, status_body(None), ApiUnavailable, 2.0,
     "504 Gateway Timeout"),
    (403, JSON, status_body('cannot patch resource "tputrainingjobs/status"'), ApiRefused,
     None, '403 cannot patch resource "tputrainingjobs/status"'),
    (422, JSON, status_body("status.phase: Unsupported value"), ApiRefused, None,
     "422 status.phase: Unsupported value"),
    (418, TEXT, b"", ApiRefused, None, "418 I'm a Teapot"),
    (599, TEXT, b"", ApiRefused, None, "599 599"),     # no reason phrase: the number
])
def test_an_answer_is_sorted_into_retry_later_or_refused(answers, status, headers, body, error,
                                                         retry_after, words):
    answers.reply = (status, headers, body)
    with pytest.raises((ApiUnavailable, ApiRefused)) as caught:
        answers.kube.patch_status("team", "job-a", {"phase": "Running"})
    assert type(caught.value) is error
    assert str(caught.value) == f"patch status of team/job-a: {words}"
    if error is ApiUnavailable:
        assert caught.value.retry_after == retry_after
    else:
        assert caught.value.status == status


@pytest.mark.parametrize("err, error, text", [
    # What the client raises for a TLS failure (no HTTP status at all): retry later.
    (ApiException(status=0, reason="SSLError\ncertificate verify failed"), ApiUnavailable,
     "get x: 0 SSLError\ncertificate verify failed"),
    (ProtocolError("Connection aborted."), ApiUnavailable,
     "get x: ProtocolError: Connection aborted."),
    (ConnectionRefusedError(111, "refused"), ApiUnavailable,
     "get x: ConnectionRefusedError: [Errno 111] refused"),
    (ApiException(status=404, reason="Not Found"), ApiRefused, "get x: 404 Not Found"),
])
def test_errors_without_an_answer_are_unavailable(err, error, text):
    translated = _translate(err, "get x")
    assert type(translated) is error and str(translated) == text


def test_a_server_that_is_not_there_is_unavailable(c, kube):
    cfg = client.Configuration()
    with http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler) as s:
        cfg.host = f"http://127.0.0.1:{s.server_port}"  # closed when the block ends
    with pytest.raises(ApiUnavailable, match="get JobSet team/x: MaxRetryError"):
        KubeApi(client.ApiClient(cfg)).get_jobset("team", "x")


def test_an_injected_503_is_unavailable_with_the_servers_retry_after(c, kube):
    c.server.set_faults(error_rate=1.0, error_codes=[503], retry_after_s=3, verbs={"create"})
    with pytest.raises(ApiUnavailable) as caught:
        kube.create_jobset(jobset_body(c, "busy"))
    assert caught.value.retry_after == 3.0
    assert str(caught.value) == (f"create JobSet {c.namespace}/busy: 503 the server is "
                                 "currently unable to handle the request")
    c.server.set_faults()
    assert c.jobset("busy") is None


# -- JobSets ----------------------------------------------------------------------------------

def test_get_jobset_is_none_when_there_is_none(c, kube):
    assert kube.get_jobset(c.namespace, "nothing") is None
    made = c.create(JOBSETS, jobset_body(c, "there"))
    assert kube.get_jobset(c.namespace, "there")["metadata"]["uid"] == made["metadata"]["uid"]


def test_create_jobset_returns_the_existing_one_on_conflict(c, kube):
    made, fresh = kube.create_jobset(jobset_body(c, "once"))
    assert fresh is True and made["metadata"]["uid"] == c.jobset("once")["metadata"]["uid"]
    again, fresh = kube.create_jobset(jobset_body(c, "once"))
    assert fresh is False and again == c.jobset("once")
    assert [s for v, r, s in sent(c) if r == "jobsets"] == [201, 409, 200]


def test_create_jobset_whose_answer_was_lost_finds_it(c, kube):
    c.server.set_faults(timeout_rate=1.0, timeout_after_commit=True, timeout_hold_s=0.05,
                        verbs={"create"}, resources={"jobsets"})
    made, fresh = kube.create_jobset(jobset_body(c, "stored"))
    c.server.set_faults()
    assert fresh is False and made["metadata"]["uid"] == c.jobset("stored")["metadata"]["uid"]


@pytest.mark.parametrize("suspend", [True, False])
def test_set_jobset_suspend(c, kube, suspend):
    body = jobset_body(c, "s")
    body["spec"]["suspend"] = not suspend
    c.create(JOBSETS, body)
    assert kube.set_jobset_suspend(c.namespace, "s", suspend)["spec"]["suspend"] is suspend
    assert c.jobset("s")["spec"]["suspend"] is suspend


def test_delete_jobset_only_if_it_is_still_the_one_seen(c, kube):
    uid = c.create(JOBSETS, jobset_body(c, "d"))["metadata"]["uid"]
    with pytest.raises(ApiUnavailable, match="409"):   # another JobSet of the name by now
        kube.delete_jobset(c.namespace, "d", "another-uid")
    assert c.jobset("d") is not None
    kube.delete_jobset(c.namespace, "d", uid)
    assert c.jobset("d") is None
    kube.delete_jobset(c.namespace, "d", uid)          # already gone: nothing to do
    c.create(JOBSETS, jobset_body(c, "d"))
    kube.delete_jobset(c.namespace, "d", None)         # no uid: whichever is there
    assert c.jobset("d") is None


# -- Jobs and pods ----------------------------------------------------------------------------

def _batch_job(c: Cluster, name: str, jobset: str) -> None:
    c.create(BATCH_JOBS, {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {"jobset.sigs.k8s.io/jobset-name": jobset}},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
                                       "containers": [{"name": "c", "image": "i"}]}}}})


def _batch_jobs(c: Cluster) -> list[str]:
    return sorted(j["metadata"]["name"] for j in c.request("GET", BATCH_JOBS).json()["items"])


def test_restart_jobs_deletes_the_jobsets_jobs(c, kube, monkeypatch):
    for name in ("r-slice-0", "r-slice-1"):
        _batch_job(c, name, "r")
    _batch_job(c, "other-slice-0", "other")
    # One Job goes between the list and its delete (its JobSet's controller, a person): 404.
    listed = kube.batch.list_namespaced_job

    def list_then_one_goes(*args, **kwargs):
        found = listed(*args, **kwargs)
        assert c.request("DELETE", BATCH_JOBS + "/r-slice-1").status_code == 200
        return found

    monkeypatch.setattr(kube.batch, "list_namespaced_job", list_then_one_goes)
    assert kube.restart_jobs(c.namespace, "r") == 2
    assert _batch_jobs(c) == ["other-slice-0"]
    assert [(v, s) for v, r, s in sent(c) if r == "jobs"] == [
        ("list", 200), ("delete", 200), ("delete", 404)]


def _pod(c: Cluster, name: str, jobset: str) -> dict:
    return c.create(PODS, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"jobset.sigs.k8s.io/jobset-name": jobset}},
        "spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]}})


def test_list_pods_of_a_jobset_as_plain_dicts(c, kube):
    _pod(c, "p-0", "p")
    _pod(c, "q-0", "q")
    c.patch(PODS + "/p-0/status", {"status": {"phase": "Running", "podIP": "10.0.0.7"}})
    pods = kube.list_pods(c.namespace, "p")
    assert [(p["metadata"]["name"], p["status"]["podIP"]) for p in pods] == [("p-0", "10.0.0.7")]


class OneLog:
    def __init__(self, path: Path):
        self.path = path

    def container_log(self, namespace, pod, uid, container, previous):
        return ContainerLog(self.path, lambda: False)


def test_read_pod_log_or_none(c, kube, tmp_path):
    log = tmp_path / "trainer.log"
    log.write_text("".join(f"line {i}\n" for i in range(10)))
    c.server.set_pod_logs(OneLog(log))
    _pod(c, "l-0", "l")
    assert kube.read_pod_log(c.namespace, "l-0", "trainer", 3, 900) == "line 7\nline 8\nline 9\n"
    assert kube.read_pod_log(c.namespace, "gone", "trainer", 3, 900) is None      # 404
    assert kube.read_pod_log(c.namespace, "l-0", "sidecar", 3, 900) is None       # 400
    c.server.set_faults(error_rate=1.0, error_codes=[500], resources={"pods/log"})
    assert kube.read_pod_log(c.namespace, "l-0", "trainer", 3, 900) is None       # 500


# -- ConfigMap --------------------------------------------------------------------------------

def test_apply_config_map_creates_then_patches_only_a_change(c, kube):
    kube.apply_config_map(config_map(c, "cfg", {"config.yaml": "a: 1\n"}))
    kube.apply_config_map(config_map(c, "cfg", {"config.yaml": "a: 1\n"}))
    assert [(v, s) for v, r, s in sent(c)] == [("create", 201), ("create", 409), ("get", 200)]
    kube.apply_config_map(config_map(c, "cfg", {"config.yaml": "a: 2\n"}))
    assert [v for v, r, s in sent(c)][-1] == "patch"
    got = c.request("GET", CONFIGMAPS + "/cfg").json()
    assert got["data"] == {"config.yaml": "a: 2\n"}


def test_apply_config_map_through_an_outage_fails(c, kube):
    c.server.set_faults(error_rate=1.0, error_codes=[500], verbs={"create"})
    with pytest.raises(ApiUnavailable, match=f"create ConfigMap {c.namespace}/cfg: 500"):
        kube.apply_config_map(config_map(c, "cfg", {"a": "1"}))


# -- the job's status and Events ----------------------------------------------------------------

def test_job_exists_by_uid(c, kube):
    job = c.create_job("j")
    assert kube.job_exists(c.namespace, "j", job["metadata"]["uid"])
    assert not kube.job_exists(c.namespace, "j", "an-earlier-job-of-that-name")
    c.request("DELETE", JOBS + "/j")
    assert not kube.job_exists(c.namespace, "j", job["metadata"]["uid"])


def test_list_jobs_and_jobsets_in_a_namespace_or_everywhere(c, kube, server, kubeconfig):
    other = Cluster(server, kubeconfig, c.namespace + "-b")
    other.request("POST", "/api/v1/namespaces", json={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other.namespace}})
    c.create_job("here")
    other.create_job("there")
    here, version = kube.list_jobs(c.namespace)
    assert [j["metadata"]["name"] for j in here] == ["here"] and version.isdigit()
    everywhere, _ = kube.list_jobs(None)
    names = {(j["metadata"]["namespace"], j["metadata"]["name"]) for j in everywhere}
    assert {(c.namespace, "here"), (other.namespace, "there")} <= names
    c.create(JOBSETS, jobset_body(c, "mine") | {"metadata": {
        "name": "mine", "labels": {"tpujob.dev/job-name": "mine"}}})
    c.create(JOBSETS, jobset_body(c, "theirs"))
    found, version = kube.list_jobsets(c.namespace, "tpujob.dev/job-name")
    assert [j["metadata"]["name"] for j in found] == ["mine"] and version.isdigit()
    assert kube.list_jobsets(None, "tpujob.dev/job-name=nothing")[0] == []


def test_patch_status(c, kube):
    c.create_job("st")
    patched = kube.patch_status(c.namespace, "st", {"phase": "Pending"})
    assert patched["status"]["phase"] == "Pending" == c.job("st")["status"]["phase"]


def test_create_event_names_the_job_and_keeps_order(c, kube):
    job = c.create_job("ev")
    kube.create_event(job, "Warning", "Stalled", "x" * 2000)
    kube.create_event(job, "Normal", "Running", "every host is running")
    events = sorted(c.events("ev"), key=lambda e: e["metadata"]["name"])
    assert [e["reason"] for e in events] == ["Stalled", "Running"]
    first = events[0]
    meta = job["metadata"]
    assert first["metadata"]["name"].startswith("ev.")
    assert first["involvedObject"] == {
        "apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob", "name": "ev",
        "namespace": c.namespace, "uid": meta["uid"],
        "resourceVersion": meta["resourceVersion"]}
    assert (first["type"], first["message"], first["count"]) == ("Warning", "x" * 1024, 1)
    assert first["source"] == {"component": "tpujob-operator"}
    assert first["reportingComponent"] == first["reportingInstance"] == "tpujob-operator"
    assert first["firstTimestamp"] == first["lastTimestamp"]


def test_an_event_that_cannot_be_posted_is_only_logged(c, kube, caplog):
    job = c.create_job("lost")
    c.server.set_faults(error_rate=1.0, error_codes=[500], resources={"events"})
    with caplog.at_level(logging.WARNING, logger="tpujob.operator"):
        kube.create_event(job, "Normal", "Running", "every host is running")      # 500
        c.server.set_faults()
        kube.create_event(job | {"metadata": job["metadata"] | {"namespace": "no-such"}},
                          "Normal", "Running", "every host is running")      # 404
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        f"could not record Event Running for {c.namespace}/lost",
        "could not record Event Running for no-such/lost"]
    assert c.events("lost") == []


# -- Kueue -------------------------------------------------------------------------------------

WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads"


def test_the_workload_of_a_jobset_is_found_by_kueues_label(c, kube):
    for name, uid in (("jobset-a-1", "uid-a"), ("jobset-b-1", "uid-b")):
        c.create(WORKLOADS, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                             "metadata": {"name": name, "labels": {
                                 "kueue.x-k8s.io/job-uid": uid}},
                             "spec": {"queueName": "q"}})
    assert kube.find_workload(c.namespace, "uid-b")["metadata"]["name"] == "jobset-b-1"
    assert kube.find_workload(c.namespace, "uid-none") is None


@pytest.mark.parametrize("status, found", [(404, None), (403, ApiRefused), (503, ApiUnavailable)])
def test_without_kueue_there_is_no_workload_and_other_errors_stand(answers, status, found):
    body = json.dumps({"kind": "Status", "code": status, "message": "no"}).encode()
    answers.reply = (status, {"Content-Type": "application/json"}, body)
    if found is None:
        assert answers.kube.find_workload("team", "uid") is None
    else:
        with pytest.raises(found):
            answers.kube.find_workload("team", "uid")


def test_the_priority_label_is_patched_on_the_jobset(c, kube):
    c.create(JOBSETS, jobset_body(c, "js"))
    kube.set_jobset_label(c.namespace, "js", "kueue.x-k8s.io/priority-class", "high")
    assert c.jobset("js")["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
