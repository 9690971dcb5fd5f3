"""The JobSet controller's part of `restartStrategy: InPlaceRestart` (v0.12,
`pkg/controllers/in_place_restart.go`), pure: the JobSet's pods in, what it writes out.

In-place restarts themselves are the kubelet's: a container whose `restartPolicyRules` match its
exit code starts again in its pod (`pod_status.should_restart`). The controller only watches:
  - any container (init or regular) of its pods restarted more than `maxRestarts` times fails
    the JobSet (`ReachedMaxRestarts`);
  - pods (not Failed) carry `jobset.sigs.k8s.io/in-place-restart-attempt`, written by JobSet's
    in-place-restart agent when a pod has one; a pod's attempt above `maxRestarts` plus the
    JobSet's uncounted restarts fails the JobSet; when every pod of the JobSet is at the same
    attempt it becomes `status.currentInPlaceRestartAttempt` (the agents lift their barrier),
    else the highest attempt less one becomes `status.previousInPlaceRestartAttempt` (the
    agents of pods below it restart their pods).
Without an agent (the pods tpujob builds have none) there are no attempts, and only the first
check applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .keys import PodPhase

IN_PLACE_RESTART_ATTEMPT = "jobset.sigs.k8s.io/in-place-restart-attempt"


@dataclass(frozen=True)
class InPlaceVerdict:
    """`fail`: the JobSet reached its max restarts; else the status fields to set (None: left)."""

    fail: bool = False
    current_attempt: int | None = None
    previous_attempt: int | None = None


def is_in_place_restart(spec: dict[str, Any]) -> bool:
    return (spec.get("failurePolicy") or {}).get("restartStrategy") == "InPlaceRestart"


def max_container_restarts(pods: list[dict[str, Any]]) -> int:
    return max((int(s.get("restartCount") or 0) for p in pods
                for key in ("initContainerStatuses", "containerStatuses")
                for s in (p.get("status") or {}).get(key) or []), default=0)


def _attempts(pods: list[dict[str, Any]]) -> list[int]:
    out = []
    for pod in pods:
        if (pod.get("status") or {}).get("phase") == PodPhase.FAILED:
            continue  # a failed pod may linger while its replacement exists
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(IN_PLACE_RESTART_ATTEMPT)
        if raw is not None and raw.isdigit():
            out.append(int(raw))
    return out


def _total_pods(spec: dict[str, Any]) -> int:
    return sum(int(r.get("replicas", 1)) * int(r["template"]["spec"].get("parallelism", 1))
               for r in spec["replicatedJobs"])


def decide_in_place_restart(spec: dict[str, Any], status: dict[str, Any],
                            pods: list[dict[str, Any]]) -> InPlaceVerdict:
    """`reconcileInPlaceRestart` for a defaulted JobSet's spec and status and its pods."""
    max_restarts = int((spec.get("failurePolicy") or {}).get("maxRestarts") or 0)
    if max_container_restarts(pods) > max_restarts:
        return InPlaceVerdict(fail=True)
    attempts = _attempts(pods)
    uncounted = int(status.get("restarts") or 0) - int(status.get("restartsCountTowardsMax") or 0)
    if max(attempts, default=0) - uncounted > max_restarts:
        return InPlaceVerdict(fail=True)
    if attempts and len(attempts) == _total_pods(spec) and len(set(attempts)) == 1:
        return InPlaceVerdict(current_attempt=attempts[0])
    if not attempts or max(attempts) == 0:
        return InPlaceVerdict()
    previous = max(attempts) - 1
    old = status.get("previousInPlaceRestartAttempt")
    if old is not None and previous <= int(old):  # not lower, and unchanged: nothing to write
        return InPlaceVerdict()
    return InPlaceVerdict(previous_attempt=previous)
