"""A pod and its containers as the local kubelet tracks them across restarts, and the pod
status a kubelet reports for them: phase, conditions, container states (`waiting` / `running` /
`terminated`, `lastState`, `restartCount`), addresses, QoS class. Pure: the kubelet's processes
are read only through `ContainerRun.is_alive` and the recorded exits.
"""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .keys import PodPhase
from .objects import find_condition, format_time, meta

NOT_LOCATED = "The container could not be located when the pod was terminated"

@dataclass
class ContainerRun:
    """One container of a running pod, across its restarts."""

    spec: dict[str, Any]
    dir: Path
    init: bool = False
    restart_count: int = 0
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    started_at: float | None = None
    terminated: dict[str, Any] | None = None
    last_terminated: dict[str, Any] | None = None
    waiting: tuple[str, str] | None = ("ContainerCreating", "")
    next_start: float = 0.0
    stop_deadline: float | None = None  # a sidecar told to stop: killed if still up after it
    _pump: threading.Thread | None = None  # copies the output into the log while it runs

    @property
    def name(self) -> str:
        return self.spec["name"]

    @property
    def term_path(self) -> Path:
        return self.dir / "termination-log"

    @property
    def is_alive(self) -> bool:
        return self.proc is not None and self.terminated is None


@dataclass
class PodRun:
    """A pod this kubelet admitted: its address, directory and containers."""

    pod: dict[str, Any]
    ip: str
    dir: Path
    containers: list[ContainerRun]
    init_containers: list[ContainerRun]
    admitted_at: float
    volumes: dict[str, Path] | None = None
    stop_deadline: float | None = None  # set once stopping: SIGKILL after it
    gone: bool = False  # the pod object no longer exists
    error: tuple[str, str] | None = None  # why containers cannot start yet

    @property
    def key(self) -> tuple[str, str]:
        return meta(self.pod).get("namespace", ""), meta(self.pod).get("name", "")

    @property
    def stopping(self) -> bool:
        return self.stop_deadline is not None

    def live(self) -> list[ContainerRun]:
        return [c for c in self.init_containers + self.containers if c.is_alive]



def exit_code_of(returncode: int) -> int:
    """A container runtime's exit code: 128 + N for a process killed by signal N."""
    return returncode if returncode >= 0 else 128 - returncode


def is_sidecar(c: ContainerRun) -> bool:
    """A restartable init container (Kubernetes' native sidecar, KEP-753: an init container
    with `restartPolicy: Always`): started in order with the init containers, it runs beside
    the regular ones, restarts whenever it exits, and is stopped once they are done."""
    return c.init and c.spec.get("restartPolicy") == "Always"


def is_init_done(c: ContainerRun) -> bool:
    """An init container lets the next start once it exited 0; a sidecar, once it started."""
    if is_sidecar(c):
        return c.started_at is not None
    return c.terminated is not None and c.terminated["exitCode"] == 0


def _rule_matches(rule: dict[str, Any], code: int) -> bool:
    exit_codes = rule.get("exitCodes") or {}
    listed = code in [int(v) for v in exit_codes.get("values") or []]
    return listed if exit_codes.get("operator") == "In" else \
        exit_codes.get("operator") == "NotIn" and not listed


def should_restart(c: ContainerRun, policy: str) -> bool:
    """Whether the terminated container starts again in place, as the kubelet of Kubernetes
    1.35 decides it (`ContainerShouldRestart`, pkg/api/v1/pod/util.go, with the beta gate
    ContainerRestartRules on): a regular container's own `restartPolicy` and its
    `restartPolicyRules` (the first rule whose exit codes match decides; `Restart` restarts it;
    `RestartAllContainers`, behind the alpha gate RestartAllContainersOnContainerExits, falls
    back to the container's policy), else the pod's restartPolicy. Init containers follow the
    pod's; a sidecar always starts again."""
    if is_sidecar(c):
        return True
    code = c.terminated["exitCode"]
    own = None if c.init else c.spec.get("restartPolicy")
    if own is not None:
        rule = next((r for r in c.spec.get("restartPolicyRules") or []
                     if _rule_matches(r, code)), None)
        if rule is not None and rule.get("action") == "Restart":
            return True
        policy = own
    if policy == "Always":
        return not c.init or code != 0
    return policy == "OnFailure" and code != 0


def has_started(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == PodPhase.RUNNING or any(
        "running" in (s.get("state") or {}) for s in status.get("containerStatuses") or [])


def pod_outcome(run: PodRun) -> str | None:
    """Succeeded/Failed once the pod's containers are done for good, else None."""
    restart = (run.pod.get("spec") or {}).get("restartPolicy", "Always")
    # A sidecar outlives the regular containers until the kubelet stops it: it decides nothing.
    if run.live() if run.stopping else any(not is_sidecar(c) for c in run.live()):
        return None
    if run.stopping:
        ok = all(c.terminated is not None and c.terminated["exitCode"] == 0
                 for c in run.containers)
        return PodPhase.SUCCEEDED if ok else PodPhase.FAILED
    # A sidecar's exit decides nothing either: stopped after the regular containers (SIGTERM:
    # 143) or crashed and started again, the pod's phase is theirs (kubernetes#127221: a pod
    # whose restartable init container exits non-zero is Succeeded).
    failed_init = next((c for c in run.init_containers if not is_sidecar(c)
                        and c.terminated is not None and c.terminated["exitCode"] != 0), None)
    if failed_init is not None and restart == "Never":
        return PodPhase.FAILED
    if not run.containers or any(c.terminated is None for c in run.containers):
        return None
    # Every container has stopped: the pod runs on while one of them is to start again
    # (the kubelet's getPhase with ContainerRestartRules on).
    if any(should_restart(c, restart) for c in run.containers):
        return None
    ok = all(c.terminated["exitCode"] == 0 for c in run.containers)
    return PodPhase.SUCCEEDED if ok else PodPhase.FAILED


# -- status ------------------------------------------------------------------------------------

def build_container_status(c: ContainerRun) -> dict[str, Any]:
    if c.terminated is not None:
        state: dict[str, Any] = {"terminated": c.terminated}
    elif c.is_alive:
        state = {"running": {"startedAt": format_time(c.started_at or 0)}}
    else:
        reason, message = c.waiting or ("ContainerCreating", "")
        state = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
    status = {"name": c.name, "state": state, "ready": c.is_alive and (not c.init or
                                                                       is_sidecar(c)),
              "restartCount": c.restart_count, "image": c.spec.get("image", ""), "imageID": "",
              "started": c.is_alive}
    if c.proc is not None:
        status["containerID"] = f"local://{c.proc.pid}"
    if c.last_terminated is not None:
        status["lastState"] = {"terminated": c.last_terminated}
    else:
        status["lastState"] = {}
    return status


def _condition(old: dict[str, Any], ctype: str, cstatus: str, now: float,
               reason: str | None = None) -> dict[str, Any]:
    previous = find_condition(old, ctype)
    stamp = previous["lastTransitionTime"] if previous and previous.get("status") == cstatus \
        and previous.get("lastTransitionTime") else format_time(now)
    cond = {"type": ctype, "status": cstatus, "lastProbeTime": None, "lastTransitionTime": stamp}
    if reason:
        cond["reason"] = reason
    return cond


_OWN_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                   "PodScheduled")


def build_pod_status(run: PodRun, now: float) -> dict[str, Any]:
    old = run.pod.get("status") or {}
    outcome = pod_outcome(run)
    init_done = all(is_init_done(c) for c in run.init_containers)
    all_running = bool(run.containers) and all(c.is_alive for c in run.containers)
    if outcome is not None:
        phase = outcome
    elif init_done and any(c.started_at is not None for c in run.containers):
        phase = PodPhase.RUNNING
    else:
        phase = PodPhase.PENDING
    ready = all_running and not run.stopping and outcome is None
    not_ready = "PodCompleted" if outcome is not None else "ContainersNotReady"
    conditions = [
        _condition(old, "PodReadyToStartContainers", "True" if outcome is None else "False",
                   now),
        _condition(old, "Initialized", "True" if init_done else "False", now,
                   None if init_done else "ContainersNotInitialized"),
        _condition(old, "Ready", "True" if ready else "False", now,
                   None if ready else not_ready),
        _condition(old, "ContainersReady", "True" if ready else "False", now,
                   None if ready else not_ready),
        _condition(old, "PodScheduled", "True", now),
    ]
    conditions += [c for c in old.get("conditions") or [] if c.get("type") not in _OWN_CONDITIONS]
    status: dict[str, Any] = {
        "phase": phase, "conditions": conditions,
        "hostIP": run.ip, "hostIPs": [{"ip": run.ip}], "podIP": run.ip, "podIPs": [{"ip": run.ip}],
        "startTime": old.get("startTime") or format_time(run.admitted_at),
        "qosClass": old.get("qosClass") or qos_class(run.pod),
        "containerStatuses": [build_container_status(c) for c in run.containers],
    }
    if run.init_containers:
        status["initContainerStatuses"] = [build_container_status(c) for c in run.init_containers]
    return status


def build_lost_status(pod: dict[str, Any], now: float, started: bool = True) -> dict[str, Any]:
    """Failed, for a pod whose processes this executor does not have (it was started by an
    earlier executor, or deleted before it started)."""
    old = pod.get("status") or {}
    stamp = format_time(now)
    statuses = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        statuses.append({"name": c["name"], "ready": False, "restartCount": 0,
                         "image": c.get("image", ""), "imageID": "", "started": False,
                         "lastState": {}, "state": {"terminated": {
                             "exitCode": 137, "reason": "ContainerStatusUnknown",
                             "message": NOT_LOCATED, "startedAt": stamp, "finishedAt": stamp}}})
    conditions = [c for c in old.get("conditions") or [] if c.get("type") not in _OWN_CONDITIONS]
    conditions += [
        {"type": t, "status": "False", "lastProbeTime": None, "lastTransitionTime": stamp,
         "reason": "PodCompleted"} for t in ("Ready", "ContainersReady")]
    status = {**old, "phase": PodPhase.FAILED, "conditions": conditions,
              "containerStatuses": statuses}
    if not started:
        status["startTime"] = old.get("startTime") or stamp
    return status


def qos_class(pod: dict[str, Any]) -> str:
    resources = [c.get("resources") or {} for c in (pod.get("spec") or {}).get("containers") or []]
    seen = [r for r in resources
            if any(k in (r.get(s) or {}) for s in ("requests", "limits") for k in ("cpu", "memory"))]
    if not seen:
        return "BestEffort"
    guaranteed = all(all((r.get("limits") or {}).get(k) and
                         (r.get("requests") or {}).get(k, (r.get("limits") or {})[k]) ==
                         (r.get("limits") or {})[k] for k in ("cpu", "memory"))
                     for r in resources)
    return "Guaranteed" if guaranteed else "Burstable"

