"""Goodput accounting across restarts, pure: time integrated by phase, starts folded when a new
one appears, lost steps from the previous start's furthest step and the new start's resume
point, exit records preferred over the last read, a trainer without a timeline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tpujob.api.status import Goodput, Phase
from tpujob.controller.goodput import account, summary
from tpujob.controller.trainer_reports import TimelineReading

T0 = datetime(2026, 1, 1, tzinfo=UTC)
pytestmark = pytest.mark.unit


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def timeline(attempt: str, *, step=None, steps=0, resumed=None, productive=0.0, compile_s=0.0,
             previous=None, median=None) -> dict:
    return {"attempt": attempt, "step": step, "steps": steps, "resumed_from_step": resumed,
            "seconds": {"productive": productive, "program_startup": compile_s},
            "step_time_median_s": median, "previous": previous}


def run(passes):
    """passes: (seconds, phase, timeline doc or None, finals); returns the last Goodput."""
    g, phase = None, Phase.PENDING
    for seconds, new_phase, doc, finals in passes:
        g = account(g, now=at(seconds), phase_before=phase, phase_after=new_phase,
                    reading=TimelineReading.from_document(doc) if doc else None,
                    finals=tuple(TimelineReading.from_document(f) for f in finals))
        phase = new_phase
    return g


@pytest.mark.parametrize("name, passes, want", [
    ("queued then running: phases integrate",
     [(0, Phase.QUEUED, None, []), (30, Phase.STARTING, None, []),
      (40, Phase.RUNNING, timeline("a", step=10, steps=10, productive=50), []),
      (100, Phase.RUNNING, timeline("a", step=20, steps=20, productive=55), [])],
     dict(queued_seconds=30, wall_seconds=70, productive_seconds=55, lost_steps=0,
          attempts=1, percent=round(100 * 55 / 70, 2))),
    ("a restart: steps past the resume point are lost, at the old start's mean step time",
     [(0, Phase.STARTING, None, []),
      (10, Phase.RUNNING, timeline("a", step=25, steps=25, productive=50), []),
      (20, Phase.RESTARTING, None, []),
      (35, Phase.RUNNING, timeline("b", step=21, steps=1, resumed=20, productive=2), [])],
     dict(wall_seconds=35, recovery_seconds=15, lost_steps=5, attempts=2,
          productive_seconds=50 + 2 - 5 * 2.0)),
    ("a new start is taken in once it knows where it resumed from",
     [(0, Phase.STARTING, None, []),
      (10, Phase.RUNNING, timeline("a", step=25, steps=25, productive=50), []),
      (20, Phase.RESTARTING, None, []),
      (30, Phase.RUNNING, timeline("b", compile_s=3), []),
      (35, Phase.RUNNING, timeline("b", step=21, steps=1, resumed=20, productive=2), [])],
     dict(lost_steps=5, attempts=2)),
    ("the new start's record of the old one is later than the last read: it wins",
     [(0, Phase.STARTING, None, []),
      (10, Phase.RUNNING, timeline("a", step=25, steps=25, productive=50), []),
      (20, Phase.RESTARTING, None, []),
      (35, Phase.RUNNING, timeline("b", step=21, steps=1, resumed=20, productive=2,
                                   previous=timeline("a", step=27, steps=27, productive=54)),
       [])],
     dict(lost_steps=7, productive_seconds=54 + 2 - 7 * 2.0)),
    ("exit records in termination messages complete the last start",
     [(0, Phase.STARTING, None, []),
      (10, Phase.RUNNING, timeline("a", step=25, steps=25, productive=50), []),
      (12, Phase.SUCCEEDED, None, [timeline("a", step=30, steps=30, productive=60)])],
     dict(productive_seconds=60, lost_steps=0, wall_seconds=12)),
    ("a start the operator never saw is folded from the record the next one read",
     [(0, Phase.STARTING, None, []),
      (10, Phase.RUNNING, timeline("a", step=25, steps=25, productive=50), []),
      (40, Phase.RUNNING, timeline("c", step=31, steps=1, resumed=30, productive=1,
                                   previous=timeline("b", step=33, steps=13, productive=26)),
       [])],
     dict(lost_steps=3, attempts=2, productive_seconds=50 + 26 + 1 - 3 * 2.0)),
    ("no checkpoint: a restart from scratch loses every step",
     [(0, Phase.RUNNING, timeline("a", step=8, steps=8, productive=8), []),
      (5, Phase.RUNNING, timeline("b", step=0, steps=0, resumed=0), [])],
     dict(lost_steps=8, productive_seconds=0)),
    ("a trainer without a timeline: only what the operator sees",
     [(0, Phase.QUEUED, None, []), (5, Phase.RUNNING, None, []),
      (65, Phase.RESTARTING, None, []), (70, Phase.RUNNING, None, [])],
     dict(percent=None, productive_seconds=None, queued_seconds=5, wall_seconds=65,
          recovery_seconds=5, attempts=2)),
    ("a timeline first served after its start counts that start once",
     [(0, Phase.STARTING, None, []), (5, Phase.RUNNING, None, []),
      (9, Phase.RUNNING, timeline("a", step=3, steps=3, productive=3), []),
      (20, Phase.RESTARTING, None, []),
      (25, Phase.RUNNING, timeline("b", step=3, steps=0, resumed=3), [])],
     dict(attempts=2, lost_steps=0)),
    ("a timeline served in the pass every host runs counts its start once",
     [(0, Phase.STARTING, None, []),
      (5, Phase.RUNNING, timeline("a", step=0, steps=0, resumed=0), [])],
     dict(attempts=1)),
])
def test_accounting(name, passes, want):
    g = run(passes)
    got = {k: getattr(g, k) for k in want}
    assert got == pytest.approx(want), name


def test_passes_a_fraction_of_a_second_apart_add_up_to_the_time_that_passed():
    # The status keeps whole seconds: 40 passes 0.4 s apart are 16 s, not 40.
    kept = None
    for i in range(41):  # through the status, as the operator reads it back
        kept = account(kept, now=at(0.4 * i), phase_before=Phase.RUNNING,
                       phase_after=Phase.RUNNING)
        kept = Goodput.model_validate(kept.to_dict())
    assert kept.wall_seconds == pytest.approx(16, abs=1)


def test_categories_add_up_to_wall_time_with_other_taking_the_rest():
    g = run([(0, Phase.STARTING, None, []),
             (100, Phase.RUNNING, timeline("a", step=10, steps=10, productive=60,
                                           compile_s=15), [])])
    b = g.badput
    assert b.program_startup == 15 and b.other == pytest.approx(100 - 60 - 15)
    assert g.not_measured == []
    assert sum(v for v in b.to_dict().values()) + g.productive_seconds == pytest.approx(100)


def test_a_trainer_without_a_timeline_names_what_was_not_measured():
    g = run([(0, Phase.RUNNING, None, []), (10, Phase.RUNNING, None, [])])
    assert "productive" in g.not_measured and "wastedProgressFromDisruption" in g.not_measured
    assert g.badput.program_startup is None and "not measured" in summary(g)


def test_the_status_alone_carries_the_accounting_across_an_operator_restart():
    passes = [(0, Phase.STARTING, None, []),
              (10, Phase.RUNNING, timeline("a", step=25, steps=25, productive=50), []),
              (20, Phase.RESTARTING, None, [])]
    g = run(passes)
    # A new operator reads the status back (as JSON) and goes on from there.
    kept = Goodput.model_validate(g.to_dict())
    after = account(kept, now=at(35), phase_before=Phase.RESTARTING, phase_after=Phase.RUNNING,
                    reading=TimelineReading.from_document(
                        timeline("b", step=21, steps=1, resumed=20, productive=2)))
    assert after.lost_steps == 5 and after.recovery_seconds == 15 and after.attempts == 2


@pytest.mark.parametrize("doc", [None, {}, {"attempt": 3}, {"attempt": ""}, "x",
                                 {"attempt": "x" * 65}])
def test_what_is_not_a_timeline_is_ignored(doc):
    assert TimelineReading.from_document(doc) is None


@pytest.mark.parametrize("productive, shown", [
    (29.52, "29.5%"), (2.2, "2.2%"), (4.19, "4.2%"), (92.149, "92.1%"), (100.0, "100.0%"),
    (0.0, "0.0%"), (None, "-")])
def test_goodput_prints_as_a_percent_with_one_decimal(productive, shown):
    # Wall time 100 s: the productive seconds are the percent.
    doc = None if productive is None else timeline("a", step=1, steps=1, productive=productive)
    g = run([(0, Phase.RUNNING, None, []), (100, Phase.RUNNING, doc, [])])
    assert g.display == shown
    assert g.percent == (None if productive is None else pytest.approx(productive, abs=0.005))


def _numbers(value):
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return [value] if isinstance(value, float) else []


def test_the_status_holds_no_raw_floats_for_describe_to_print():
    # kubectl describe prints a float as Go's %v does: 1.795681820864016e+09 for an instant in
    # Unix seconds, every digit of 0.1234567891. The status keeps milliseconds and 0.01 points.
    messy = timeline("a", step=7, steps=7, productive=5.123456789, compile_s=1.987654321,
                     median=0.123456789)
    g = run([(0, Phase.STARTING, None, []), (10.123456789, Phase.RUNNING, messy, []),
             (21.987654321, Phase.RUNNING, messy, [])])
    d = g.to_dict()
    assert d["accountedUntil"] == "2026-01-01T00:00:21.987654Z"
    numbers = _numbers(d)
    assert len(numbers) > 10
    assert all(round(n, 3) == n and abs(n) < 1e6 for n in numbers), numbers
    # Read back (as an operator restarted would), it goes on from the same instant.
    kept = Goodput.model_validate(d)
    after = account(kept, now=at(31.987654321), phase_before=Phase.RUNNING,
                    phase_after=Phase.RUNNING)
    assert after.wall_seconds == pytest.approx(31.988, abs=2e-3)


def test_a_status_written_with_unix_seconds_is_read_back():
    kept = Goodput.model_validate({"wallSeconds": 5.0, "accountedUntil": at(5).timestamp()})
    after = account(kept, now=at(7.5), phase_before=Phase.RUNNING, phase_after=Phase.RUNNING)
    assert after.wall_seconds == pytest.approx(7.5)
