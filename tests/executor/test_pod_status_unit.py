"""The local kubelet's pure verdicts, table-driven: whether a stopped container starts again in
place (the pod's restartPolicy, or the container's own with its restart rules, as Kubernetes
1.35's kubelet decides), the pod's phase once its containers stopped, and the JobSet
controller's InPlaceRestart checks over the pods."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpujob.local.executor.in_place_restart import (
    InPlaceVerdict,
    decide_in_place_restart,
    max_container_restarts,
)
from tpujob.local.executor.pod_status import ContainerRun, PodRun, pod_outcome, should_restart

pytestmark = pytest.mark.unit
RETRY_42 = {"restartPolicy": "Never", "restartPolicyRules": [
    {"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]}


def _stopped(code: int, init: bool = False, **spec) -> ContainerRun:
    c = ContainerRun(spec={"name": "c", **spec}, dir=Path("/nonexistent"), init=init)
    c.terminated = {"exitCode": code}
    return c


@pytest.mark.parametrize("pod_policy, spec, code, init, restart", [
    ("Never", {}, 1, False, False),
    ("OnFailure", {}, 1, False, True),
    ("OnFailure", {}, 0, False, False),
    ("Always", {}, 0, False, True),
    ("Always", {}, 0, True, False),        # an init container that succeeded is done
    ("Always", {}, 3, True, True),
    # The container's own policy and rules win over the pod's.
    ("Never", RETRY_42, 42, False, True),
    ("Never", RETRY_42, 4, False, False),
    ("OnFailure", RETRY_42, 4, False, False),
    ("Never", {"restartPolicy": "OnFailure"}, 4, False, True),
    ("Never", {"restartPolicy": "Never", "restartPolicyRules": [
        {"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [0, 4]}}]}, 9, False,
     True),
    ("Never", {"restartPolicy": "Never", "restartPolicyRules": [
        {"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [0, 4]}}]}, 4, False,
     False),
    # The first matching rule decides; RestartAllContainers (an alpha gate, off) falls back
    # to the container's policy.
    ("Never", {"restartPolicy": "Never", "restartPolicyRules": [
        {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}},
        {"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]}, 42, False,
     False),
    # An init container's own restartPolicy makes a sidecar, which this kubelet does not run.
    ("Never", RETRY_42, 42, True, False),
])
def test_should_restart(pod_policy, spec, code, init, restart):
    assert should_restart(_stopped(code, init, **spec), pod_policy) is restart


def _run(policy: str, *containers: ContainerRun) -> PodRun:
    return PodRun(pod={"spec": {"restartPolicy": policy}}, ip="127.0.0.1", dir=Path("/x"),
                  containers=list(containers), init_containers=[], admitted_at=0.0)


@pytest.mark.parametrize("policy, containers, outcome", [
    ("Never", [_stopped(0), _stopped(0)], "Succeeded"),
    ("Never", [_stopped(0), _stopped(1)], "Failed"),
    ("OnFailure", [_stopped(0)], "Succeeded"),
    ("OnFailure", [_stopped(1)], None),
    ("Always", [_stopped(0)], None),
    # A container to start again in place keeps the pod running.
    ("Never", [_stopped(42, **RETRY_42), _stopped(0)], None),
    ("Never", [_stopped(4, **RETRY_42), _stopped(0)], "Failed"),
])
def test_pod_outcome_once_every_container_stopped(policy, containers, outcome):
    assert pod_outcome(_run(policy, *containers)) == outcome


def _pod(restarts: int = 0, attempt: str | None = None, phase: str = "Running") -> dict:
    notes = {} if attempt is None else {"jobset.sigs.k8s.io/in-place-restart-attempt": attempt}
    return {"metadata": {"annotations": notes},
            "status": {"phase": phase, "containerStatuses": [{"restartCount": restarts}],
                       "initContainerStatuses": [{"restartCount": 0}]}}


SPEC = {"failurePolicy": {"maxRestarts": 2, "restartStrategy": "InPlaceRestart"},
        "replicatedJobs": [{"replicas": 2, "template": {"spec": {"parallelism": 1}}}]}


@pytest.mark.parametrize("status, pods, verdict", [
    ({}, [_pod(2), _pod(0)], InPlaceVerdict()),
    ({}, [_pod(3), _pod(0)], InPlaceVerdict(fail=True)),          # a container past maxRestarts
    ({}, [_pod(0, "0"), _pod(0, "0")], InPlaceVerdict(current_attempt=0)),
    ({}, [_pod(0, "0")], InPlaceVerdict()),                       # not every pod has one yet
    ({}, [_pod(0, "2"), _pod(0, "1")], InPlaceVerdict(previous_attempt=1)),
    ({"previousInPlaceRestartAttempt": 3}, [_pod(0, "2"), _pod(0, "1")], InPlaceVerdict()),
    ({}, [_pod(0, "3"), _pod(0, "3")], InPlaceVerdict(fail=True)),
    # Restarts that did not count (disruptions) raise the bound on the attempts.
    ({"restarts": 1}, [_pod(0, "3"), _pod(0, "3")], InPlaceVerdict(current_attempt=3)),
    # A failed pod's attempt is not read (its replacement's is).
    ({}, [_pod(0, "1"), _pod(0, "0", phase="Failed"), _pod(0, "1")],
     InPlaceVerdict(current_attempt=1)),
])
def test_in_place_restart_decisions(status, pods, verdict):
    assert decide_in_place_restart(SPEC, status, pods) == verdict


def test_max_container_restarts_reads_init_and_regular_containers():
    pod = {"status": {"initContainerStatuses": [{"restartCount": 5}],
                      "containerStatuses": [{"restartCount": 1}]}}
    assert max_container_restarts([pod, {"status": {}}]) == 5
    assert max_container_restarts([]) == 0
