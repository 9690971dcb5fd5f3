"""The hosts as the operator keeps them between reads (`host_watch`) and the status it decides
from them (`host_status`): reads gathered across polls, a step read twice counted once, older
beats ignored, each host's steps bounded, how far back the next read looks, the attempt's first
step as its start; then the SlowHost condition, the SLOW HOST column and the Events, by table."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from datetime import UTC, datetime, timedelta

import pytest

from tpujob.api.status import HostScoreStatus, HostsStatus
from tpujob.controller.hangs import HostBeat, HostPhase
from tpujob.controller.host_reports import HostReports
from tpujob.controller.host_status import decide_hosts
from tpujob.controller.host_watch import (
    FIRST_LOOK_S,
    KEEP_STEPS,
    OVERLAP_S,
    HostsView,
    HostWatch,
)
from tpujob.controller.log_source import SINCE_SECONDS
from tpujob.controller.stragglers import DEFAULTS, HostScore, StepSample

pytestmark = pytest.mark.unit
T0 = datetime(2026, 1, 1, tzinfo=UTC)
A, B = "slice-0/host-0", "slice-0/host-1"


def beat(host: str, step: int, at_s: float) -> HostBeat:
    return HostBeat(host, HostPhase.STEP, step, T0 + timedelta(seconds=at_s),
                    T0 + timedelta(seconds=at_s))


def steps(first: int, last: int, busy: float, total: float | None = None
          ) -> tuple[StepSample, ...]:
    return tuple(StepSample(s, busy, total) for s in range(first, last + 1))


def test_reads_gather_a_step_read_twice_counts_once_and_an_older_beat_is_ignored():
    watch = HostWatch("attempt")
    watch.merge(HostReports({A: steps(1, 10, 1.0)}, {A: beat(A, 10, 10)}), T0)
    watch.merge(HostReports({A: steps(8, 20, 2.0)}, {A: beat(A, 20, 20)}, unreadable=1), T0)
    watch.merge(HostReports({}, {A: beat(A, 15, 15)}, unreadable=2), T0)
    assert sorted(watch.samples[A]) == list(range(1, 21))
    assert watch.samples[A][8].busy_s == 2.0 and watch.samples[A][7].busy_s == 1.0
    assert watch.beats[A].step == 20 and watch.unreadable == 3
    assert watch.start_step() == 0


def test_a_beat_of_the_same_time_read_later_wins_and_nothing_read_starts_at_0():
    watch = HostWatch("attempt")
    assert watch.start_step() == 0 and watch.view().scores == ()
    watch.merge(HostReports({}, {A: beat(A, 10, 10)}), T0)
    saving = HostBeat(A, HostPhase.CHECKPOINT_SAVE, 10, T0 + timedelta(seconds=10), T0)
    watch.merge(HostReports({}, {A: saving}), T0)
    assert watch.beats[A] is saving


@pytest.mark.parametrize("steps_a, steps_b, want", [
    (steps(1, 51, 0.5, 1.0), steps(1, 51, 0.5, 1.0), None),   # 49 steady steps: not yet
    (steps(1, 52, 0.5, 1.0), (), 120.0),                      # 50: the floor
    (steps(1, 52, 0.5, 30.0), steps(1, 20, 0.5, 31.0), 155.0),   # 5x the longest, any host
])
def test_the_step_timeout_is_learned_from_the_steady_steps(steps_a, steps_b, want):
    watch = HostWatch("attempt")
    watch.merge(HostReports({A: steps_a, B: steps_b} if steps_b else {A: steps_a}, {}), T0)
    assert watch.view().step_timeout_s == want


def test_warm_up_and_checkpoint_steps_do_not_teach_the_timeout():
    watch = HostWatch("attempt")
    warm = (StepSample(1, 300.0, 600.0), StepSample(2, 1.0, 400.0))    # the compile step
    saved = tuple(StepSample(s, 0.5, 500.0, True) for s in range(3, 6))
    watch.merge(HostReports({A: warm + saved + steps(6, 60, 0.5, 1.0)}, {}), T0)
    assert watch.view().step_timeout_s == 120.0


def test_the_bounds_fit_the_scores_and_the_log_reads():
    # Every host keeps 20 of the scores' windows (its own best reaches back over them); the
    # first read looks back as far as process 0's progress read does.
    assert KEEP_STEPS == 20 * DEFAULTS.window
    assert FIRST_LOOK_S == SINCE_SECONDS and OVERLAP_S == 30
    with pytest.raises(FrozenInstanceError):
        HostWatch("a").view().message = "x"


def test_the_start_is_the_earliest_step_of_any_host():
    watch = HostWatch("attempt")
    watch.merge(HostReports({A: steps(10, 20, 1.0), B: steps(8, 8, 1.0)}, {}), T0)
    assert watch.start_step() == 7
    watch.merge(HostReports({A: steps(9, 9, 1.0)}, {}), T0)   # not earlier than 8
    assert watch.start_step() == 7


def test_each_host_keeps_only_its_newest_steps_and_the_start_stays():
    watch = HostWatch("attempt")
    watch.merge(HostReports({A: steps(101, 100 + KEEP_STEPS + 50, 1.0)}, {}), T0)
    assert min(watch.samples[A]) == 151 and len(watch.samples[A]) == KEEP_STEPS
    assert watch.start_step() == 100   # the attempt's start, not the oldest step kept


@pytest.mark.parametrize("read_at, now_s, want", [
    (None, 0, FIRST_LOOK_S),
    (0, 10, 10 + OVERLAP_S),
    (0, 0.2, 1 + OVERLAP_S),
    (0, 0, 1 + OVERLAP_S),
    (0, 10_000, FIRST_LOOK_S),
])
def test_how_far_back_the_next_read_looks(read_at, now_s, want):
    watch = HostWatch("attempt")
    watch.read_at = None if read_at is None else T0 + timedelta(seconds=read_at)
    assert watch.since_seconds(T0 + timedelta(seconds=now_s)) == want


def test_the_view_scores_from_the_attempts_start_and_names_the_slow_host():
    watch = HostWatch("attempt")
    fast, slow = steps(51, 52, 30.0, 31.0) + steps(53, 80, 0.1, 1.2), \
        steps(51, 52, 30.0, 31.0) + steps(53, 80, 0.3, 1.2)
    watch.merge(HostReports({A: fast, B: slow}, {A: beat(A, 80, 5), B: beat(B, 80, 6)}), T0)
    view = watch.view()
    assert [(s.host, s.flagged) for s in view.scores] == [(A, False), (B, True)]
    assert view.scores[1].samples == 28 and round(view.scores[1].vs_fastest, 3) == 0.833
    assert [b.host for b in view.beats] == [A, B] and view.scored == 2
    assert view.flagged == (view.scores[1],)
    assert view.message.startswith(f"host {B} at 0.83 (busy 0.3 s/step")


# -- the status decided from the view ------------------------------------------------------

def score(host: str, vs_fastest: float, flagged: bool, vs_own_best: float = 1.0) -> HostScore:
    return HostScore(host, vs_fastest, vs_own_best, flagged, 30, 0.3, 0.1, 0.1, 1.2)


def view(*scores: HostScore, message: str = "the sentence") -> HostsView:
    return HostsView(scores, tuple(beat(s.host, 5, 1) for s in scores), message, 0)


def prev_with(*flagged: str) -> HostsStatus:
    return HostsStatus(reporting=2, scored=2, slow_host=flagged[0] if flagged else None,
                       slowest=[HostScoreStatus(host=h, score=0.8, vs_fastest=0.8,
                                                vs_own_best=1.0, busy_seconds=0.3, steps=30,
                                                flagged=True) for h in flagged])


@pytest.mark.parametrize("name, prev, new, display, condition, events", [
    ("nothing scored yet: figures, no condition, no Event",
     None, view(HostScore(A, None, None, False, 3, None, None, None)), None, None, []),
    ("healthy: the condition False, no Event",
     None, view(score(A, 1.0, False), score(B, 0.97, False)), None,
     (False, "NoSlowHost"), []),
    ("a host flagged: the condition True, the column, a Warning",
     None, view(score(A, 1.0, False), score(B, 0.8, True)), f"{B} 0.80",
     (True, "SlowHost"), [("Warning", "SlowHost")]),
    ("the same host flagged again: no second Event",
     prev_with(B), view(score(A, 1.0, False), score(B, 0.78, True)), f"{B} 0.78",
     (True, "SlowHost"), []),
    ("another host joins: a Warning again; the lowest first, the others counted",
     prev_with(B), view(score(A, 0.7, True), score(B, 0.8, True)), f"{A} 0.70 +1",
     (True, "SlowHost"), [("Warning", "SlowHost")]),
    ("flagged on its own best: its lower score is the one shown",
     None, view(score(A, 1.0, True, vs_own_best=0.6)), f"{A} 0.60",
     (True, "SlowHost"), [("Warning", "SlowHost")]),
    ("the host recovers: False again, a Normal Event",
     prev_with(B), view(score(A, 1.0, False), score(B, 0.95, False)), None,
     (False, "NoSlowHost"), [("Normal", "SlowHostRecovered")]),
])
def test_decide_hosts(name, prev, new, display, condition, events):
    decided = decide_hosts(prev, new)
    assert decided.hosts.display == display
    assert decided.hosts.slow_host == (display.split()[0] if display else None)
    assert (None if decided.condition is None else decided.condition[:2]) == condition
    assert [e[:2] for e in decided.events] == events
    assert all(e[2] for e in decided.events)
    assert decided.hosts.scored == new.scored and decided.hosts.reporting == len(new.beats)


def test_figures_are_rounded_and_long_sentences_cut_to_the_fields_bounds():
    slow = HostScore(A, 0.81234, 0.95678, True, 30, 0.123456, 0.1, 0.0123456, 1.23456)
    decided = decide_hosts(None, view(slow, message="x" * 5000))
    [row] = decided.hosts.slowest
    assert (row.score, row.vs_fastest, row.vs_own_best, row.busy_seconds, row.step_seconds) == (
        0.81, 0.81, 0.96, 0.123, 1.23)
    assert decided.hosts.display == f"{A} 0.81"
    assert len(decided.hosts.message) == 4096 and len(decided.condition.message) == 4096
    assert [len(e[2]) for e in decided.events] == [1024]
    recovered = decide_hosts(decided.hosts, view(score(A, 1.0, False), message="y" * 5000))
    assert [len(e[2]) for e in recovered.events] == [1024]


def test_not_read_this_pass_the_figures_stand():
    prev = prev_with(B)
    assert decide_hosts(prev, None) == (prev, None, ())


def test_the_status_lists_the_flagged_then_the_lowest_scored_at_most_eight():
    scores = [score(f"slice-0/host-{i}", 1.0 - i / 100, i in (3, 7)) for i in range(12)]
    decided = decide_hosts(None, view(*scores))
    assert [h.host for h in decided.hosts.slowest] == [
        "slice-0/host-7", "slice-0/host-3", "slice-0/host-11", "slice-0/host-10",
        "slice-0/host-9", "slice-0/host-8", "slice-0/host-6", "slice-0/host-5"]
    assert [h.flagged for h in decided.hosts.slowest] == [True, True] + [False] * 6
    assert decided.hosts.slowest[0].model_dump(by_alias=True, exclude_none=True) == {
        "host": "slice-0/host-7", "score": 0.93, "vsFastest": 0.93, "vsOwnBest": 1.0,
        "busySeconds": 0.3, "stepSeconds": 1.2, "steps": 30, "flagged": True}
