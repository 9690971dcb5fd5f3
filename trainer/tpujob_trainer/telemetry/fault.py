"""Injected host-side slowness, for testing straggler detection on a real run: a process that
spends longer in each step's own work than its peers, as a host with a slow CPU, a noisy
neighbour or a slow input pipeline does. Off unless a test or a person sets
TPUJOB_FAULT_STEP_SLEEP_S or TPUJOB_FAULT_STEP_SLOWDOWN (`tpujob_trainer.env`).

`slowdown` is a fraction of the process's recent step time without the injected sleep (the
median of its last few loop iterations), so that 0.2 makes every step of the job 20% longer
whatever the step time of the machine it runs on; `sleep_s` is a fixed time on top.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from statistics import median

RECENT_STEPS = 5


class StepFault:
    """Called once per step at the point of the step's host work; sleeps the injected time."""

    def __init__(self, sleep_s: float = 0.0, slowdown: float = 0.0, *,
                 clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep):
        if sleep_s < 0 or slowdown < 0:
            raise ValueError(f"sleep_s {sleep_s} and slowdown {slowdown} must be >= 0")
        self.sleep_s = sleep_s
        self.slowdown = slowdown
        self._clock = clock
        self._sleep = sleep
        self._recent: deque[float] = deque(maxlen=RECENT_STEPS)
        self._last: float | None = None    # when the previous call returned

    @property
    def active(self) -> bool:
        return self.sleep_s > 0 or self.slowdown > 0

    def __call__(self) -> float:
        """Sleep this step's injected time; returns it."""
        now = self._clock()
        if self._last is not None:
            # The previous iteration's time, its injected sleep left out.
            self._recent.append(max(0.0, now - self._last))
        extra = self.slowdown * median(self._recent) if self._recent and self.slowdown else 0.0
        pause = self.sleep_s + extra
        if pause > 0:
            self._sleep(pause)
        self._last = self._clock()   # the next iteration's time starts after the sleep
        return pause
