"""What `tpujob local run` shows while jobs run: one status line per job (phase, a progress
bar, step/total, loss, tokens/s, last checkpoint, restarts, elapsed time) redrawn in place on a
terminal, or printed as plain lines (on a phase change, and at most every few seconds while the
step moves) when stdout is a file or a pipe; the operator's Events for the job as lines above.

`build_job_line` is pure (a job as stored -> a line), the displays only decide when to write."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from tpujob_trainer.contract import NOT_TRAINING_PHASES

BAR_WIDTH = 24


def _fmt_count(x: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if x >= size:
            return f"{x / size:.1f}{unit}"
    return f"{x:.0f}"


def _fmt_duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def build_bar(step: int, total: int | None, width: int = BAR_WIDTH) -> str:
    """`[########----------------]`; empty when the total is unknown."""
    if not total:
        return "[" + " " * width + "]"
    filled = min(width, int(width * step / total))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def tokens_per_step(job: dict[str, Any]) -> int | None:
    """global_batch x seq_len of the job's trainer config, when it names both."""
    train = (((job.get("spec") or {}).get("trainer") or {}).get("config") or {}).get("train") or {}
    batch, seq = train.get("global_batch"), train.get("seq_len")
    return batch * seq if isinstance(batch, int) and isinstance(seq, int) else None


def build_job_line(job: dict[str, Any], elapsed_s: float, bar: bool = True) -> str:
    """One line of a job's state, e.g.
    `quickstart  Running    [##########--------------] 17/40  loss 4.731  5.2k tok/s  ckpt 10  0:41`."""
    name = job["metadata"]["name"]
    status = job.get("status") or {}
    phase = status.get("phase") or "Pending"
    progress = status.get("progress") or {}
    parts = [f"{name}  {phase:<10}"]
    step, total = int(progress.get("step") or 0), progress.get("totalSteps")
    # Not stepping yet (starting, initializing, compiling): say what it does instead of
    # sitting at 0/N. Training or done, the step figures.
    before_steps = progress.get("trainerPhase") in NOT_TRAINING_PHASES
    if phase in ("Running", "Restarting") and before_steps:
        parts.append(progress["trainerPhase"])
    elif phase == "Running" and not progress:
        parts.append("starting")
    if progress and not before_steps:
        if bar:
            parts.append(build_bar(step, total))
        parts.append(f"{step}/{total}" if total else f"step {step}")
        if progress.get("loss") is not None:
            parts.append(f"loss {progress['loss']:.4f}")
        step_time, per_step = progress.get("stepTimeSeconds"), tokens_per_step(job)
        if step_time and per_step:
            parts.append(f"{_fmt_count(per_step / step_time)} tok/s")
        elif progress.get("tokensPerSecondPerDevice") is not None:
            parts.append(f"{_fmt_count(progress['tokensPerSecondPerDevice'])} tok/s/dev")
        if progress.get("lastCheckpointStep") is not None:
            parts.append(f"ckpt {progress['lastCheckpointStep']}")
    if status.get("restarts"):
        parts.append(f"restarts {status['restarts']}")
    failure = status.get("failure")
    if failure and phase in ("Failed", "Invalid"):
        parts.append(f"{failure.get('reason')}")
    parts.append(_fmt_duration(elapsed_s))
    return "  ".join(parts)


def build_event_line(event: dict[str, Any]) -> str:
    """An Event as `  Warning Restarting: message`."""
    return f"  {event.get('type', 'Normal')} {event.get('reason', '')}: {event.get('message', '')}"


@dataclass
class _Shown:
    phase: str | None = None
    step: int | None = None
    at: float = 0.0


@dataclass
class Display:
    """Writes job lines and event lines to `out`: redrawn in place on a terminal (`live`),
    plain lines otherwise."""

    out: TextIO = field(default_factory=lambda: sys.stdout)
    live: bool | None = None          # None: when `out` is a terminal
    plain_interval_s: float = 5.0     # plain mode: at most one line per job this often
    _drawn: int = 0                   # live mode: job lines currently on screen
    _shown: dict[str, _Shown] = field(default_factory=dict)
    _started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if self.live is None:
            self.live = bool(getattr(self.out, "isatty", lambda: False)())

    def message(self, text: str) -> None:
        """A permanent line (an Event, a note) above the live job lines."""
        self._clear()
        self.out.write(text + "\n")
        self.out.flush()
        self._drawn = 0

    def update(self, jobs: list[dict[str, Any]], final: bool = False) -> None:
        """Show the jobs' current state (always, for `final`)."""
        elapsed = time.monotonic() - self._started
        if self.live:
            self._clear()
            lines = [build_job_line(j, elapsed) for j in jobs]
            self.out.write("".join(line[:self._width()] + "\n" for line in lines))
            self.out.flush()
            self._drawn = 0 if final else len(lines)
            return
        now = time.monotonic()
        for job in jobs:
            key = job["metadata"]["name"]
            status = job.get("status") or {}
            phase, step = status.get("phase"), (status.get("progress") or {}).get("step")
            shown = self._shown.setdefault(key, _Shown())
            moved = step != shown.step and now - shown.at >= self.plain_interval_s
            if final or phase != shown.phase or moved:
                self.out.write(build_job_line(job, elapsed, bar=False) + "\n")
                self._shown[key] = _Shown(phase, step, now)
        self.out.flush()

    def _clear(self) -> None:
        if self.live and self._drawn:
            self.out.write(f"\x1b[{self._drawn}F\x1b[J")  # up to the first job line, clear below
            self._drawn = 0

    def _width(self) -> int:
        import shutil
        return max(40, shutil.get_terminal_size((120, 24)).columns - 1)
