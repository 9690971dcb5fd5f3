"""The JobSet controller's reconcile, pure: a JobSet and its child Jobs in, a plan out (Jobs to
create, delete or update, the headless Service, the new status, events). The executor applies
the plan through the API server.

The steps follow kubernetes-sigs/jobset v0.12's `reconcile`, in its order:
  1. skip a JobSet being deleted or managed by another controller;
  2. sort child Jobs into previous run (restart-attempt below status.restarts), active,
     succeeded and failed, and count them per replicated job;
  3. a finished JobSet only deletes its active Jobs (and itself after ttlSecondsAfterFinished);
  4. delete the Jobs of a previous run;
  5. a failed Job triggers the failure policy (fail, or restart: restarts + 1);
  6. succeeded Jobs are checked against the success policy;
  7. ensure the headless Service (DNS host names), create missing Jobs (dependsOn and the InOrder
     startup policy gate them);
  8. suspend or resume the active Jobs.
The JobSet webhook's defaults (successPolicy All, completionMode Indexed, DNS host names on,
pod restartPolicy OnFailure) are applied in memory: this emulation has no admission webhook.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any

from . import keys
from .failure_policy import decide_failure
from .keys import JobCondition, JobSetCondition
from .objects import (
    Event,
    annotations,
    build_controller_ref,
    find_condition,
    format_time,
    is_condition_true,
    is_deleting,
    labels,
    meta,
    name,
    namespace,
    parse_time,
)
from .success_policy import is_success_policy_met

COMPONENT = "jobset-controller"


@dataclass
class ChildJobs:
    """A JobSet's Jobs sorted as its controller sees them."""

    active: list[dict[str, Any]] = field(default_factory=list)
    successful: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    previous: list[dict[str, Any]] = field(default_factory=list)  # from an earlier restart

    def all(self) -> list[dict[str, Any]]:
        return self.active + self.successful + self.failed + self.previous


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


# -- defaults, names, labels ---------------------------------------------------------------------

def default_jobset(js: dict[str, Any]) -> dict[str, Any]:
    """A copy of the JobSet with its admission webhook's defaults filled in."""
    js = copy.deepcopy(js)
    spec = js.setdefault("spec", {})
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    network = spec.get("network") or {}
    spec["network"] = network
    for rjob in spec.setdefault("replicatedJobs", []):
        rjob.setdefault("replicas", 1)
        rjob.setdefault("groupName", "default")
        job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
        job_spec.setdefault("completionMode", "Indexed")
        network.setdefault("enableDNSHostnames", True)
        pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
        if not pod_spec.get("restartPolicy"):
            pod_spec["restartPolicy"] = "OnFailure"
    return js


def job_name(jobset: str, replicated_job: str, index: int) -> str:
    return f"{jobset}-{replicated_job}-{index}"


def subdomain(js: dict[str, Any]) -> str:
    return (js["spec"].get("network") or {}).get("subdomain") or name(js)


def is_dns_enabled(js: dict[str, Any]) -> bool:
    return bool((js["spec"].get("network") or {}).get("enableDNSHostnames"))


def is_suspended(js: dict[str, Any]) -> bool:
    return bool(js["spec"].get("suspend"))


def is_finished(js: dict[str, Any]) -> bool:
    return any(is_condition_true(js, c) for c in (JobSetCondition.COMPLETED,
                                                    JobSetCondition.FAILED))


def job_key(ns: str, job: str) -> str:
    """The job-key label: SHA-1 of `<namespace>/<job name>`, as the controller computes it."""
    return hashlib.sha1(f"{ns}/{job}".encode()).hexdigest()


def _global_index(spec: dict[str, Any], rjob_name: str, index: int) -> str:
    total = 0
    for rjob in spec["replicatedJobs"]:
        if rjob["name"] == rjob_name:
            return str(total + index)
        total += int(rjob["replicas"])
    return ""


def _group_index(spec: dict[str, Any], group: str, rjob_name: str, index: int) -> str:
    total = 0
    for rjob in spec["replicatedJobs"]:
        if rjob["groupName"] != group:
            continue
        if rjob["name"] == rjob_name:
            return str(total + index)
        total += int(rjob["replicas"])
    return ""


def build_jobset_labels(js: dict[str, Any], rjob: dict[str, Any], index: int) -> dict[str, str]:
    """The labels (and, with the same values, annotations) JobSet puts on a child Job and its
    pod template."""
    spec = js["spec"]
    jname = job_name(name(js), rjob["name"], index)
    group = rjob["groupName"]
    values = {
        keys.JOBSET_NAME: name(js),
        keys.REPLICATED_JOB_NAME: rjob["name"],
        keys.RESTART_ATTEMPT: str(int((js.get("status") or {}).get("restarts") or 0)),
        keys.REPLICATED_JOB_REPLICAS: str(rjob["replicas"]),
        keys.GLOBAL_REPLICAS: str(sum(int(r["replicas"]) for r in spec["replicatedJobs"])),
        keys.JOB_INDEX: str(index),
        keys.JOB_KEY: job_key(namespace(js), jname),
        keys.JOB_GLOBAL_INDEX: _global_index(spec, rjob["name"], index),
        keys.GROUP_NAME: group,
        keys.GROUP_REPLICAS: str(sum(int(r["replicas"]) for r in spec["replicatedJobs"]
                                     if r["groupName"] == group)),
        keys.JOB_GROUP_INDEX: _group_index(spec, group, rjob["name"], index),
    }
    coordinator = spec.get("coordinator")
    if coordinator:
        values[keys.COORDINATOR] = (
            f"{name(js)}-{coordinator['replicatedJob']}-{coordinator.get('jobIndex', 0)}-"
            f"{coordinator.get('podIndex', 0)}.{subdomain(js)}")
    return values


def _label_and_annotate(target_meta: dict[str, Any], js: dict[str, Any], rjob: dict[str, Any],
                        index: int) -> None:
    values = build_jobset_labels(js, rjob, index)
    target_meta["labels"] = {**(target_meta.get("labels") or {}), **values}
    notes = {**(target_meta.get("annotations") or {}), **values}
    for source in (annotations(js), (rjob["template"].get("metadata") or {}).get("annotations")
                   or {}):
        if keys.EXCLUSIVE_TOPOLOGY in source:
            notes[keys.EXCLUSIVE_TOPOLOGY] = source[keys.EXCLUSIVE_TOPOLOGY]
            if keys.NODE_SELECTOR_STRATEGY in source:
                notes[keys.NODE_SELECTOR_STRATEGY] = source[keys.NODE_SELECTOR_STRATEGY]
    target_meta["annotations"] = notes


def build_job(js: dict[str, Any], rjob: dict[str, Any], index: int) -> dict[str, Any]:
    """The child Job `index` of replicated job `rjob` (of a defaulted JobSet)."""
    template = rjob["template"]
    tmeta = template.get("metadata") or {}
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name(name(js), rjob["name"], index), "namespace": namespace(js),
                     "labels": dict(tmeta.get("labels") or {}),
                     "annotations": dict(tmeta.get("annotations") or {}),
                     "ownerReferences": [build_controller_ref(js)]},
        "spec": copy.deepcopy(template["spec"]),
    }
    _label_and_annotate(job["metadata"], js, rjob, index)
    pod_template = job["spec"].setdefault("template", {})
    _label_and_annotate(pod_template.setdefault("metadata", {}), js, rjob, index)
    pod_spec = pod_template.setdefault("spec", {})
    if is_dns_enabled(js):
        pod_spec["subdomain"] = subdomain(js)
    notes = job["metadata"]["annotations"]
    if keys.EXCLUSIVE_TOPOLOGY in notes and keys.NODE_SELECTOR_STRATEGY in notes:
        pod_spec.setdefault("nodeSelector", {})[keys.NAMESPACED_JOB] = \
            f"{namespace(js)}_{job['metadata']['name']}"
        pod_spec.setdefault("tolerations", []).append(
            {"key": keys.NO_SCHEDULE_TAINT, "operator": "Exists", "effect": "NoSchedule"})
    job["spec"]["suspend"] = is_suspended(js)
    return job


def build_headless_service(js: dict[str, Any]) -> dict[str, Any]:
    network = js["spec"].get("network") or {}
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": subdomain(js), "namespace": namespace(js),
                     "ownerReferences": [build_controller_ref(js)]},
        "spec": {"clusterIP": "None", "selector": {keys.JOBSET_NAME: name(js)},
                 "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True)},
    }


# -- child Jobs and their counts -----------------------------------------------------------------

def job_finished_type(job: dict[str, Any]) -> str | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in (JobCondition.COMPLETE, JobCondition.FAILED) and \
                cond.get("status") == "True":
            return cond["type"]
    return None


def classify_jobs(js: dict[str, Any], jobs: list[dict[str, Any]]) -> ChildJobs:
    restarts = int((js.get("status") or {}).get("restarts") or 0)
    owned = ChildJobs()
    for job in sorted(jobs, key=name):
        try:
            attempt = int(labels(job).get(keys.RESTART_ATTEMPT, ""))
        except ValueError:
            attempt = -1
        if attempt < restarts:
            owned.previous.append(job)
            continue
        finished = job_finished_type(job)
        if finished == JobCondition.FAILED:
            owned.failed.append(job)
        elif finished == JobCondition.COMPLETE:
            owned.successful.append(job)
        else:
            owned.active.append(job)
    return owned


def replicated_job_statuses(js: dict[str, Any], owned: ChildJobs) -> list[dict[str, Any]]:
    counts = {rjob["name"]: {"name": rjob["name"], "ready": 0, "succeeded": 0, "failed": 0,
                             "active": 0, "suspended": 0}
              for rjob in js["spec"]["replicatedJobs"]}

    def bucket(job: dict[str, Any]) -> dict[str, int] | None:
        return counts.get(labels(job).get(keys.REPLICATED_JOB_NAME, ""))

    for job in owned.active:
        entry = bucket(job)
        if entry is None:
            continue
        spec, status = job.get("spec") or {}, job.get("status") or {}
        pods = int(spec.get("parallelism", 1))
        if spec.get("completions") is not None:
            pods = min(pods, int(spec["completions"]))
        if int(status.get("succeeded") or 0) + int(status.get("ready") or 0) >= pods:
            entry["ready"] += 1
        if int(status.get("active") or 0) > 0:
            entry["active"] += 1
        if spec.get("suspend"):
            entry["suspended"] += 1
    for job in owned.successful:
        if (entry := bucket(job)) is not None:
            entry["succeeded"] += 1
    for job in owned.failed:
        if (entry := bucket(job)) is not None:
            entry["failed"] += 1
    return list(counts.values())


def _find_rjob_status(statuses: list[dict[str, Any]], rjob: str) -> dict[str, Any]:
    return next((s for s in statuses if s["name"] == rjob),
                {"ready": 0, "succeeded": 0, "failed": 0})


def _all_replicas_started(rjob: dict[str, Any], statuses: list[dict[str, Any]]) -> bool:
    s = _find_rjob_status(statuses, rjob["name"])
    return int(rjob["replicas"]) == s["failed"] + s["ready"] + s["succeeded"]


def _dependencies_reached(js: dict[str, Any], rjob: dict[str, Any],
                          statuses: list[dict[str, Any]]) -> bool:
    replicas = {r["name"]: int(r["replicas"]) for r in js["spec"]["replicatedJobs"]}
    for dep in rjob.get("dependsOn") or []:
        s = _find_rjob_status(statuses, dep["name"])
        if dep.get("status") == "Complete":
            if replicas.get(dep["name"]) != s["succeeded"]:
                return False
        elif replicas.get(dep["name"]) != s["failed"] + s["ready"] + s["succeeded"]:
            return False
    return True


# -- conditions ----------------------------------------------------------------------------------

_EXCLUSIVE = {JobSetCondition.STARTUP_POLICY_IN_PROGRESS, JobSetCondition.STARTUP_POLICY_COMPLETED}


def set_condition(status: dict[str, Any], ctype: str, cstatus: str, reason: str, message: str,
                  now: float) -> bool:
    """JobSet's `updateCondition`: change a condition whose status differs, add a new one only
    when True, and turn off the other startup-policy condition. Returns whether it changed."""
    conditions = status.setdefault("conditions", [])
    new = {"type": ctype, "status": cstatus, "reason": reason, "message": message,
           "lastTransitionTime": format_time(now)}
    changed, found = False, False
    for i, cond in enumerate(conditions):
        if cond["type"] == ctype:
            found = True
            if cond["status"] != cstatus:
                conditions[i] = new
                changed = True
        elif {cond["type"], ctype} == _EXCLUSIVE and cond["status"] == "True" and \
                cstatus == "True":
            cond["status"] = "False"
            changed = True
    if not found and cstatus == "True":
        conditions.append(new)
        changed = True
    return changed


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


def plan_jobset(jobset: dict[str, Any], jobs: list[dict[str, Any]], now: float) -> JobSetPlan:
    """Reconcile one JobSet against its child Jobs (those it controls)."""
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
        _reconcile(r, owned, statuses)
    finally:
        if not r.status.get("restartsCountTowardsMax"):
            r.status.pop("restartsCountTowardsMax", None)
        plan.status_changed = r.status != original
    return plan


def _reconcile(r: _Reconcile, owned: ChildJobs, statuses: list[dict[str, Any]]) -> None:
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
        r.status["restarts"] += 1
        if decision.counts_towards_max:
            r.status["restartsCountTowardsMax"] = \
                int(r.status.get("restartsCountTowardsMax") or 0) + 1
        plan.events.append(Event(js, "Warning", decision.reason, decision.message, COMPONENT))
        if decision.unsupported_action:
            plan.events.append(Event(
                js, "Warning", "UnsupportedFailurePolicyAction",
                f"{decision.unsupported_action} is emulated locally by restarting the whole "
                f"JobSet", COMPONENT))
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


def _is_in_order(js: dict[str, Any]) -> bool:
    return (js["spec"].get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"


def _create_missing_jobs(r: _Reconcile, owned: ChildJobs, statuses: list[dict[str, Any]]) -> None:
    js, plan = r.js, r.plan
    blocking = (js["spec"].get("failurePolicy") or {}).get("restartStrategy") == \
        "BlockingRecreate"
    existing = {name(j) for j in owned.all()}
    in_order = _is_in_order(js) and not is_suspended(js)
    for rjob in js["spec"]["replicatedJobs"]:
        if not _dependencies_reached(js, rjob, statuses):
            continue
        if in_order and _all_replicas_started(rjob, statuses):
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
        if not _dependencies_reached(js, rjob, statuses):
            continue
        if in_order and _all_replicas_started(rjob, statuses):
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
