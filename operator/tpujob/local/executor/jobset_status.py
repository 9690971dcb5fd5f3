"""How the JobSet controller sees a JobSet's children, pure: the Jobs sorted into previous run,
active, succeeded and failed, counted per replicated job (`replicatedJobsStatus`), the gates
dependsOn and the InOrder startup policy read off those counts, and the JobSet's conditions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import keys
from .keys import JobCondition, JobSetCondition
from .objects import format_time, labels, name


@dataclass
class ChildJobs:
    """A JobSet's Jobs sorted as its controller sees them."""

    active: list[dict[str, Any]] = field(default_factory=list)
    successful: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    previous: list[dict[str, Any]] = field(default_factory=list)  # from an earlier restart

    def all(self) -> list[dict[str, Any]]:
        return self.active + self.successful + self.failed + self.previous


def job_finished_type(job: dict[str, Any]) -> str | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in (JobCondition.COMPLETE, JobCondition.FAILED) and \
                cond.get("status") == "True":
            return cond["type"]
    return None


def job_restarts(js: dict[str, Any], rjob: str, key: str = "jobRestarts") -> list[int]:
    """A replicated job's per-Job restart counts (`jobRestarts` or
    `jobRestartsCountTowardsMax` of its `replicatedJobsStatus`), zeros when none yet."""
    for rjs in (js.get("status") or {}).get("replicatedJobsStatus") or []:
        if rjs.get("name") == rjob and rjs.get(key):
            return [int(n) for n in rjs[key]]
    replicas = next((int(r.get("replicas", 1)) for r in js["spec"]["replicatedJobs"]
                     if r["name"] == rjob), 0)
    return [0] * replicas


def _int_label(job: dict[str, Any], key: str) -> int | None:
    try:
        return int(labels(job)[key])
    except (KeyError, ValueError):
        return None


def _is_previous_run(js: dict[str, Any], job: dict[str, Any], restarts: int) -> bool:
    """A Job of an earlier JobSet restart, or of an earlier restart of its own (RestartJob:
    its job-restart-attempt below its `jobRestarts` entry)."""
    attempt = _int_label(job, keys.RESTART_ATTEMPT)
    if attempt is None or attempt < restarts:
        return True
    own, index = _int_label(job, keys.JOB_RESTART_ATTEMPT), _int_label(job, keys.JOB_INDEX)
    if own is None:  # made before per-Job restarts: kept, as the controller does
        return False
    targets = job_restarts(js, labels(job).get(keys.REPLICATED_JOB_NAME, ""))
    return index is None or index >= len(targets) or own < targets[index]


def classify_jobs(js: dict[str, Any], jobs: list[dict[str, Any]]) -> ChildJobs:
    restarts = int((js.get("status") or {}).get("restarts") or 0)
    owned = ChildJobs()
    for job in sorted(jobs, key=name):
        if _is_previous_run(js, job, restarts):
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
    """The counts per replicated job; the per-Job restart counts are carried over."""
    counts = {rjob["name"]: {"name": rjob["name"], "ready": 0, "succeeded": 0, "failed": 0,
                             "active": 0, "suspended": 0}
              for rjob in js["spec"]["replicatedJobs"]}
    for rjs in (js.get("status") or {}).get("replicatedJobsStatus") or []:
        for key in ("jobRestarts", "jobRestartsCountTowardsMax"):
            if rjs.get("name") in counts and rjs.get(key):
                counts[rjs["name"]][key] = list(rjs[key])

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


def find_rjob_status(statuses: list[dict[str, Any]], rjob: str) -> dict[str, Any]:
    return next((s for s in statuses if s["name"] == rjob),
                {"ready": 0, "succeeded": 0, "failed": 0})


def all_replicas_started(rjob: dict[str, Any], statuses: list[dict[str, Any]]) -> bool:
    s = find_rjob_status(statuses, rjob["name"])
    return int(rjob["replicas"]) == s["failed"] + s["ready"] + s["succeeded"]


def dependencies_reached(js: dict[str, Any], rjob: dict[str, Any],
                          statuses: list[dict[str, Any]]) -> bool:
    replicas = {r["name"]: int(r["replicas"]) for r in js["spec"]["replicatedJobs"]}
    for dep in rjob.get("dependsOn") or []:
        s = find_rjob_status(statuses, dep["name"])
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
