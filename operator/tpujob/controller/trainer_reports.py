"""What the trainer reports, read in one place: the `/progress` document (or the same fields from
a program's log lines), the goodput timeline inside it and in the exit records, and the one-line
JSON termination message. Pure: documents in, small frozen readings out; anything that is not
such a document reads as None.

The field names are the trainer's (`tpujob_trainer.contract`); tests tie each reading to them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tpujob.api.status import GoodputAttempt, TrainerSeconds
from tpujob.builders import names
from tpujob_trainer.contract import (
    COMPILE_CACHE_OUTCOMES,
    GOODPUT_CATEGORIES,
    NOT_TRAINING_PHASES,
)

MAX_ATTEMPT_CHARS = 64


def _num(value: Any) -> float | None:
    """A finite number, else None (JSON may carry booleans, strings, NaN or infinities)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


def _count(value: Any) -> int | None:
    n = _num(value)
    return int(n) if n is not None and n >= 0 else None


def _seconds(doc: Any) -> TrainerSeconds | None:
    if not isinstance(doc, dict):
        return None
    return TrainerSeconds(**{k: max(0.0, _num(doc.get(k)) or 0.0) for k in GOODPUT_CATEGORIES})


@dataclass(frozen=True)
class TimelineReading:
    """One start's timeline as the trainer served it (or wrote it on exit)."""

    attempt: str
    step: int | None = None
    steps: int = 0
    resumed_from_step: int | None = None
    seconds: TrainerSeconds | None = None
    step_time_median_s: float | None = None
    step_time_max_deviation_pct: float | None = None
    previous: TimelineReading | None = None
    started_at: float | None = None      # the process's start (Unix seconds)
    compile_cache: str | None = None     # contract.COMPILE_CACHE_OUTCOMES
    first_step_at: float | None = None

    @classmethod
    def from_document(cls, doc: Any) -> TimelineReading | None:
        """From /progress `goodput`, an exit record summary or the termination message's
        `goodput`; None when it is not one."""
        if not isinstance(doc, dict) or not isinstance(doc.get("attempt"), str) \
                or not doc["attempt"] or len(doc["attempt"]) > MAX_ATTEMPT_CHARS:
            return None
        previous = doc.get("previous")
        return cls(attempt=doc["attempt"], step=_count(doc.get("step")),
                   steps=_count(doc.get("steps")) or 0,
                   resumed_from_step=_count(doc.get("resumed_from_step")),
                   seconds=_seconds(doc.get("seconds")),
                   step_time_median_s=_num(doc.get("step_time_median_s")),
                   step_time_max_deviation_pct=_num(doc.get("step_time_max_deviation_pct")),
                   previous=cls.from_document(previous) if isinstance(previous, dict) else None,
                   started_at=_num(doc.get("started_at")),
                   compile_cache=(doc["compile_cache"] if doc.get("compile_cache")
                                  in COMPILE_CACHE_OUTCOMES else None),
                   first_step_at=_num(doc.get("first_step_at")))

    def as_attempt(self) -> GoodputAttempt:
        return GoodputAttempt(attempt=self.attempt, resumed_from_step=self.resumed_from_step,
                              step=self.step, steps=self.steps,
                              seconds=self.seconds or TrainerSeconds(),
                              step_time_median_seconds=self.step_time_median_s,
                              step_time_max_deviation_percent=self.step_time_max_deviation_pct)


@dataclass(frozen=True)
class ProgressReading:
    """One read of the trainer's /progress document (field names as the trainer serves them)."""

    step: int
    total_steps: int | None = None
    loss: float | None = None
    step_time_s: float | None = None
    tokens_per_s_per_device: float | None = None
    tflops_per_device: float | None = None
    mfu: float | None = None
    last_checkpoint_step: int | None = None
    training: bool = True   # False while the process starts, restores or compiles
    trainer_phase: str | None = None  # the trainer's own word: starting, compiling, training...
    timeline: TimelineReading | None = None   # the trainer's goodput timeline, if it serves one

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> ProgressReading | None:
        """None when the document is not a progress document (a program that serves
        something else on the port)."""
        if not isinstance(doc, dict) or not isinstance(doc.get("step"), int | float):
            return None
        phase = doc.get("phase")
        return cls(step=max(0, int(doc["step"])), total_steps=_count(doc.get("total_steps")),
                   loss=_num(doc.get("loss")), step_time_s=_num(doc.get("step_time_s")),
                   tokens_per_s_per_device=_num(doc.get("tokens_per_s_per_device")),
                   tflops_per_device=_num(doc.get("tflops_per_device")), mfu=_num(doc.get("mfu")),
                   last_checkpoint_step=_count(doc.get("last_checkpoint_step")),
                   training=phase not in NOT_TRAINING_PHASES,
                   trainer_phase=phase[:63] if isinstance(phase, str) and phase else None,
                   timeline=TimelineReading.from_document(doc.get("goodput")))


def termination_document(message: str) -> dict[str, Any] | None:
    """The trainer's one-line JSON termination message (its last line: a runtime may have written
    before it), or None when the message is not one."""
    text = message.strip()
    if not text:
        return None
    try:
        doc = json.loads(text.splitlines()[-1])
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _terminated(container_status: dict[str, Any]) -> dict[str, Any] | None:
    state = container_status.get("state") or {}
    return state.get("terminated") or (container_status.get("lastState") or {}).get("terminated")


def _exit_documents(pods: list[dict[str, Any]]
                    ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod, document) of every container of `pods` that ended with a trainer's termination
    message."""
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            doc = termination_document((_terminated(cs) or {}).get("message") or "")
            if doc is not None:
                yield pod, doc


def read_final_timelines(pods: list[dict[str, Any]]) -> tuple[TimelineReading, ...]:
    """The goodput timelines trainer processes left in their termination messages as they
    exited (process 0's first: its seconds are the ones read while it ran)."""
    found: list[tuple[int, TimelineReading]] = []
    for _, doc in _exit_documents(pods):
        reading = TimelineReading.from_document(doc.get("goodput"))
        if reading is not None:
            index = doc["goodput"].get("process_index")
            found.append((index if isinstance(index, int) else 1 << 30, reading))
    found.sort(key=lambda item: item[0])
    # Only process 0's seconds stand; the others add their furthest step.
    return tuple(r if i == 0 else TimelineReading(attempt=r.attempt, step=r.step)
                 for i, r in found)


def read_final_progress(pods: list[dict[str, Any]]) -> ProgressReading | None:
    """Process 0's last progress figures, left in its termination message as it exited (the
    trainer's `progress` field): the newest JobSet attempt's, the furthest one where more than
    one pod of it left some; None when none did (a program of one's own, a trainer that was
    killed)."""
    found = []
    for pod, doc in _exit_documents(pods):
        reading = ProgressReading.from_document(doc.get("progress"))
        if reading is not None:
            found.append((_restart_attempt(pod), reading.step, reading))
    return max(found, key=lambda f: f[:2])[2] if found else None


def _restart_attempt(pod: dict[str, Any]) -> int:
    """The JobSet attempt a pod belongs to (its restart-attempt label); 0 when not said."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    text = str(labels.get(names.JOBSET_LABEL_RESTART_ATTEMPT, ""))
    return int(text) if text.isdigit() else 0


__all__ = ["ProgressReading", "TimelineReading", "read_final_progress", "read_final_timelines",
           "termination_document"]
