"""What the operator reads from the cluster, reduced to the facts its decisions need. Pure: API
objects (dicts) in, small frozen views out.

JobSet status fields follow JobSet v0.12: `restarts`, `conditions` (Completed, Failed,
Suspended), `replicatedJobsStatus[].{ready,succeeded,failed,active,suspended}`. Pod fields are
core v1: container `state.terminated.{exitCode,reason,message}`, the `DisruptionTarget` condition
the cluster sets on preemption and eviction, and `state.waiting.reason` for pods that cannot start.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from tpujob.api.status import FailureReason
from tpujob.builders import names
from tpujob.controller.log_failures import read_log_failure
from tpujob.controller.trainer_reports import termination_document
from tpujob_trainer.contract import SIGNAL_EXIT_BASE, Reason

JOBSET_LABEL_RESTART_ATTEMPT = names.JOBSET_LABEL_RESTART_ATTEMPT
# Waiting reasons that will not fix themselves: the pod can never start as written.
STUCK_WAITING = {
    "CreateContainerConfigError": FailureReason.CONFIG_ERROR,
    "InvalidImageName": FailureReason.CONFIG_ERROR,
    "ErrImagePull": FailureReason.CONFIG_ERROR,
    "ImagePullBackOff": FailureReason.CONFIG_ERROR,
}
# The trainer's termination-message reasons (tpujob_trainer.contract.Reason) as status reasons;
# a lost peer restarts the job as a preemption does.
TRAINER_REASONS = {
    Reason.CONFIG_ERROR.value: FailureReason.CONFIG_ERROR,
    Reason.OUT_OF_MEMORY.value: FailureReason.OUT_OF_MEMORY,
    Reason.DATA_ERROR.value: FailureReason.DATA_ERROR,
    Reason.DATA_EXHAUSTED.value: FailureReason.DATA_EXHAUSTED,
    Reason.NAN_LOSS.value: FailureReason.NAN_LOSS,
    Reason.MESH_MISMATCH.value: FailureReason.MESH_MISMATCH,
    Reason.PREEMPTED.value: FailureReason.PREEMPTED,
    Reason.PEER_LOST.value: FailureReason.PREEMPTED,
    Reason.CHECKPOINT_ERROR.value: FailureReason.CHECKPOINT_ERROR,
    Reason.INTERNAL_ERROR.value: FailureReason.ERROR,
}
# Less specific causes rank lower: a host that died of OOM explains its peers' lost-peer exits,
# and a host that crashed explains the peers the JobSet stopped with SIGTERM to restart them
# all (they exit as Preempted or by the signal). A pod the cluster itself marked disrupted
# (DisruptionTarget: preemption, node shutdown, eviction) is a cause, not a consequence.
_RANK = {FailureReason.ERROR: 1, FailureReason.PREEMPTED: 2}
SIGNAL_BASE = SIGNAL_EXIT_BASE


def conditions_by_type(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}


def _is_true(cond: dict[str, Any] | None) -> bool:
    return bool(cond) and cond.get("status") == "True"


@dataclass(frozen=True)
class JobSetState:
    """The JobSet as the decision needs it; `exists` False when there is none."""

    exists: bool
    uid: str | None = None
    owner_uid: str | None = None
    suspended: bool = False
    restarts: int = 0
    completed: bool = False
    failed: bool = False
    message: str = ""
    ready_jobs: int = 0
    jobs: int = 0
    queue_name: str | None = None
    priority_class: str | None = None   # Kueue's WorkloadPriorityClass label
    created: datetime | None = None
    deleting: bool = False

    @property
    def all_ready(self) -> bool:
        return self.jobs > 0 and self.ready_jobs >= self.jobs

    @classmethod
    def missing(cls) -> JobSetState:
        return cls(exists=False)

    @classmethod
    def from_object(cls, obj: dict[str, Any] | None) -> JobSetState:
        if not obj:
            return cls.missing()
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        conds = conditions_by_type(obj)
        owner = next((r.get("uid") for r in meta.get("ownerReferences") or []
                      if r.get("controller")), None)
        replicas = sum(int(r.get("replicas", 1)) for r in spec.get("replicatedJobs") or [])
        ready = sum(int(r.get("ready", 0)) for r in status.get("replicatedJobsStatus") or [])
        # JobSet v0.12 counts a RestartJob restart (one slice) per Job, in
        # replicatedJobsStatus[].jobRestarts, not in status.restarts: both are restarts here.
        job_restarts = sum(int(n) for r in status.get("replicatedJobsStatus") or []
                           for n in r.get("jobRestarts") or [])
        failed = _is_true(conds.get("Failed"))
        completed = _is_true(conds.get("Completed"))
        message = ""
        for kind in ("Failed", "Completed"):
            if _is_true(conds.get(kind)):
                message = conds[kind].get("message") or ""
                break
        return cls(exists=True, uid=meta.get("uid"), owner_uid=owner,
                   suspended=bool(spec.get("suspend")),
                   restarts=int(status.get("restarts", 0)) + job_restarts,
                   completed=completed, failed=failed, message=message, ready_jobs=ready,
                   jobs=replicas, queue_name=(meta.get("labels") or {}).get(
                       names.KUEUE_QUEUE_LABEL),
                   priority_class=(meta.get("labels") or {}).get(names.KUEUE_PRIORITY_LABEL),
                   created=parse_time(meta.get("creationTimestamp")),
                   deleting=bool(meta.get("deletionTimestamp")))


@dataclass(frozen=True)
class ContainerExit:
    """One container that stopped (or cannot start), with what it said about why."""

    pod: str
    container: str
    exit_code: int | None
    k8s_reason: str = ""
    message: str = ""
    disrupted: bool = False
    restart_attempt: int = 0
    finished_at: datetime | None = None

    @property
    def trainer_reason(self) -> str | None:
        """The reason in the trainer's one-line JSON termination message, if it wrote one."""
        doc = termination_document(self.message)
        return doc.get("reason") if doc is not None else None

    @property
    def trainer_message(self) -> str:
        doc = termination_document(self.message)
        return str(doc.get("message", "")) if doc is not None else self.message.strip()

    @property
    def lost_peer(self) -> bool:
        """It stopped because a peer did (the trainer's PeerLost, or its log says so): a
        consequence, which the peer's own failure explains."""
        if self.trainer_reason is not None:
            return self.trainer_reason == Reason.PEER_LOST.value
        found = read_log_failure(self.message) if self.exit_code is not None else None
        return found is not None and found.lost_peer

    def classify(self) -> tuple[FailureReason, str]:
        """Why this container stopped, as a status reason and a one-line message."""
        where = f"pod {self.pod}, container {self.container}"
        if self.exit_code is None:
            reason = STUCK_WAITING.get(self.k8s_reason, FailureReason.ERROR)
            return reason, f"{where} cannot start ({self.k8s_reason}): {self.message}".rstrip(": ")
        trainer = self.trainer_reason
        if trainer in TRAINER_REASONS:
            text = self.trainer_message
            return TRAINER_REASONS[trainer], f"{where} exited {self.exit_code}: {trainer}: {text}"
        if self.k8s_reason == "OOMKilled":
            return (FailureReason.OUT_OF_MEMORY,
                    f"{where} was killed for using more memory than its limit (OOMKilled)")
        if self.disrupted:
            return (FailureReason.PREEMPTED,
                    f"{where} was disrupted (preemption, maintenance or eviction)")
        if self.exit_code > SIGNAL_BASE:
            return (FailureReason.PREEMPTED,
                    f"{where} was killed by signal {self.exit_code - SIGNAL_BASE}")
        found = read_log_failure(self.message)
        if found is not None:
            return found.reason, f"{where} exited {self.exit_code}: {found.summary}: {found.line}"
        tail = f": {self.message.strip()[-500:]}" if self.message.strip() else ""
        return FailureReason.ERROR, f"{where} exited {self.exit_code}{tail}"


def read_container_exits(pods: list[dict[str, Any]]) -> list[ContainerExit]:
    """Every failed or stuck trainer container of these pods, newest restart attempt first."""
    exits: list[ContainerExit] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        disrupted = _is_true(conditions_by_type(pod).get("DisruptionTarget"))
        attempt = int((meta.get("labels") or {}).get(JOBSET_LABEL_RESTART_ATTEMPT, 0) or 0)
        for cs in status.get("containerStatuses") or []:
            state = cs.get("state") or {}
            term = state.get("terminated") or (cs.get("lastState") or {}).get("terminated")
            waiting = state.get("waiting")
            if term and int(term.get("exitCode", 0)) != 0:
                exits.append(ContainerExit(
                    pod=meta.get("name", ""), container=cs.get("name", ""),
                    exit_code=int(term["exitCode"]), k8s_reason=term.get("reason") or "",
                    message=term.get("message") or "", disrupted=disrupted,
                    restart_attempt=attempt, finished_at=parse_time(term.get("finishedAt"))))
            elif waiting and waiting.get("reason") in STUCK_WAITING:
                exits.append(ContainerExit(
                    pod=meta.get("name", ""), container=cs.get("name", ""), exit_code=None,
                    k8s_reason=waiting["reason"], message=waiting.get("message") or "",
                    restart_attempt=attempt))
    exits.sort(key=lambda e: -e.restart_attempt)
    return exits


class FailureCause(NamedTuple):
    """Why the job's last attempt failed, and the container that says so (status.failure)."""

    reason: FailureReason
    message: str
    pod: str | None = None
    container: str | None = None
    at: datetime | None = None   # the first of those containers' exits


def explain_failure(exits: list[ContainerExit]) -> FailureCause | None:
    """The most specific cause among the newest attempt's failed containers: a fatal trainer
    reason or a disruption the cluster recorded beats a crash, which beats a signal, which
    beats a lost peer (usually the consequences of the others)."""
    if not exits:
        return None
    newest = exits[0].restart_attempt
    candidates = [(e.classify(), e) for e in exits if e.restart_attempt == newest]
    candidates.sort(key=lambda c: 0 if c[1].disrupted else
                    _RANK.get(c[0][0], 0) + (1 if c[1].lost_peer else 0))
    (reason, message), container = candidates[0]
    ends = [e.finished_at for _, e in candidates if e.finished_at is not None]
    return FailureCause(reason, message, container.pod or None, container.container or None,
                        min(ends) if ends else None)


@dataclass(frozen=True)
class Unscheduled:
    """Pods the scheduler has not placed: how many, since when, and the scheduler's words."""

    pods: int
    of: int
    since: datetime
    pod: str
    message: str


def read_unscheduled(pods: list[dict[str, Any]]) -> Unscheduled | None:
    """The live pods whose PodScheduled condition is False, with the oldest one's creation time
    and the scheduler's message for one of them; None when every live pod is placed."""
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    waiting = []
    for pod in live:
        cond = conditions_by_type(pod).get("PodScheduled")
        if cond is not None and cond.get("status") == "False":
            created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
            waiting.append((created, (pod.get("metadata") or {}).get("name", ""),
                            str(cond.get("message") or cond.get("reason") or "")))
    if not waiting:
        return None
    waiting.sort(key=lambda w: (w[0] is None, w[0] or datetime.min.replace(tzinfo=UTC), w[1]))
    since, pod, message = waiting[0]
    return Unscheduled(len(waiting), len(live), since or datetime.now(UTC), pod, message)


def parse_time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def process_zero_pods(pods: list[dict[str, Any]], phases: tuple[str, ...] = ("Running",)
                      ) -> Iterator[dict[str, Any]]:
    """The pods of JAX process 0's host (slice 0, host 0) in one of `phases`: running, or,
    once the run has ended, Succeeded or Failed."""
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        index = annotations.get(names.JOB_COMPLETION_INDEX_ANNOTATION,
                                labels.get(names.JOB_COMPLETION_INDEX_ANNOTATION))
        if str(labels.get(names.JOBSET_LABEL_JOB_INDEX, "0")) != "0" or str(index) != "0":
            continue
        # A pod being deleted is an attempt that ended (its process may still step on).
        if (pod.get("status") or {}).get("phase") in phases and \
                not meta.get("deletionTimestamp"):
            yield pod


def find_process_zero(pods: list[dict[str, Any]]) -> tuple[str, int] | None:
    """(pod IP, metrics port) of JAX process 0: slice 0, host 0, first container; None until that
    pod runs with an IP."""
    for pod in process_zero_pods(pods):
        status = pod.get("status") or {}
        if not status.get("podIP"):
            continue
        containers = (pod.get("spec") or {}).get("containers") or []
        for port in (containers[0].get("ports") or []) if containers else []:
            if port.get("name") == "metrics":
                return status["podIP"], int(port["containerPort"])
    return None


def trainer_containers(pods: list[dict[str, Any]], attempt: int) -> Iterator[tuple[str, str]]:
    """(pod, container) of every trainer container of the attempt's running pods: the logs
    every trainer process writes its host reports to."""
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if int(labels.get(JOBSET_LABEL_RESTART_ATTEMPT, attempt) or 0) != attempt or \
                (pod.get("status") or {}).get("phase") != "Running" or \
                meta.get("deletionTimestamp"):
            continue
        for container in (pod.get("spec") or {}).get("containers") or []:
            if str(container.get("name", "")).startswith(names.TRAINER_CONTAINER):
                yield meta.get("name", ""), container["name"]


def trainer_endpoints(pods: list[dict[str, Any]], attempt: int
                      ) -> Iterator[tuple[str, str, int]]:
    """(host, pod IP, port) of every trainer process of the attempt's running pods, the host
    named as the host reports name it (slice-S/host-H, /container-C where a host runs several)."""
    by_name = {(pod.get("metadata") or {}).get("name", ""): pod for pod in pods}
    for pod_name, container in trainer_containers(pods, attempt):
        pod = by_name[pod_name]
        meta = pod["metadata"]
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        index = annotations.get(names.JOB_COMPLETION_INDEX_ANNOTATION,
                                labels.get(names.JOB_COMPLETION_INDEX_ANNOTATION, 0))
        host = f"slice-{labels.get(names.JOBSET_LABEL_JOB_INDEX, 0)}/host-{index}"
        trainers = [c for c in pod["spec"]["containers"]
                    if str(c.get("name", "")).startswith(names.TRAINER_CONTAINER)]
        spec = next(c for c in trainers if c["name"] == container)
        if len(trainers) > 1:
            host = f"{host}/container-{trainers.index(spec)}"
        port = next((int(p["containerPort"]) for p in spec.get("ports") or []
                     if str(p.get("name", "")).startswith("metrics")), None)
        ip = (pod.get("status") or {}).get("podIP")
        if ip and port is not None:
            yield host, ip, port
