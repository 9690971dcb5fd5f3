"""`pods/log` served from the executor's container logs, read with the real kubectl and the
`kubernetes` client: the current and the previous start of a container restarted in place,
`-f` until the container ends, `--tail`, `--timestamps`, `--since`, `-l`, and the refusals in
the API server's and the kubelet's words."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.executor.conftest import JOBSETS, unique
from tests.support.apiserver import wait_for

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")]

# Attempt 0 prints three lines and fails; attempt 1 prints two, then waits for /data/go.
MAIN = """
import os, sys, time
state = '/data/attempts'
n = int(open(state).read()) if os.path.exists(state) else 0
open(state, 'w').write(str(n + 1))
for i in range(3 if n == 0 else 2):
    print(f'attempt {n} line {i}', flush=True)
if n == 0:
    sys.exit(1)
while not os.path.exists('/data/go'):
    time.sleep(0.05)
print('done', flush=True)
"""
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z ")


def _jobset(name: str) -> dict:
    mounts = [{"name": "data", "mountPath": "/data"}]
    pod_spec = {"restartPolicy": "OnFailure", "terminationGracePeriodSeconds": 1,
                "volumes": [{"name": "data", "emptyDir": {}}],
                "initContainers": [{"name": "prepare", "image": "busybox",
                                    "command": [sys.executable, "-c", "print('ready')"]}],
                "containers": [{"name": "main", "image": "app", "volumeMounts": mounts,
                                "command": [sys.executable, "-c", MAIN]}]}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                "parallelism": 1, "completions": 1, "backoffLimit": 3,
                "template": {"spec": pod_spec}}}}]}}


@pytest.fixture
def kubectl(cluster, tmp_path: Path):
    def command(*args: str) -> list[str]:
        return ["kubectl", f"--kubeconfig={cluster.kube.kubeconfig}",
                f"--cache-dir={tmp_path / 'cache'}", f"--namespace={cluster.namespace}", *args]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(command(*args), capture_output=True, text=True, timeout=60)
    run.command = command
    return run


@pytest.fixture
def logs_from(cluster):
    """Serve pods/log from an executor's kubelet for the test, as local mode does."""
    server = cluster.kube.server

    def serve(executor) -> None:
        server.set_pod_logs(executor.kubelet)
    yield serve
    server.set_pod_logs(None)


def test_kubectl_logs_current_previous_follow_and_options(cluster, executor_factory, logs_from,
                                                          kubectl, kube_client):
    name = unique("logs")
    r = cluster.kube.request("POST", cluster.path(JOBSETS), json=_jobset(name))
    assert r.status_code == 201, r.text
    executor = executor_factory(container_backoff_s=0.1)
    logs_from(executor)

    def restarted_and_running():
        pods = cluster.pods(name)
        if not pods:
            return None
        status = (pods[0]["status"].get("containerStatuses") or [{}])[0]
        return pods[0] if status.get("restartCount") == 1 and "running" in status.get(
            "state", {}) else None
    pod = wait_for(restarted_and_running, timeout=60, interval=0.1,
                   message="the container to run again after its first failure")
    pod_name = pod["metadata"]["name"]

    # -f: what is there, then what comes, until the container ends.
    follow = subprocess.Popen(kubectl.command("logs", "-f", pod_name), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert follow.stdout.readline() == "attempt 1 line 0\n"
        assert follow.stdout.readline() == "attempt 1 line 1\n"
        (executor.workdir / "pods" / cluster.namespace / pod_name / "volumes" / "data" /
         "go").write_text("")
        out, err = follow.communicate(timeout=60)
    finally:
        follow.kill()
    assert out == "done\n", err
    assert follow.returncode == 0, err

    previous = kubectl("logs", pod_name, "--previous")
    assert previous.returncode == 0, previous.stderr
    assert previous.stdout == "attempt 0 line 0\nattempt 0 line 1\nattempt 0 line 2\n"
    current = kubectl("logs", pod_name, "-c", "main")
    assert current.stdout == "attempt 1 line 0\nattempt 1 line 1\ndone\n", current.stderr
    assert kubectl("logs", pod_name, "--tail=1").stdout == "done\n"
    assert kubectl("logs", pod_name, "--previous", "--tail=2").stdout == \
        "attempt 0 line 1\nattempt 0 line 2\n"
    assert kubectl("logs", pod_name, "--since=1h").stdout == current.stdout
    stamped = kubectl("logs", pod_name, "--timestamps").stdout.splitlines()
    assert len(stamped) == 3 and all(STAMP.match(line) for line in stamped), stamped
    assert [STAMP.sub("", line) for line in stamped] == current.stdout.splitlines()
    assert kubectl("logs", pod_name, "-c", "prepare").stdout == "ready\n"
    by_label = kubectl("logs", "-l", f"jobset.sigs.k8s.io/jobset-name={name}")
    assert by_label.stdout == current.stdout, by_label.stderr

    # The standard client reads the same (the operator's way to process 0's log).
    from kubernetes import client
    core = client.CoreV1Api(kube_client)
    assert core.read_namespaced_pod_log(pod_name, cluster.namespace, container="main",
                                        tail_lines=2) == "attempt 1 line 1\ndone\n"
    assert core.read_namespaced_pod_log(pod_name, cluster.namespace, container="main",
                                        previous=True).startswith("attempt 0 line 0\n")

    # Refusals, in kube-apiserver's and the kubelet's words.
    wrong = kubectl("logs", pod_name, "-c", "nope")
    assert wrong.returncode == 1
    assert f"container nope is not valid for pod {pod_name}" in wrong.stderr
    no_previous = kubectl("logs", pod_name, "-c", "prepare", "--previous")
    assert no_previous.returncode == 1
    assert f'previous terminated container "prepare" in pod "{pod_name}" not found' in \
        no_previous.stderr
    missing = kubectl("logs", "no-such-pod")
    assert 'pods "no-such-pod" not found' in missing.stderr
    invalid = cluster.kube.get(cluster.path(f"/api/v1/namespaces/{{ns}}/pods/{pod_name}/log"),
                               params={"tailLines": "-1", "sinceSeconds": "0"})
    assert invalid.status_code == 422
    assert invalid.json()["message"] == (
        f'PodLogOptions "{pod_name}" is invalid: [tailLines: Invalid value: -1: must be greater '
        "than or equal to 0, sinceSeconds: Invalid value: 0: must be greater than 0]")


def test_a_container_not_started_yet_is_waiting(cluster, executor_factory, logs_from, kubectl):
    name = unique("wait")
    body = _jobset(name)
    pod_spec = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    # A ConfigMap that does not exist keeps the container waiting (CreateContainerConfigError).
    pod_spec["containers"][0]["env"] = [{"name": "X", "valueFrom": {"configMapKeyRef": {
        "name": f"{name}-missing", "key": "x"}}}]
    r = cluster.kube.request("POST", cluster.path(JOBSETS), json=body)
    assert r.status_code == 201, r.text
    logs_from(executor_factory())

    def waiting():
        pods = cluster.pods(name)
        statuses = pods[0]["status"].get("containerStatuses") if pods else None
        return pods[0] if statuses and "waiting" in statuses[0]["state"] and \
            statuses[0]["state"]["waiting"]["reason"] == "CreateContainerConfigError" else None
    pod_name = wait_for(waiting, timeout=30, interval=0.1,
                        message="the container to wait for its ConfigMap")["metadata"]["name"]
    result = kubectl("logs", pod_name, "-c", "main")
    assert result.returncode == 1
    assert (f'container "main" in pod "{pod_name}" is waiting to start: '
            "CreateContainerConfigError") in result.stderr
