"""Which host is slow: per-host straggler scores from each host's own busy time per step. Pure:
the steps each host reported in, one score per host and a sentence for status and Events out.

Why busy time and not wall time: in synchronous SPMD JAX every step ends in collectives (the
gradient reduction, FSDP's gathers), so every host's wall-clock step lasts as long as the slowest
host's. A slow host slows the whole job, and every host's step time shows it alike: wall time
cannot say which host it is. What differs between hosts is the time each spends in its own work
(compute, input, host-side code) before it arrives at the collective, its busy time; the rest of
the step it waits for the others. The slow host is the one with the most busy time.

A host's score is the share of the job's step time it does not cost: against the fastest host,
1 - (its busy median - the fastest host's busy median) / its step time; against its own best,
1 - (its busy median - its lowest windowed busy median) / its step time. 1.0 is the fastest host;
0.83 is a host whose extra work makes every step of the job 20% longer (1 / 1.2). Where a host
reports no step time (a program that prints only how long its steps took), its busy time is its
step time and the scores are nvidia-resiliency-ext's ratios: the fastest's median over its own.
Scoring the cost to the step, not the ratio of busy times, keeps a host that is busy 3 ms where
the others are busy 2 ms, in a step of 500 ms spent on the devices, from being called slow.

Medians over a window of steps keep one slow step (a GC pause, a late batch) from flagging a
host; the warm-up steps of an attempt (the compile step among them) and the steps a checkpoint
save or restore overlapped are left out. A host is flagged below the threshold on either score,
and only once it has the minimum number of steady steps. The threshold, 0.85 (a host that makes
each step 18% longer), was measured: benchmarks/stragglers.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median


@dataclass(frozen=True)
class StepSample:
    """One step of one host. `busy_s`: from the step's start to the host's arrival at the step's
    collective (its own work); `total_s`: the whole step, waits included, where known;
    `checkpoint`: a checkpoint save or restore overlapped this step."""

    step: int
    busy_s: float
    total_s: float | None = None
    checkpoint: bool = False


@dataclass(frozen=True)
class StragglerSettings:
    threshold: float = 0.85   # flagged below this, on either score
    window: int = 20          # steps per median
    min_samples: int = 10     # steady steps a host needs before it is scored
    warmup_steps: int = 2     # the first steps of an attempt: the compile step and the next


DEFAULTS = StragglerSettings()


@dataclass(frozen=True)
class HostScore:
    """One host's scores; the figures are None until the host has `min_samples` steady steps."""

    host: str
    vs_fastest: float | None
    vs_own_best: float | None
    flagged: bool
    samples: int                   # steady steps (past warm-up, no checkpoint)
    busy_s: float | None           # its current windowed median
    best_busy_s: float | None      # its lowest windowed median
    fastest_busy_s: float | None   # the fastest host's current windowed median
    step_s: float | None = None    # the median wall time of its current window, where reported


def host_name(slice_index: int, host_index: int) -> str:
    return f"slice-{slice_index}/host-{host_index}"


def host_order(host: str) -> tuple[str | int, ...]:
    """A sort key that puts host-2 before host-10 (re.split keeps the digit runs at odd places,
    so the tuples compare str with str and int with int)."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", host))


def _steady(host: str, samples: Sequence[StepSample], start_step: int,
            warmup_steps: int) -> list[StepSample]:
    """The samples scored, in step order: past the attempt's warm-up, no checkpoint in them."""
    for s in samples:
        if not s.busy_s > 0:  # also NaN
            raise ValueError(f"host {host}: step {s.step}: busy_s must be a positive number of "
                             f"seconds, got {s.busy_s}")
    return sorted((s for s in samples if s.step > start_step + warmup_steps and not s.checkpoint),
                  key=lambda s: s.step)


def _window_medians(values: list[float], window: int) -> list[float]:
    """Medians of the full windows counted back from the newest value, the current one first
    (of all the values while there are fewer than a window). Windows that do not overlap keep
    the best from being the luckiest of many overlapping ones."""
    ends = range(len(values), window - 1, -window)
    return [median(values[end - window:end]) for end in ends] or [median(values)]


def score_hosts(samples: Mapping[str, Sequence[StepSample]], start_step: int = 0,
                settings: StragglerSettings = DEFAULTS) -> tuple[HostScore, ...]:
    """Every host's scores, in host order. `samples`: each host's recent steps of the current
    attempt; `start_step`: the step the attempt started from (its checkpoint, 0 for a fresh
    run), so that steps start_step+1 .. start_step+warmup_steps are warm-up."""
    steady = {host: _steady(host, s, start_step, settings.warmup_steps)
              for host, s in samples.items()}
    medians = {host: _window_medians([s.busy_s for s in kept], settings.window)
               for host, kept in steady.items() if len(kept) >= settings.min_samples}
    fastest = min((m[0] for m in medians.values()), default=None)
    scores = []
    for host in sorted(samples, key=host_order):
        kept, m = steady[host], medians.get(host)
        if m is None:
            scores.append(HostScore(host, None, None, False, len(kept), None, None, fastest))
            continue
        totals = [s.total_s for s in kept[-settings.window:] if s.total_s is not None]
        step_s = median(totals) if totals else None
        # The step time the extra busy time is a share of (never below the busy time itself).
        step = max(step_s, m[0]) if step_s is not None else m[0]
        vs_fastest, vs_own_best = 1 - (m[0] - fastest) / step, 1 - (m[0] - min(m)) / step
        scores.append(HostScore(
            host, vs_fastest, vs_own_best,
            flagged=vs_fastest < settings.threshold or vs_own_best < settings.threshold,
            samples=len(kept), busy_s=m[0], best_busy_s=min(m), fastest_busy_s=fastest,
            step_s=step_s))
    return tuple(scores)


def _why(s: HostScore) -> str:
    # The lower score is the one that flagged it (both may have).
    step = f" in a {s.step_s:.3g} s step" if s.step_s is not None else ""
    if s.vs_fastest <= s.vs_own_best:
        return (f"host {s.host} at {s.vs_fastest:.2f} (busy {s.busy_s:.3g} s/step vs the "
                f"fastest host's {s.fastest_busy_s:.3g} s{step})")
    return (f"host {s.host} at {s.vs_own_best:.2f} of its own best (busy {s.busy_s:.3g} s/step "
            f"vs {s.best_busy_s:.3g} s{step})")


def describe_stragglers(scores: Sequence[HostScore]) -> str:
    """One line for status and an Event: the flagged hosts, lowest score first."""
    flagged = sorted((s for s in scores if s.flagged),
                     key=lambda s: (min(s.vs_fastest, s.vs_own_best), host_order(s.host)))
    if flagged:
        return "; ".join(_why(s) for s in flagged)
    scored = [s.vs_fastest for s in scores if s.vs_fastest is not None]
    if not scored:
        return "no slow host: too few steady steps to score yet"
    return f"no slow host: {len(scored)} scored, the slowest at {min(scored):.2f} of the fastest"
