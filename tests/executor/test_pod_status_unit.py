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
    is_in_place_restart,
    max_container_restarts,
)
from tpujob.local.executor.pod_status import (
    ContainerRun,
    PodRun,
    build_lost_status,
    build_pod_status,
    exit_code_of,
    has_started,
    is_init_done,
    is_sidecar,
    pod_outcome,
    qos_class,
    should_restart,
)

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
    # An init container's own restartPolicy: Always makes a sidecar, which always restarts;
    # any other of its own is not one (the API server refuses it; the pod's decides).
    ("Never", RETRY_42, 42, True, False),
    ("Never", {"restartPolicy": "Always"}, 0, True, True),
    ("Never", {"restartPolicy": "Always"}, 137, True, True),
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
    ({"restarts": 2, "restartsCountTowardsMax": 1}, [_pod(0, "4"), _pod(0, "4")],
     InPlaceVerdict(fail=True)),
    ({"previousInPlaceRestartAttempt": 1}, [_pod(0, "2"), _pod(0, "1")], InPlaceVerdict()),
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


def test_in_place_restart_reads_the_jobsets_defaults():
    # maxRestarts left out is 0; replicas and parallelism left out are 1 each.
    spec = {"failurePolicy": {"restartStrategy": "InPlaceRestart"},
            "replicatedJobs": [{"template": {"spec": {}}},
                               {"replicas": 1, "template": {"spec": {"parallelism": 2}}}]}
    assert is_in_place_restart(spec)
    assert decide_in_place_restart(spec, {}, []) == InPlaceVerdict()
    assert decide_in_place_restart(spec, {}, [_pod(1)]) == InPlaceVerdict(fail=True)
    three = [_pod(0, "0")] * 3
    assert decide_in_place_restart(spec, {}, three) == InPlaceVerdict(current_attempt=0)
    assert decide_in_place_restart(spec, {}, three[:2]) == InPlaceVerdict()
    one = {"failurePolicy": {"maxRestarts": 1, "restartStrategy": "InPlaceRestart"},
           "replicatedJobs": [{"template": {"spec": {}}}]}
    assert decide_in_place_restart(one, {}, [_pod(0, "1")]) == InPlaceVerdict(current_attempt=1)
    assert not is_in_place_restart({}) and not is_in_place_restart(
        {"failurePolicy": {"restartStrategy": "Recreate"}})
    assert max_container_restarts([{"status": {"containerStatuses": [{}]}}]) == 0


# -- the status a pod's run reports --------------------------------------------------------------

class _Proc:
    """A live process as the status sees one: a pid."""

    pid = 4242


def _running(**spec) -> ContainerRun:
    c = ContainerRun(spec={"name": "c", "image": "img:1", **spec}, dir=Path("/x"))
    c.proc, c.started_at, c.waiting = _Proc(), 1_800_000_000.0, None
    return c


def _conditions(status: dict) -> dict[str, tuple[str, str | None]]:
    return {c["type"]: (c["status"], c.get("reason")) for c in status["conditions"]}


def test_a_running_pod_reports_ready_with_a_running_container():
    c = _running()
    run = _run("Never", c)
    status = build_pod_status(run, 1_800_000_005.0)
    assert status["phase"] == "Running"
    assert _conditions(status) == {
        "PodReadyToStartContainers": ("True", None), "Initialized": ("True", None),
        "Ready": ("True", None), "ContainersReady": ("True", None),
        "PodScheduled": ("True", None)}
    [cs] = status["containerStatuses"]
    assert cs["state"] == {"running": {"startedAt": "2027-01-15T08:00:00Z"}}
    assert (cs["ready"], cs["started"], cs["restartCount"], cs["lastState"]) == \
        (True, True, 0, {})
    assert cs["containerID"] == "local://4242" and cs["image"] == "img:1"
    assert status["podIP"] == status["hostIP"] == "127.0.0.1"
    assert status["startTime"] == "1970-01-01T00:00:00Z" and status["qosClass"] == "BestEffort"


def test_a_container_restarted_in_place_reports_its_count_and_last_exit():
    c = _running(**RETRY_42)
    c.restart_count, c.last_terminated = 1, {"exitCode": 42, "reason": "Error"}
    status = build_pod_status(_run("Never", c), 1_800_000_005.0)
    [cs] = status["containerStatuses"]
    assert cs["restartCount"] == 1 and cs["lastState"] == {"terminated": c.last_terminated}
    # Waiting to start again: not ready, the pod still Running.
    c.proc, c.terminated, c.waiting = None, None, ("CrashLoopBackOff", "back-off 0.1s")
    c.started_at = 1.0
    status = build_pod_status(_run("Never", c), 1_800_000_005.0)
    [cs] = status["containerStatuses"]
    assert cs["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 0.1s"}}
    assert not cs["ready"] and status["phase"] == "Running"
    assert _conditions(status)["Ready"] == ("False", "ContainersNotReady")


def test_a_finished_pod_reports_its_phase_and_keeps_conditions_others_added():
    run = _run("Never", _stopped(0), _stopped(3))
    run.pod["status"] = {"conditions": [{"type": "DisruptionTarget", "status": "True"}],
                         "startTime": "2027-01-01T00:00:00Z"}
    status = build_pod_status(run, 1_800_000_005.0)
    assert status["phase"] == "Failed"
    assert _conditions(status)["Ready"] == ("False", "PodCompleted")
    assert _conditions(status)["PodReadyToStartContainers"] == ("False", None)
    assert _conditions(status)["DisruptionTarget"] == ("True", None)
    assert status["startTime"] == "2027-01-01T00:00:00Z"
    assert [cs["state"]["terminated"]["exitCode"] for cs in status["containerStatuses"]] == [0, 3]


def test_a_pod_whose_processes_are_lost_is_failed_as_the_kubelet_fails_it():
    pod = {"spec": {"containers": [{"name": "a", "image": "i"}]},
           "status": {"phase": "Running", "startTime": "2027-01-01T00:00:00Z"}}
    assert has_started(pod) and not has_started({"status": {"phase": "Pending"}})
    status = build_lost_status(pod, 1_800_000_000.0)
    [cs] = status["containerStatuses"]
    assert status["phase"] == "Failed" and cs["state"]["terminated"]["exitCode"] == 137
    assert cs["state"]["terminated"]["reason"] == "ContainerStatusUnknown"
    assert _conditions(status)["Ready"] == ("False", "PodCompleted")
    never = build_lost_status({"spec": pod["spec"]}, 1_800_000_000.0, started=False)
    assert never["startTime"] == "2027-01-15T08:00:00Z"


@pytest.mark.parametrize("resources, qos", [
    ([{}], "BestEffort"),
    ([{"requests": {"cpu": "1"}}], "Burstable"),
    ([{"limits": {"cpu": "1", "memory": "1Gi"}}], "Guaranteed"),
    ([{"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}],
     "Guaranteed"),
    ([{"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}],
     "Burstable"),
    ([{"limits": {"cpu": "1", "memory": "1Gi"}}, {}], "Burstable"),
])
def test_qos_class(resources, qos):
    assert qos_class({"spec": {"containers": [{"resources": r} for r in resources]}}) == qos


@pytest.mark.parametrize("returncode, code", [(0, 0), (3, 3), (-9, 137), (-15, 143)])
def test_exit_code_of(returncode, code):
    assert exit_code_of(returncode) == code


def _with_init(policy: str, init: ContainerRun, *containers: ContainerRun) -> PodRun:
    run = _run(policy, *containers)
    run.init_containers = [init]
    return run


@pytest.mark.parametrize("policy, init_code, outcome, initialized", [
    ("Never", 1, "Failed", "False"),      # a failed init container fails a pod that never restarts
    ("OnFailure", 1, None, "False"),      # ... and is run again otherwise
    ("Never", 0, None, "True"),           # done: the containers' turn
])
def test_init_containers_gate_the_pod(policy, init_code, outcome, initialized):
    run = _with_init(policy, _stopped(init_code, init=True), ContainerRun(
        spec={"name": "c"}, dir=Path("/x")))
    assert pod_outcome(run) == outcome
    status = build_pod_status(run, 1_800_000_000.0)
    assert _conditions(status)["Initialized"][0] == initialized
    assert status["phase"] == (outcome or "Pending")
    assert status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == init_code


@pytest.mark.parametrize("codes, phase", [((0, 0), "Succeeded"), ((0, 143), "Failed")])
def test_a_stopped_pod_ends_by_its_containers_exits(codes, phase):
    # Stopping (deleted): whatever the policy, nothing starts again.
    run = _run("Always", *(_stopped(code) for code in codes))
    run.stop_deadline = 1.0
    assert pod_outcome(run) == phase


def test_a_pod_with_a_running_container_has_started():
    assert has_started({"status": {"phase": "Pending", "containerStatuses": [
        {"state": {"waiting": {}}}, {"state": {"running": {}}}]}})
    assert not has_started({"status": {"phase": "Pending", "containerStatuses": [
        {"state": {"waiting": {}}}]}})


def test_a_lost_pod_keeps_conditions_others_added_and_reports_unstarted_containers():
    pod = {"spec": {"containers": [{"name": "a"}]},
           "status": {"phase": "Running", "conditions": [
               {"type": "DisruptionTarget", "status": "True"},
               {"type": "Ready", "status": "True"}]}}
    status = build_lost_status(pod, 1_800_000_000.0)
    assert _conditions(status)["DisruptionTarget"] == ("True", None)
    assert _conditions(status)["Ready"] == ("False", "PodCompleted")
    assert [c["type"] for c in status["conditions"]].count("Ready") == 1
    [cs] = status["containerStatuses"]
    assert (cs["ready"], cs["started"], cs["restartCount"], cs["image"]) == (False, False, 0, "")
    assert "startTime" not in status  # it had started: its start time is the server's


def test_a_condition_keeps_its_transition_time_until_its_status_changes():
    run = _run("Never", _running())
    run.pod["status"] = {"conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2027-01-01T00:00:00Z"},
        {"type": "Initialized", "status": "False", "lastTransitionTime": "2027-01-01T00:00:00Z"}]}
    stamps = {c["type"]: c["lastTransitionTime"]
              for c in build_pod_status(run, 1_800_000_000.0)["conditions"]}
    assert stamps["Ready"] == "2027-01-01T00:00:00Z"          # still True
    assert stamps["Initialized"] == "2027-01-15T08:00:00Z"    # False -> True now


def test_a_sidecar_starts_the_containers_and_outlives_them_without_deciding_the_pod():
    """Kubernetes' native sidecar (KEP-753): once started, the next containers start; it runs
    beside them; when they are done for good the pod's outcome is theirs, the sidecar still up."""
    sidecar = _running(restartPolicy="Always")
    sidecar.init = True
    waiting = ContainerRun(spec={"name": "init2"}, dir=Path("/x"), init=True)
    assert is_sidecar(sidecar) and not is_sidecar(waiting) and not is_sidecar(_running())
    assert is_init_done(sidecar) and not is_init_done(waiting)
    trainer = _stopped(0)
    run = _with_init("Never", sidecar, trainer)
    assert pod_outcome(run) == "Succeeded"
    run.containers = [_stopped(3)]
    assert pod_outcome(run) == "Failed"
    run.containers = [_running()]
    assert pod_outcome(run) is None
    status = build_pod_status(run, 1_800_000_005.0)
    assert _conditions(status)["Initialized"][0] == "True"
    assert status["initContainerStatuses"][0]["ready"] is True
    # Deleted: the pod is over only when the sidecar is gone too.
    run.containers = [_stopped(0)]
    run.stop_deadline = 1.0
    assert pod_outcome(run) is None
    sidecar.terminated = {"exitCode": 143}
    assert pod_outcome(run) == "Succeeded"


@pytest.mark.parametrize("trainer_exit, outcome", [(0, "Succeeded"), (3, "Failed")])
def test_a_sidecar_stopped_after_the_containers_leaves_the_pod_their_outcome(trainer_exit,
                                                                             outcome):
    """The kubelet stops a sidecar once the regular containers are done: its SIGTERM exit (143)
    is not the pod's failure (kubernetes#127221: Succeeded with a non-zero sidecar exit)."""
    sidecar = _stopped(143, restartPolicy="Always")
    sidecar.init = True
    run = _with_init("Never", sidecar, _stopped(trainer_exit))
    assert pod_outcome(run) == outcome
    # A plain init container that failed still fails a pod that never restarts.
    init = _stopped(1)
    init.init = True
    assert pod_outcome(_with_init("Never", init, _stopped(0))) == "Failed"
