"""Goodput accounting across restarts. Pure: the previous `status.goodput`, the phase the job
was in and is in now, and what the trainer last reported (its timeline for the current process
start, and the previous start's exit record) in; the next `status.goodput` out.

Time is integrated by phase between two passes (the status keeps the instant accounted up to):
Pending, Queued and Suspended count as queued; Starting, Running and Restarting count as wall
time, Restarting also as recovery. The trainer's seconds come from its timeline: the starts that
ended are summed in `ended`, the current one is kept as last read, and when a new start appears
the old one is folded in and the steps it computed after the checkpoint the new one resumed
from are counted as lost (docs/goodput.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import TypeVar

from tpujob.api.status import Badput, Goodput, GoodputAttempt, Phase, TrainerSeconds
from tpujob.controller.trainer_reports import TimelineReading
from tpujob_trainer.contract import GOODPUT_CATEGORIES

_Seconds = TypeVar("_Seconds", Badput, TrainerSeconds)
QUEUED_PHASES = {Phase.PENDING, Phase.QUEUED, Phase.SUSPENDED}
WALL_PHASES = {Phase.STARTING, Phase.RUNNING, Phase.RESTARTING}
# Each of the trainer's categories but productive time, as the badput it is (ml-goodput-
# measurement's names); a category the trainer adds without a place here fails a test.
BADPUT_OF_CATEGORY = {
    "tpu_initialization": "tpu_initialization",
    "training_prep": "training_prep",
    "program_startup": "program_startup",
    "data_loading": "data_loading_sync",
    "checkpoint_save": "unproductive_checkpoint_save_time",
    "checkpoint_restore": "unproductive_checkpoint_restore_time",
}
# What a trainer without a timeline leaves unmeasured (status names).
UNMEASURED_WITHOUT_TIMELINE = [
    "productive", *(Badput.model_fields[b].alias for b in BADPUT_OF_CATEGORY.values()),
    "wastedProgressFromDisruption", "lostSteps", "stepTime"]


def _add(a: TrainerSeconds, b: TrainerSeconds) -> TrainerSeconds:
    return TrainerSeconds(**{k: getattr(a, k) + getattr(b, k) for k in GOODPUT_CATEGORIES})


def merge_final(current: GoodputAttempt, final: TimelineReading) -> GoodputAttempt:
    """The current start with what it reported on exit (later than any read): the furthest step
    and, when it carries them, the exit's seconds."""
    steps = [s for s in (current.step, final.step) if s is not None]
    return current.model_copy(update={
        "step": max(steps) if steps else None,
        "steps": max(current.steps, final.steps),
        "seconds": final.seconds or current.seconds,
        "step_time_median_seconds": (final.step_time_median_s
                                     or current.step_time_median_seconds)})


def _lost(previous: GoodputAttempt, resumed_from: int | None) -> tuple[int, float]:
    """Steps `previous` computed past `resumed_from`, and their productive seconds (its mean
    step time, as measured between step completions)."""
    if resumed_from is None or previous.step is None or previous.step <= resumed_from:
        return 0, 0.0
    lost = previous.step - resumed_from
    per_step = previous.seconds.productive / previous.steps if previous.steps else 0.0
    return lost, min(previous.seconds.productive, lost * per_step)


def account(prev: Goodput | None, *, now: datetime, phase_before: Phase, phase_after: Phase,
            reading: TimelineReading | None = None,
            finals: tuple[TimelineReading, ...] = (),
            last_step_time_s: float | None = None) -> Goodput:
    """The next status.goodput; see the module docstring."""
    g = prev or Goodput()
    # Timestamps in the status keep whole seconds; the instant accounted up to is kept exactly
    # (Unix seconds), so short phases count and no fraction is counted twice.
    last = g.accounted_until.timestamp() if g.accounted_until is not None else (
        g.last_update_time.timestamp() if g.last_update_time is not None else None)
    wall, queued, recovery = g.wall_seconds, g.queued_seconds, g.recovery_seconds
    if last is not None and now.timestamp() > last:
        elapsed = now.timestamp() - last
        if phase_before in QUEUED_PHASES:
            queued += elapsed
        elif phase_before in WALL_PHASES:
            wall += elapsed
            if phase_before == Phase.RESTARTING:
                recovery += elapsed
    ended, current, attempts = g.ended, g.current, g.attempts
    if current is None and reading is None and phase_after == Phase.RUNNING \
            and phase_before != Phase.RUNNING:
        # A trainer that serves no timeline: each time every host runs again is a start.
        attempts += 1
    lost_steps = g.lost_steps
    wasted = g.badput.wasted_progress_from_disruption or 0.0

    # What the processes said as they exited (termination messages), for the start last read.
    for final in finals:
        if current is not None and final.attempt == current.attempt:
            current = merge_final(current, final)

    if reading is not None and current is not None and reading.attempt != current.attempt \
            and reading.resumed_from_step is None:
        # A new start that has not restored yet: its resume point decides the lost steps, so it
        # is taken in once known (its seconds are cumulative: nothing is missed meanwhile).
        reading = None
    if reading is not None and (current is None or reading.attempt != current.attempt):
        # A new start: fold the one before it (with its exit record when the new start read it),
        # and any start the operator never saw but the new one found on storage.
        before = current
        recorded = reading.previous
        if recorded is not None:
            if before is not None and recorded.attempt == before.attempt:
                before = merge_final(before, recorded)
            else:
                if before is not None:
                    ended = _add(ended, before.seconds)
                before = recorded.as_attempt()
        if before is not None:
            ended = _add(ended, before.seconds)
            n, seconds = _lost(before, reading.resumed_from_step)
            lost_steps += n
            wasted += seconds
        current = reading.as_attempt()
        if before is not None or attempts == 0:  # a first timeline may come after its start
            attempts += 1
    elif reading is not None:
        current = reading.as_attempt()

    measured = current is not None
    total = _add(ended, current.seconds) if measured else None
    productive = max(0.0, total.productive - wasted) if measured else None
    if measured:
        badput = Badput(
            **{b: getattr(total, c) for c, b in BADPUT_OF_CATEGORY.items()},
            wasted_progress_from_disruption=wasted,
            infrastructure_recovery_from_disruption=recovery)
        accounted = productive + sum(v for v in badput.model_dump().values() if v)
        badput = badput.model_copy(update={"other": max(0.0, wall - accounted)})
        percent = min(100.0, 100.0 * productive / wall) if wall > 0 else None
    else:
        badput = Badput(infrastructure_recovery_from_disruption=recovery,
                        other=None)
        percent = None
    median = current.step_time_median_seconds if current is not None else None
    deviation = ((last_step_time_s - median) / median * 100
                 if median and last_step_time_s is not None else None)
    # Seconds to the millisecond and percents to 0.01 points: what `kubectl describe` prints,
    # and all the precision the figures have.
    return Goodput(
        percent=_round(percent, 2), display=display_of_percent(percent),
        productive_seconds=_round(productive),
        wall_seconds=_round(wall), queued_seconds=_round(queued),
        recovery_seconds=_round(recovery), lost_steps=lost_steps, badput=_rounded(badput),
        not_measured=[] if measured else list(UNMEASURED_WITHOUT_TIMELINE),
        step_time_median_seconds=_round(median), step_time_deviation_percent=_round(deviation, 2),
        step_time_max_deviation_percent=_round(current.step_time_max_deviation_percent
                                                if current is not None else None, 2),
        attempts=attempts, ended=_rounded(ended),
        current=None if current is None else current.model_copy(update={
            "seconds": _rounded(current.seconds),
            "step_time_median_seconds": _round(current.step_time_median_seconds),
            "step_time_max_deviation_percent": _round(
                current.step_time_max_deviation_percent, 2)}),
        last_update_time=now, accounted_until=now)


def display_of_percent(percent: float | None) -> str:
    """`92.149` -> `92.1%`, as the GOODPUT column prints it; `-` when not measured."""
    return "-" if percent is None else f"{percent:.1f}%"


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _rounded(seconds: _Seconds) -> _Seconds:
    return type(seconds)(**{k: _round(v) for k, v in seconds.model_dump().items()})


def summary(goodput: Goodput | None) -> str:
    """One line for the Event at the end of a job and for `tpujob local run`."""
    if goodput is None:
        return "goodput: nothing measured"
    head = (f"goodput {goodput.percent:.1f}% ({goodput.productive_seconds:.1f} s productive of "
            f"{goodput.wall_seconds:.1f} s)" if goodput.percent is not None else
            f"goodput not measured (no trainer timeline; wall {goodput.wall_seconds:.1f} s)")
    parts = [f"{k} {v:.1f} s" for k, v in goodput.badput.to_dict().items() if v]
    tail = f"; badput: {', '.join(parts)}" if parts else ""
    return (f"{head}; lost steps {goodput.lost_steps}; recovery "
            f"{goodput.recovery_seconds:.1f} s; queued {goodput.queued_seconds:.1f} s{tail}")


__all__ = ["account", "merge_final", "summary"]
