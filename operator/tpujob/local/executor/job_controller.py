"""The batch/v1 Job controller's sync, pure: a Job and its pods in, a plan out (pods to create
and delete, tracking finalizers to remove, the new status, events).

What it follows of the real controller (Kubernetes 1.31+):
- pods are created from the template with the `batch.kubernetes.io/job-tracking` finalizer, the
  Job's labels (`batch.kubernetes.io/controller-uid`, `job-name`, ...), an owner reference and,
  for Indexed Jobs, the completion index (annotation, label, JOB_COMPLETION_INDEX env), the
  host name `<job>-<index>` and the generated name `<job>-<index>-xxxxx`;
- a finished pod is counted once, in the same status write that precedes the removal of its
  finalizer: Succeeded adds its index to completedIndexes, Failed goes through the
  podFailurePolicy (FailJob / Ignore / Count) and backoffLimit;
- a failing Job first gets FailureTarget (reason PodFailurePolicy, BackoffLimitExceeded or
  DeadlineExceeded), its remaining pods are deleted, and Failed follows once none is running;
  success goes SuccessCriteriaMet then Complete the same way;
- a suspended Job deletes its active pods (their failures are not counted); resuming resets
  startTime; failed pods are replaced after an exponential back-off.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from . import keys
from .keys import JobCondition, PodPhase
from .objects import (
    Event,
    annotations,
    build_controller_ref,
    find_condition,
    format_time,
    has_finalizer,
    is_condition_true,
    is_deleting,
    is_pod_ready,
    is_pod_terminal,
    meta,
    name,
    namespace,
    parse_time,
    pod_phase,
    uid,
)
from .pod_failure_policy import match_pod_failure_policy

COMPONENT = "job-controller"
MAX_BACKOFF_S = 360.0


@dataclass
class JobPlan:
    status: dict[str, Any]
    status_changed: bool = False
    create_pods: list[dict[str, Any]] = field(default_factory=list)
    delete_pods: list[dict[str, Any]] = field(default_factory=list)
    release_pods: list[dict[str, Any]] = field(default_factory=list)  # remove job-tracking
    excuse_pods: list[str] = field(default_factory=list)  # uids stopped by a suspension
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None


# -- completed indexes ---------------------------------------------------------------------------

def parse_indexes(text: str | None) -> set[int]:
    found: set[int] = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            found.update(range(int(lo), int(hi) + 1))
        else:
            found.add(int(part))
    return found


def format_indexes(indexes: set[int]) -> str:
    """`0-2,5,7-8`: the compressed form of completedIndexes."""
    parts, ordered = [], sorted(indexes)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


# -- pods ----------------------------------------------------------------------------------------

def completion_index(pod: dict[str, Any]) -> int | None:
    try:
        value = int(annotations(pod).get(keys.JOB_COMPLETION_INDEX, ""))
    except ValueError:
        return None
    return value if value >= 0 else None


def is_indexed(job: dict[str, Any]) -> bool:
    return (job.get("spec") or {}).get("completionMode") == "Indexed"


def generate_name(job_name: str, index: int | None) -> str:
    if index is None:
        return f"{job_name}-"[:keys.MAX_GENERATED_NAME]
    suffix = f"-{index}-"
    prefix = job_name + suffix
    if len(prefix) > keys.MAX_GENERATED_NAME:
        prefix = prefix[:keys.MAX_GENERATED_NAME - len(suffix)] + suffix
    return prefix


def build_pod(job: dict[str, Any], index: int | None) -> dict[str, Any]:
    """A pod for the Job (for completion index `index` of an Indexed Job)."""
    template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    tmeta = template.get("metadata") or {}
    pod_labels = dict(tmeta.get("labels") or {})
    # The API server adds these to the template of every Job (its generated selector).
    pod_labels.update({keys.CONTROLLER_UID_LABEL: uid(job), keys.JOB_NAME_LABEL: name(job),
                       keys.LEGACY_CONTROLLER_UID_LABEL: uid(job),
                       keys.LEGACY_JOB_NAME_LABEL: name(job)})
    pod_notes = dict(tmeta.get("annotations") or {})
    spec = template.get("spec") or {}
    if index is not None:
        pod_notes[keys.JOB_COMPLETION_INDEX] = str(index)
        pod_labels[keys.JOB_COMPLETION_INDEX] = str(index)
        spec["hostname"] = f"{name(job)}-{index}"
        field_path = f"metadata.labels['{keys.JOB_COMPLETION_INDEX}']"
        for container in spec.get("initContainers", []) + spec.get("containers", []):
            env = container.setdefault("env", [])
            if not any(e.get("name") == keys.COMPLETION_INDEX_ENV for e in env):
                env.append({"name": keys.COMPLETION_INDEX_ENV,
                            "valueFrom": {"fieldRef": {"fieldPath": field_path}}})
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": generate_name(name(job), index),
                     "namespace": namespace(job), "labels": pod_labels,
                     "annotations": pod_notes, "finalizers": [keys.JOB_TRACKING_FINALIZER],
                     "ownerReferences": [build_controller_ref(job)]},
        "spec": spec,
    }


def _finished_at(pod: dict[str, Any]) -> float:
    times = [parse_time(((s.get("state") or {}).get("terminated") or {}).get("finishedAt"))
             for s in (pod.get("status") or {}).get("containerStatuses") or []]
    return max((t for t in times if t is not None), default=0.0)


def _set_condition(status: dict[str, Any], ctype: str, cstatus: str, reason: str, message: str,
                   now: float) -> bool:
    """The Job controller's `ensureJobConditionStatus`."""
    conditions = status.setdefault("conditions", [])
    stamp = format_time(now)
    new = {"type": ctype, "status": cstatus, "reason": reason, "message": message,
           "lastProbeTime": stamp, "lastTransitionTime": stamp}
    for i, cond in enumerate(conditions):
        if cond["type"] == ctype:
            if (cond["status"], cond.get("reason"), cond.get("message")) != \
                    (cstatus, reason, message):
                conditions[i] = new
                return True
            return False
    if cstatus != "False":
        conditions.append(new)
        return True
    return False


def is_job_finished(job: dict[str, Any]) -> bool:
    return any(is_condition_true(job, c) for c in (JobCondition.COMPLETE, JobCondition.FAILED))


# -- the sync ------------------------------------------------------------------------------------

def plan_job(job: dict[str, Any], pods: list[dict[str, Any]], now: float,
             backoff_base_s: float = 10.0, excused: frozenset[str] = frozenset()) -> JobPlan:
    """Sync one Job against the pods it controls. `excused`: uids of pods this controller
    stopped because the Job was suspended (their failure does not count, even when they
    finish after a resume)."""
    spec = job.get("spec") or {}
    original = copy.deepcopy(job.get("status") or {})
    status = copy.deepcopy(original)
    plan = JobPlan(status=status)
    pods = sorted(pods, key=lambda p: meta(p).get("creationTimestamp") or "")
    active = [p for p in pods if not is_pod_terminal(p) and not is_deleting(p)]
    terminating = [p for p in pods if not is_pod_terminal(p) and is_deleting(p)]
    uncounted = [p for p in pods if is_pod_terminal(p) and
                 has_finalizer(p, keys.JOB_TRACKING_FINALIZER)]

    def finish(changed_counts: bool = True) -> JobPlan:
        status["active"] = len(active) + len(plan.create_pods) - len(
            [p for p in plan.delete_pods if p in active])
        status["ready"] = sum(1 for p in active if is_pod_ready(p) and p not in plan.delete_pods)
        status["terminating"] = len(terminating) + len(
            [p for p in plan.delete_pods if p in active])
        for key in ("active", "succeeded", "failed"):
            if not status.get(key):
                status.pop(key, None)
        plan.status_changed = status != original
        return plan

    if is_job_finished(job):
        # Finished: release every finished pod, stop any that still runs.
        plan.release_pods = uncounted
        plan.delete_pods = list(active)
        return finish()

    indexed = is_indexed(job)
    parallelism = int(spec.get("parallelism", 1))
    completions = spec.get("completions")
    completions = int(completions) if completions is not None else None
    backoff_limit = int(spec.get("backoffLimit", 6))
    suspended = bool(spec.get("suspend"))
    done_indexes = parse_indexes(status.get("completedIndexes")) if indexed else set()
    succeeded = int(status.get("succeeded") or 0)
    failed = int(status.get("failed") or 0)
    target = find_condition(status, JobCondition.FAILURE_TARGET)
    failure = (target["reason"], target["message"]) \
        if target and target.get("status") == "True" else None

    # Count the pods that finished since the last sync (each once, then release it).
    for pod in sorted(uncounted, key=_finished_at):
        if pod_phase(pod) == PodPhase.SUCCEEDED:
            index = completion_index(pod)
            if indexed and index is not None and (completions is None or index < completions):
                done_indexes.add(index)
            elif not indexed:
                succeeded += 1
        elif not suspended and uid(pod) not in excused:
            verdict = match_pod_failure_policy(spec.get("podFailurePolicy"), pod)
            if verdict.action == "FailJob" and failure is None:
                failure = (keys.POD_FAILURE_POLICY, verdict.message or "")
            if verdict.counts:
                failed += 1
        plan.release_pods.append(pod)
    if indexed:
        succeeded = len(done_indexes)
        status["completedIndexes"] = format_indexes(done_indexes)
        if not status["completedIndexes"]:
            del status["completedIndexes"]
    status["succeeded"], status["failed"] = succeeded, failed

    start = parse_time(status.get("startTime"))
    if failure is None and failed > backoff_limit:
        failure = keys.BACKOFF_LIMIT_EXCEEDED
    deadline = spec.get("activeDeadlineSeconds")
    if failure is None and deadline is not None and start is not None and not suspended and \
            now - start >= int(deadline):
        failure = keys.DEADLINE_EXCEEDED

    if failure is not None:
        # Failing: FailureTarget now, delete the rest, Failed once nothing runs.
        _set_condition(status, JobCondition.FAILURE_TARGET, "True", *failure, now)
        plan.delete_pods = list(active)
        if not active and not terminating:
            if _set_condition(status, JobCondition.FAILED, "True", *failure, now):
                plan.events.append(Event(job, "Warning", failure[0], failure[1], COMPONENT))
        return finish()

    wanted = completions if completions is not None else max(parallelism, 1)
    if (indexed and succeeded >= wanted) or \
            (not indexed and succeeded >= (completions or 1) and (completions or not active)):
        _set_condition(status, JobCondition.SUCCESS_CRITERIA_MET, "True",
                       *keys.COMPLETIONS_REACHED, now)
        plan.delete_pods = list(active)
        if not active and not terminating:
            if _set_condition(status, JobCondition.COMPLETE, "True", *keys.COMPLETIONS_REACHED,
                              now):
                status["completionTime"] = format_time(now)
                plan.events.append(Event(job, "Normal", "Completed", "Job completed",
                                         COMPONENT))
        return finish()

    if suspended:
        plan.delete_pods = list(active)
        plan.excuse_pods = [uid(p) for p in active]
        _set_condition(status, JobCondition.SUSPENDED, "True", *keys.JOB_SUSPENDED, now)
        return finish()
    if is_condition_true(status, JobCondition.SUSPENDED):
        _set_condition(status, JobCondition.SUSPENDED, "False", *keys.JOB_RESUMED, now)
        status["startTime"] = format_time(now)
    status.setdefault("startTime", format_time(now))

    # Back off after failures before replacing pods: base * 2^(failures - 1), capped.
    if failed:
        last = max((_finished_at(p) for p in pods if pod_phase(p) == PodPhase.FAILED),
                   default=0.0)
        delay = min(backoff_base_s * 2 ** (failed - 1), MAX_BACKOFF_S)
        if now < last + delay:
            plan.requeue_after = last + delay - now
            return finish()
    _plan_new_pods(job, plan, active, terminating, done_indexes, parallelism, completions,
                   indexed, succeeded)
    return finish()


def _only_replace_failed(spec: dict[str, Any]) -> bool:
    return spec.get("podReplacementPolicy") == "Failed" or bool(spec.get("podFailurePolicy"))


def _plan_new_pods(job: dict[str, Any], plan: JobPlan, active: list[dict[str, Any]],
                   terminating: list[dict[str, Any]], done: set[int], parallelism: int,
                   completions: int | None, indexed: bool, succeeded: int) -> None:
    spec = job.get("spec") or {}
    if not indexed:
        remaining = (completions - succeeded) if completions is not None else parallelism
        busy = len(active) + (len(terminating) if _only_replace_failed(spec) else 0)
        for _ in range(max(0, min(parallelism, remaining) - busy)):
            plan.create_pods.append(build_pod(job, None))
        return
    running: dict[int, list[dict[str, Any]]] = {}
    for pod in active:
        index = completion_index(pod)
        running.setdefault(-1 if index is None else index, []).append(pod)
    for index, group in running.items():
        if index in done or index < 0 or (completions is not None and index >= completions):
            plan.delete_pods += group  # finished or out-of-range indexes need no pod
        else:
            plan.delete_pods += group[1:]  # one pod per index
    held = {completion_index(p) for p in terminating} if _only_replace_failed(spec) else set()
    slots = parallelism - sum(1 for i in running if i not in done and i >= 0)
    for index in range(completions or 0):
        if slots <= 0:
            break
        if index in done or index in running or index in held:
            continue
        plan.create_pods.append(build_pod(job, index))
        slots -= 1
