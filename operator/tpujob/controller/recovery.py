"""Where a restart's time went, from the failure to the new attempt's first step (status.recoveries,
docs/goodput.md "Recovery"). Pure: the previous records, the restart just decided (its cause and
when the attempt before it ended), the new attempt's pods and the trainer's timeline in; the
records and the Event that closes one out.

The parts follow one another on one clock, so they add up to the total:

    failed ─ detect ─ first new pod ─ schedule ─ last pod placed ─ start ─ last trainer container
    running ─ init ─ process 0's distributed init done ─ prepare ─ restore ─ compile ─ first step

The pod times are the API server's (whole seconds); init to first step are the trainer's own
(process 0's timeline: its start plus its seconds by category, and its first step's end). A
record is filled in pass by pass and closed once the first step is known; a later restart leaves
an unfinished one as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tpujob.api.status import (
    ConditionType,
    RecoveryStatus,
    TpuTrainingJobStatus,
    find_condition,
)
from tpujob.builders import names
from tpujob.controller.observe import FailureCause, conditions_by_type, parse_time
from tpujob.controller.trainer_reports import TimelineReading

RECOVERIES_KEPT = 16
STALLED = "stalled"   # how a stall restart's cause begins
# The trainer's parts after its init, in order: (status field, the timeline's category it is).
TRAINER_PARTS = (("prepare_seconds", "training_prep"), ("restore_seconds", "checkpoint_restore"),
                 ("compile_seconds", "program_startup"))
PART_WORDS = (("detect_seconds", "detect"), ("schedule_seconds", "schedule"),
              ("start_seconds", "start"), ("init_seconds", "init"),
              ("prepare_seconds", "prepare"), ("restore_seconds", "restore"),
              ("compile_seconds", "compile"), ("first_step_seconds", "first step"))

CACHE_WORDS = {"miss": "compiled", "hit": "compilation cache hit",
               "executable": "whole step from the executable cache"}


@dataclass(frozen=True)
class AttemptStart:
    """How far the new attempt's pods are: its first pod's creation, the last one placed on a
    node and the last trainer container running (None until every host got there)."""

    created_at: datetime | None = None
    scheduled_at: datetime | None = None
    running_at: datetime | None = None


def read_attempt_start(pods: list[dict[str, Any]], *, after: datetime, hosts: int
                       ) -> AttemptStart | None:
    """The attempt made after `after` (the failure): its live pods created since then (to the
    second: the API server's creation times are whole seconds); None when it has none yet."""
    floor = after.replace(microsecond=0)
    made = [(parse_time(meta.get("creationTimestamp")), p) for p in pods
            if not (meta := p.get("metadata") or {}).get("deletionTimestamp")]
    made = [(t, p) for t, p in made if t is not None and t >= floor]
    if not made:
        return None
    created = min(t for t, _ in made)
    new = [p for _, p in made]
    placed, running = [], []
    for pod in new:
        cond = conditions_by_type(pod).get("PodScheduled") or {}
        placed.append(parse_time(cond.get("lastTransitionTime"))
                      if cond.get("status") == "True" else None)
        starts = [parse_time(((cs.get("state") or {}).get("running") or {}).get("startedAt"))
                  for cs in (pod.get("status") or {}).get("containerStatuses") or []
                  if str(cs.get("name", "")).startswith(names.TRAINER_CONTAINER)]
        running.append(max(starts) if starts and None not in starts else None)
    every = len(new) >= hosts
    return AttemptStart(
        created_at=created,
        scheduled_at=max(placed) if every and None not in placed else None,
        running_at=max(running) if every and None not in running else None)


def open_recovery(restart: int, cause: str, failed_at: datetime) -> RecoveryStatus:
    """A record for a restart just seen."""
    return RecoveryStatus(restart=restart, cause=cause[:1024], failed_at=failed_at)


def _unix(t: datetime | None) -> float | None:
    return None if t is None else t.timestamp()


def _not_before(t: float | None, earlier: float | None) -> float | None:
    return t if t is None or earlier is None else max(t, earlier)


def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round(max(0.0, end - start), 3)


def fill_recovery(record: RecoveryStatus, start: AttemptStart | None,
                  timeline: TimelineReading | None, first_step_seen: datetime | None
                  ) -> RecoveryStatus:
    """The record with what is known now. `timeline` counts only when its process started after
    the failure; `first_step_seen` (the operator's own reading of the first step, for a trainer
    without a timeline) only when it is after the failure too."""
    if record.total_seconds is not None:
        return record
    failed = record.failed_at.timestamp()
    created, placed, running = ((_unix(start.created_at), _unix(start.scheduled_at),
                                 _unix(start.running_at)) if start is not None else (None,) * 3)
    # The API server's times are whole seconds, the failure's and the trainer's are not: each
    # boundary is taken no earlier than the one before it, so that the parts stay one chain and
    # add up to the total (a part of a second truncated away would otherwise be counted twice).
    created = _not_before(created, failed)
    placed = _not_before(placed, created)
    running = _not_before(running, placed)
    update: dict[str, Any] = {
        "detect_seconds": _span(failed, created),
        "schedule_seconds": _span(created, placed), "start_seconds": _span(placed, running)}
    first_step_at = None
    if timeline is not None and timeline.started_at is not None \
            and timeline.started_at > failed and timeline.seconds is not None:
        # Process 0 may start before the last container: it waits for every process in its
        # distributed init, so init runs from the last container's start.
        init_done = timeline.started_at + timeline.seconds.tpu_initialization
        init_done = _not_before(init_done, running)
        # Without the pods read this pass, an init measured from them before stands.
        from_ = running if running is not None else (
            timeline.started_at if record.init_seconds is None else None)
        update["init_seconds"] = _span(from_, init_done)
        mark = init_done
        for field, category in TRAINER_PARTS:
            update[field] = round(getattr(timeline.seconds, category), 3)
            mark += getattr(timeline.seconds, category)
        update["compile_cache"] = timeline.compile_cache
        update["resumed_from_step"] = timeline.resumed_from_step
        if timeline.first_step_at is not None:
            first_step_at = _not_before(timeline.first_step_at, mark)
            update["first_step_seconds"] = _span(mark, first_step_at)
    elif first_step_seen is not None:
        # A step change counts once the new attempt's containers were seen running (the old
        # attempt's processes may step on while they are torn down).
        known = {**record.model_dump(), **{k: v for k, v in update.items() if v is not None}}
        parts = [known[f"{p}_seconds"] for p in ("detect", "schedule", "start")]
        if None not in parts and first_step_seen.timestamp() >= failed + sum(parts):
            first_step_at = max(failed, first_step_seen.timestamp())
    if first_step_at is not None:
        update["total_seconds"] = _span(failed, first_step_at)
    return record.model_copy(update={k: v for k, v in update.items()
                                     if v is not None or getattr(record, k) is None})


def describe(record: RecoveryStatus) -> str:
    """The Recovered Event's words."""
    parts = []
    for field, word in PART_WORDS:
        value = getattr(record, field)
        if value is None:
            continue
        cache = f" ({CACHE_WORDS[record.compile_cache]})" if field == "compile_seconds" and \
            record.compile_cache in CACHE_WORDS else ""
        parts.append(f"{word} {value:.1f} s{cache}")
    resumed = (f"; resumed from step {record.resumed_from_step}"
               if record.resumed_from_step is not None else "")
    return (f"restart {record.restart}: training again {record.total_seconds:.1f} s after the "
            f"failure ({', '.join(parts) or 'no parts measured'}){resumed}")


def decide_recoveries(prev: list[RecoveryStatus] | None, *, restarts_before: int,
                      restarts_after: int, cause: str, failed_at: datetime,
                      start: AttemptStart | None,
                      timeline: TimelineReading | None, first_step_seen: datetime | None
                      ) -> tuple[list[RecoveryStatus] | None, str | None]:
    """The next status.recoveries, and the Recovered Event's message when one closed."""
    records = list(prev or [])
    if restarts_after > restarts_before:
        records.append(open_recovery(restarts_after, cause, failed_at))
    if not records or records[-1].total_seconds is not None:
        return prev if restarts_after == restarts_before else records[-RECOVERIES_KEPT:], None
    records[-1] = fill_recovery(records[-1], start, timeline, first_step_seen)
    closed = describe(records[-1]) if records[-1].total_seconds is not None else None
    return records[-RECOVERIES_KEPT:], closed


def after_a_stall(records: list[RecoveryStatus] | None) -> bool:
    """The newest restart is the operator's own after a stall, and its first step is not in."""
    return bool(records) and records[-1].total_seconds is None \
        and records[-1].cause.startswith(STALLED)


def track(prev: TpuTrainingJobStatus, new: TpuTrainingJobStatus, *,
          failure: FailureCause | None, now: datetime, start: AttemptStart | None,
          timeline: TimelineReading | None, serves_timeline: bool
          ) -> tuple[list[RecoveryStatus] | None, str | None]:
    """status.recoveries for the status just decided: a record opened for a restart (a stall
    restart's failure is its last step; a JobSet's, its first failed container's exit), the
    newest record filled in. `serves_timeline`: the trainer was seen serving its timeline (its
    first step is the timeline's, never a step change the operator read)."""
    if new.stall_restarts > prev.stall_restarts:
        stalled = find_condition(new.conditions, ConditionType.STALLED.value)
        cause = f"{STALLED}: {stalled.message}" if stalled is not None else STALLED
        failed_at = (prev.progress.last_step_time if prev.progress is not None else None) or now
    else:
        cause = failure.message if failure is not None else "the JobSet restarted"
        failed_at = failure.at if failure is not None else None
        if failed_at is None:
            # The failed pods were gone before the operator looked (the JobSet controller
            # deletes them as it restarts): the failure came after the last step read.
            last = prev.progress.last_step_time if prev.progress is not None else None
            failed_at = last or now
            cause += (" (the failure's time was not read: counted from the last step read "
                      "before it)" if last else " (the failure's time was not read: counted "
                      "from when the restart was seen)")
    seen = (new.progress.last_step_time if new.progress is not None and not serves_timeline
            else None)
    return decide_recoveries(prev.recoveries, restarts_before=prev.restarts,
                             restarts_after=new.restarts, cause=cause, failed_at=failed_at,
                             start=start, timeline=timeline, first_step_seen=seen)


__all__ = ["RECOVERIES_KEPT", "AttemptStart", "decide_recoveries", "describe", "fill_recovery",
           "after_a_stall", "open_recovery", "read_attempt_start", "track"]
