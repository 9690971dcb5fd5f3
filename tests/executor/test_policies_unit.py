"""The pure parts of the executor's controllers, table-driven: the JobSet failure and success
policies, a Job's podFailurePolicy, and the plans of the Job and JobSet controllers."""

from __future__ import annotations

import hashlib

import pytest

from tpujob.local.executor.failure_policy import decide_failure
from tpujob.local.executor.job_controller import (
    build_pod,
    format_indexes,
    generate_name,
    parse_indexes,
    plan_job,
)
from tpujob.local.executor.jobset_children import build_job, default_jobset
from tpujob.local.executor.jobset_controller import plan_jobset
from tpujob.local.executor.pod_failure_policy import match_pod_failure_policy
from tpujob.local.executor.success_policy import is_success_policy_met

pytestmark = pytest.mark.unit
NOW = 1_800_000_000.0


# -- test objects --------------------------------------------------------------------------------

def failed_job(name: str, reason: str, message: str = "", rjob: str = "slice",
               at: str = "2027-01-01T00:00:10Z") -> dict:
    return {"metadata": {"name": name, "labels": {"jobset.sigs.k8s.io/replicatedjob-name": rjob,
                                                   "jobset.sigs.k8s.io/restart-attempt": "0"}},
            "status": {"conditions": [{"type": "Failed", "status": "True", "reason": reason,
                                       "message": message, "lastTransitionTime": at}]}}


TPUJOB_RULES = [
    {"name": "Disruption", "action": "RestartJobSetAndIgnoreMaxRestarts",
     "onJobFailureReasons": ["PodFailurePolicy"],
     "onJobFailureMessagePatterns": [".*DisruptionTarget.*"]},
    {"name": "FatalExit", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]},
]
DISRUPTED = "Pod ns/p has condition DisruptionTarget matching FailJob rule at index 0"
FATAL = "Container trainer for pod ns/p failed with exit code 4 matching FailJob rule at index 1"


@pytest.mark.parametrize("policy, status, jobs, fail, reason, counts", [
    (None, {}, [failed_job("a", "BackoffLimitExceeded")], True, "FailedJobs", False),
    ({"maxRestarts": 3, "rules": TPUJOB_RULES}, {},
     [failed_job("a", "PodFailurePolicy", DISRUPTED)], False,
     "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction", False),
    ({"maxRestarts": 3, "rules": TPUJOB_RULES}, {},
     [failed_job("a", "PodFailurePolicy", FATAL)], True, "FailJobSetFailurePolicyAction", False),
    ({"maxRestarts": 3, "rules": TPUJOB_RULES}, {"restartsCountTowardsMax": 2},
     [failed_job("a", "BackoffLimitExceeded")], False, "RestartJobSetFailurePolicyAction", True),
    ({"maxRestarts": 3, "rules": TPUJOB_RULES}, {"restartsCountTowardsMax": 3},
     [failed_job("a", "BackoffLimitExceeded")], True, "ReachedMaxRestarts", False),
    ({"maxRestarts": 1, "rules": [{"name": "x", "action": "FailJobSet",
                                   "targetReplicatedJobs": ["workers"]}]}, {},
     [failed_job("a", "BackoffLimitExceeded", rjob="leader")], False,
     "RestartJobSetFailurePolicyAction", True),
    ({"maxRestarts": 1, "rules": [{"name": "x", "action": "FailJobSet",
                                   "onJobFailureMessagePatterns": ["([unclosed"]}]}, {},
     [failed_job("a", "PodFailurePolicy", FATAL)], False, "RestartJobSetFailurePolicyAction",
     True),
], ids=["no-policy", "disruption", "fatal", "default-restart", "max-restarts",
        "other-replicated-job", "invalid-pattern"])
def test_failure_policy(policy, status, jobs, fail, reason, counts):
    spec = {} if policy is None else {"failurePolicy": policy}
    decision = decide_failure(spec, status, jobs)
    assert (decision.fail, decision.reason, decision.counts_towards_max) == (fail, reason, counts)
    assert decision.message.endswith("(first failed job: a)")


def test_failure_policy_names_the_earliest_failed_job_and_restarts_that_job_alone():
    jobs = [failed_job("late", "BackoffLimitExceeded", at="2027-01-01T00:00:20Z"),
            failed_job("early", "BackoffLimitExceeded", at="2027-01-01T00:00:05Z")]
    spec = {"failurePolicy": {"maxRestarts": 2, "rules": [
        {"name": "one", "action": "RestartJob", "onJobFailureReasons": ["BackoffLimitExceeded"]}]}}
    decision = decide_failure(spec, {}, jobs)
    assert (decision.job_name, decision.rule, decision.restart_job) == ("early", "one", True)
    assert decision.reason == "RestartJobFailurePolicyAction"
    assert not decision.fail and decision.counts_towards_max


@pytest.mark.parametrize("action, status, fail, reason, counts", [
    ("RestartJob", {"restartsCountTowardsMax": 1,
                    "replicatedJobsStatus": [{"name": "slice", "jobRestartsCountTowardsMax": [0, 1]}]},
     True, "ReachedMaxRestarts", False),
    ("RestartJob", {"replicatedJobsStatus": [{"name": "slice", "jobRestartsCountTowardsMax": [0, 1]}]},
     False, "RestartJobFailurePolicyAction", True),
    ("RestartJobAndIgnoreMaxRestarts", {"restartsCountTowardsMax": 2}, False,
     "RestartJobAndIgnoreMaxRestartsFailurePolicyAction", False),
    # RestartJobSet counts the Jobs' own counted restarts too (the RestartJob gate is on).
    ("RestartJobSet", {"replicatedJobsStatus": [{"name": "slice", "jobRestartsCountTowardsMax": [1, 1]}]},
     True, "ReachedMaxRestarts", False),
], ids=["job-at-max", "job-below-max", "job-ignore-max", "jobset-counts-job-restarts"])
def test_max_restarts_bound_jobset_and_job_restarts_together(action, status, fail, reason, counts):
    spec = {"failurePolicy": {"maxRestarts": 2, "rules": [{"name": "r", "action": action}]}}
    decision = decide_failure(spec, status, [failed_job("a", "BackoffLimitExceeded")])
    assert (decision.fail, decision.reason, decision.counts_towards_max) == (fail, reason, counts)
    assert decision.restart_job is (not fail and action.startswith("RestartJob") and
                                    not action.startswith("RestartJobSet"))


@pytest.mark.parametrize("operator, targets, succeeded, met", [
    ("All", [], ["a"], False), ("All", [], ["a", "b", "b"], True),
    ("All", ["b"], ["b", "b"], True), ("Any", [], ["b"], True), ("Any", ["a"], ["b"], False),
])
def test_success_policy(operator, targets, succeeded, met):
    spec = {"successPolicy": {"operator": operator, "targetReplicatedJobs": targets},
            "replicatedJobs": [{"name": "a", "replicas": 1}, {"name": "b", "replicas": 2}]}
    jobs = [{"metadata": {"labels": {"jobset.sigs.k8s.io/replicatedjob-name": r}}}
            for r in succeeded]
    assert is_success_policy_met(spec, jobs) is met


# -- podFailurePolicy ----------------------------------------------------------------------------

def failed_pod(codes: dict[str, int], conditions: list[dict] | None = None) -> dict:
    return {"metadata": {"name": "p", "namespace": "ns"},
            "status": {"phase": "Failed", "conditions": conditions or [],
                       "containerStatuses": [{"name": n, "state": {"terminated": {"exitCode": c}}}
                                             for n, c in codes.items()]}}


RETRYABLE = [42, *range(129, 256)]
POD_POLICY = {"rules": [
    {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    {"action": "FailJob", "onExitCodes": {"containerName": "trainer", "operator": "NotIn",
                                          "values": RETRYABLE}},
    {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [143]}},
]}


@pytest.mark.parametrize("pod, action, counts, message", [
    (failed_pod({"trainer": 4}), "FailJob", True, FATAL),
    (failed_pod({"trainer": 42}), None, True, None),
    (failed_pod({"trainer": 137}), None, True, None),
    (failed_pod({"trainer": 143}), "Ignore", False, None),
    (failed_pod({"sidecar": 4, "trainer": 0}), None, True, None),
    (failed_pod({"trainer": 143}, [{"type": "DisruptionTarget", "status": "True"}]),
     "FailJob", True, DISRUPTED),
])
def test_pod_failure_policy(pod, action, counts, message):
    verdict = match_pod_failure_policy(POD_POLICY, pod)
    assert (verdict.action, verdict.counts, verdict.message) == (action, counts, message)


# -- the Job controller --------------------------------------------------------------------------

def indexed_job(completions: int = 2, **spec) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "js-slice-0", "namespace": "ns", "uid": "job-uid"},
            "spec": {"parallelism": completions, "completions": completions,
                     "completionMode": "Indexed", "backoffLimit": 0,
                     "podFailurePolicy": POD_POLICY,
                     "template": {"metadata": {"labels": {"app": "x"}},
                                  "spec": {"restartPolicy": "Never", "subdomain": "js",
                                           "containers": [{"name": "trainer"}]}}, **spec}}


def pod_of(job: dict, index: int, phase: str = "Running", code: int | None = None,
           deleting: bool = False, counted: bool = False) -> dict:
    pod = build_pod(job, index)
    pod["metadata"].update(name=f"{pod['metadata']['generateName']}abcde", uid=f"pod-{index}",
                           creationTimestamp="2027-01-01T00:00:00Z")
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2027-01-01T00:00:01Z"
    if counted:
        pod["metadata"]["finalizers"] = []
    state = {"running": {}} if code is None else {"terminated": {
        "exitCode": code, "finishedAt": "2027-01-01T00:00:02Z"}}
    pod["status"] = {"phase": phase, "containerStatuses": [{"name": "trainer", "state": state}],
                     "conditions": [{"type": "Ready", "status": "True"}]}
    return pod


def test_build_pod_for_a_completion_index():
    pod = build_pod(indexed_job(), 1)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["generateName"] == "js-slice-0-1-"
    assert meta["finalizers"] == ["batch.kubernetes.io/job-tracking"]
    assert meta["annotations"] == {"batch.kubernetes.io/job-completion-index": "1"}
    assert meta["labels"] == {"app": "x", "batch.kubernetes.io/controller-uid": "job-uid",
                              "batch.kubernetes.io/job-name": "js-slice-0",
                              "controller-uid": "job-uid", "job-name": "js-slice-0",
                              "batch.kubernetes.io/job-completion-index": "1"}
    assert meta["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job",
                                        "name": "js-slice-0", "uid": "job-uid",
                                        "controller": True, "blockOwnerDeletion": True}]
    assert (spec["hostname"], spec["subdomain"]) == ("js-slice-0-1", "js")
    assert spec["containers"][0]["env"] == [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {
        "fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}}]
    assert generate_name("x" * 60, 12) == "x" * 54 + "-12-"


def test_indexes_round_trip():
    assert format_indexes({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert parse_indexes("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}
    assert parse_indexes(None) == set()


def test_job_creates_one_pod_per_index_and_counts_successes():
    job = indexed_job()
    plan = plan_job(job, [], NOW)
    assert [p["metadata"]["generateName"] for p in plan.create_pods] == \
        ["js-slice-0-0-", "js-slice-0-1-"]
    assert plan.status["active"] == 2 and plan.status["startTime"]
    job["status"] = plan.status
    done = [pod_of(job, 0, "Succeeded", 0), pod_of(job, 1, "Running")]
    plan = plan_job(job, done, NOW)
    assert plan.release_pods == [done[0]] and not plan.create_pods
    assert (plan.status["completedIndexes"], plan.status["succeeded"]) == ("0", 1)
    job["status"] = plan.status
    done = [pod_of(job, 0, "Succeeded", 0, counted=True), pod_of(job, 1, "Succeeded", 0)]
    plan = plan_job(job, done, NOW)
    types = [(c["type"], c["reason"]) for c in plan.status["conditions"]]
    assert types == [("SuccessCriteriaMet", "CompletionsReached"),
                     ("Complete", "CompletionsReached")]
    assert plan.status["completionTime"] and "active" not in plan.status


def test_job_fails_by_its_pod_failure_policy_after_stopping_the_other_pods():
    job = indexed_job()
    pods = [pod_of(job, 0, "Failed", 4), pod_of(job, 1)]
    plan = plan_job(job, pods, NOW)
    target = plan.status["conditions"][0]
    assert (target["type"], target["reason"]) == ("FailureTarget", "PodFailurePolicy")
    assert target["message"].startswith("Container trainer for pod ns/js-slice-0-0-abcde failed "
                                        "with exit code 4 matching FailJob rule at index 1")
    assert plan.delete_pods == [pods[1]] and plan.release_pods == [pods[0]]
    assert not [c for c in plan.status["conditions"] if c["type"] == "Failed"]
    job["status"] = plan.status
    pods = [pod_of(job, 0, "Failed", 4, counted=True), pod_of(job, 1, "Failed", 143)]
    plan = plan_job(job, pods, NOW)
    failed = [c for c in plan.status["conditions"] if c["type"] == "Failed"]
    assert failed[0]["reason"] == "PodFailurePolicy" and plan.status["failed"] == 1


@pytest.mark.parametrize("code, backoff_limit, reason", [
    (42, 0, "BackoffLimitExceeded"), (42, 1, None), (143, 0, None),
])
def test_job_backoff_limit(code, backoff_limit, reason):
    job = indexed_job(backoffLimit=backoff_limit)
    plan = plan_job(job, [pod_of(job, 0, "Failed", code), pod_of(job, 1)], NOW)
    target = [c for c in plan.status.get("conditions", []) if c["type"] == "FailureTarget"]
    assert (target[0]["reason"] if target else None) == reason


def test_failed_pod_is_replaced_after_the_back_off():
    job = indexed_job(backoffLimit=3)
    job["status"] = {"failed": 1, "startTime": "2027-01-01T00:00:00Z"}
    pods = [pod_of(job, 0, "Failed", 42, counted=True), pod_of(job, 1)]
    finished = 1_798_761_602.0  # 2027-01-01T00:00:02Z
    waiting = plan_job(job, pods, finished + 1, backoff_base_s=10)
    assert not waiting.create_pods and waiting.requeue_after == pytest.approx(9)
    due = plan_job(job, pods, finished + 11, backoff_base_s=10)
    assert [p["metadata"]["generateName"] for p in due.create_pods] == ["js-slice-0-0-"]


def test_suspended_job_stops_its_pods_without_counting_failures():
    job = indexed_job(suspend=True)
    pods = [pod_of(job, 0), pod_of(job, 1, "Failed", 143, deleting=True)]
    plan = plan_job(job, pods, NOW)
    assert plan.delete_pods == [pods[0]] and "failed" not in plan.status
    assert [(c["type"], c["status"], c["reason"]) for c in plan.status["conditions"]] == \
        [("Suspended", "True", "JobSuspended")]


# -- the JobSet controller -----------------------------------------------------------------------

def jobset(**spec) -> dict:
    rjob = {"name": "slice", "replicas": 2, "template": {
        "metadata": {"labels": {"team": "a"}},
        "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0,
                 "template": {"spec": {"restartPolicy": "Never",
                                       "containers": [{"name": "trainer"}]}}}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "namespace": "ns", "uid": "js-uid",
                         "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology":
                                         "cloud.google.com/gke-nodepool"}},
            "spec": {"replicatedJobs": [{"name": "leader", "replicas": 1,
                                         "template": rjob["template"]}, rjob], **spec}}


def test_build_job_labels_as_jobset_does():
    js = default_jobset(jobset())
    job = build_job(js, js["spec"]["replicatedJobs"][1], 1)
    expected = {"jobset.sigs.k8s.io/jobset-name": "js",
                "jobset.sigs.k8s.io/replicatedjob-name": "slice",
                "jobset.sigs.k8s.io/restart-attempt": "0",
                "jobset.sigs.k8s.io/job-restart-attempt": "0",
                "jobset.sigs.k8s.io/replicatedjob-replicas": "2",
                "jobset.sigs.k8s.io/global-replicas": "3",
                "jobset.sigs.k8s.io/job-index": "1",
                "jobset.sigs.k8s.io/job-key": hashlib.sha1(b"ns/js-slice-1").hexdigest(),
                "jobset.sigs.k8s.io/job-global-index": "2",
                "jobset.sigs.k8s.io/group-name": "default",
                "jobset.sigs.k8s.io/group-replicas": "3",
                "jobset.sigs.k8s.io/job-group-index": "2"}
    assert job["metadata"]["name"] == "js-slice-1"
    assert job["metadata"]["labels"] == {"team": "a", **expected}
    assert job["metadata"]["annotations"] == {
        **expected, "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
    assert job["spec"]["template"]["metadata"]["labels"] == expected
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["suspend"] is False
    assert job["spec"]["template"]["spec"]["subdomain"] == "js"
    assert job["metadata"]["ownerReferences"][0]["uid"] == "js-uid"


def _child(js: dict, rjob: int, index: int, conditions=(), **status) -> dict:
    d = default_jobset(js)
    job = build_job(d, d["spec"]["replicatedJobs"][rjob], index)
    job["status"] = {"conditions": [{"type": t, "status": "True", "reason": r, "message": "",
                                     "lastTransitionTime": "2027-01-01T00:00:00Z"}
                                    for t, r in conditions], **status}
    return job


def test_jobset_creates_jobs_and_restarts_on_failure():
    js = jobset(failurePolicy={"maxRestarts": 2})
    plan = plan_jobset(js, [], NOW)
    assert [j["metadata"]["name"] for j in plan.create_jobs] == \
        ["js-leader-0", "js-slice-0", "js-slice-1"]
    assert plan.service["metadata"]["name"] == "js" and plan.status_changed
    jobs = [_child(js, 0, 0), _child(js, 1, 0, [("Failed", "BackoffLimitExceeded")]),
            _child(js, 1, 1, ready=2)]
    plan = plan_jobset(js, jobs, NOW)
    assert (plan.status["restarts"], plan.status["restartsCountTowardsMax"]) == (1, 1)
    assert plan.events[0].reason == "RestartJobSetFailurePolicyAction"
    assert not plan.create_jobs and not plan.delete_jobs
    js["status"] = plan.status
    plan = plan_jobset(js, jobs, NOW)  # the next pass: the old run goes before the new comes
    assert sorted(j["metadata"]["name"] for j in plan.delete_jobs) == \
        ["js-leader-0", "js-slice-0", "js-slice-1"]
    assert not plan.create_jobs
    plan = plan_jobset(js, [], NOW)
    assert {j["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"]
            for j in plan.create_jobs} == {"1"}


def test_restart_job_recreates_the_failed_job_alone():
    js = jobset(failurePolicy={"maxRestarts": 2, "rules": [{"name": "r", "action": "RestartJob"}]})
    jobs = [_child(js, 0, 0, ready=2), _child(js, 1, 0, ready=2),
            _child(js, 1, 1, [("Failed", "BackoffLimitExceeded")])]
    plan = plan_jobset(js, jobs, NOW)
    slices = plan.status["replicatedJobsStatus"][1]
    assert (slices["jobRestarts"], slices["jobRestartsCountTowardsMax"]) == ([0, 1], [0, 1])
    assert plan.status["restarts"] == 0 and "restartsCountTowardsMax" not in plan.status
    assert [e.reason for e in plan.events] == ["RestartJobFailurePolicyAction"]
    assert "(first failed job: js-slice-1)" in plan.events[0].message
    js["status"] = plan.status
    plan = plan_jobset(js, jobs, NOW)  # the next pass: only that Job goes
    assert [j["metadata"]["name"] for j in plan.delete_jobs] == ["js-slice-1"]
    assert not plan.create_jobs
    plan = plan_jobset(js, jobs[:2], NOW)  # once it is gone, it comes back, one attempt on
    assert [j["metadata"]["name"] for j in plan.create_jobs] == ["js-slice-1"]
    created = plan.create_jobs[0]
    for meta in (created["metadata"], created["spec"]["template"]["metadata"]):
        assert meta["labels"]["jobset.sigs.k8s.io/job-restart-attempt"] == "1"
        assert meta["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "0"
    assert plan.status["replicatedJobsStatus"][1]["jobRestarts"] == [0, 1]  # carried over


def test_jobset_completes_and_then_deletes_active_jobs():
    js = jobset(successPolicy={"operator": "All", "targetReplicatedJobs": ["slice"]})
    jobs = [_child(js, 0, 0, active=1), _child(js, 1, 0, [("Complete", "CompletionsReached")]),
            _child(js, 1, 1, [("Complete", "CompletionsReached")])]
    plan = plan_jobset(js, jobs, NOW)
    assert plan.status["terminalState"] == "Completed"
    assert [c["reason"] for c in plan.status["conditions"]] == ["AllJobsCompleted"]
    assert plan.status["replicatedJobsStatus"] == [
        {"name": "leader", "ready": 0, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0},
        {"name": "slice", "ready": 0, "succeeded": 2, "failed": 0, "active": 0, "suspended": 0}]
    js["status"] = plan.status
    assert [j["metadata"]["name"] for j in plan_jobset(js, jobs, NOW).delete_jobs] == \
        ["js-leader-0"]


def test_jobset_suspend_and_resume():
    js = jobset(suspend=True)
    jobs = [_child(js, 0, 0), _child(js, 1, 0), _child(js, 1, 1)]
    for job in jobs:
        job["spec"]["suspend"] = False
    plan = plan_jobset(js, jobs, NOW)
    assert [j["spec"]["suspend"] for j in plan.update_jobs] == [True, True, True]
    assert [(c["type"], c["status"], c["reason"]) for c in plan.status["conditions"]] == \
        [("Suspended", "True", "SuspendedJobs")]
    js["status"], js["spec"]["suspend"] = plan.status, False
    for job in jobs:
        job["spec"]["suspend"] = True
    plan = plan_jobset(js, jobs, NOW)
    assert [j["spec"]["suspend"] for j in plan.update_jobs] == [False, False, False]
    assert [(c["type"], c["status"], c["reason"]) for c in plan.status["conditions"]] == \
        [("Suspended", "False", "ResumeJobs")]


def test_in_order_startup_and_depends_on():
    js = jobset(startupPolicy={"startupPolicyOrder": "InOrder"})
    plan = plan_jobset(js, [], NOW)
    assert [j["metadata"]["name"] for j in plan.create_jobs] == ["js-leader-0"]
    assert plan.status["conditions"][0]["type"] == "StartupPolicyInProgress"
    leader = _child(js, 0, 0, ready=2)
    plan = plan_jobset(js, [leader], NOW)
    assert [j["metadata"]["name"] for j in plan.create_jobs] == ["js-slice-0", "js-slice-1"]
    js = jobset()
    js["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "leader", "status": "Complete"}]
    assert [j["metadata"]["name"] for j in plan_jobset(js, [], NOW).create_jobs] == \
        ["js-leader-0"]
    done = _child(js, 0, 0, [("Complete", "CompletionsReached")])
    assert [j["metadata"]["name"] for j in plan_jobset(js, [done], NOW).create_jobs] == \
        ["js-slice-0", "js-slice-1"]


def test_jobset_managed_by_another_controller_is_left_alone():
    plan = plan_jobset(jobset(managedBy="kueue.x-k8s.io/multikueue"), [], NOW)
    assert not plan.create_jobs and not plan.status_changed


def test_pods_stopped_by_a_suspension_do_not_count_after_the_resume():
    job = indexed_job(suspend=True)
    plan = plan_job(job, [pod_of(job, 0), pod_of(job, 1)], NOW)
    assert plan.excuse_pods == ["pod-0", "pod-1"]
    job["spec"]["suspend"], job["status"] = False, plan.status
    late = [pod_of(job, 0, "Failed", 137, deleting=True), pod_of(job, 1, "Failed", 137)]
    resumed = plan_job(job, late, NOW, excused=frozenset(plan.excuse_pods))
    assert "failed" not in resumed.status and resumed.release_pods == late
    counted = plan_job(job, late, NOW)
    assert counted.status["failed"] == 2


def test_in_place_restart_fails_the_jobset_once_a_container_restarted_past_max():
    js = jobset(failurePolicy={"maxRestarts": 1, "restartStrategy": "InPlaceRestart"})
    jobs = [_child(js, 0, 0, ready=2), _child(js, 1, 0, ready=2), _child(js, 1, 1, ready=2)]
    pod = {"metadata": {"labels": {"jobset.sigs.k8s.io/jobset-name": "js"}},
           "status": {"phase": "Running", "containerStatuses": [{"restartCount": 1}]}}
    assert "terminalState" not in plan_jobset(js, jobs, NOW, [pod]).status
    pod["status"]["containerStatuses"][0]["restartCount"] = 2
    plan = plan_jobset(js, jobs, NOW, [pod])
    assert plan.status["terminalState"] == "Failed"
    [failed] = [c for c in plan.status["conditions"] if c["type"] == "Failed"]
    assert failed["reason"] == "ReachedMaxRestarts"
    # Recreate does not look at container restarts.
    js["spec"]["failurePolicy"]["restartStrategy"] = "Recreate"
    assert "terminalState" not in plan_jobset(js, jobs, NOW, [pod]).status
