"""Progress read from JAX process 0's container log, for a job whose
`spec.trainer.progress.source` is `log`: process 0's pod and container (found once per JobSet
attempt by the reconciler), the end of its log through the pods/log API (a few hundred lines,
the last few minutes), and the newest progress line in it (`tpujob.log_progress`). A line that cannot be read is reported, never raised: the
job gets a condition and the operator keeps looking."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tpujob.api.trainer_spec import ProgressSpec
from tpujob.controller.observe import process_zero_pods
from tpujob.controller.trainer_reports import ProgressReading
from tpujob.log_progress import LogFormatError, latest_progress

log = logging.getLogger("tpujob.operator")
TAIL_LINES = 400       # MaxText writes one line per step, plus a few around checkpoints
SINCE_SECONDS = 900    # a step slower than this is a stall anyway

# (namespace, pod, container, tailLines, sinceSeconds) -> the log text, or None (no log yet)
ReadLog = Callable[[str, str, str, int, int], str | None]


@dataclass(frozen=True)
class LogReading:
    """What one look at process 0's log found: a reading, or a problem, or neither; `missing`
    when there was no log to read (the pod may be gone: look it up again)."""

    progress: ProgressReading | None = None
    problem: str | None = None
    missing: bool = False


def find_process_zero_container(pods: list[dict[str, Any]],
                                phases: tuple[str, ...] = ("Running",)
                                ) -> tuple[str, str] | None:
    """(pod name, container name) of JAX process 0: slice 0, host 0, first container, of a pod
    in one of `phases`; None until that pod runs."""
    for pod in process_zero_pods(pods, phases):
        name = (pod.get("metadata") or {}).get("name")
        containers = (pod.get("spec") or {}).get("containers") or []
        if containers and name:
            return name, containers[0]["name"]
    return None


def read_log_progress(read_log: ReadLog, namespace: str, target: tuple[str, str],
                      progress: ProgressSpec) -> LogReading:
    """One look at the log of process 0's (pod, container). Never raises for what the log
    holds."""
    text = read_log(namespace, *target, TAIL_LINES, SINCE_SECONDS)
    if text is None:
        return LogReading(missing=True)
    if not text:
        return LogReading()
    fmt = progress.format.value
    try:
        doc = latest_progress(text, fmt, progress.regex)
    except (LogFormatError, ValueError) as err:
        return LogReading(problem=f"process 0's log ({target[0]}/{target[1]}) has a {fmt} "
                                  f"progress line that cannot be read: {err}")
    if doc is None:
        return LogReading()
    return LogReading(progress=ProgressReading.from_document(doc))
