"""The injected straggler: a fixed sleep, or a fraction of the process's recent step time with
its own sleeps left out, so that a slowdown of 0.2 makes each step 20% longer than it was."""

from __future__ import annotations

import pytest

from tpujob_trainer.telemetry.fault import RECENT_STEPS, StepFault

pytestmark = pytest.mark.unit


class FakeTime:
    """A clock that a step's own work and the fault's sleeps both move."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def run(fault: StepFault, t: FakeTime, work: list[float]) -> list[float]:
    """One call per step, each step's own work between calls; the sleeps made."""
    out = []
    for seconds in work:
        out.append(fault())
        t.now += seconds
    return out


def test_a_fixed_sleep_every_step():
    t = FakeTime()
    fault = StepFault(0.25, clock=t.clock, sleep=t.sleep)
    assert run(fault, t, [1.0] * 3) == [0.25, 0.25, 0.25] and t.slept == [0.25] * 3


def test_a_slowdown_is_a_fraction_of_the_steps_without_the_sleeps():
    t = FakeTime()
    fault = StepFault(slowdown=0.2, clock=t.clock, sleep=t.sleep)
    slept = run(fault, t, [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0])
    # The first step has no history; then 20% of the median of the last steps' own work.
    # The median follows once most of the recent steps took 2 s.
    assert slept == pytest.approx([0.0, 0.2, 0.2, 0.2, 0.2, 0.2, 0.4])
    assert len(t.slept) == 6   # nothing to sleep on the first step: no sleep at all
    assert fault.active and not StepFault().active


def test_the_history_is_the_last_few_steps():
    t = FakeTime()
    fault = StepFault(slowdown=1.0, clock=t.clock, sleep=t.sleep)
    slept = run(fault, t, [10.0] * RECENT_STEPS + [1.0] * (RECENT_STEPS // 2 + 1) + [1.0])
    assert slept[-1] == pytest.approx(1.0)  # the 10 s steps no longer the median
    assert slept[RECENT_STEPS] == pytest.approx(10.0)


def test_both_add_up_and_a_negative_is_refused():
    t = FakeTime()
    fault = StepFault(0.5, 0.1, clock=t.clock, sleep=t.sleep)
    assert run(fault, t, [2.0, 2.0]) == pytest.approx([0.5, 0.7])
    with pytest.raises(ValueError, match="must be >= 0"):
        StepFault(-1.0)


def test_steps_shorter_than_a_second_count_as_they_are():
    t = FakeTime()
    fault = StepFault(slowdown=0.5, clock=t.clock, sleep=t.sleep)
    assert run(fault, t, [0.25, 0.25, 0.25]) == pytest.approx([0.0, 0.125, 0.125])
