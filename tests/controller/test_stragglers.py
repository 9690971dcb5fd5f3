"""Straggler scores, pure: the threshold at and just past its boundary on either score, the sample
minimum, warm-up and checkpoint steps left out, window medians, the sentence; then simulated
jobs: healthy ones with jitter raise no flag, a host slowed by 20% is named within 50 steps."""

from __future__ import annotations

import random
from dataclasses import FrozenInstanceError

import pytest

from tpujob.controller.stragglers import (
    DEFAULTS,
    HostScore,
    StepSample,
    StragglerSettings,
    _window_medians,
    describe_stragglers,
    host_name,
    host_order,
    score_hosts,
)

pytestmark = pytest.mark.unit
COMPILE_S = 30.0
NRX = StragglerSettings(threshold=0.75)   # nvidia-resiliency-ext's threshold


def run_of(*busy, start_step=0, total=None, warmup=2) -> list[StepSample]:
    """`warmup` steps at compile speed from start_step+1, then one step per busy figure."""
    figures = [COMPILE_S] * warmup + list(busy)
    return [StepSample(start_step + 1 + i, b, total) for i, b in enumerate(figures)]


def figures(s: HostScore) -> tuple:
    r = lambda x: None if x is None else round(x, 4)  # noqa: E731
    return (s.host, r(s.vs_fastest), r(s.vs_own_best), s.flagged, s.samples, r(s.busy_s),
            r(s.best_busy_s), r(s.fastest_busy_s), r(s.step_s))


@pytest.mark.parametrize("name, samples, start_step, settings, want", [
    ("at the threshold exactly: not flagged",
     {"a": run_of(*[3.0] * 10), "b": run_of(*[4.0] * 10)}, 0, NRX,
     [("a", 1.0, 1.0, False, 10, 3.0, 3.0, 3.0, None),
      ("b", 0.75, 1.0, False, 10, 4.0, 4.0, 3.0, None)]),
    ("just below the threshold against the fastest: flagged",
     {"a": run_of(*[3.0] * 10), "b": run_of(*[4.01] * 10)}, 0, NRX,
     [("a", 1.0, 1.0, False, 10, 3.0, 3.0, 3.0, None),
      ("b", 0.7481, 1.0, True, 10, 4.01, 4.01, 3.0, None)]),
    ("against its own best exactly at the threshold: not flagged (two windows of 20)",
     {"a": run_of(*[3.0] * 20, *[4.0] * 20)}, 0, NRX,
     [("a", 1.0, 0.75, False, 40, 4.0, 3.0, 4.0, None)]),
    ("just below its own best: flagged, though it is the fastest",
     {"a": run_of(*[3.0] * 20, *[4.01] * 20)}, 0, NRX,
     [("a", 1.0, 0.7481, True, 40, 4.01, 3.0, 4.01, None)]),
    ("the fastest is the fastest now, not the one with the best past",
     {"a": run_of(*[1.0] * 20, *[2.0] * 20), "b": run_of(*[1.5] * 40)}, 0, NRX,
     [("a", 0.75, 0.5, True, 40, 2.0, 1.0, 1.5, None),
      ("b", 1.0, 1.0, False, 40, 1.5, 1.5, 1.5, None)]),
    ("9 steady steps: not scored; 10: scored",
     {"a": run_of(*[1.0] * 9), "b": run_of(*[2.0] * 10)}, 0, DEFAULTS,
     [("a", None, None, False, 9, None, None, 2.0, None),
      ("b", 1.0, 1.0, False, 10, 2.0, 2.0, 2.0, None)]),
    ("no host has enough: none scored",
     {"a": run_of(*[1.0] * 9)}, 0, DEFAULTS,
     [("a", None, None, False, 9, None, None, None, None)]),
    ("resumed from step 200: steps 201 and 202 are warm-up, 203 on count",
     {"a": run_of(*[1.0] * 10, start_step=200)}, 200, DEFAULTS,
     [("a", 1.0, 1.0, False, 10, 1.0, 1.0, 1.0, None)]),
    ("a start_step past the attempt's start leaves out what it takes for warm-up",
     {"a": run_of(*[1.0] * 11, start_step=200)}, 201, DEFAULTS,
     [("a", 1.0, 1.0, False, 10, 1.0, 1.0, 1.0, None)]),
    ("totals: the median wall time of the current window only",
     {"a": [StepSample(2 + i, 1.0, 9.0 if i <= 15 else 1.3) for i in range(1, 31)]}, 0,
     DEFAULTS, [("a", 1.0, 1.0, False, 30, 1.0, 1.0, 1.0, 1.3)]),
    ("a tighter threshold, a smaller window and minimum, no warm-up",
     {"a": [StepSample(i, 1.0) for i in range(1, 5)],
      "b": [StepSample(i, 1.2) for i in range(1, 5)]}, 0,
     StragglerSettings(threshold=0.9, window=2, min_samples=4, warmup_steps=0),
     [("a", 1.0, 1.0, False, 4, 1.0, 1.0, 1.0, None),
      ("b", 0.8333, 1.0, True, 4, 1.2, 1.2, 1.0, None)]),
    ("the default threshold: 0.85 exactly is not flagged, just below it is",
     {"a": run_of(*[0.85] * 10), "b": run_of(*[1.0] * 10), "c": run_of(*[1.0001] * 10)}, 0,
     DEFAULTS, [("a", 1.0, 1.0, False, 10, 0.85, 0.85, 0.85, None),
                ("b", 0.85, 1.0, False, 10, 1.0, 1.0, 0.85, None),
                ("c", 0.8499, 1.0, True, 10, 1.0001, 1.0001, 0.85, None)]),
    ("with step times: the extra busy time as a share of the step, not of the busy time",
     {"a": run_of(*[0.02] * 10, total=1.0), "b": run_of(*[0.03] * 10, total=1.0),
      "c": run_of(*[0.20] * 10, total=1.0)}, 0, DEFAULTS,
     [("a", 1.0, 1.0, False, 10, 0.02, 0.02, 0.02, 1.0),
      ("b", 0.99, 1.0, False, 10, 0.03, 0.03, 0.02, 1.0),      # 50% more busy, 1% of the step
      ("c", 0.82, 1.0, True, 10, 0.2, 0.2, 0.02, 1.0)]),       # 18% of the step
    ("against its own best, as a share of the step too",
     {"a": run_of(*[0.1] * 20, *[0.3] * 20, total=1.0)}, 0, DEFAULTS,
     [("a", 1.0, 0.8, True, 40, 0.3, 0.1, 0.3, 1.0)]),
    ("a step time below the busy time (a report that does not add up) counts as the busy time",
     {"a": run_of(*[1.0] * 10, total=0.5), "b": run_of(*[2.0] * 10, total=0.5)}, 0, DEFAULTS,
     [("a", 1.0, 1.0, False, 10, 1.0, 1.0, 1.0, 0.5),
      ("b", 0.5, 1.0, True, 10, 2.0, 2.0, 1.0, 0.5)]),
    ("hosts come out in host order: 2 before 10",
     {host_name(0, 10): run_of(*[1.0] * 10), host_name(0, 2): run_of(*[1.0] * 10)}, 0,
     DEFAULTS, [("slice-0/host-2", 1.0, 1.0, False, 10, 1.0, 1.0, 1.0, None),
                ("slice-0/host-10", 1.0, 1.0, False, 10, 1.0, 1.0, 1.0, None)]),
])
def test_score_hosts(name, samples, start_step, settings, want):
    assert [figures(s) for s in score_hosts(samples, start_step, settings)] == want


def test_defaults_are_the_measured_threshold_and_a_window_of_20():
    assert (DEFAULTS.threshold, DEFAULTS.window, DEFAULTS.min_samples,
            DEFAULTS.warmup_steps) == (0.85, 20, 10, 2)
    assert score_hosts({"a": run_of(*[3.0] * 10), "b": run_of(*[3.54] * 10)})[1].flagged
    assert not score_hosts({"a": run_of(*[3.0] * 10), "b": run_of(*[3.52] * 10)})[1].flagged


def test_steps_overlapped_by_a_checkpoint_are_left_out():
    run = run_of(*[1.0] * 10)
    run[5] = StepSample(run[5].step, 50.0, checkpoint=True)
    (a,) = score_hosts({"a": run})
    assert (a.samples, a.vs_fastest) == (9, None)
    (a,) = score_hosts({"a": run + [StepSample(13, 1.0)]})
    assert (a.samples, a.busy_s) == (10, 1.0)


def test_the_newest_steps_are_the_current_window_whatever_the_order_given():
    run = run_of(*[1.0] * 20, *[2.0] * 20)
    (a,) = score_hosts({"a": list(reversed(run))})
    assert (a.busy_s, a.best_busy_s) == (2.0, 1.0)


@pytest.mark.parametrize("values, window, want", [
    ([5.0, 1.0, 3.0], 3, [3.0]),                              # one full window
    ([1.0, 2.0], 3, [1.5]),                                   # fewer: all of them
    ([9.0, 9.0, 9.0, 1.0, 2.0, 3.0], 3, [2.0, 9.0]),          # the current one first
    ([0.1, 1.0, 1.0, 1.0, 5.0, 5.0, 5.0], 3, [5.0, 1.0]),     # a partial oldest one is dropped
    ([4.0, 4.0, 1.0, 2.0], 2, [1.5, 4.0]),
])
def test_window_medians(values, window, want):
    assert _window_medians(values, window) == want


@pytest.mark.parametrize("busy", [0.0, -1.0, float("nan")])
def test_a_busy_time_that_is_not_a_positive_number_is_refused_naming_host_and_step(busy):
    run = run_of(*[1.0] * 12)
    run[4] = StepSample(run[4].step, busy)
    with pytest.raises(ValueError, match=r"host slice-0/host-3: step 5: busy_s must be a "
                                         r"positive number of seconds, got"):
        score_hosts({"slice-0/host-3": run, "slice-0/host-4": run_of(*[1.0] * 12)})


@pytest.mark.parametrize("names, want", [
    (["slice-0/host-10", "slice-0/host-2", "slice-1/host-0", "slice-0/host-1"],
     ["slice-0/host-1", "slice-0/host-2", "slice-0/host-10", "slice-1/host-0"]),
    (["job-w-10", "job-w-9", "10.0.0.2", "9.0.0.1"],
     ["9.0.0.1", "10.0.0.2", "job-w-9", "job-w-10"]),
])
def test_host_order_is_natural(names, want):
    assert sorted(names, key=host_order) == want
    assert host_name(1, 3) == "slice-1/host-3"


def score(host, vs_fastest, vs_own_best, flagged=True, busy=1.28, best=1.0, fastest=1.0):
    return HostScore(host, vs_fastest, vs_own_best, flagged, 50, busy, best, fastest)


@pytest.mark.parametrize("scores, want", [
    ([score("slice-0/host-1", 1.0, 1.0, False, busy=1.0),
      score("slice-0/host-3", 0.78, 1.0)],
     "host slice-0/host-3 at 0.78 (busy 1.28 s/step vs the fastest host's 1 s)"),
    ([score("a", 1.0, 0.7, busy=1.43)],
     "host a at 0.70 of its own best (busy 1.43 s/step vs 1 s)"),
    ([score("a", 0.7, 0.7, busy=1.43, best=1.3, fastest=1.0)],   # equal: against the fastest
     "host a at 0.70 (busy 1.43 s/step vs the fastest host's 1 s)"),
    ([score("h-10", 0.7, 1.0, busy=1.43), score("h-2", 0.7, 1.0, busy=1.43),
      score("h-1", 0.6, 1.0, busy=1.67)],                      # lowest first, then host order
     "host h-1 at 0.60 (busy 1.67 s/step vs the fastest host's 1 s); "
     "host h-2 at 0.70 (busy 1.43 s/step vs the fastest host's 1 s); "
     "host h-10 at 0.70 (busy 1.43 s/step vs the fastest host's 1 s)"),
    ([HostScore("h-3", 0.82, 1.0, True, 50, 0.2, 0.2, 0.02, 1.0)],   # with its step time
     "host h-3 at 0.82 (busy 0.2 s/step vs the fastest host's 0.02 s in a 1 s step)"),
    ([score("a", 0.97, 1.0, False), score("b", 1.0, 0.9, False),
      HostScore("c", None, None, False, 3, None, None, 1.0)],
     "no slow host: 2 scored, the slowest at 0.97 of the fastest"),
    ([HostScore("c", None, None, False, 3, None, None, None)],
     "no slow host: too few steady steps to score yet"),
])
def test_describe_stragglers(scores, want):
    assert describe_stragglers(scores) == want


@pytest.mark.parametrize("value, field", [
    (StepSample(1, 1.0), "step"), (DEFAULTS, "threshold"), (score("a", 1.0, 1.0), "flagged")])
def test_the_records_are_frozen(value, field):
    with pytest.raises(FrozenInstanceError):
        setattr(value, field, 0)


# -- simulated jobs ----------------------------------------------------------------------------

HOSTS, STEPS, JITTER = 8, 200, 0.05


def simulate(seed: int, slow_host: int | None = None, slow_from: int = 0, slow_by: float = 0.0
             ) -> list[dict[str, list[StepSample]]]:
    """A job of HOSTS hosts over STEPS steps: each host's own speed a few percent off the others,
    5% gaussian jitter per step, step 1 compiling, step 2 slower, a checkpoint every 50 steps
    that triples a step's busy time. The samples as the operator would see them after each step."""
    rng = random.Random(seed)
    speed = [1.0 + rng.uniform(-0.03, 0.03) for _ in range(HOSTS)]
    seen: dict[str, list[StepSample]] = {host_name(0, h): [] for h in range(HOSTS)}
    after_each = []
    for step in range(1, STEPS + 1):
        for h, samples in enumerate(seen.values()):
            busy = {1: COMPILE_S, 2: 2.0}.get(step, speed[h]) * (1 + rng.gauss(0, JITTER))
            checkpoint = step % 50 == 0
            busy *= 3 if checkpoint else 1
            busy *= 1 + slow_by if h == slow_host and step >= slow_from else 1
            samples.append(StepSample(step, busy, checkpoint=checkpoint))
        after_each.append({host: list(s) for host, s in seen.items()})
    return after_each


def test_twenty_healthy_jobs_raise_no_flag_and_stay_above_0_85():
    flags, lowest = 0, 1.0
    for seed in range(20):
        for samples in simulate(seed):
            for s in score_hosts(samples):
                flags += s.flagged
                if s.vs_fastest is not None:
                    lowest = min(lowest, s.vs_fastest, s.vs_own_best)
    # 20 runs x 8 hosts x 200 steps, judged after every step: not one flag at the default, and
    # no score at or below 0.85 either (measured: 0.881), so 0.85 would do for this jitter.
    assert flags == 0
    assert 0.85 < lowest < 0.95


def first_flag(seed, slow_by, settings, slow_from) -> tuple[int | None, set[str]]:
    """The first step after which host 3 (slowed from `slow_from` on) is flagged, and every
    host ever flagged."""
    named: set[str] = set()
    first = None
    for step, samples in enumerate(simulate(seed, 3, slow_from, slow_by), start=1):
        flagged = {s.host for s in score_hosts(samples, settings=settings) if s.flagged}
        named |= flagged
        if flagged and first is None:
            first = step
    return first, named


# Measured over seeds 0-19: +20% at 0.85 is named 11-19 steps after it slows at step 100, 12-13
# steps after step 0 (2 warm-up steps and the 10-sample minimum); +40% at 0.75, 11-15 and 12.
@pytest.mark.parametrize("slow_by, threshold, slow_from, seeds", [
    (0.2, 0.85, 100, 20),    # +20% busy: a score of 0.83 (0.78 to 0.85 with the hosts' spread)
    (0.2, 0.85, 0, 5),
    (0.4, 0.75, 100, 5),     # +40% busy: 0.71, below the default
    (0.4, 0.75, 0, 5),
])
def test_a_slowed_host_is_named_within_50_steps_and_no_other(slow_by, threshold, slow_from,
                                                              seeds):
    settings = StragglerSettings(threshold=threshold)
    for seed in range(seeds):
        first, named = first_flag(seed, slow_by, settings, slow_from)
        assert named == {"slice-0/host-3"}
        assert first is not None and slow_from < first <= slow_from + 50


def test_at_nvidia_resiliency_exts_threshold_a_host_20_percent_slower_can_go_unnamed():
    # A score of 0.83 is above 0.75: 19 of seeds 0-19 never flag it. Seed 0 is one.
    assert first_flag(0, 0.2, NRX, 100) == (None, set())
    assert first_flag(0, 0.2, DEFAULTS, 100)[0] is not None


def simulate_device_bound(seed: int, slow_host: int | None = None, slow_by: float = 0.0,
                          slow_from: int = 0) -> list[dict[str, list[StepSample]]]:
    """A job whose 1 s steps are 95% device time: each host busy 50 ms with 30% jitter (host-side
    Python is noisy), every host's step as long as the busiest host's busy time plus the device
    time. The slowed host adds `slow_by` of the healthy step to its own work from `slow_from`."""
    rng = random.Random(seed)
    after_each, seen = [], {host_name(0, h): [] for h in range(HOSTS)}
    for step in range(1, STEPS + 1):
        busy = [(COMPILE_S if step == 1 else 0.05 * (1 + abs(rng.gauss(0, 0.3))))
                + (slow_by if h == slow_host and step >= slow_from else 0.0)
                for h in range(HOSTS)]
        total = max(busy) + 0.95
        for h, samples in enumerate(seen.values()):
            samples.append(StepSample(step, busy[h], total))
        after_each.append({host: list(s) for host, s in seen.items()})
    return after_each


def test_a_device_bound_job_with_noisy_hosts_raises_no_flag_and_names_a_20_percent_host():
    # Busy times 30% apart are 1.5% of the step: no host is slow. (A host steadily 50% busier
    # than the others in such a step is in the score table: 0.99.)
    lowest, first = 1.0, []
    for seed in range(5):
        for samples in simulate_device_bound(seed):
            for s in score_hosts(samples):
                assert not s.flagged
                lowest = min(lowest, s.vs_fastest if s.vs_fastest is not None else 1.0)
        for step, samples in enumerate(simulate_device_bound(seed, 3, 0.2, 100), start=1):
            flagged = {s.host for s in score_hosts(samples) if s.flagged}
            assert flagged <= {"slice-0/host-3"}
            if flagged and len(first) == seed:
                first.append(step)
    assert lowest > 0.95
    assert len(first) == 5 and all(100 < f <= 150 for f in first)
