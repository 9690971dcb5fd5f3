"""The JobSet controller's reconcile, pure: a JobSet and its child Jobs in, a plan out (Jobs to
create, delete or update, the headless Service, the new status, events). The executor applies
the plan through the API server.

The steps follow kubernetes-sigs/jobset v0.12's `reconcile`, in its order:
  1. skip a JobSet being deleted or managed by another controller;
  2. sort child Jobs into previous run (restart-attempt below status.restarts, or, for a Job
     restarted on its own, job-restart-attempt below its `jobRestarts` entry), active,
     succeeded and failed, and count them per replicated job;
  3. a finished JobSet only deletes its active Jobs (and itself after ttlSecondsAfterFinished);
  4. delete the Jobs of a previous run;
  5. a failed Job triggers the failure policy (fail; restart the JobSet: restarts + 1; or
     restart the Job alone: its `jobRestarts` entry + 1);
  6. succeeded Jobs are checked against the success policy;
  7. ensure the headless Service (DNS host names), create missing Jobs (dependsOn and the InOrder
     startup policy gate them);
  8. suspend or resume the active Jobs;
  9. InPlaceRestart: fail once a container of its pods restarted more than maxRestarts times,
     and follow the pods' in-place restart attempts (`in_place_restart`).
The JobSet webhook's defaults (successPolicy All, completionMode Indexed, DNS host names on,
pod restartPolicy OnFailure) are applied in memory: this emulation has no admission webhook.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from . import keys
from .failure_policy import FailureDecision, decide_failure
from .in_place_restart import decide_in_place_restart, is_in_place_restart
from .jobset_children import (
    build_headless_service,
    build_job,
    default_jobset,
    is_dns_enabled,
    is_finished,
    is_suspended,
    job_name,
)
from .jobset_status import (
    ChildJobs,
    all_replicas_started,
    classify_jobs,
    dependencies_reached,
    job_restarts,
    replicated_job_statuses,
    set_condition,
)
from .keys import JobSetCondition
from .objects import Event, find_condition, is_deleting, labels, meta, name, parse_time
from .success_policy import is_success_policy_met

COMPONENT = "jobset-controller"


@dataclass
class JobSetPlan:
    status: dict[str, Any]
    status_changed: bool = False
    create_jobs: list[dict[str, Any]] = field(default_factory=list)
    delete_jobs: list[dict[str, Any]] = field(default_factory=list)
    update_jobs: list[dict[str, Any]] = field(default_factory=list)  # changed Job objects
    service: dict[str, Any] | None = None  # the headless Service the JobSet needs
    events: list[Event] = field(default_factory=list)
    delete_jobset: bool = False


class _Reconcile:
    """One reconcile of one JobSet, accumulating its plan."""

    def __init__(self, js: dict[str, Any], now: float) -> None:
        self.js = js
        self.now = now
        self.status = js.setdefault("status", {})
        self.status["restarts"] = int(self.status.get("restarts") or 0)
        self.plan = JobSetPlan(status=self.status)

    def condition(self, ctype: str, cstatus: str, reason: str, message: str,
                  event_type: str = "Normal") -> None:
        if set_condition(self.status, ctype, cstatus, reason, message, self.now):
            self.plan.events.append(Event(self.js, event_type, reason, message, COMPONENT))

    def fail(self, reason: str, message: str) -> None:
        self.condition(JobSetCondition.FAILED, "True", reason, message, "Warning")
        self.status["terminalState"] = JobSetCondition.FAILED

    def complete(self) -> None:
        self.condition(JobSetCondition.COMPLETED, "True", *keys.ALL_JOBS_COMPLETED)
        self.status["terminalState"] = JobSetCondition.COMPLETED


def plan_jobset(jobset: dict[str, Any], jobs: list[dict[str, Any]], now: float,
                pods: list[dict[str, Any]] | None = None) -> JobSetPlan:
    """Reconcile one JobSet against its child Jobs (those it controls) and, for
    InPlaceRestart, its pods (those labelled with its name)."""
    js = default_jobset(jobset)
    r = _Reconcile(js, now)
    original = copy.deepcopy(jobset.get("status") or {})
    plan = r.plan
    manager = js["spec"].get("managedBy")
    # Not ours to reconcile: being deleted, or managed by another controller.
    if is_deleting(js) or (manager and manager != keys.JOBSET_CONTROLLER_NAME):
        return plan
    # Sort the children and count them per replicated job.
    owned = classify_jobs(js, jobs)
    statuses = replicated_job_statuses(js, owned)
    r.status["replicatedJobsStatus"] = statuses
    try:
        _reconcile(r, owned, statuses, pods or [])
    finally:
        if not r.status.get("restartsCountTowardsMax"):
            r.status.pop("restartsCountTowardsMax", None)
        plan.status_changed = r.status != original
    return plan


def _reconcile(r: _Reconcile, owned: ChildJobs, statuses: list[dict[str, Any]],
               pods: list[dict[str, Any]]) -> None:
    js, plan = r.js, r.plan
    # A finished JobSet only cleans up its active Jobs, and goes after its TTL.
    if is_finished(js):
        plan.delete_jobs += [j for j in owned.active if not is_deleting(j)]
        ttl = js["spec"].get("ttlSecondsAfterFinished")
        if ttl is not None:
            finished_at = max((parse_time(c.get("lastTransitionTime")) or 0.0)
                              for c in r.status.get("conditions") or []
                              if c["type"] in (JobSetCondition.COMPLETED, JobSetCondition.FAILED)
                              and c["status"] == "True")
            plan.delete_jobset = r.now >= finished_at + int(ttl)
        return
    # Jobs of a previous run go (their pods with them).
    plan.delete_jobs += [j for j in owned.previous if not is_deleting(j)]
    # A failed Job: the failure policy fails or restarts the JobSet.
    if owned.failed:
        decision = decide_failure(js["spec"], r.status, owned.failed)
        if decision.fail:
            r.fail(decision.reason, decision.message)
            return
        if decision.restart_job:
            _restart_one_job(r, decision, owned.failed)
        else:
            r.status["restarts"] += 1
            if decision.counts_towards_max:
                r.status["restartsCountTowardsMax"] = \
                    int(r.status.get("restartsCountTowardsMax") or 0) + 1
        plan.events.append(Event(js, "Warning", decision.reason, decision.message, COMPONENT))
        return
    # Succeeded Jobs: the success policy may complete the JobSet.
    if owned.successful and is_success_policy_met(js["spec"], owned.successful):
        r.complete()
        return
    # DNS host names need the headless Service named after the subdomain.
    if is_dns_enabled(js):
        plan.service = build_headless_service(js)
    # Create the Jobs that are missing, as dependsOn and the startup policy allow.
    _create_missing_jobs(r, owned, statuses)
    # Suspend or resume the active Jobs.
    if is_suspended(js):
        for job in owned.active:
            if not (job.get("spec") or {}).get("suspend"):
                updated = copy.deepcopy(job)
                updated["spec"]["suspend"] = True
                plan.update_jobs.append(updated)
        r.condition(JobSetCondition.SUSPENDED, "True", *keys.JOBSET_SUSPENDED)
    else:
        _resume_jobs(r, owned, statuses)
    # InPlaceRestart: the pods' container restarts and in-place restart attempts.
    if is_in_place_restart(js["spec"]):
        verdict = decide_in_place_restart(js["spec"], r.status, pods)
        if verdict.fail:
            r.fail(*keys.REACHED_MAX_RESTARTS)
        if verdict.current_attempt is not None:
            r.status["currentInPlaceRestartAttempt"] = verdict.current_attempt
        if verdict.previous_attempt is not None:
            r.status["previousInPlaceRestartAttempt"] = verdict.previous_attempt


def _restart_one_job(r: _Reconcile, decision: FailureDecision,
                     failed: list[dict[str, Any]]) -> None:
    """RestartJob: the failed Job's own restart count goes up; the next pass sees it as of a
    previous run, deletes it and makes it again (`failurePolicyRecreateJob`)."""
    job = next(j for j in failed if name(j) == decision.job_name)
    rjob = labels(job).get(keys.REPLICATED_JOB_NAME, "")
    index = int(labels(job).get(keys.JOB_INDEX, "0"))
    entry = next(s for s in r.status["replicatedJobsStatus"] if s["name"] == rjob)
    keys_ = ("jobRestarts", "jobRestartsCountTowardsMax") if decision.counts_towards_max \
        else ("jobRestarts",)
    for key in keys_:
        counts = job_restarts(r.js, rjob, key)
        counts[index] += 1
        entry[key] = counts


def _is_in_order(js: dict[str, Any]) -> bool:
    return (js["spec"].get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"


def _create_missing_jobs(r: _Reconcile, owned: ChildJobs, statuses: list[dict[str, Any]]) -> None:
    js, plan = r.js, r.plan
    blocking = (js["spec"].get("failurePolicy") or {}).get("restartStrategy") == \
        "BlockingRecreate"
    existing = {name(j) for j in owned.all()}
    in_order = _is_in_order(js) and not is_suspended(js)
    for rjob in js["spec"]["replicatedJobs"]:
        if not dependencies_reached(js, rjob, statuses):
            continue
        if in_order and all_replicas_started(rjob, statuses):
            continue
        if not (blocking and owned.previous):
            for index in range(int(rjob["replicas"])):
                if job_name(name(js), rjob["name"], index) not in existing:
                    plan.create_jobs.append(build_job(js, rjob, index))
        if in_order:
            r.condition(JobSetCondition.STARTUP_POLICY_IN_PROGRESS, "True",
                        *keys.STARTUP_IN_PROGRESS)
            return
    if in_order:
        r.condition(JobSetCondition.STARTUP_POLICY_COMPLETED, "True", *keys.STARTUP_COMPLETED)


def _resume_jobs(r: _Reconcile, owned: ChildJobs, statuses: list[dict[str, Any]]) -> None:
    js = r.js
    by_rjob: dict[str, list[dict[str, Any]]] = {}
    for job in owned.active:
        by_rjob.setdefault(labels(job).get(keys.REPLICATED_JOB_NAME, ""), []).append(job)
    in_order = _is_in_order(js)
    for rjob in js["spec"]["replicatedJobs"]:
        if not dependencies_reached(js, rjob, statuses):
            continue
        if in_order and all_replicas_started(rjob, statuses):
            continue
        template = rjob["template"]["spec"].get("template") or {}
        for job in by_rjob.get(rjob["name"], []):
            if not (job.get("spec") or {}).get("suspend"):
                continue
            updated = copy.deepcopy(job)
            pod_template = updated["spec"].setdefault("template", {})
            pmeta = pod_template.setdefault("metadata", {})
            tmeta = template.get("metadata") or {}
            # Kueue may change these while suspended; they flow to the Jobs on resume.
            pmeta["labels"] = {**(pmeta.get("labels") or {}), **(tmeta.get("labels") or {})}
            pmeta["annotations"] = {**(pmeta.get("annotations") or {}),
                                    **(tmeta.get("annotations") or {})}
            pspec = pod_template.setdefault("spec", {})
            tspec = template.get("spec") or {}
            pspec["nodeSelector"] = {**(pspec.get("nodeSelector") or {}),
                                     **(tspec.get("nodeSelector") or {})}
            if not pspec["nodeSelector"]:
                del pspec["nodeSelector"]
            updated["spec"]["suspend"] = False
            r.plan.update_jobs.append(updated)
        if in_order:
            r.condition(JobSetCondition.STARTUP_POLICY_IN_PROGRESS, "True",
                        *keys.STARTUP_IN_PROGRESS)
            return
    if find_condition(r.status, JobSetCondition.SUSPENDED) is not None:
        r.condition(JobSetCondition.SUSPENDED, "False", *keys.JOBSET_RESUMED)


def controlled_jobs(js: dict[str, Any], jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Jobs `js` controls (by owner reference uid)."""
    js_uid = meta(js).get("uid")
    return [j for j in jobs if any(ref.get("controller") and ref.get("uid") == js_uid
                                   for ref in meta(j).get("ownerReferences") or [])]
