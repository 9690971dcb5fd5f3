"""A Job's podFailurePolicy, pure: what a failed pod means for its Job (batch/v1 semantics).

Rules are tried in order; the first that matches decides: FailJob fails the Job at once (reason
PodFailurePolicy, with the message the Job controller writes), Ignore does not count the pod
towards backoffLimit, Count counts it; no matching rule counts it. An onExitCodes rule looks at
terminated containers with a non-zero exit code (all containers, or the one it names; init
containers after the others); an onPodConditions rule at the pod's conditions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .objects import name, namespace


@dataclass(frozen=True)
class PodFailureVerdict:
    action: str | None  # FailJob | Ignore | Count | FailIndex, None when no rule matched
    counts: bool  # counts towards backoffLimit
    message: str | None = None  # the Job failure message, for FailJob


def _exit_code_matches(code: int, requirement: dict[str, Any]) -> bool:
    values = [int(v) for v in requirement.get("values") or []]
    operator = requirement.get("operator")
    if operator == "In":
        return code in values
    if operator == "NotIn":
        return code not in values
    return False


def _matching_container(statuses: list[dict[str, Any]], requirement: dict[str, Any]
                        ) -> dict[str, Any] | None:
    wanted = requirement.get("containerName")
    for status in statuses:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is None or (wanted and status.get("name") != wanted):
            continue
        code = int(terminated.get("exitCode") or 0)
        if code != 0 and _exit_code_matches(code, requirement):
            return status
    return None


def _matching_condition(pod_status: dict[str, Any], patterns: list[dict[str, Any]]
                        ) -> dict[str, Any] | None:
    for cond in pod_status.get("conditions") or []:
        for pattern in patterns:
            if cond.get("type") == pattern.get("type") and \
                    cond.get("status") == pattern.get("status", "True"):
                return cond
    return None


def match_pod_failure_policy(policy: dict[str, Any] | None, pod: dict[str, Any]
                             ) -> PodFailureVerdict:
    if not policy:
        return PodFailureVerdict(None, True)
    status = pod.get("status") or {}
    for index, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        if rule.get("onExitCodes") is not None:
            requirement = rule["onExitCodes"]
            container = _matching_container(status.get("containerStatuses") or [], requirement) \
                or _matching_container(status.get("initContainerStatuses") or [], requirement)
            if container is None:
                continue
            code = container["state"]["terminated"]["exitCode"]
            message = (f"Container {container['name']} for pod {namespace(pod)}/{name(pod)} "
                       f"failed with exit code {code} matching {action} rule at index {index}")
        elif rule.get("onPodConditions") is not None:
            cond = _matching_condition(status, rule["onPodConditions"])
            if cond is None:
                continue
            message = (f"Pod {namespace(pod)}/{name(pod)} has condition {cond['type']} "
                       f"matching {action} rule at index {index}")
        else:
            continue
        if action == "Ignore":
            return PodFailureVerdict("Ignore", False)
        if action == "Count":
            return PodFailureVerdict("Count", True)
        if action == "FailJob":
            return PodFailureVerdict("FailJob", True, message)
        if action == "FailIndex":
            return PodFailureVerdict("FailIndex", True, message)
    return PodFailureVerdict(None, True)
