"""The JobSet success policy, pure: `All` needs every Job of the target replicated jobs (all of
them, when none are named) to complete; `Any` needs one."""

from __future__ import annotations

from typing import Any

from . import keys
from .objects import labels


def _targets(spec: dict[str, Any]) -> list[str]:
    return (spec.get("successPolicy") or {}).get("targetReplicatedJobs") or []


def jobs_expected_to_succeed(spec: dict[str, Any]) -> int:
    operator = (spec.get("successPolicy") or {}).get("operator", "All")
    if operator == "Any":
        return 1
    targets = _targets(spec)
    return sum(int(rjob.get("replicas", 1)) for rjob in spec.get("replicatedJobs") or []
               if not targets or rjob["name"] in targets)


def is_success_policy_met(spec: dict[str, Any], successful_jobs: list[dict[str, Any]]) -> bool:
    targets = _targets(spec)
    matching = sum(1 for job in successful_jobs
                   if not targets or labels(job).get(keys.REPLICATED_JOB_NAME) in targets)
    return matching >= jobs_expected_to_succeed(spec)
