"""The JobSet failure policy (v0.12 semantics), pure: which rule a failed child Job matches and
what the JobSet does about it.

Rules are tried in order; for each rule, the earliest failed Job it applies to wins. A rule
applies when the Job's Failed condition has one of `onJobFailureReasons` (any, when empty), its
message matches one of `onJobFailureMessagePatterns` (regular expressions, searched; any, when
empty) and the Job belongs to one of `targetReplicatedJobs` (any, when empty). No matching rule
means RestartJobSet; no failurePolicy at all means the JobSet fails.

RestartJob and RestartJobAndIgnoreMaxRestarts (v0.12, with its RestartJob feature gate on, as
local mode runs it) restart only the failed Job: its entry of `jobRestarts` (and of
`jobRestartsCountTowardsMax`) in `replicatedJobsStatus` goes up by one, and `maxRestarts`
bounds the JobSet's restarts and the Jobs' counted restarts together
(`pkg/controllers/failure_policy.go`: `totalRestartsCountTowardsMax`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from . import keys
from .keys import FailurePolicyAction
from .objects import find_condition, labels, name, parse_time


@dataclass(frozen=True)
class FailureDecision:
    """What to do about failed child Jobs: fail the JobSet (with a condition reason and message),
    restart it, or restart only the Job `job_name` (`restart_job`); a restart counts towards
    maxRestarts or not."""

    fail: bool
    reason: str
    message: str
    counts_towards_max: bool = False
    rule: str | None = None
    job_name: str = ""
    restart_job: bool = False


def job_failure(job: dict[str, Any]) -> dict[str, Any] | None:
    """The Job's Failed=True condition, if it failed."""
    cond = find_condition(job, keys.JobCondition.FAILED)
    return cond if cond is not None and cond.get("status") == "True" else None


def _failure_time(job: dict[str, Any]) -> float:
    cond = job_failure(job) or {}
    return parse_time(cond.get("lastTransitionTime")) or 0.0


def first_failed_job(failed_jobs: list[dict[str, Any]]) -> dict[str, Any]:
    return min(failed_jobs, key=_failure_time)


def _matches_any_pattern(patterns: list[str], message: str) -> bool:
    for pattern in patterns:
        try:
            if re.search(pattern, message):
                return True
        except re.error:
            continue  # an invalid pattern matches nothing
    return False


def is_rule_applicable(rule: dict[str, Any], job: dict[str, Any]) -> bool:
    cond = job_failure(job)
    if cond is None:
        return False
    reasons = rule.get("onJobFailureReasons") or []
    if reasons and cond.get("reason") not in reasons:
        return False
    patterns = rule.get("onJobFailureMessagePatterns") or []
    if patterns and not _matches_any_pattern(patterns, cond.get("message") or ""):
        return False
    replicated_job = labels(job).get(keys.REPLICATED_JOB_NAME)
    if not replicated_job:
        return False
    targets = rule.get("targetReplicatedJobs") or []
    return not targets or replicated_job in targets


def find_matching_rule(rules: list[dict[str, Any]], failed_jobs: list[dict[str, Any]]
                       ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The first rule that applies to some failed Job, and the earliest such Job."""
    for rule in rules:
        matching = [job for job in failed_jobs if is_rule_applicable(rule, job)]
        if matching:
            return rule, first_failed_job(matching)
    return None, None


def _with_job(message: str, job: dict[str, Any]) -> str:
    return f"{message} (first failed job: {name(job)})"


def total_restarts_towards_max(status: dict[str, Any]) -> int:
    """The JobSet's counted restarts and every Job's counted restarts (RestartJob) together."""
    return int(status.get("restartsCountTowardsMax") or 0) + sum(
        int(n) for rjs in status.get("replicatedJobsStatus") or []
        for n in rjs.get("jobRestartsCountTowardsMax") or [])


def decide_failure(spec: dict[str, Any], status: dict[str, Any],
                   failed_jobs: list[dict[str, Any]]) -> FailureDecision:
    """Apply the JobSet's failure policy to its failed child Jobs (at least one)."""
    policy = spec.get("failurePolicy")
    if policy is None:
        job = first_failed_job(failed_jobs)
        reason, message = keys.FAILED_JOBS
        return FailureDecision(True, reason, _with_job(message, job), job_name=name(job))
    rule, job = find_matching_rule(policy.get("rules") or [], failed_jobs)
    if rule is None or job is None:
        action: str = FailurePolicyAction.RESTART_JOBSET
        job = first_failed_job(failed_jobs)
    else:
        action = rule.get("action") or FailurePolicyAction.RESTART_JOBSET
    rule_name = rule.get("name") if rule else None
    at_max = total_restarts_towards_max(status) >= int(policy.get("maxRestarts") or 0)
    if action == FailurePolicyAction.FAIL_JOBSET:
        reason, message = keys.FAIL_JOBSET_ACTION
        return FailureDecision(True, reason, _with_job(message, job), rule=rule_name,
                               job_name=name(job))
    ignore_max = action in (FailurePolicyAction.RESTART_JOBSET_IGNORE_MAX,
                            FailurePolicyAction.RESTART_JOB_IGNORE_MAX)
    if at_max and not ignore_max:
        reason, message = keys.REACHED_MAX_RESTARTS
        return FailureDecision(True, reason, _with_job(message, job), rule=rule_name,
                               job_name=name(job))
    restart_job = action in (FailurePolicyAction.RESTART_JOB,
                             FailurePolicyAction.RESTART_JOB_IGNORE_MAX)
    reason, message = {
        FailurePolicyAction.RESTART_JOBSET_IGNORE_MAX: keys.RESTART_JOBSET_IGNORE_MAX_ACTION,
        FailurePolicyAction.RESTART_JOB: keys.RESTART_JOB_ACTION,
        FailurePolicyAction.RESTART_JOB_IGNORE_MAX: keys.RESTART_JOB_IGNORE_MAX_ACTION,
    }.get(action, keys.RESTART_JOBSET_ACTION)
    return FailureDecision(False, reason, _with_job(message, job),
                           counts_towards_max=not ignore_max, rule=rule_name,
                           job_name=name(job), restart_job=restart_job)
