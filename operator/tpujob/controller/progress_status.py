"""The progress part of a job's status: the trainer's reading turned into status.progress, what
is kept of it across a restart, and when a run counts as stalled. Pure; `decide` calls it."""

from __future__ import annotations

from datetime import datetime, timedelta

from tpujob.api.spec import TpuTrainingJobSpec
from tpujob.api.status import Progress, ProgressDisplay, display_of
from tpujob.controller.trainer_reports import ProgressReading


def _figure(value: float | None) -> float | None:
    """A measured figure to 6 significant digits: more than it is known to, and what `kubectl
    describe` prints in full (the table's cells are `display`)."""
    return None if value is None else float(f"{value:.6g}")


def build_progress(prev: Progress | None, reading: ProgressReading | None, now: datetime
              ) -> Progress | None:
    if reading is None:
        return prev
    # The first reading of an attempt only sets the mark; a step is counted when it changes.
    moved = prev is not None and prev.step != reading.step and reading.training
    step = reading.step
    if not reading.training and step == 0 and prev is not None and prev.last_checkpoint_step:
        # A restarted process reports 0 until it has restored: the run goes on from the
        # newest checkpoint, so that is the step to show.
        step = max(prev.last_checkpoint_step, reading.last_checkpoint_step or 0)
    return Progress(step=step, total_steps=reading.total_steps, loss=_figure(reading.loss),
                    step_time_seconds=_figure(reading.step_time_s),
                    tokens_per_second_per_device=_figure(reading.tokens_per_s_per_device),
                    tflops_per_device=_figure(reading.tflops_per_device),
                    mfu=_figure(reading.mfu),
                    last_checkpoint_step=reading.last_checkpoint_step, last_update_time=now,
                    last_step_time=now if moved else (prev.last_step_time if prev else None),
                    trainer_phase=reading.trainer_phase,
                    display=display_of(reading.loss, reading.tokens_per_s_per_device,
                                       reading.mfu, reading.tflops_per_device))


def stall_deadline(spec: TpuTrainingJobSpec, running_since: datetime,
                   progress: Progress | None) -> datetime | None:
    """When the current attempt counts as stalled: the first-step allowance from the moment
    every host runs, then stallTimeoutSeconds from the last step change; None when off."""
    last_step = progress.last_step_time if progress else None
    if last_step is None or last_step < running_since:
        if spec.first_step_timeout_seconds <= 0:
            return None
        return running_since + timedelta(seconds=spec.first_step_timeout_seconds)
    if spec.stall_timeout_seconds <= 0:
        return None
    return last_step + timedelta(seconds=spec.stall_timeout_seconds)


def restart_progress(progress: Progress) -> Progress:
    """Progress once the attempt it was read from has ended: its step and checkpoint stand
    until the next attempt reports where it resumed; its loss and speed are the old attempt's,
    so they are left blank, and its step clock is cleared (see replace_progress)."""
    return replace_progress(progress).model_copy(update={
        "loss": None, "step_time_seconds": None, "tokens_per_second_per_device": None,
        "tflops_per_device": None, "mfu": None, "trainer_phase": None,
        "display": ProgressDisplay()})


def replace_progress(progress: Progress) -> Progress:
    """Progress with the step clock cleared, so a restarted run is judged from its own start."""
    return progress.model_copy(update={"last_step_time": None})


__all__ = ["build_progress", "replace_progress", "restart_progress", "stall_deadline"]
