"""The reconciler's paths, driven directly (`reconcile`, `observe`, `act`, `_next_look`,
`_status_patch`) against the embedded API server over real HTTP, with the real `decide` and real
TpuTrainingJobs: children created and owned by the job, a JobSet adopted after a create whose
answer was lost, a JobSet of another owner, workload policies, terminal and deleted jobs, the
status patch, the JobSet actions, progress from the endpoint and from the log (process 0 looked
up once per JobSet attempt), the verdict cache and when to look again.

One server for the module; every test has a namespace of its own and reads what the reconciler
sent from the server's request log (the reconciler's client is the only one whose User-Agent is
OpenAPI-Generator)."""

from __future__ import annotations

import dataclasses
import http.server
import json
import secrets
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.operator.conftest import JOBS, JOBSETS, TINY, Cluster
from tpujob.api.status import FailureReason, Phase, TpuTrainingJobStatus, find_condition
from tpujob.builders.jobset import build_children
from tpujob.controller.decide import Action, Decision, Observation
from tpujob.controller.kube import ApiRefused, ApiUnavailable, KubeApi
from tpujob.controller.metrics import OperatorMetrics
from tpujob.controller.observe import JobSetState
from tpujob.controller.reconcile import Outcome, Reconciler, _status_patch
from tpujob.controller.settings import OperatorSettings
from tpujob.controller.trainer_reports import ProgressReading
from tpujob.gcp.errors import QuotaExceeded
from tpujob.local.apiserver.podlogs import ContainerLog
from tpujob.validation import validate_job

pytestmark = pytest.mark.integration

# Every delay told apart: progress 15 s, resync 60 s, the blocked retry 30 s (retry_delays[-2]).
# The host reports' reads are counted in test_reconcile_hosts.py: off here.
SETTINGS = OperatorSettings(http_port=None, progress_interval_s=15.0, resync_interval_s=60.0,
                            retry_delays_s=(1, 2, 5, 10, 30, 60), host_report_interval_s=0.0)
PODS = "/api/v1/namespaces/{ns}/pods"
BATCH_JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"
RUNNING = [{"name": "slice", "ready": 1, "succeeded": 0, "failed": 0, "active": 1,
            "suspended": 0}]
TPU7X = {"slice": "tpu7x-64",
         "trainer": {"config": TINY | {"train": TINY["train"] | {"global_batch": 64}}}}
POLICY = "tpu7x-64-2x4x4-placement-policy"
LOG_PROGRESS = {"config": TINY, "progress": {"source": "log", "format": "jsonl"}}


# -- the server, and what the reconciler sent it ------------------------------------------------

class LogFiles:
    """The kubelet's part of pods/log: each pod's log is a file this test writes."""

    def __init__(self, root: Path):
        self.root = root

    def write(self, pod: str, text: str) -> None:
        (self.root / f"{pod}.log").write_text(text)

    def container_log(self, namespace, pod, uid, container, previous):
        path = self.root / f"{pod}.log"
        return ContainerLog(path, lambda: False) if path.exists() else None


def sent(c: Cluster, since: int = 0) -> list[tuple[str, str]]:
    """(verb, resource) of the reconciler's requests in the test's namespace, from the
    `since`-th on."""
    return [(r.verb, r.resource) for r in c.server.requests()
            if r.namespace == c.namespace and "OpenAPI-Generator" in r.user_agent][since:]


def mark(c: Cluster) -> int:
    return len(sent(c))


def event_reasons(c: Cluster, name: str) -> list[str]:
    return [e["reason"] for e in sorted(c.events(name), key=lambda e: e["metadata"]["name"])]


def reconciler(kube: KubeApi, **kw: Any) -> Reconciler:
    return Reconciler(kube, SETTINGS, **kw)


def add_pod(c: Cluster, jobset: str, *, port: int = 9431, attempt: int = 0, index: int = 0,
            name: str | None = None, **status: Any) -> dict:
    """A pod of slice 0 as the JobSet controller makes it (host `index`, restart `attempt`),
    running on 127.0.0.1 unless `status` says otherwise."""
    name = name or f"{jobset}-slice-0-{index}-{secrets.token_hex(2)}"
    c.create(PODS, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name,
                     "labels": {"jobset.sigs.k8s.io/jobset-name": jobset,
                                "jobset.sigs.k8s.io/job-index": "0",
                                "jobset.sigs.k8s.io/restart-attempt": str(attempt)},
                     "annotations": {"batch.kubernetes.io/job-completion-index": str(index)}},
        "spec": {"containers": [{"name": "trainer", "image": "trainer:1",
                                 "ports": [{"name": "metrics", "containerPort": port}]}]}})
    return c.patch(PODS + f"/{name}/status",
                   {"status": {"phase": "Running", "podIP": "127.0.0.1"} | status})


def started(c: Cluster, r: Reconciler, name: str, **spec: Any) -> tuple[dict, dict]:
    """A job created and reconciled once, its JobSet then reporting every host ready: (the job
    as the reconciler left it, the JobSet as the server has it)."""
    out = r.reconcile(c.create_job(name, **spec), None)
    c.set_jobset_status(name, replicatedJobsStatus=RUNNING)
    return out.job, c.jobset(name)


def status_of(c: Cluster, name: str) -> dict:
    return c.job(name).get("status") or {}


def running_condition(c: Cluster, name: str) -> dict:
    return find_condition(TpuTrainingJobStatus.model_validate(status_of(c, name)).conditions,
                          "Running").model_dump(by_alias=True)


# -- children ---------------------------------------------------------------------------------

def test_a_new_job_gets_its_config_map_and_jobset_owned_by_it(c, kube):
    metrics = OperatorMetrics()
    r = reconciler(kube, metrics=metrics)
    job = c.create_job("new")
    out = r.reconcile(job, None)
    assert (out.phase, out.requeue_after, out.gone) == (Phase.STARTING, 15.0, False)
    # Exactly these calls: no pod listed, no job looked up, the status written once.
    assert sent(c) == [("create", "configmaps"), ("create", "jobsets"),
                       ("patch", "tputrainingjobs/status"), ("create", "events"),
                       ("create", "events")]
    uid = job["metadata"]["uid"]
    jobset = c.jobset("new")
    config = c.request("GET", "/api/v1/namespaces/{ns}/configmaps/new-trainer").json()
    for child in (jobset, config):
        assert [(o["uid"], o["controller"]) for o in child["metadata"]["ownerReferences"]] == \
            [(uid, True)]
    assert out.jobset["metadata"]["uid"] == jobset["metadata"]["uid"]
    assert "_adopted" not in out.jobset
    assert out.job["status"] == status_of(c, "new") and out.job["status"]["phase"] == "Starting"
    assert event_reasons(c, "new") == ["Created", "Starting"]
    assert metrics.registry.get_sample_value("tpujob_operator_events_total",
                                             {"reason": "Created"}) == 1


def test_a_second_look_at_an_unchanged_job_sends_nothing(c, kube):
    now = datetime.now(UTC)
    r = reconciler(kube, clock=lambda: now)  # goodput's seconds do not move
    out = r.reconcile(c.create_job("same"), None)
    before = mark(c)
    again = r.reconcile(out.job, c.jobset("same"))
    assert (again.phase, again.requeue_after, again.job, again.jobset) == \
        (Phase.STARTING, 15.0, None, None)
    assert sent(c, before) == []  # no status patch, no Event, no pod listed


def test_events_go_to_the_recorder_given():
    """Checked without a server: the recorder given replaces posting through the API."""
    posted = []
    r = Reconciler(None, SETTINGS, record_event=lambda *args: posted.append(args))
    r.record_event({"metadata": {}}, "Normal", "Why", "what")
    assert posted == [({"metadata": {}}, "Normal", "Why", "what")]


def test_a_jobset_created_before_a_lost_reply_is_adopted_without_a_second_created_event(c, kube):
    # The create is carried out but its answer never comes (a timeout after etcd committed):
    # the reconciler finds the JobSet it made and goes on with it.
    c.server.set_faults(timeout_rate=1.0, timeout_after_commit=True, timeout_hold_s=0.05,
                        verbs={"create"}, resources={"jobsets"})
    r = reconciler(kube)
    job = c.create_job("lost")
    out = r.reconcile(job, None)
    c.server.set_faults()
    assert out.phase == Phase.STARTING and "_adopted" not in out.jobset
    assert out.jobset["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert event_reasons(c, "lost") == ["Starting"]
    assert len(c.request("GET", JOBSETS).json()["items"]) == 1


def test_a_jobset_found_by_a_409_is_adopted_when_it_is_the_jobs(c, kube):
    # The first pass created the children and then failed to write the status: the next pass
    # (the watch has not shown the JobSet yet) gets 409 for its create and adopts the JobSet.
    job = c.create_job("again")
    c.server.set_faults(error_rate=1.0, error_codes=[500], verbs={"patch"},
                        resources={"tputrainingjobs/status"})
    r = reconciler(kube)
    with pytest.raises(ApiUnavailable):
        r.reconcile(job, None)
    c.server.set_faults()
    assert c.jobset("again") is not None and "status" not in c.job("again")
    out = r.reconcile(job, None)
    assert out.phase == Phase.STARTING and status_of(c, "again")["phase"] == "Starting"
    creates = [x.status for x in c.server.requests() if x.namespace == c.namespace
               and x.resource == "jobsets" and x.verb == "create"]
    assert creates == [201, 409]
    assert event_reasons(c, "again") == ["Starting"]


def _foreign_jobset(c: Cluster, job: dict) -> dict:
    """The JobSet the job would make, but owned by another object."""
    other = json.loads(json.dumps(job))
    other["metadata"]["uid"] = "someone-else"
    verdict = validate_job(other)
    return c.create(JOBSETS, build_children(other, verdict.job.spec, verdict.plan)[-1])


def test_a_jobset_of_another_owner_blocks_the_job_and_nothing_is_created(c, kube):
    job = c.create_job("taken")
    foreign = _foreign_jobset(c, job)
    r = reconciler(kube)
    before = mark(c)
    out = r.reconcile(job, foreign)
    assert (out.phase, out.requeue_after, out.jobset) == (Phase.PENDING, 30, None)
    assert [v for v, _ in sent(c, before) if v == "create"] == ["create"]  # its Event only
    cond = running_condition(c, "taken")
    assert (cond["status"], cond["reason"]) == ("False", "Conflict")
    assert f"a JobSet named taken already exists in namespace {c.namespace}" in cond["message"]
    assert event_reasons(c, "taken") == ["Conflict"]
    assert c.jobset("taken")["metadata"]["uid"] == foreign["metadata"]["uid"]


def test_a_jobset_of_another_owner_met_at_create_is_not_taken(c, kube):
    # Seen only by the create (the watch had not shown it): the pass fails, to be retried,
    # and the status is not written.
    job = c.create_job("race")
    foreign = _foreign_jobset(c, job)
    with pytest.raises(ApiUnavailable, match="belongs to something else"):
        reconciler(kube).reconcile(job, None)
    assert "status" not in c.job("race")
    assert c.jobset("race")["metadata"]["uid"] == foreign["metadata"]["uid"]


# -- workload policies ------------------------------------------------------------------------

class Policies:
    def __init__(self, *errors: Exception):
        self.errors = list(errors)
        self.calls: list[tuple[str, str]] = []

    def __call__(self, name: str, topology: str) -> None:
        self.calls.append((name, topology))
        if self.errors:
            raise self.errors.pop(0)


def test_a_workload_policy_that_cannot_be_ensured_blocks_the_job_naming_it(c, kube):
    policies = Policies(QuotaExceeded("the region's resource policy quota is used up"))
    r = reconciler(kube, ensure_policy=policies)
    job = c.create_job("ironwood", **TPU7X)
    out = r.reconcile(job, None)
    assert (out.phase, out.requeue_after) == (Phase.PENDING, 30)
    assert c.jobset("ironwood") is None
    cond = running_condition(c, "ironwood")
    # The error's own message, not its str() (which leads with the reason).
    assert (cond["reason"], cond["message"]) == (
        "WorkloadPolicy", f"workload policy {POLICY}: the region's resource policy quota is "
                          "used up")
    # Ensured on the next pass, then never again: not for this job, nor for another.
    again = r.reconcile(c.job("ironwood"), None)
    assert again.phase == Phase.STARTING and c.jobset("ironwood") is not None
    r.reconcile(c.create_job("ironwood-2", **TPU7X), None)
    assert policies.calls == [(POLICY, "2x4x4")] * 2


def test_an_error_without_a_message_attribute_is_named_by_its_text(c, kube):
    r = reconciler(kube, ensure_policy=Policies(RuntimeError("compute is down")))
    r.reconcile(c.create_job("plain", **TPU7X), None)
    assert running_condition(c, "plain")["message"] == f"workload policy {POLICY}: compute is down"


def test_workload_policies_are_ensured_only_where_needed(c, kube):
    policies = Policies()
    # A generation without policies; policies not managed; the JobSet already there (an
    # operator restarted: its memory of ensured policies is empty).
    assert reconciler(kube, ensure_policy=policies).reconcile(
        c.create_job("v6e"), None).phase == Phase.STARTING
    assert reconciler(kube).reconcile(c.create_job("unmanaged", **TPU7X), None).phase == \
        Phase.STARTING
    seen = c.job("unmanaged")
    restarted = reconciler(kube, ensure_policy=policies)
    assert restarted.reconcile(seen, c.jobset("unmanaged")).phase == Phase.STARTING
    assert policies.calls == []


# -- jobs the reconciler leaves alone, and jobs that are gone ------------------------------------

@pytest.mark.parametrize("phase, deleting", [
    ("Succeeded", False), ("Failed", False), ("Running", True), ("Pending", True)])
def test_finished_and_deleted_jobs_are_left_alone(c, kube, phase, deleting):
    job = c.create_job("done")
    job["status"] = {"phase": phase}
    if deleting:
        job["metadata"]["deletionTimestamp"] = "2026-11-01T00:00:00Z"
    out = reconciler(kube).reconcile(job, None)
    assert out == Outcome(Phase(phase), None)
    assert sent(c) == []


def test_the_children_of_a_deleted_job_are_not_created_again(c, kube):
    r = reconciler(kube)
    seen = r.reconcile(c.create_job("gone"), None).job
    assert c.request("DELETE", JOBS + "/gone").status_code == 200
    c.request("DELETE", JOBSETS + "/gone")  # as the garbage collector does
    before = mark(c)
    # The JobSet's DELETED event came first; the job's own has not.
    outcome = r.reconcile(seen, None)
    assert (outcome.gone, outcome.phase, outcome.requeue_after) == (True, Phase.STARTING, None)
    assert sent(c, before) == [("list", "tputrainingjobs")]
    assert c.request("GET", JOBSETS).json()["items"] == []


def test_a_jobset_deleted_by_hand_is_created_again(c, kube):
    r = reconciler(kube)
    job = c.create_job("kept")
    seen = r.reconcile(job, None).job
    assert c.request("DELETE", JOBSETS + "/kept").status_code == 200
    again = r.reconcile(seen, None)
    assert again.jobset is not None and not again.gone
    assert c.jobset("kept")["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]


# -- the status patch -------------------------------------------------------------------------

@pytest.mark.parametrize("prev, new, patch", [
    ({}, {"phase": "Pending"}, {"phase": "Pending"}),
    ({"phase": "Pending", "restarts": 0}, {"phase": "Pending", "restarts": 0}, {}),
    ({"phase": "Pending", "restarts": 0}, {"phase": "Running", "restarts": 0},
     {"phase": "Running"}),
    ({"phase": "Invalid", "failure": {"reason": "InvalidSlice"}}, {"phase": "Starting"},
     {"phase": "Starting", "failure": None}),
    # Nested objects merge on the server: a nested key that went away is sent as null.
    ({"queue": {"state": "Admitted", "clusterQueue": "cq", "flavors": {"google.com/tpu": "f"}}},
     {"queue": {"state": "Preempted", "flavors": {}}},
     {"queue": {"state": "Preempted", "clusterQueue": None, "flavors": {"google.com/tpu": None}}}),
    ({"progress": {"step": 5, "loss": 2.5}}, {"progress": {"step": 5}},
     {"progress": {"loss": None}}),
    ({"queue": {"admissionChecks": [{"name": "a"}]}}, {"queue": {"admissionChecks": []}},
     {"queue": {"admissionChecks": []}}),
])
def test_the_status_patch_holds_changes_and_nulls(prev, new, patch):
    assert _status_patch(prev, new) == patch


def test_a_status_key_that_went_away_is_removed_on_the_server(c, kube):
    r = reconciler(kube)
    bad = {"config": TINY | {"train": TINY["train"] | {"global_batch": 17}}}
    r.reconcile(c.create_job("fixed", trainer=bad), None)
    assert status_of(c, "fixed")["failure"]["reason"] == "InvalidBatch"
    c.patch(JOBS + "/fixed", {"spec": {"trainer": {"config": TINY}}})
    out = r.reconcile(c.job("fixed"), None)
    assert out.phase == Phase.STARTING
    assert "failure" not in status_of(c, "fixed") and "failure" not in out.job["status"]


def test_a_job_failed_under_an_older_operator_gets_its_reason_column_once(c, kube):
    r = reconciler(kube)
    job = c.create_job("old")
    c.patch(JOBS + "/old/status", {"status": {"phase": "Failed", "failure": {
        "reason": "OutOfMemory", "message": "pod old-slice-0-0 exited 137"}}})
    out = r.reconcile(c.job("old"), None)
    assert out.phase == Phase.FAILED and status_of(c, "old")["reason"] == "OutOfMemory"
    assert job["metadata"]["uid"] == c.job("old")["metadata"]["uid"]
    before = len(c.server.requests())
    assert r.reconcile(c.job("old"), None).job is None   # nothing more to write
    assert len(c.server.requests()) == before + 1         # the GET above only


# -- actions ----------------------------------------------------------------------------------

def _batch_job(c: Cluster, name: str, jobset: str) -> None:
    c.create(BATCH_JOBS, {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {"jobset.sigs.k8s.io/jobset-name": jobset}},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
                                       "containers": [{"name": "c", "image": "i"}]}}}})


def _batch_jobs(c: Cluster) -> list[str]:
    return sorted(j["metadata"]["name"] for j in c.request("GET", BATCH_JOBS).json()["items"])


@pytest.mark.parametrize("action, suspended_before, suspend_after", [
    (Action.SUSPEND, False, True), (Action.STOP, False, True), (Action.RESUME, True, False)])
def test_suspend_stop_and_resume_reach_the_jobset(c, kube, action, suspended_before,
                                                  suspend_after):
    r = reconciler(kube)
    job, jobset = started(c, r, "act")
    c.patch(JOBSETS + "/act", {"spec": {"suspend": suspended_before}})
    obs = r.observe(job, c.jobset("act"), TpuTrainingJobStatus())
    before = mark(c)
    assert r.act(job, obs, Decision(TpuTrainingJobStatus(), actions=[action])) is None
    assert sent(c, before) == [("patch", "jobsets")]
    assert c.jobset("act")["spec"]["suspend"] is suspend_after


def test_restart_deletes_the_jobsets_jobs_only(c, kube):
    r = reconciler(kube)
    job, jobset = started(c, r, "again")
    _batch_job(c, "again-slice-0", "again")
    _batch_job(c, "other-slice-0", "other")
    obs = r.observe(job, jobset, TpuTrainingJobStatus())
    r.act(job, obs, Decision(TpuTrainingJobStatus(), actions=[Action.RESTART]))
    assert _batch_jobs(c) == ["other-slice-0"]
    assert c.jobset("again") is not None


def test_recreate_deletes_the_jobset_it_saw(c, kube):
    r = reconciler(kube)
    job, jobset = started(c, r, "remade")
    obs = r.observe(job, jobset, TpuTrainingJobStatus())
    assert obs.jobset.uid == jobset["metadata"]["uid"]
    r.act(job, obs, Decision(TpuTrainingJobStatus(), actions=[Action.RECREATE]))
    assert c.jobset("remade") is None


def test_a_spec_suspended_while_running_suspends_the_jobset(c, kube):
    r = reconciler(kube)
    job, jobset = started(c, r, "pause")
    c.patch(JOBS + "/pause", {"spec": {"suspend": True}})
    job = c.job("pause")
    assert r.reconcile(job, jobset).phase == Phase.SUSPENDED
    assert c.jobset("pause")["spec"]["suspend"] is True


def test_a_stall_restarts_every_host(c, kube):
    now = [datetime.now(UTC)]
    r = reconciler(kube, read_progress=lambda ip, port: None, clock=lambda: now[0])
    job, jobset = started(c, r, "stuck", firstStepTimeoutSeconds=60)
    _batch_job(c, "stuck-slice-0", "stuck")
    job = r.reconcile(job, jobset).job          # Running: the first-step allowance starts
    assert job["status"]["phase"] == "Running"
    now[0] += timedelta(minutes=5)
    out = r.reconcile(job, jobset)
    assert out.phase == Phase.RESTARTING and _batch_jobs(c) == []


# -- progress ---------------------------------------------------------------------------------

class Progress:
    """A trainer's /progress endpoint on 127.0.0.1: `doc` as JSON, or 404 when None."""

    def __init__(self):
        self.doc: dict | None = None
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (the base class's name)
                body = json.dumps(outer.doc).encode() if outer.doc is not None else b""
                self.send_response(200 if outer.doc is not None else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_port
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def progress():
    p = Progress()
    yield p
    p.httpd.shutdown()


def _reads(metrics: OperatorMetrics, result: str) -> float:
    return metrics.registry.get_sample_value("tpujob_operator_progress_reads_total",
                                             {"result": result}) or 0


def _pod_lists(c: Cluster, since: int) -> int:
    return sent(c, since).count(("list", "pods"))


def test_progress_from_the_endpoint_with_process_zero_looked_up_once(c, kube, progress):
    metrics = OperatorMetrics()
    r = reconciler(kube, metrics=metrics)
    job, jobset = started(c, r, "train")
    add_pod(c, "train", port=progress.port)
    progress.doc = {"step": 5, "total_steps": 100, "loss": 2.5, "phase": "training"}
    before = mark(c)
    job = r.reconcile(job, jobset).job
    assert job["status"]["phase"] == "Running" and job["status"]["progress"]["step"] == 5
    assert _pod_lists(c, before) == 1
    progress.doc = {"step": 6, "total_steps": 100, "loss": 2.4, "phase": "training"}
    before = mark(c)
    job = r.reconcile(job, jobset).job
    assert job["status"]["progress"]["step"] == 6 and _pod_lists(c, before) == 0
    # The endpoint stops answering: the step stays, and process 0 is looked up again next time.
    progress.doc = None
    before = mark(c)
    r.reconcile(job, jobset)
    assert status_of(c, "train")["progress"]["step"] == 6 and _pod_lists(c, before) == 0
    before = mark(c)
    r.reconcile(job, jobset)
    assert _pod_lists(c, before) == 1
    assert (_reads(metrics, "ok"), _reads(metrics, "none")) == (2, 2)


def test_progress_is_read_where_the_reader_given_says(c, kube, progress):
    asked = []
    r = reconciler(kube, read_progress=lambda ip, port: asked.append((ip, port)) or
                   ProgressReading(step=9))
    job, jobset = started(c, r, "given")
    add_pod(c, "given", port=progress.port)
    progress.doc = {"step": 5}
    assert r.reconcile(job, jobset).job["status"]["progress"]["step"] == 9
    assert asked == [("127.0.0.1", progress.port)]


def test_process_zero_is_kept_per_jobset_attempt(c, kube):
    # The reading names the port it was read from: each job is read at its own process 0.
    r = reconciler(kube, read_progress=lambda ip, port: ProgressReading(step=port - 9000))
    job_a, js_a = started(c, r, "a")
    job_b, js_b = started(c, r, "b")
    add_pod(c, "a", port=9001)
    add_pod(c, "b", port=9002)
    job_a = r.reconcile(job_a, js_a).job
    job_b = r.reconcile(job_b, js_b).job
    assert (job_a["status"]["progress"]["step"], job_b["status"]["progress"]["step"]) == (1, 2)
    before = mark(c)
    r.reconcile(job_a, js_a)
    r.reconcile(job_b, js_b)
    assert _pod_lists(c, before) == 0  # each job's process 0 kept beside the other's
    # The JobSet restarts: the new attempt's process 0 is looked up, the old one forgotten.
    for pod in c.request("GET", PODS).json()["items"]:
        if pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == "a":
            c.request("DELETE", PODS + f"/{pod['metadata']['name']}")
    add_pod(c, "a", port=9003, attempt=1)
    js_a = c.set_jobset_status("a", restarts=1)
    out = r.reconcile(job_a, js_a)
    assert out.job["status"]["progress"]["step"] == 3
    attempt_a = r._process_zero[job_a["metadata"]["uid"]][0]
    assert attempt_a == (c.namespace, js_a["metadata"]["uid"], 1)
    assert len(r._process_zero) == 2


def test_process_zero_is_forgotten_with_its_job_and_with_its_attempt(c, kube):
    # What the operator keeps per job must go when the job does: a long-lived operator sees
    # every job ever run.
    r = reconciler(kube, read_progress=lambda ip, port: ProgressReading(step=port - 9000))
    job_a, js_a = started(c, r, "gone")
    job_b, js_b = started(c, r, "stays")
    add_pod(c, "gone", port=9001)
    add_pod(c, "stays", port=9002)
    r.reconcile(job_a, js_a)
    job_b = r.reconcile(job_b, js_b).job
    assert job_b["status"]["progress"]["step"] == 2 and len(r._process_zero) == 2
    # The job is deleted: the operator calls forget on its DELETED event.
    r.forget(job_a["metadata"]["uid"])
    assert len(r._process_zero) == 1
    # The other one restarts, its new attempt's process 0 not running yet: the old attempt's
    # process 0 is not kept either.
    for pod in c.request("GET", PODS).json()["items"]:
        c.request("DELETE", PODS + f"/{pod['metadata']['name']}")
    js_b = c.set_jobset_status("stays", restarts=1)
    r.reconcile(job_b, js_b)
    assert r._process_zero == {}


def _read_from_log(c: Cluster, kube: KubeApi, tmp_path: Path, name: str):
    """A job whose progress is read from process 0's log, started, process 0's pod running and
    its log saying step 7: (reconciler, job, JobSet, the logs, the pod's name)."""
    logs = LogFiles(tmp_path)
    c.server.set_pod_logs(logs)
    r = reconciler(kube)
    job, jobset = started(c, r, name, trainer=LOG_PROGRESS)
    pod = add_pod(c, name)["metadata"]["name"]
    logs.write(pod, '{"step": 7, "loss": 3.0}\n')
    return r, job, jobset, logs, pod


def test_progress_from_the_log_with_process_zero_looked_up_once(c, kube, tmp_path):
    r, job, jobset, logs, first = _read_from_log(c, kube, tmp_path, "own")
    before = mark(c)
    job = r.reconcile(job, jobset).job
    assert job["status"]["progress"]["step"] == 7
    assert (_pod_lists(c, before), sent(c, before).count(("get", "pods/log"))) == (1, 1)
    logs.write(first, '{"step": 7, "loss": 3.0}\n{"step": 8, "loss": 2.9}\n')
    before = mark(c)
    job = r.reconcile(job, jobset).job
    assert job["status"]["progress"]["step"] == 8 and _pod_lists(c, before) == 0
    # Process 0's pod goes (no log to read: 404) and comes back as another pod.
    c.request("DELETE", PODS + f"/{first}")
    before = mark(c)
    r.reconcile(job, jobset)
    second = add_pod(c, "own")["metadata"]["name"]
    logs.write(second, '{"step": 9, "loss": 2.8}\n')
    job = r.reconcile(job, jobset).job
    assert job["status"]["progress"]["step"] == 9 and _pod_lists(c, before) == 1


def _terminated(message: str, *, code: int = 0) -> dict:
    return {"phase": "Failed" if code else "Succeeded", "containerStatuses": [
        {"name": "trainer", "image": "trainer:1", "imageID": "", "ready": False,
         "restartCount": 0, "state": {"terminated": {"exitCode": code, "message": message}}}]}


FINAL = {"step": 10, "total_steps": 10, "loss": 2.1, "last_checkpoint_step": 10, "phase": "done"}


@pytest.mark.parametrize("left, code, step, loss", [
    # Process 0 left its last figures as it exited: the status shows where the run ended.
    (FINAL, 0, 10, 2.1),
    (None, 0, 6, 2.4),  # it left none (killed, or a program of one's own): the last read stands
    # A run that failed for good: where it stopped (a NaN loss reads as no loss).
    (FINAL | {"step": 8, "loss": float("nan"), "last_checkpoint_step": 5}, 6, 8, None),
])
def test_a_finished_run_shows_the_step_it_ended_at(c, kube, progress, left, code, step, loss):
    r = reconciler(kube)
    job, jobset = started(c, r, "ends")
    pod = add_pod(c, "ends", port=progress.port)["metadata"]["name"]
    progress.doc = {"step": 6, "total_steps": 10, "loss": 2.4, "phase": "training",
                    "last_checkpoint_step": 5}
    job = r.reconcile(job, jobset).job
    assert job["status"]["progress"]["step"] == 6
    # Steps 7 to 10 and the final save come before the next look; the pod exits.
    progress.doc = None
    message = json.dumps({"reason": "NaNLoss" if code else "Completed", "message": "ended"}
                         | ({"progress": left} if left else {}))
    c.patch(PODS + f"/{pod}/status", {"status": _terminated(message, code=code)})
    jobset = c.set_jobset_status("ends", conditions=[FAILED if code else DONE])
    job = r.reconcile(job, jobset).job
    assert job["status"]["phase"] == ("Failed" if code else "Succeeded")
    shown = job["status"]["progress"]
    assert (shown["step"], shown.get("loss"), shown["lastCheckpointStep"]) == \
        (step, loss, left["last_checkpoint_step"] if left else 5)


@pytest.mark.parametrize("code", [0, 1])
def test_a_finished_run_whose_progress_is_in_its_log_reads_the_log_once_more(c, kube, tmp_path,
                                                                             code):
    r, job, jobset, logs, pod = _read_from_log(c, kube, tmp_path, "ownends")
    job = r.reconcile(job, jobset).job
    assert job["status"]["progress"]["step"] == 7
    logs.write(pod, '{"step": 7, "loss": 3.0}\n{"step": 9, "loss": 2.7}\ndone\n')
    c.patch(PODS + f"/{pod}/status", {"status": _terminated("", code=code)})
    jobset = c.set_jobset_status("ownends", conditions=[FAILED if code else DONE])
    job = r.reconcile(job, jobset).job
    assert job["status"]["phase"] == ("Failed" if code else "Succeeded")
    assert (job["status"]["progress"]["step"], job["status"]["progress"]["loss"]) == (9, 2.7)


def test_the_log_is_read_through_the_reader_given(c, kube):
    asked = []

    def read_log(*args):
        asked.append(args)
        return '{"step": 3}\n'

    r = reconciler(kube, read_log=read_log)
    job, jobset = started(c, r, "told", trainer=LOG_PROGRESS)
    pod = add_pod(c, "told")["metadata"]["name"]
    assert r.reconcile(job, jobset).job["status"]["progress"]["step"] == 3
    assert asked == [(c.namespace, pod, "trainer", 400, 900)]


# -- observe ----------------------------------------------------------------------------------

def _obs_fields(obs: Observation) -> dict:
    return {k: getattr(obs, k) for k in ("generation", "spec_matches", "changed_fields",
                                         "failure", "progress", "blocked", "finals")}


NOTHING = {"spec_matches": True, "changed_fields": (), "failure": None, "progress": None,
           "blocked": None, "finals": ()}


def test_observe_a_new_job(c, kube):
    r = reconciler(kube)
    job = c.create_job("fresh")
    assert _obs_fields(r.observe(job, None, TpuTrainingJobStatus())) == \
        NOTHING | {"generation": 1}
    del job["metadata"]["generation"]  # a job read from a file, not from the server
    assert r.observe(job, None, TpuTrainingJobStatus()).generation == 0
    assert sent(c) == []


def test_observe_a_spec_changed_since_the_jobset_was_made(c, kube):
    r = reconciler(kube)
    job, jobset = started(c, r, "edit")
    assert r.observe(job, jobset, TpuTrainingJobStatus()).spec_matches
    job = json.loads(json.dumps(job))
    job["spec"]["image"] = "trainer:2"
    job["metadata"]["generation"] = 2  # a verdict is kept per generation
    obs = r.observe(job, jobset, TpuTrainingJobStatus())
    assert (obs.spec_matches, obs.changed_fields) == (False, ("spec.image",))


def test_observe_an_update_that_cannot_be_read_while_the_jobset_runs(c, kube):
    r = reconciler(kube)
    job, jobset = started(c, r, "broken")
    job = json.loads(json.dumps(job))
    del job["spec"]["image"]
    job["metadata"]["generation"] = 2
    obs = r.observe(job, jobset, TpuTrainingJobStatus())
    assert not obs.verdict.valid and (obs.spec_matches, obs.changed_fields) == (True, ())


STATUS = {"name": "trainer", "image": "trainer:1", "imageID": "", "ready": False,
          "restartCount": 0}
OOM = {"containerStatuses": [STATUS | {"state": {"terminated": {
    "exitCode": 137, "reason": "OOMKilled"}}}]}
FAILED_EARLIER = {"containerStatuses": [STATUS | {"state": {"running": {}}, "lastState": {
    "terminated": {"exitCode": 1, "reason": "Error", "message": "boom"}}}]}
DONE = {"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "done",
        "lastTransitionTime": "2026-11-21T00:00:00Z"}
FAILED = DONE | {"type": "Failed", "reason": "FailedJobs", "message": "failed"}


@pytest.mark.parametrize("jobset_status, pod_status, failure", [
    ({"conditions": [FAILED]}, OOM, FailureReason.OUT_OF_MEMORY),
    ({"restarts": 1}, OOM, FailureReason.OUT_OF_MEMORY),          # restarted, not failed
    ({"conditions": [DONE]}, FAILED_EARLIER, None),               # finished: no failure
    ({"conditions": [FAILED]}, FAILED_EARLIER, FailureReason.ERROR),
])
def test_observe_why_an_attempt_ended(c, kube, jobset_status, pod_status, failure):
    r = reconciler(kube)
    job, _ = started(c, r, "ended")
    add_pod(c, "ended", **pod_status)
    jobset = c.set_jobset_status("ended", **jobset_status)
    obs = r.observe(job, jobset, TpuTrainingJobStatus())
    assert (obs.failure[0] if obs.failure else None) == failure
    assert sent(c)[-1] == ("list", "pods")


# -- the verdict cache, when to look again, the outcome -------------------------------------------

def _job(uid: str | None, generation: int | None, slice_name: str = "v6e-16") -> dict:
    meta = {"name": "j", "namespace": "ns"} | ({"uid": uid} if uid else {}) | (
        {"generation": generation} if generation is not None else {})
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob", "metadata": meta,
            "spec": {"slice": slice_name, "image": "trainer:1", "output": "gs://bucket/run",
                     "trainer": {"config": TINY}}}


def test_the_verdict_is_kept_per_uid_and_generation():
    r = Reconciler(None, SETTINGS)
    first = r._validate(_job("u", 1))
    assert first.valid and r._validate(_job("u", 1)) is first
    assert not r._validate(_job("u", 2, "v6e-12")).valid  # a new generation is validated
    assert r._validate(_job("v", 2)).valid                # another job has its own
    r.forget("u")
    again = r._validate(_job("u", 2, "v6e-12"))
    assert not again.valid and r._validate(_job("u", 2, "v6e-12")) is again
    # Without a uid or a generation nothing is kept: two jobs, two verdicts.
    for uid, generation in ((None, 1), ("w", None)):
        assert r._validate(_job(uid, generation)).valid
        assert not r._validate(_job(uid, generation, "v6e-12")).valid


@pytest.mark.parametrize("phase, blocked, delay", [
    (Phase.PENDING, None, 60.0), (Phase.QUEUED, None, 60.0), (Phase.SUSPENDED, None, 60.0),
    (Phase.STARTING, None, 15.0), (Phase.RUNNING, None, 15.0), (Phase.RESTARTING, None, 15.0),
    (Phase.PENDING, (FailureReason.CONFLICT, "x"), 30),
    (Phase.SUCCEEDED, None, None), (Phase.FAILED, None, None), (Phase.INVALID, None, None),
    (Phase.FAILED, (FailureReason.CONFLICT, "x"), None),
])
def test_when_to_look_again(phase, blocked, delay):
    obs = Observation(now=datetime.now(UTC), generation=1, verdict=validate_job(_job("u", 1)),
                      jobset=JobSetState.missing(), blocked=blocked)
    assert Reconciler(None, SETTINGS)._next_look(phase, obs) == delay


def test_an_outcome_cannot_be_changed():
    out = Outcome(Phase.RUNNING, 1.0)
    assert out.gone is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.gone = True


@pytest.mark.parametrize("status, reason, hint", [
    (403, "Forbidden", "lacks this permission"),
    (422, "Refused", None),
])
def test_a_refused_call_is_reported_on_the_job_once(status, reason, hint):
    posted = []
    r = Reconciler(None, SETTINGS, record_event=lambda *args: posted.append(args))
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "u-1"}}
    err = ApiRefused(status, "create JobSet ns/j: denied")
    r.report_refused(job, err)
    r.report_refused(job, err)
    assert len(posted) == 1
    _, type_, got_reason, message = posted[0]
    assert (type_, got_reason) == ("Warning", reason)
    assert f"({status})" in message and "create JobSet ns/j: denied" in message
    assert (hint in message) if hint else ("permission" not in message)
    r.report_refused(job, ApiRefused(status, "create JobSet ns/j: denied again"))
    assert len(posted) == 2, "another refusal is another event"
    r.forget("u-1")
    r.report_refused(job, err)
    assert len(posted) == 3, "forgotten with the deleted job"
