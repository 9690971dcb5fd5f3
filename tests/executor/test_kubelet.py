"""Kubelet features the builders' JobSets do not use, on a hand-written JobSet: an init
container, an emptyDir shared with the container, restartPolicy OnFailure (a restart in place,
with the previous run's log kept), stdout's and stderr's lines in the log never cut by each
other, env from a Secret and a ConfigMap, `$(VAR)` in args, a ConfigMap volume with items and
subPath, a container whose program does not exist, one that leaves a process running in a
session of its own (killed with it, as a runtime's cgroup is), and a stopped container whose
main process alone gets SIGTERM (as a runtime sends it to PID 1)."""

from __future__ import annotations

import base64
import os
import signal
import sys

import pytest

from tests.executor.conftest import JOBSETS, condition, is_alive, unique
from tests.support.apiserver import wait_for

pytestmark = pytest.mark.integration

MAIN = """
import os, sys
state = '/data/attempts'
n = int(open(state).read()) if os.path.exists(state) else 0
open(state, 'w').write(str(n + 1))
# Its line in two writes, with a line to stderr between: two lines in the log, neither cut.
sys.stdout.write(f'attempt {n}'); sys.stdout.flush()
sys.stderr.write('to stderr\\n'); sys.stderr.flush()
print('', os.environ['GREETING'], os.environ['TOKEN'], open('/cfg/conf.txt').read())
sys.exit(1 if n == 0 else 0)
"""


def _jobset(name: str, containers: list[dict], init: list[dict] | None = None) -> dict:
    pod_spec = {"restartPolicy": "OnFailure", "containers": containers,
                "terminationGracePeriodSeconds": 1,
                "volumes": [{"name": "data", "emptyDir": {}},
                            {"name": "cfg", "configMap": {"name": f"{name}-cfg", "items": [
                                {"key": "conf", "path": "sub/conf.txt"}]}}]}
    if init:
        pod_spec["initContainers"] = init
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                "parallelism": 1, "completions": 1, "backoffLimit": 0,
                "template": {"spec": pod_spec}}}}]}}


def test_init_container_restart_in_place_secrets_and_volumes(cluster, executor_factory):
    name = unique("kubelet")
    kube = cluster.kube
    ns = cluster.namespace
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-token"},
              "data": {"token": base64.b64encode(b"t0k3n").decode()}}
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-cfg"},
              "data": {"conf": "from-configmap", "greeting": "hello"}}
    for path, body in ((f"/api/v1/namespaces/{ns}/secrets", secret),
                       (f"/api/v1/namespaces/{ns}/configmaps", config)):
        assert kube.request("POST", path, json=body).status_code == 201
    mounts = [{"name": "data", "mountPath": "/data"},
              {"name": "cfg", "mountPath": "/cfg", "subPath": "sub"}]
    init = [{"name": "prepare", "image": "busybox", "command": [sys.executable, "-c"],
             "args": ["open('/data/attempts', 'w').write('0')"], "volumeMounts": mounts}]
    main = {"name": "main", "image": "app", "command": ["python", "-c", "$(PROGRAM)"],
            "volumeMounts": mounts, "env": [
                {"name": "PROGRAM", "value": MAIN},
                {"name": "GREETING", "valueFrom": {"configMapKeyRef": {
                    "name": f"{name}-cfg", "key": "greeting"}}},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {
                    "name": f"{name}-token", "key": "token"}}}]}
    r = kube.request("POST", cluster.path(JOBSETS), json=_jobset(name, [main], init))
    assert r.status_code == 201, r.text
    executor = executor_factory(container_backoff_s=0.1)
    done = cluster.wait_jobset(name, lambda j: j.get("status", {}).get("terminalState"),
                               message="the JobSet to finish")
    assert done["status"]["terminalState"] == "Completed"
    (pod,) = cluster.pods(name)
    status = pod["status"]
    assert status["phase"] == "Succeeded"
    assert status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    main_status = status["containerStatuses"][0]
    assert main_status["restartCount"] == 1
    assert main_status["lastState"]["terminated"]["exitCode"] == 1
    pod_name = pod["metadata"]["name"]
    for previous, attempt in ((True, 0), (False, 1)):
        lines = executor.read_log(ns, pod_name, previous=previous).splitlines()
        assert sorted(lines) == [f"attempt {attempt} hello t0k3n from-configmap", "to stderr"]
    assert executor.read_log(ns, pod_name, "prepare") == ""


def test_a_missing_program_fails_the_pod_with_start_error(cluster, executor_factory):
    name = unique("noexec")
    missing = {"name": "main", "image": "app", "command": ["no-such-program-here"]}
    body = _jobset(name, [missing])
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"].update(
        restartPolicy="Never", volumes=[])
    assert cluster.kube.request("POST", cluster.path(JOBSETS), json=body).status_code == 201
    executor_factory()
    done = cluster.wait_jobset(name, lambda j: j.get("status", {}).get("terminalState"),
                               message="the JobSet to fail")
    assert condition(done, "Failed")["reason"] == "FailedJobs"  # no failurePolicy
    (pod,) = cluster.pods(name)
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (128, "StartError")
    assert "no-such-program-here" in terminated["message"]
    wait_for(lambda: not cluster.jobs(name) or condition(cluster.jobs(name)[0], "Failed"),
             message="the Job to fail")


# Leaves a sleeper in a session of its own (as torchrun starts its workers), holding the
# container's stdout, and exits.
DETACH = """
import subprocess, sys
p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],
                     start_new_session=True)
print(p.pid, flush=True)
"""


def _run_program(cluster, executor_factory, name: str, program: str):
    """A one-pod JobSet whose container runs `program` (Python) once; its executor."""
    main = {"name": "main", "image": "app", "command": [sys.executable, "-c", program]}
    body = _jobset(name, [main])
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"].update(
        restartPolicy="Never", volumes=[])
    assert cluster.kube.request("POST", cluster.path(JOBSETS), json=body).status_code == 201
    return executor_factory()


def test_what_a_container_leaves_running_ends_with_it(cluster, executor_factory):
    name = unique("leftover")
    executor = _run_program(cluster, executor_factory, name, DETACH)
    done = cluster.wait_jobset(name, lambda j: j.get("status", {}).get("terminalState"),
                               message="the JobSet to finish")
    assert done["status"]["terminalState"] == "Completed"
    (pod,) = cluster.pods(name)
    sleeper = int(executor.read_log(cluster.namespace, pod["metadata"]["name"]))
    try:
        # Killed when the container's main process ended, though not in its process group.
        wait_for(lambda: not is_alive(sleeper), timeout=10, interval=0.05,
                 message="the process the container left behind to end")
    finally:
        if is_alive(sleeper):
            os.kill(sleeper, signal.SIGKILL)


TERM_ONLY_MAIN = """
import os, signal, subprocess, sys
CHILD = ("import signal, sys, time\\n"
         "def term(*_):\\n"
         "    print('child got SIGTERM', flush=True); sys.exit(0)\\n"
         "signal.signal(signal.SIGTERM, term)\\n"
         "print('child ready', flush=True)\\n"
         "while True: time.sleep(3600)\\n")
child = subprocess.Popen([sys.executable, '-c', CHILD])   # the container's process group
def term(*_):
    print('main got SIGTERM', flush=True)
    child.wait()   # ends when the child ends: at once if it got SIGTERM too
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print('main ready', os.getpid(), child.pid, flush=True)
child.wait()
"""


def test_a_stopped_container_s_main_process_alone_gets_sigterm(cluster, executor_factory):
    """As a runtime sends the stop signal to a container's main process (its PID 1), not to every
    process in it: what the main process started gets SIGTERM only if the main process passes it
    on, and is SIGKILLed with the rest when the grace period ends. (A shell wrapper that does not
    `exec` its program, or passes no signal on, lets the program die without its SIGTERM handler
    on a cluster: local mode does the same.)"""
    name = unique("sigterm")
    executor = _run_program(cluster, executor_factory, name, TERM_ONLY_MAIN)
    pod = wait_for(lambda: next(iter(cluster.pods(name)), None), timeout=60, interval=0.1,
                   message="the pod")
    pod_name = pod["metadata"]["name"]

    def ready() -> list[int] | None:
        text = executor.read_log(cluster.namespace, pod_name)
        if "child ready" not in text:
            return None
        line = next(x for x in text.splitlines() if x.startswith("main ready"))
        return [int(x) for x in line.split()[2:]]

    pids = wait_for(ready, timeout=60, interval=0.05, message="both processes to be ready")
    try:
        executor.disrupt(cluster.namespace, pod_name)
        wait_for(lambda: not any(is_alive(p) for p in pids), timeout=30, interval=0.05,
                 message="the container's processes to end")
        text = executor.read_log(cluster.namespace, pod_name)
        assert "main got SIGTERM" in text, text
        assert "child got SIGTERM" not in text, text
    finally:
        for p in pids:
            if is_alive(p):
                os.kill(p, signal.SIGKILL)
