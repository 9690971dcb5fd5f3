"""Kueue's view of a queued job: the Workload Kueue makes for its JobSet (kueue.x-k8s.io/v1beta2,
as Kueue v0.17 writes it), reduced to one state, one reason and one sentence a person reads in
`kubectl get tpujobs`. Pure: the Workload (a dict) in, a frozen reading out.

Kueue v0.17 says why a workload waits in the `QuotaReserved` condition: reason `Inadmissible`
(its LocalQueue or ClusterQueue is missing or inactive:
`pkg/controller/core/workload_controller.go`) or `Pending`, with the flavor assigner's words as
the message (`pkg/scheduler/flavorassigner/flavorassigner.go`: "insufficient unused quota for
... N more needed", "insufficient quota ... > maximum capacity", "flavor F doesn't match node
affinity", "untolerated taint", "resource R unavailable in ClusterQueue";
`pkg/cache/scheduler/tas_flavor_snapshot.go`: "topology T doesn't allow to fit", "no topology
domains at level L" (no node has the level's label), "no requested topology level";
`pkg/scheduler/scheduler.go`: "Pending the preemption of N workload(s)"). Later Kueue releases
name these as reasons of their own (NoMatchingFlavor, ExceedsMaxQuota, WaitingForQuota,
TopologyPlacementFailed, WaitingForPreemptedWorkloads, UnsatisfiedAdmissionChecks); the same
names are derived here from the words, so the REASON column says the same on either.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

FLAVOR_PREFIX = "couldn't assign flavors to pod set "


class QueueState(StrEnum):
    """Where the job's Workload is in Kueue."""

    PENDING = "Pending"                # waiting for quota (or for a first look)
    INADMISSIBLE = "Inadmissible"      # its queue is missing or stopped
    QUOTA_RESERVED = "QuotaReserved"   # quota held; admission checks still to pass
    ADMITTED = "Admitted"
    PREEMPTED = "Preempted"            # evicted for another workload; waiting again
    EVICTED = "Evicted"                # evicted for another cause; waiting again
    DEACTIVATED = "Deactivated"        # spec.active false: Kueue will not admit it again
    FINISHED = "Finished"


class QueueReason(StrEnum):
    """One word for why (REASON column); the names later Kueue releases use where they exist."""

    QUEUE_NOT_FOUND = "QueueNotFound"
    QUEUE_INACTIVE = "QueueInactive"
    WAITING_FOR_QUOTA = "WaitingForQuota"
    WAITING_FOR_PREEMPTED = "WaitingForPreemptedWorkloads"
    EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
    NO_MATCHING_FLAVOR = "NoMatchingFlavor"
    TOPOLOGY_PLACEMENT_FAILED = "TopologyPlacementFailed"
    ADMISSION_CHECKS = "UnsatisfiedAdmissionChecks"
    ADMISSION_CHECK_REJECTED = "AdmissionCheckRejected"
    PREEMPTED = "Preempted"
    EVICTED = "Evicted"
    DEACTIVATED = "Deactivated"
    ADMITTED = "Admitted"
    PENDING = "Pending"

    @property
    def never_admitted(self) -> bool:
        """Kueue will not admit the job as its queues stand: waiting will not help."""
        return self in NEVER_ADMITTED


NEVER_ADMITTED = frozenset({QueueReason.QUEUE_NOT_FOUND, QueueReason.EXCEEDS_MAX_QUOTA,
                            QueueReason.NO_MATCHING_FLAVOR, QueueReason.ADMISSION_CHECK_REJECTED,
                            QueueReason.DEACTIVATED})
_NAMED_BY_KUEUE = frozenset({QueueReason.WAITING_FOR_QUOTA, QueueReason.EXCEEDS_MAX_QUOTA,
                             QueueReason.NO_MATCHING_FLAVOR,
                             QueueReason.TOPOLOGY_PLACEMENT_FAILED,
                             QueueReason.WAITING_FOR_PREEMPTED})
# The flavor assigner's words, most hopeful first: a message lists every flavor tried, and the
# job waits as long as one of them could take it.
_PENDING_WORDS: tuple[tuple[str, QueueReason], ...] = (
    ("Pending the preemption of", QueueReason.WAITING_FOR_PREEMPTED),
    ("insufficient unused quota", QueueReason.WAITING_FOR_QUOTA),
    ("no longer fits after processing another workload", QueueReason.WAITING_FOR_QUOTA),
    ("doesn't allow to fit", QueueReason.TOPOLOGY_PLACEMENT_FAILED),
    ("allows to fit only", QueueReason.TOPOLOGY_PLACEMENT_FAILED),
    ("no topology domains at level", QueueReason.TOPOLOGY_PLACEMENT_FAILED),
    ("no requested topology level", QueueReason.NO_MATCHING_FLAVOR),
    ("does not support TopologyAwareScheduling", QueueReason.NO_MATCHING_FLAVOR),
    ("> maximum capacity", QueueReason.EXCEEDS_MAX_QUOTA),
    ("doesn't match node affinity", QueueReason.NO_MATCHING_FLAVOR),
    ("untolerated taint", QueueReason.NO_MATCHING_FLAVOR),
    ("does not provide resource", QueueReason.NO_MATCHING_FLAVOR),
    ("unavailable in ClusterQueue", QueueReason.NO_MATCHING_FLAVOR),
    ("not found", QueueReason.NO_MATCHING_FLAVOR),
)


@dataclass(frozen=True)
class AdmissionCheck:
    """One admission check of the Workload (Pending, Ready, Retry or Rejected)."""

    name: str
    state: str
    message: str = ""


@dataclass(frozen=True)
class WorkloadReading:
    """The job's Workload as a person needs it."""

    name: str
    state: QueueState
    reason: QueueReason
    message: str                               # Kueue's own words for the current state
    local_queue: str = ""
    cluster_queue: str | None = None           # once quota is reserved
    priority: int | None = None
    priority_class: str | None = None
    flavors: tuple[tuple[str, str], ...] = ()  # (resource, flavor) admitted to
    checks: tuple[AdmissionCheck, ...] = ()
    queued_since: datetime | None = None       # created, or last put back in the queue
    admitted_since: datetime | None = None
    evictions: int = 0                         # times Kueue evicted it, all causes
    last_eviction: str | None = None           # the newest eviction's reason and words

    @property
    def waiting(self) -> bool:
        return self.state not in (QueueState.ADMITTED, QueueState.FINISHED)


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}


def _is_true(cond: dict[str, Any] | None) -> bool:
    return bool(cond) and cond.get("status") == "True"


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def classify_pending(message: str) -> QueueReason:
    """The reason a Pending Workload's message gives (see the module docstring)."""
    for words, reason in _PENDING_WORDS:
        if words in message:
            return reason
    return QueueReason.PENDING


def _inadmissible_reason(message: str) -> QueueReason:
    return (QueueReason.QUEUE_NOT_FOUND if "doesn't exist" in message
            else QueueReason.QUEUE_INACTIVE)


def _checks(status: dict[str, Any]) -> tuple[AdmissionCheck, ...]:
    return tuple(AdmissionCheck(str(c.get("name", "")), str(c.get("state", "")),
                                str(c.get("message") or ""))
                 for c in status.get("admissionChecks") or [])


def _flavors(status: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    found: dict[str, str] = {}
    for podset in ((status.get("admission") or {}).get("podSetAssignments") or []):
        for resource, flavor in (podset.get("flavors") or {}).items():
            found.setdefault(str(resource), str(flavor))
    return tuple(sorted(found.items()))


def _evictions(status: dict[str, Any]) -> int:
    stats = (status.get("schedulingStats") or {}).get("evictions") or []
    return sum(int(e.get("count", 0) or 0) for e in stats)


def read_workload(obj: dict[str, Any]) -> WorkloadReading:
    """The reading of one Workload: its state, the reason and message for it, and the facts
    around it (queue, priority, flavors, checks, evictions, since when it waits)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    conds = _conditions(obj)
    reserved, admitted = conds.get("QuotaReserved"), conds.get("Admitted")
    evicted, preempted = conds.get("Evicted"), conds.get("Preempted")
    checks = _checks(status)
    eviction = None
    if _is_true(evicted):
        eviction = f"{evicted.get('reason', 'Evicted')}: {evicted.get('message', '')}".rstrip(": ")
    # In the queue since it was made, or since Kueue last evicted it (back in line then).
    queued_since = max(filter(None, (_time(meta.get("creationTimestamp")), _time(
        (evicted or {}).get("lastTransitionTime")) if _is_true(evicted) else None)),
        default=None)
    common = dict(name=str(meta.get("name", "")), local_queue=str(spec.get("queueName") or ""),
                  cluster_queue=(status.get("admission") or {}).get("clusterQueue"),
                  priority=spec.get("priority"),
                  priority_class=(spec.get("priorityClassRef") or {}).get("name"),
                  flavors=_flavors(status), checks=checks, queued_since=queued_since,
                  evictions=_evictions(status), last_eviction=eviction)

    def reading(state: QueueState, reason: QueueReason, message: str, **extra: Any
                ) -> WorkloadReading:
        return WorkloadReading(state=state, reason=reason, message=message,
                               **{**common, **extra})

    if _is_true(conds.get("Finished")):
        return reading(QueueState.FINISHED, QueueReason.ADMITTED,
                       str(conds["Finished"].get("message") or "finished"))
    if spec.get("active") is False:
        words = (evicted or {}).get("message") or "spec.active is false"
        return reading(QueueState.DEACTIVATED, QueueReason.DEACTIVATED, str(words))
    if _is_true(admitted):
        return reading(QueueState.ADMITTED, QueueReason.ADMITTED,
                       str(admitted.get("message") or "admitted"),
                       admitted_since=_time(admitted.get("lastTransitionTime")))
    if _is_true(reserved):
        rejected = next((c for c in checks if c.state == "Rejected"), None)
        waiting = [c for c in checks if c.state != "Ready"]
        reason = (QueueReason.ADMISSION_CHECK_REJECTED if rejected is not None
                  else QueueReason.ADMISSION_CHECKS)
        words = "; ".join(f"admission check {c.name} is {c.state}"
                          + (f": {c.message}" if c.message else "") for c in waiting)
        return reading(QueueState.QUOTA_RESERVED, reason,
                       words or str(reserved.get("message") or "quota reserved"))
    message = str((reserved or {}).get("message") or "")
    if (reserved or {}).get("reason") == "Inadmissible":
        return reading(QueueState.INADMISSIBLE, _inadmissible_reason(message), message)
    kueue_reason = str((reserved or {}).get("reason") or "")
    # A Kueue that names the reason itself (later releases) is taken at its word.
    reason = (QueueReason(kueue_reason) if kueue_reason in _NAMED_BY_KUEUE
              else classify_pending(message))
    if _is_true(evicted):
        state = QueueState.PREEMPTED if _is_true(preempted) else QueueState.EVICTED
        if reason == QueueReason.PENDING:
            reason = QueueReason.PREEMPTED if _is_true(preempted) else QueueReason.EVICTED
        return reading(state, reason, message or str(evicted.get("message") or ""))
    return reading(QueueState.PENDING, reason, message)


def _quota_words(message: str) -> str:
    """Kueue's message less its pod-set preamble: the part a person needs."""
    text = message.strip()
    if text.startswith(FLAVOR_PREFIX):
        text = text[len(FLAVOR_PREFIX):]
        text = text.split(": ", 1)[1] if ": " in text else text
    return text


def describe_wait(reading: WorkloadReading) -> str:
    """The one sentence for the job's Queued phase: what it waits for, in Kueue's words."""
    queue = f"LocalQueue {reading.local_queue}" if reading.local_queue else "its queue"
    words = _quota_words(reading.message)
    before = ""
    if reading.state in (QueueState.PREEMPTED, QueueState.EVICTED) and reading.last_eviction:
        cause = reading.last_eviction.split(":", 1)[0]
        before = ("preempted by a higher-priority workload; " if cause == "Preempted"
                  else f"evicted by Kueue ({cause}); ")
    r = reading.reason
    if not reading.waiting:   # read before Kueue wrote the eviction that suspended the JobSet
        return f"waiting for Kueue {queue} to admit it"
    if r == QueueReason.QUEUE_NOT_FOUND:
        return (f"not admitted: {words}; create the LocalQueue in the job's namespace or set "
                "spec.scheduling.queueName to one that exists")
    if r == QueueReason.QUEUE_INACTIVE:
        return f"not admitted: {words}"
    if r == QueueReason.EXCEEDS_MAX_QUOTA:
        return (f"{before}never admitted as {queue} stands: {words}; ask for a smaller slice "
                "or fewer slices, or for more quota in its ClusterQueue")
    if r == QueueReason.NO_MATCHING_FLAVOR:
        return (f"{before}never admitted as {queue} stands: no flavor of its ClusterQueue "
                f"offers this slice ({words})")
    if r == QueueReason.TOPOLOGY_PLACEMENT_FAILED:
        return f"{before}waiting in {queue}: Kueue cannot place the slice: {words}"
    if r in (QueueReason.ADMISSION_CHECKS, QueueReason.ADMISSION_CHECK_REJECTED):
        cq = f" in ClusterQueue {reading.cluster_queue}" if reading.cluster_queue else ""
        return f"quota reserved{cq}; {words}"
    if r == QueueReason.DEACTIVATED:
        return f"deactivated by Kueue, not admitted again: {words}"
    if not words:
        return f"{before}waiting for Kueue {queue} to admit it"
    return f"{before}waiting in {queue}: {words}"


__all__ = ["AdmissionCheck", "NEVER_ADMITTED", "QueueReason", "QueueState",
           "WorkloadReading", "classify_pending", "describe_wait",
           "read_workload"]
