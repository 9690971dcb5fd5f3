"""The queue part of a job's status: `status.queue` from its Kueue Workload, the Events a change
of it deserves, and the flag for pods the scheduler leaves unplaced. Pure; `decide` calls it.

A job waits in two places: in Kueue's queue (for quota, an admission check, a higher priority
to finish) and, once admitted, for the scheduler to find nodes. Kueue's own words say the
first (tpujob.controller.kueue_workload), the pods' PodScheduled condition the second."""

from __future__ import annotations

from datetime import datetime

from tpujob.api.status import AdmissionCheckStatus, QueueStatus
from tpujob.controller.kueue_workload import QueueReason, QueueState, WorkloadReading
from tpujob.controller.observe import Unscheduled

UNSCHEDULABLE = "Unschedulable"


def build_queue_status(reading: WorkloadReading | None, queue_name: str | None,
                       prev: QueueStatus | None) -> QueueStatus | None:
    """status.queue: the Workload's reading, or (before Kueue made one) the queue asked for."""
    if reading is None:
        if queue_name is None:
            return None
        if prev is not None and prev.local_queue == queue_name:
            return prev   # the Workload is not read this pass (or not made yet): as it was
        return QueueStatus(state=QueueState.PENDING.value, reason=QueueReason.PENDING.value,
                           message="waiting for Kueue to make the job's Workload",
                           local_queue=queue_name)
    return QueueStatus(
        state=reading.state.value, reason=reading.reason.value, message=reading.message[:4096],
        local_queue=reading.local_queue or queue_name, cluster_queue=reading.cluster_queue,
        workload=reading.name or None, priority=reading.priority,
        priority_class=reading.priority_class, flavors=dict(reading.flavors),
        admission_checks=[AdmissionCheckStatus(name=c.name, state=c.state,
                                               message=c.message[:4096])
                          for c in reading.checks[:16]],
        queued_since=reading.queued_since, admitted_time=reading.admitted_since,
        evictions=reading.evictions,
        last_eviction=reading.last_eviction[:4096] if reading.last_eviction else None)


def queue_events(prev: QueueStatus | None, new: QueueStatus | None, now: datetime,
                 sentence: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) Events for what changed in the queue since the last status: an
    eviction, an admission, and a new reason to wait that waiting will not fix."""
    if new is None:
        return []
    events = []
    if new.evictions > (prev.evictions if prev is not None else 0) and new.last_eviction:
        cause, _, words = new.last_eviction.partition(": ")
        kind = "Preempted" if cause == "Preempted" else "Evicted"
        events.append(("Warning", kind, (
            f"Kueue evicted the job ({cause}): {words}; its pods are stopped (the trainer "
            f"saves a checkpoint on SIGTERM) and it waits in LocalQueue {new.local_queue} to "
            "be admitted again, then resumes from its newest checkpoint")[:1024]))
    was_admitted = prev is not None and prev.state == QueueState.ADMITTED.value
    if new.state == QueueState.ADMITTED.value and not was_admitted:
        flavors = ", ".join(f"{f} ({r})" for r, f in sorted(new.flavors.items()))
        waited = ""
        if new.queued_since is not None and new.admitted_time is not None:
            wait = max(0.0, (new.admitted_time - new.queued_since).total_seconds())
            waited = f" after {wait:.0f} s in the queue"
        events.append(("Normal", "Admitted", (
            f"admitted by ClusterQueue {new.cluster_queue or '?'}"
            + (f" to flavor {flavors}" if flavors else "") + waited)))
    reason = QueueReason(new.reason) if new.reason in QueueReason.__members__.values() else None
    changed = prev is None or prev.reason != new.reason
    if reason is not None and reason.never_admitted and changed:
        events.append(("Warning", reason.value, sentence[:1024]))
    return events


def unscheduled_sentence(found: Unscheduled, admitted: bool, now: datetime,
                         hosts: int) -> str:
    """"admitted by Kueue, 2 of 4 pods not scheduled for 10m: 0/8 nodes are available: ...":
    of the job's `hosts` pods, those the scheduler has not placed and those not made yet (the
    Job controller makes an indexed Job's pods in growing batches)."""
    expected = max(hosts, found.of)
    missing = found.pods + (expected - found.of)
    waited = int(max(0.0, (now - found.since).total_seconds()))
    minutes, seconds = divmod(waited, 60)
    age = f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"
    head = "admitted by Kueue, " if admitted else ""
    return (f"{head}{missing} of {expected} pods not scheduled for {age} (pod {found.pod}): "
            f"{found.message}")


def is_unscheduled_too_long(found: Unscheduled | None, now: datetime,
                            warning_seconds: int) -> bool:
    """Whether pods have waited for nodes past the job's bound (0: never flagged)."""
    if found is None or warning_seconds <= 0:
        return False
    return (now - found.since).total_seconds() >= warning_seconds


__all__ = ["UNSCHEDULABLE", "build_queue_status", "is_unscheduled_too_long", "queue_events",
           "unscheduled_sentence"]
