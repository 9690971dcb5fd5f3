"""What the operator knows of each host of a running attempt: the host reports read from every
trainer container's log (`host_reports`), gathered across reads, and what they say now: the
straggler scores and the heartbeats a hang is judged by. Pure: readings in, a frozen view out;
the reconciler does the reading (`HostWatch.since_seconds` says how far back).

One `HostWatch` per job and attempt: a restarted attempt starts a new one, so that a host's own
best and the warm-up are the new attempt's. Each host keeps its newest `KEEP_STEPS` steps (the
scores' windows reach back over them for a host's own best), so a long run costs the operator the
same memory as a short one.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from datetime import datetime

from tpujob.controller.hangs import FLOOR_S, LONGEST_SEEN_FACTOR, HostBeat, HostPhase
from tpujob.controller.host_reports import HostReports
from tpujob.controller.stragglers import (
    DEFAULTS,
    HostScore,
    StepSample,
    StragglerSettings,
    describe_stragglers,
    host_order,
    score_hosts,
)

KEEP_STEPS = 400            # per host: 20 windows of 20
LEARN_STEPS = 50            # steady steps a host needs before the step timeout is learned
FIRST_LOOK_S = 900          # how far back the first read of an attempt looks
OVERLAP_S = 30              # a later read looks back this much past the previous one


@dataclass(frozen=True)
class HostsView:
    """The hosts of the current attempt as last read: every host's scores (host order), its
    newest heartbeat, the sentence for status and Events."""

    scores: tuple[HostScore, ...]
    beats: tuple[HostBeat, ...]
    message: str
    unreadable: int         # report lines skipped as malformed, this attempt
    # 5x the longest steady step this attempt has seen (120 s at least), once a host has
    # LEARN_STEPS of them; None before: how long no step may take before the job is hung.
    step_timeout_s: float | None = None

    @property
    def flagged(self) -> tuple[HostScore, ...]:
        """The flagged hosts, lowest score first (host order among equals)."""
        return tuple(sorted((s for s in self.scores if s.flagged),
                            key=lambda s: (min(s.vs_fastest, s.vs_own_best),
                                           host_order(s.host))))

    @property
    def scored(self) -> int:
        return sum(s.vs_fastest is not None for s in self.scores)


@dataclass
class HostWatch:
    """The host reports of one attempt, gathered across reads."""

    attempt: Hashable
    settings: StragglerSettings = DEFAULTS
    samples: dict[str, dict[int, StepSample]] = field(default_factory=dict)
    beats: dict[str, HostBeat] = field(default_factory=dict)
    unreadable: int = 0
    read_at: datetime | None = None
    first_step: int | None = None   # the first step any host reported in this attempt

    def since_seconds(self, now: datetime) -> int:
        """How far back the next read of the logs must look: everything since the previous read
        (with some overlap: a line read twice counts once), or the whole recent past at first."""
        if self.read_at is None:
            return FIRST_LOOK_S
        gap = (now - self.read_at).total_seconds()
        return min(FIRST_LOOK_S, max(1, math.ceil(gap)) + OVERLAP_S)

    def merge(self, reports: HostReports, now: datetime) -> None:
        """Add what one read found (a step reported again replaces itself; a beat older than the
        one kept is ignored)."""
        for host, beat in reports.beats.items():
            known = self.beats.get(host)
            if known is None or beat.beat_at >= known.beat_at:
                self.beats[host] = beat
        for host, samples in reports.samples.items():
            if samples and (self.first_step is None or samples[0].step < self.first_step):
                self.first_step = samples[0].step
            mine = self.samples.setdefault(host, {})
            mine.update((s.step, s) for s in samples)
            for step in sorted(mine)[:-KEEP_STEPS]:
                del mine[step]
        self.unreadable += reports.unreadable
        self.read_at = now

    def start_step(self) -> int:
        """The step the attempt started from, as far as the reports show: one before the first
        step any host reported (the steps after it are the attempt's warm-up)."""
        return self.first_step - 1 if self.first_step is not None else 0

    def view(self) -> HostsView:
        samples = {host: tuple(steps[s] for s in sorted(steps))
                   for host, steps in self.samples.items()}
        scores = score_hosts(samples, self.start_step(), self.settings)
        beats = tuple(self.beats[h] for h in sorted(self.beats, key=host_order))
        return HostsView(scores, beats, describe_stragglers(scores), self.unreadable,
                         self._step_timeout_s())

    def _step_timeout_s(self) -> float | None:
        """Learned from every host's steady steps (warm-up and checkpoint steps left out)."""
        start = self.start_step() + self.settings.warmup_steps
        steady = [[s.total_s for step, s in sorted(steps.items())
                   if step > start and not s.checkpoint and s.total_s is not None]
                  for steps in self.samples.values()]
        if not any(len(host) >= LEARN_STEPS for host in steady):
            return None
        longest = max(t for host in steady for t in host)
        return max(FLOOR_S[HostPhase.STEP], LONGEST_SEEN_FACTOR * longest)
