"""Is the job hung, which hosts hold it up, and is one more restart worth it. Pure: the hosts'
heartbeats, the phases' timeouts and `now` in; a verdict and a sentence for status and Events
out.

Timeouts fit the phase a host is in. A step's follows nvidia-resiliency-ext's rule: 5x the
longest steady step this attempt has seen, never below its floor (`host_watch` learns it); the
other phases keep generous defaults, so that a first run is never cut short: 600 s to start
(process start to distributed init: image pull and peers scheduled minutes apart), 1800 s to
compile and for a checkpoint save or restore (a large model, a cold cache, gs://), 600 s for a
step not yet learned. The floors: 120 s for a step (above JAX's own 100 s heartbeat timeout, so
that a lost process is first reported by JAX with its own error, and several operator polls),
300 s for the other phases.

A host is hung when its last heartbeat is older than its phase's timeout (beat from a thread
that keeps going while the main thread waits in a collective, so a stale beat means the process
itself stopped: SIGSTOP, a lost node, the GIL held), or the job is when no host has moved (a step
ended, a phase began) for longer than the timeout of the longest phase a host is in. In SPMD JAX
a hung job is a collective some hosts wait in: the hosts behind are those not in it, at a lower
step than the others, silent while the others beat, or busy in their own work while the others
wait on the step (where the hosts say so). Otherwise no host is behind: a collective or a data
wait that every host is in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from tpujob.controller.stragglers import host_order


class HostPhase(StrEnum):
    STARTUP = "startup"                        # process start to distributed init
    COMPILE = "compile"                        # until the first step ends
    STEP = "step"                              # steady steps
    CHECKPOINT_SAVE = "checkpoint_save"
    CHECKPOINT_RESTORE = "checkpoint_restore"


DEFAULT_TIMEOUT_S: dict[HostPhase, float] = {
    HostPhase.STARTUP: 600.0, HostPhase.COMPILE: 1800.0, HostPhase.STEP: 600.0,
    HostPhase.CHECKPOINT_SAVE: 1800.0, HostPhase.CHECKPOINT_RESTORE: 1800.0}
FLOOR_S: dict[HostPhase, float] = {
    HostPhase.STARTUP: 300.0, HostPhase.COMPILE: 300.0, HostPhase.STEP: 120.0,
    HostPhase.CHECKPOINT_SAVE: 300.0, HostPhase.CHECKPOINT_RESTORE: 300.0}
LONGEST_SEEN_FACTOR = 5.0
RESTARTS_WITHOUT_CHECKPOINT = 3
HEARTBEAT_STALE_S = 60.0   # silent, for a host that does not say how often it beats
MISSED_BEATS = 3           # silent, for one that does: this many beats missed (and 5 s at least)


@dataclass(frozen=True)
class HostBeat:
    """What the operator last read of one host (one JAX process)."""

    host: str
    phase: HostPhase
    step: int            # the last step it completed
    beat_at: datetime    # its last heartbeat
    moved_at: datetime   # when it last moved: its step advanced or its phase began
    interval_s: float | None = None   # how often it beats, where it says
    waiting: bool | None = None       # its main thread waits on the step (for the others)


@dataclass(frozen=True)
class HangVerdict:
    hung: bool
    phase: HostPhase         # the phase whose timeout is judged
    timeout_s: float
    behind: tuple[str, ...]  # the hosts not in the collective the others wait in, in host order
    message: str


def _seconds(now: datetime, then: datetime) -> float:
    return (now - then).total_seconds()


def judge_hang(beats: Sequence[HostBeat], now: datetime,
               timeouts: Mapping[HostPhase, float]) -> HangVerdict:
    """Whether the job is hung, in which phase, and which hosts are behind."""
    if not beats:
        raise ValueError("judge_hang needs a heartbeat per host; none given")
    beats = sorted(beats, key=lambda b: host_order(b.host))
    # The job may wait as long as the longest phase any host is in: the others wait for it.
    phase = max(sorted({b.phase for b in beats}, key=list(HostPhase).index),
                key=lambda p: timeouts[p])
    timeout = timeouts[phase]
    silent = [b for b in beats if _seconds(now, b.beat_at) > timeouts[b.phase]]
    still = _seconds(now, max(b.moved_at for b in beats))
    if not silent and not still > timeout:
        return HangVerdict(False, phase, timeout, (),
                           f"not hung: a host moved {still:.0f} s ago ({phase} timeout "
                           f"{timeout:.0f} s)")
    if silent:
        oldest = max(silent, key=lambda b: _seconds(now, b.beat_at))
        phase, timeout = oldest.phase, timeouts[oldest.phase]
        cause = (f"{', '.join(b.host for b in silent)} silent for "
                 f"{_seconds(now, oldest.beat_at):.0f} s ({phase} timeout {timeout:.0f} s)")
    else:
        cause = f"no host moved for {still:.0f} s ({phase} timeout {timeout:.0f} s)"
    behind, where = _behind(beats, silent)
    return HangVerdict(True, phase, timeout, behind, f"hung in {phase}: {cause}; {where}")


def _behind(beats: Sequence[HostBeat], silent: Sequence[HostBeat]) -> tuple[tuple[str, ...], str]:
    """The hosts not in the collective the others wait in (host order), and a sentence."""
    top = max(b.step for b in beats)
    some_beat = len(silent) < len(beats)
    behind = [b for b in beats if b.step < top or (some_beat and b in silent)]
    if behind:
        where = (f"behind: {', '.join(f'{b.host} at step {b.step}' for b in behind)}; the "
                 f"furthest host is at step {top}")
        return tuple(b.host for b in behind), where
    # All at one step and beating: the hosts busy in their own work while others wait on the
    # step are the ones not in the collective (where the hosts say which they are doing).
    busy = [b for b in beats if b.waiting is False]
    if busy and not silent and len(busy) < len(beats) and \
            all(b.waiting is not None for b in beats):
        behind = busy
        where = (f"behind: {', '.join(b.host for b in busy)} at step {top}, busy in "
                 f"{'its' if len(busy) == 1 else 'their'} own work while the others wait "
                 f"for the step's result")
    elif some_beat:
        where = (f"every host at step {top} and beating: no single host is behind (a "
                 f"collective or a data wait)")
    else:
        where = "every host silent: no single host is behind (the job or its reporting stopped)"
    return tuple(b.host for b in behind), where


def stale_after_s(beat: HostBeat) -> float:
    """How long a host may go without a beat before it counts as silent."""
    if beat.interval_s is None:
        return HEARTBEAT_STALE_S
    return max(5.0, MISSED_BEATS * beat.interval_s)


def attribute_stall(beats: Sequence[HostBeat], now: datetime) -> tuple[tuple[str, ...], str]:
    """Which hosts hold up a job found stalled, and a sentence: those behind the others' step,
    or silent (`stale_after_s`) while others beat."""
    if not beats:
        return (), "no host reports read"
    beats = sorted(beats, key=lambda b: host_order(b.host))
    silent = [b for b in beats if _seconds(now, b.beat_at) > stale_after_s(b)]
    return _behind(beats, silent)


@dataclass(frozen=True)
class BudgetVerdict:
    give_up: bool
    fruitless: int   # the last restarts in a row after which no newer checkpoint was written
    message: str


def judge_restart_budget(restarts: Sequence[int | None], checkpoint_step: int | None,
                         limit: int = RESTARTS_WITHOUT_CHECKPOINT) -> BudgetVerdict:
    """Whether to fail instead of restarting again: the last `limit` restarts all ended without
    a newer checkpoint. `restarts`: the newest checkpoint step at each earlier restart, oldest
    first (None: none yet); `checkpoint_step`: the newest now. Pass only the restarts the budget
    is for (hangs, errors): a preemption is not the job's fault."""
    newest = -1 if checkpoint_step is None else checkpoint_step
    fruitless = 0
    for step in reversed(restarts):
        if (-1 if step is None else step) < newest:
            break
        fruitless += 1
    give_up = fruitless >= limit
    since = ("with no checkpoint written" if checkpoint_step is None else
             f"since checkpoint step {checkpoint_step} with no new checkpoint")
    plural = "" if fruitless == 1 else "s"
    then = ": giving up" if give_up else f" (the job fails at {limit})"
    return BudgetVerdict(give_up, fruitless, f"{fruitless} restart{plural} {since}{then}")
