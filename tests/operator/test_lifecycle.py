"""The operator end to end against the embedded API server: a job gets its JobSet and
ConfigMap, follows the JobSet's status through every phase with an Event per change, reads
progress from a stand-in metrics endpoint, refuses invalid jobs, restarts, fails with the
trainer's reason, suspends and resumes, and its children go when it is deleted."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.operator.conftest import JOBS, JOBSETS, create_trainer_pod, name, start_operator
from tests.support.apiserver import wait_for
from tpujob.api.resource import load_job
from tpujob.builders.jobset import build_jobset
from tpujob_plan.slice_plan import plan_slice

pytestmark = pytest.mark.integration


def test_create_makes_the_jobset_and_config_map(cluster, operator):
    n = name()
    job = cluster.create_job(n)
    js = wait_for(lambda: cluster.jobset(n), message="JobSet")
    expected = build_jobset(job, load_job(job).spec, plan_slice("v6e-16"))
    assert js["spec"]["replicatedJobs"][0]["replicas"] == 1
    template = js["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (template["parallelism"], template["completions"]) == (4, 4)
    got = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    want = expected["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"]
    for key in ("name", "image", "command", "args", "env", "resources"):
        assert [c.get(key) for c in got] == [c.get(key) for c in want], key
    assert js["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    cm = cluster.request("GET", f"/api/v1/namespaces/{{ns}}/configmaps/{n}-trainer")
    assert cm.status_code == 200 and "trainer.yaml" in cm.json()["data"]
    status = cluster.wait_phase(n, "Starting")["status"]
    assert status["slice"] == {"topology": "4x4", "machineType": "ct6e-standard-4t",
                               "hosts": 4, "chips": 16, "devices": 16, "processes": 4}
    valid = next(c for c in status["conditions"] if c["type"] == "Valid")
    assert valid["status"] == "True"
    wait_for(lambda: {"Created", "Starting"} <= set(cluster.event_reasons(n)), message="Events")


def test_jobset_status_drives_the_phases_with_an_event_each(cluster, operator):
    n = name()
    cluster.create_job(n)
    cluster.wait_phase(n, "Starting")
    ready = [{"name": "slice", "ready": 1, "succeeded": 0, "failed": 0, "active": 1,
              "suspended": 0}]
    cluster.set_jobset_status(n, replicatedJobsStatus=ready)
    status = cluster.wait_phase(n, "Running")["status"]
    assert status["startTime"]
    cluster.set_jobset_status(n, conditions=[{
        "type": "Completed", "status": "True", "reason": "AllJobsCompleted",
        "message": "jobset completed successfully", "lastTransitionTime": "2026-11-21T00:00:00Z"}])
    status = cluster.wait_phase(n, "Succeeded")["status"]
    assert status["completionTime"]
    wait_for(lambda: {"Starting", "Running", "Succeeded"} <= set(cluster.event_reasons(n)),
             message="an Event per phase")


def test_invalid_job_is_refused_and_nothing_is_created(cluster, operator):
    n = name()
    cluster.create_job(n, slice="v6e-12")
    status = cluster.wait_phase(n, "Invalid")["status"]
    assert status["failure"]["reason"] == "InvalidSlice"
    assert "spec.slice" in status["failure"]["message"]
    assert "v6e-16" in status["failure"]["message"]  # what would be valid
    valid = next(c for c in status["conditions"] if c["type"] == "Valid")
    assert (valid["status"], valid["reason"]) == ("False", "InvalidSlice")
    events = wait_for(lambda: [e for e in cluster.events(n) if e["reason"] == "Invalid"],
                      message="a Warning Event")
    assert events[0]["type"] == "Warning"
    assert cluster.jobset(n) is None
    cm = cluster.request("GET", f"/api/v1/namespaces/{{ns}}/configmaps/{n}-trainer")
    assert cm.status_code == 404


class _Progress(BaseHTTPRequestHandler):
    doc: dict = {}

    def do_GET(self):  # noqa: N802
        body = json.dumps(self.doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def metrics_endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Progress)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


def test_progress_is_read_from_process_zero(cluster, operator, metrics_endpoint):
    n = name()
    cluster.create_job(n)
    cluster.wait_phase(n, "Starting")
    _Progress.doc = {"phase": "training", "step": 42, "total_steps": 100, "loss": 3.25,
                     "step_time_s": 0.5, "tokens_per_s_per_device": 1234.5,
                     "tflops_per_device": 1.5, "mfu": 0.42, "last_checkpoint_step": 40}
    create_trainer_pod(cluster, n, 0, metrics_endpoint.server_address[1],
         phase="Running", podIP="127.0.0.1")
    cluster.set_jobset_status(n, replicatedJobsStatus=[{"name": "slice", "ready": 1,
                                                        "succeeded": 0, "failed": 0,
                                                        "active": 1, "suspended": 0}])
    job = wait_for(lambda: (cluster.job(n)["status"].get("progress") or {}).get("step") == 42
                   and cluster.job(n), message="progress in status")
    p = job["status"]["progress"]
    assert (p["totalSteps"], p["loss"], p["mfu"], p["lastCheckpointStep"]) == (100, 3.25, 0.42,
                                                                                40)
    assert p["tokensPerSecondPerDevice"] == 1234.5 and p["lastUpdateTime"]
    _Progress.doc = dict(_Progress.doc, step=43)
    job = wait_for(lambda: (cluster.job(n)["status"]["progress"]["step"] == 43) and cluster.job(n),
                   message="the next step")
    assert job["status"]["progress"]["lastStepTime"]


def _log_progress_job_running(cluster) -> str:
    """A job whose progress comes from process 0's log, with that pod running and the JobSet
    ready: its name."""
    n = name()
    cluster.create_job(n, trainer={"command": ["python3", "train.py"],
                                   "progress": {"source": "log", "format": "maxtext"}})
    cluster.wait_phase(n, "Starting")
    create_trainer_pod(cluster, n, 0, 9431, phase="Running", podIP="127.0.0.1")
    cluster.set_jobset_status(n, replicatedJobsStatus=[{"name": "slice", "ready": 1,
                                                        "succeeded": 0, "failed": 0,
                                                        "active": 1, "suspended": 0}])
    return n


def test_progress_from_the_log_asks_pods_log_and_a_missing_log_is_no_error(cluster, operator):
    """A job whose progress comes from process 0's log: the operator asks pods/log for the
    end of it (no kubelet serves this hand-made pod's log here), and the job runs on."""
    n = _log_progress_job_running(cluster)
    cluster.wait_phase(n, "Running")
    path = f"/api/v1/namespaces/{cluster.namespace}/pods/{n}-slice-0-0-x/log"
    asked = wait_for(lambda: [r for r in cluster.server.requests() if r.path.startswith(path)],
                     message="a pods/log request")
    assert asked[0].rule == ("", "pods/log", "get")
    assert cluster.phase(n) == "Running" and not cluster.job(n)["status"].get("progress")


def test_progress_from_the_log_finds_process_zero_once_per_attempt(fresh):
    """Each look reads the log again, but the pods are listed once per JobSet attempt (no log
    line yet is not a lost pod)."""
    operator = start_operator(fresh)
    try:
        _log_progress_job_running(fresh)
        wait_for(lambda: len([r for r in fresh.server.requests()
                              if r.resource == "pods/log"]) >= 3, message="three log reads")
        assert len([r for r in fresh.server.requests()
                    if r.verb == "list" and r.resource == "pods"]) == 1
    finally:
        operator.stop()


def test_restart_after_a_retryable_failure_is_counted_with_an_event(cluster, operator):
    n = name()
    cluster.create_job(n)
    cluster.wait_phase(n, "Starting")
    cluster.set_jobset_status(n, replicatedJobsStatus=[{"name": "slice", "ready": 1,
                                                        "succeeded": 0, "failed": 0,
                                                        "active": 1, "suspended": 0}])
    cluster.wait_phase(n, "Running")
    cluster.set_jobset_status(n, restarts=1, replicatedJobsStatus=[{
        "name": "slice", "ready": 0, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}])
    status = cluster.wait_phase(n, "Restarting")["status"]
    assert status["restarts"] == 1
    wait_for(lambda: "Restarted" in cluster.event_reasons(n), message="Restarted Event")


def test_fatal_failure_surfaces_the_trainers_reason(cluster, operator):
    n = name()
    cluster.create_job(n)
    cluster.wait_phase(n, "Starting")
    message = json.dumps({"reason": "OutOfMemory",
                          "message": "RESOURCE_EXHAUSTED: 40 GiB needed, 31 GiB free"})
    create_trainer_pod(cluster, n, 1, 9431, phase="Failed", containerStatuses=[{
        "name": "trainer", "ready": False, "restartCount": 0, "image": "trainer:1",
        "imageID": "", "state": {"terminated": {"exitCode": 4, "reason": "Error",
                                                "message": message}}}])
    cluster.set_jobset_status(n, conditions=[{
        "type": "Failed", "status": "True", "reason": "PodFailurePolicy",
        "message": "job failed", "lastTransitionTime": "2026-11-21T00:00:00Z"}])
    status = cluster.wait_phase(n, "Failed")["status"]
    assert status["failure"]["reason"] == "OutOfMemory"
    assert "RESOURCE_EXHAUSTED" in status["failure"]["message"]
    assert f"{n}-slice-0-1-x" in status["failure"]["message"]
    failed = wait_for(lambda: [e for e in cluster.events(n) if e["reason"] == "Failed"],
                      message="Failed Event")
    assert failed[0]["type"] == "Warning"


def test_suspend_and_resume(cluster, operator):
    n = name()
    cluster.create_job(n)
    cluster.wait_phase(n, "Starting")
    cluster.patch(JOBS + f"/{n}", {"spec": {"suspend": True}})
    cluster.wait_phase(n, "Suspended")
    assert cluster.jobset(n)["spec"]["suspend"] is True
    cluster.patch(JOBS + f"/{n}", {"spec": {"suspend": False}})
    cluster.wait_phase(n, "Starting")
    assert cluster.jobset(n)["spec"]["suspend"] is False


def test_change_while_suspended_is_applied_and_while_running_refused(cluster, operator):
    n = name()
    cluster.create_job(n)
    cluster.wait_phase(n, "Starting")
    cluster.patch(JOBS + f"/{n}", {"spec": {"image": "trainer:2"}})
    job = wait_for(lambda: any(c["type"] == "SpecApplied" and c["status"] == "False"
                               for c in cluster.job(n)["status"]["conditions"]) and cluster.job(n),
                   message="SpecApplied=False")
    applied = next(c for c in job["status"]["conditions"] if c["type"] == "SpecApplied")
    assert "spec.image" in applied["message"] and "suspend" in applied["message"]
    assert cluster.jobset(n)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"]["containers"][0]["image"] == "trainer:1"
    wait_for(lambda: "UpdateRefused" in cluster.event_reasons(n), message="UpdateRefused Event")
    old_uid = cluster.jobset(n)["metadata"]["uid"]
    cluster.patch(JOBS + f"/{n}", {"spec": {"suspend": True}})
    wait_for(lambda: (cluster.jobset(n) or {}).get("metadata", {}).get("uid") not in (None,
                                                                                       old_uid),
             timeout=20, message="the JobSet re-created from the new spec")
    image = cluster.jobset(n)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"]["containers"][0]["image"]
    assert image == "trainer:2"
    cluster.wait_phase(n, "Suspended")


def test_stall_restarts_every_host(cluster, operator):
    n = name()
    cluster.create_job(n, firstStepTimeoutSeconds=1, stallTimeoutSeconds=1,
                       restartPolicy={"maxRestarts": 50})
    cluster.wait_phase(n, "Starting")
    job_obj = cluster.create("/apis/batch/v1/namespaces/{ns}/jobs", {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": f"{n}-slice-0", "labels": {"jobset.sigs.k8s.io/jobset-name": n}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "trainer", "image": "trainer:1"}]}}}})
    cluster.set_jobset_status(n, replicatedJobsStatus=[{"name": "slice", "ready": 1,
                                                        "succeeded": 0, "failed": 0,
                                                        "active": 1, "suspended": 0}])
    job = wait_for(lambda: cluster.job(n)["status"].get("stallRestarts", 0) >= 1
                   and cluster.job(n), timeout=20, message="a restart after the stall")
    assert job["status"]["restarts"] >= 1
    assert cluster.request("GET", f"/apis/batch/v1/namespaces/{{ns}}/jobs/{n}-slice-0"
                           ).status_code == 404, "the Job was not deleted"
    # the JobSet controller would now report the hosts gone
    cluster.set_jobset_status(n, replicatedJobsStatus=[{"name": "slice", "ready": 0,
                                                        "succeeded": 0, "failed": 0,
                                                        "active": 1, "suspended": 0}])
    cluster.wait_phase(n, "Restarting")
    stalled = wait_for(lambda: [e for e in cluster.events(n) if e["reason"] == "Stalled"],
                       message="a Stalled Event")
    assert stalled[0]["type"] == "Warning" and "no training step" in stalled[0]["message"]
    assert job_obj["metadata"]["uid"]


def test_stall_fails_the_job_at_the_restart_limit(cluster, operator):
    n = name()
    cluster.create_job(n, firstStepTimeoutSeconds=1, restartPolicy={"maxRestarts": 0})
    cluster.wait_phase(n, "Starting")
    cluster.set_jobset_status(n, replicatedJobsStatus=[{"name": "slice", "ready": 1,
                                                        "succeeded": 0, "failed": 0,
                                                        "active": 1, "suspended": 0}])
    status = cluster.wait_phase(n, "Failed", timeout=20)["status"]
    assert status["failure"]["reason"] == "Stalled"
    assert "restart limit 0" in status["failure"]["message"]
    assert cluster.jobset(n)["spec"]["suspend"] is True  # no TPU kept busy by a failed job


def test_delete_cascades_to_children(cluster, operator):
    n = name()
    cluster.create_job(n)
    wait_for(lambda: cluster.jobset(n), message="JobSet")
    r = cluster.request("DELETE", JOBS + f"/{n}")
    assert r.status_code in (200, 202)
    wait_for(lambda: cluster.job(n) is None, message="the job gone (no finalizer holds it)")
    wait_for(lambda: cluster.jobset(n) is None, message="the JobSet collected")
    wait_for(lambda: cluster.request("GET", f"/api/v1/namespaces/{{ns}}/configmaps/{n}-trainer"
                                     ).status_code == 404, message="the ConfigMap collected")


def test_jobs_have_no_finalizer_and_no_kopf_annotations(cluster, operator):
    n = name()
    cluster.create_job(n)
    job = cluster.wait_phase(n, "Starting")
    assert not job["metadata"].get("finalizers")
    assert not [k for k in (job["metadata"].get("annotations") or {}) if "kopf" in k]


def test_health_and_metrics(cluster, operator):
    import requests
    port = operator.operator.health.port
    base = f"http://127.0.0.1:{port}"
    assert requests.get(base + "/healthz", timeout=5).status_code == 200
    assert requests.get(base + "/readyz", timeout=5).status_code == 200
    text = requests.get(base + "/metrics", timeout=5).text
    assert "tpujob_operator_reconciles_total" in text
    assert 'tpujob_operator_jobs{phase="Invalid"}' in text
    assert "tpujob_operator_reconcile_duration_seconds_bucket" in text


_ = JOBSETS
