"""JobSets built by the operator's builders, run by the local executor with stand-in commands:
names, labels, indexes and env of Jobs and pods; success; the failure policy on a retryable exit
(restarts up to maxRestarts), on a fatal exit (fails at once), on SIGKILL and on a disruption;
suspend and resume; a deleted Job or JobSet."""

from __future__ import annotations

import hashlib
import json
import os
import signal

import pytest

from tests.executor.conftest import condition, custom_job, is_alive, terminated, unique
from tests.support.apiserver import wait_for

pytestmark = pytest.mark.integration

PRINT_ENV = ("import os, json; print(json.dumps({k: v for k, v in os.environ.items() "
             "if k.startswith(('TPUJOB_', 'JAX_', 'JOB_', 'HOSTNAME'))}))")
SLEEP = "import time; time.sleep(120)"


def _host0(code: str) -> str:
    """Host 0 runs `code`; the other hosts wait, as healthy peers do."""
    return (f"import os, sys, time\nif os.environ['TPUJOB_HOST_INDEX'] == '0':\n"
            f"    {code}\nelse:\n    time.sleep(120)")


def _labels(obj: dict) -> dict:
    return obj["metadata"].get("labels") or {}


def _notes(obj: dict) -> dict:
    return obj["metadata"].get("annotations") or {}


def test_jobs_pods_and_env_of_a_four_host_slice(cluster, executor_factory):
    name = unique("env")
    js = cluster.submit(name, custom_job(PRINT_ENV, slice_name="v6e-16"))
    executor = executor_factory(cpu_devices_per_process=2)
    done = cluster.wait_jobset(name, lambda j: j.get("status", {}).get("terminalState"),
                               message="the JobSet to finish")
    assert done["status"]["terminalState"] == "Completed"
    assert condition(done, "Completed")["reason"] == "AllJobsCompleted"
    assert done["status"]["replicatedJobsStatus"] == [
        {"name": "slice", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}]

    (job,) = cluster.jobs(name)
    ns = cluster.namespace
    job_name = f"{name}-slice-0"
    assert job["metadata"]["name"] == job_name
    assert job["metadata"]["ownerReferences"][0]["uid"] == js["metadata"]["uid"]
    expected = {
        "jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": "slice",
        "jobset.sigs.k8s.io/job-index": "0", "jobset.sigs.k8s.io/job-global-index": "0",
        "jobset.sigs.k8s.io/restart-attempt": "0",
        "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
        "jobset.sigs.k8s.io/global-replicas": "1",
        "jobset.sigs.k8s.io/job-key": hashlib.sha1(f"{ns}/{job_name}".encode()).hexdigest(),
        "tpujob.dev/job-name": name}
    assert expected.items() <= _labels(job).items()
    assert expected.items() - {("tpujob.dev/job-name", name)} <= _notes(job).items()
    assert _notes(job)["alpha.jobset.sigs.k8s.io/exclusive-topology"] == \
        "cloud.google.com/gke-nodepool"
    assert condition(job, "Complete")["status"] == "True"
    assert job["status"]["completedIndexes"] == "0-3" and job["status"]["succeeded"] == 4

    pods = cluster.pods(name)
    assert [p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
            for p in pods] == ["0", "1", "2", "3"]
    addresses = [p["status"]["podIP"] for p in pods]
    assert len(set(addresses)) == 4 and all(a.startswith("127.") for a in addresses)
    for index, pod in enumerate(pods):
        meta, spec = pod["metadata"], pod["spec"]
        assert meta["name"].startswith(f"{job_name}-{index}-")
        assert (spec["hostname"], spec["subdomain"]) == (f"{job_name}-{index}", name)
        assert meta["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
        assert expected.items() <= _labels(pod).items()
        assert _labels(pod)["batch.kubernetes.io/job-completion-index"] == str(index)
        assert _labels(pod)["batch.kubernetes.io/controller-uid"] == job["metadata"]["uid"]
        assert "batch.kubernetes.io/job-tracking" not in meta.get("finalizers", [])
        assert pod["status"]["phase"] == "Succeeded"
        assert terminated(pod)["exitCode"] == 0 and terminated(pod)["reason"] == "Completed"
        env = json.loads(executor.read_log(ns, meta["name"]))
        assert env["TPUJOB_HOST_INDEX"] == env["JOB_COMPLETION_INDEX"] == str(index)
        assert env["TPUJOB_SLICE_ID"] == "0"
        assert env["HOSTNAME"] == spec["hostname"]
        assert env["TPUJOB_BIND_ADDRESS"] == pod["status"]["podIP"]
        assert env["TPUJOB_COORDINATOR_ADDRESS"] == f"{addresses[0]}:8482"  # pod 0, by DNS
        assert env["TPUJOB_PROCESS_COUNT"] == "4"
        assert (env["TPUJOB_CPU_DEVICES"], env["TPUJOB_EXPECTED_DEVICES"]) == ("2", "8")
        assert env["JAX_PLATFORMS"] == "cpu"
        assert os.path.exists(env["TPUJOB_TERMINATION_LOG"])
    service = cluster.get(f"/api/v1/namespaces/{{ns}}/services/{name}")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": name}


def test_retryable_exit_restarts_the_jobset_until_max_restarts(cluster, executor_factory):
    name = unique("retry")
    code = "print('lost a peer', file=sys.stderr); sys.exit(42)"
    cluster.submit(name, custom_job(_host0(code), max_restarts=2))
    executor_factory()
    first = cluster.wait_jobset(name, lambda j: j["status"].get("restarts", 0) >= 1,
                                message="a restart")
    assert first["status"]["restartsCountTowardsMax"] >= 1
    final = cluster.wait_jobset(name, lambda j: j["status"].get("terminalState"),
                                message="the JobSet to fail")
    status = final["status"]
    assert status["terminalState"] == "Failed"
    assert (status["restarts"], status["restartsCountTowardsMax"]) == (2, 2)
    failed = condition(final, "Failed")
    assert failed["reason"] == "ReachedMaxRestarts"
    assert failed["message"] == ("jobset failed due to reaching max number of restarts "
                                 f"(first failed job: {name}-slice-0)")
    (job,) = cluster.jobs(name)
    assert _labels(job)["jobset.sigs.k8s.io/restart-attempt"] == "2"
    assert condition(job, "Failed")["reason"] == "BackoffLimitExceeded"
    (pod,) = cluster.pods(name)  # the healthy peer was stopped and removed
    assert _labels(pod)["jobset.sigs.k8s.io/restart-attempt"] == "2"
    assert terminated(pod)["exitCode"] == 42
    assert terminated(pod)["message"] == "lost a peer"  # FallbackToLogsOnError: the log tail


def test_fatal_exit_fails_at_once_with_the_termination_message(cluster, executor_factory):
    name = unique("fatal")
    code = ("open(os.environ['TPUJOB_TERMINATION_LOG'], 'w').write("
            "'{\"reason\": \"ConfigError\", \"message\": \"bad mesh\"}'); sys.exit(4)")
    cluster.submit(name, custom_job(_host0(code), max_restarts=3))
    executor_factory()
    final = cluster.wait_jobset(name, lambda j: j["status"].get("terminalState"),
                                message="the JobSet to fail")
    assert final["status"]["terminalState"] == "Failed"
    assert final["status"]["restarts"] == 0
    assert condition(final, "Failed")["reason"] == "FailJobSetFailurePolicyAction"
    (job,) = cluster.jobs(name)
    (pod,) = cluster.pods(name)
    job_failed = condition(job, "Failed")
    assert job_failed["reason"] == "PodFailurePolicy"
    assert job_failed["message"] == (
        f"Container trainer for pod {cluster.namespace}/{pod['metadata']['name']} failed with "
        "exit code 4 matching FailJob rule at index 1")
    assert condition(job, "FailureTarget")["message"] == job_failed["message"]
    assert pod["status"]["phase"] == "Failed"
    assert terminated(pod)["exitCode"] == 4 and terminated(pod)["reason"] == "Error"
    assert json.loads(terminated(pod)["message"]) == {"reason": "ConfigError",
                                                      "message": "bad mesh"}


def test_sigkill_of_one_process_restarts_and_a_deleted_jobset_stops(cluster, executor_factory):
    name = unique("kill")
    cluster.submit(name, custom_job(SLEEP, max_restarts=2))
    executor = executor_factory()
    procs = wait_for(lambda: len(executor.processes()) == 2 and executor.processes(),
                     message="2 processes")
    os.kill(procs[0]["pid"], signal.SIGKILL)
    restarted = cluster.wait_jobset(name, lambda j: j["status"].get("restarts") == 1,
                                    message="the restart")
    assert restarted["status"]["restartsCountTowardsMax"] == 1
    wait_for(lambda: [p for p in cluster.pods(name) if p["status"].get("phase") == "Running"
                      and _labels(p)["jobset.sigs.k8s.io/restart-attempt"] == "1"
                      ] and len(executor.processes()) == 2,
             message="the restarted pods to run")
    assert not is_alive(procs[0]["pid"]) and not is_alive(procs[1]["pid"])
    pids = [p["pid"] for p in executor.processes()]
    # A JobSet deleted: its Jobs and pods go (garbage collection), and its processes stop.
    r = cluster.kube.request("DELETE", cluster.path(f"/apis/jobset.x-k8s.io/v1alpha2/"
                                                    f"namespaces/{{ns}}/jobsets/{name}"))
    assert r.status_code == 200
    wait_for(lambda: not executor.processes() and not cluster.pods(name)
             and not any(is_alive(p) for p in pids), message="the processes to stop")


def test_disruption_restarts_without_counting_towards_max(cluster, executor_factory):
    name = unique("evict")
    cluster.submit(name, custom_job(SLEEP, max_restarts=0))
    executor = executor_factory()
    wait_for(lambda: len(executor.processes()) == 2, message="2 processes")
    pod = cluster.pods(name)[1]
    executor.disrupt(cluster.namespace, pod["metadata"]["name"])
    restarted = cluster.wait_jobset(name, lambda j: j["status"].get("restarts") == 1,
                                    message="the restart")
    assert "restartsCountTowardsMax" not in restarted["status"]
    assert not restarted["status"].get("terminalState")
    wait_for(lambda: len(executor.processes()) == 2, message="the restarted processes")


def test_suspend_resume_and_a_deleted_job(cluster, executor_factory):
    name = unique("susp")
    cluster.submit(name, custom_job(SLEEP, max_restarts=1))
    executor = executor_factory()
    wait_for(lambda: len(executor.processes()) == 2, message="2 processes")

    cluster.patch_jobset(name, {"spec": {"suspend": True}})
    suspended = cluster.wait_jobset(
        name, lambda j: (condition(j, "Suspended") or {}).get("status") == "True",
        message="the Suspended condition")
    assert condition(suspended, "Suspended")["reason"] == "SuspendedJobs"
    wait_for(lambda: not executor.processes() and not cluster.pods(name),
             message="the processes and pods to go")
    (job,) = cluster.jobs(name)
    assert job["spec"]["suspend"] is True
    wait_for(lambda: (condition(cluster.jobs(name)[0], "Suspended") or {}).get("status")
             == "True", message="the Job to be suspended")

    cluster.patch_jobset(name, {"spec": {"suspend": False}})
    resumed = cluster.wait_jobset(
        name, lambda j: (condition(j, "Suspended") or {}).get("status") == "False",
        message="the resumed condition")
    assert condition(resumed, "Suspended")["reason"] == "ResumeJobs"
    wait_for(lambda: len(executor.processes()) == 2, message="the processes to run again")
    assert resumed["status"]["restarts"] == 0  # a suspension is not a failure

    # A deleted Job: its processes stop, and the JobSet controller creates it again.
    (job,) = cluster.jobs(name)
    old_pids = [p["pid"] for p in executor.processes()]
    r = cluster.kube.request("DELETE", cluster.path(
        f"/apis/batch/v1/namespaces/{{ns}}/jobs/{job['metadata']['name']}"))
    assert r.status_code == 200
    wait_for(lambda: [j for j in cluster.jobs(name) if j["metadata"]["uid"] !=
                      job["metadata"]["uid"]] and len(executor.processes()) == 2 and
             not any(is_alive(p) for p in old_pids), message="the Job to be recreated")
    assert cluster.jobset(name)["status"]["restarts"] == 0


def test_a_job_deleted_in_the_foreground_releases_its_pods_and_comes_back(cluster,
                                                                         executor_factory):
    # What the operator's restart after a stall does (kube.restart_jobs): the Job waits for
    # its pods, whose job-tracking finalizer the Job controller must remove as for a Job gone.
    name = unique("fg")
    cluster.submit(name, custom_job(SLEEP, max_restarts=1))
    executor = executor_factory()
    wait_for(lambda: len(executor.processes()) == 2, message="2 processes")
    (job,) = cluster.jobs(name)
    old_pids = [p["pid"] for p in executor.processes()]
    r = cluster.kube.request("DELETE", cluster.path(
        f"/apis/batch/v1/namespaces/{{ns}}/jobs/{job['metadata']['name']}"),
        json={"propagationPolicy": "Foreground"})
    assert r.status_code == 200
    wait_for(lambda: [j for j in cluster.jobs(name) if j["metadata"]["uid"] !=
                      job["metadata"]["uid"]] and len(executor.processes()) == 2 and
             not any(is_alive(p) for p in old_pids), timeout=60,
             message="the Job to go with its pods and be created again")
    assert all(p["metadata"]["uid"] != job["metadata"]["uid"] for p in cluster.jobs(name))


def test_pods_of_a_stopped_executor_fail_and_the_next_one_restarts_them(cluster,
                                                                        executor_factory):
    name = unique("node")
    cluster.submit(name, custom_job(SLEEP, max_restarts=1))
    first = executor_factory()
    wait_for(lambda: len(first.processes()) == 2 and all(
        p["status"].get("phase") == "Running" for p in cluster.pods(name)),
        message="2 running pods")
    first.stop()  # the nodes go away: the pods still say Running
    assert [p["status"]["phase"] for p in cluster.pods(name)] == ["Running", "Running"]
    second = executor_factory()
    restarted = cluster.wait_jobset(name, lambda j: j["status"].get("restarts") == 1,
                                    message="the restart")
    assert restarted["status"]["restartsCountTowardsMax"] == 1  # exit 137: a retryable signal
    wait_for(lambda: len(second.processes()) == 2, message="the restarted processes")
