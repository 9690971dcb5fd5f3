"""The host report: every process (not only process 0) says on its own stdout, where the
operator reads it from the pod log, which phase it is in, the last step it completed, when it
last moved, and, per step, how long it was busy with its own host-side work and how long it
waited for the step's result. A slow host is the one with the most busy time (the others wait
for it at the step's collectives); a hung one is the one whose line stops coming or whose step
stays behind.

One compact JSON line per report (`contract.HOST_REPORT_EVENT`, docs/trainer.md):

    {"event":"host_report","time":1718000012.5,"process":1,"slice":0,"host":1,"phase":"step",
     "step":57,"moved_at":1718000012.41,"interval_s":10.0,"waiting":true,
     "steps":[[56,0.0123,0.0456,0],[57,0.0119,0.0461,0]]}

A line goes out at each phase change (from the thread that changes it) and every
`interval_s` from a daemon thread, which keeps beating while the main thread waits in a
collective or a compile. The steps completed since the last line ride on the next one, so the
per-step cost on the main thread is a lock and an append; at most `max_steps` of them (the
newest), the rest counted as `dropped`: the operator scores medians over a few dozen steps.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TextIO

from tpujob_trainer.contract import HOST_REPORT_EVENT, HostPhase
from tpujob_trainer.env import ProcessEnv

MAX_STEPS_PER_LINE = 100


class HostReporter:
    """This process's phase, step and step times, written as host report lines. Thread-safe."""

    def __init__(self, identity: dict[str, int], *, interval_s: float, out: TextIO | None = None,
                 clock: Callable[[], float] = time.time, max_steps: int = MAX_STEPS_PER_LINE):
        self._identity = dict(identity)
        self._interval_s = interval_s
        self._out = out
        self._clock = clock
        self._lock = threading.Lock()        # the state
        self._write_lock = threading.Lock()  # one line at a time, in the order they were made
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._phase = HostPhase.STARTUP
        self._step = 0
        self._moved_at = clock()
        self._steps: deque[list[Any]] = deque(maxlen=max_steps)
        self._dropped = 0
        self._overlapped = False   # a checkpoint save or restore since the last step ended
        self._waiting = False      # the main thread waits on the step (for the other hosts)

    @classmethod
    def for_process(cls, penv: ProcessEnv, out: TextIO | None = None) -> HostReporter | None:
        """This process's reporter, started, from what the operator told it; None when reports
        are switched off (TPUJOB_HOST_REPORTS=0)."""
        if not penv.host_reports:
            return None
        identity = {"process": penv.process_id, "slice": penv.slice_id, "host": penv.host_index}
        if penv.containers_per_host > 1:
            identity["container"] = penv.container_index
        reporter = cls(identity, interval_s=penv.host_report_interval_s, out=out)
        reporter.start()
        return reporter

    def start(self) -> None:
        """The first line (phase startup), then a heartbeat every `interval_s`."""
        self._emit()
        self._thread = threading.Thread(target=self._beat, name="tpujob-host-report",
                                        daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._closed.wait(self._interval_s):
            self._emit()

    def phase(self, phase: HostPhase, step: int | None = None) -> None:
        """This process entered `phase` (at `step`, where it changed): a line now."""
        with self._lock:
            if phase in (HostPhase.CHECKPOINT_SAVE, HostPhase.CHECKPOINT_RESTORE):
                self._overlapped = True
            self._moved(phase, step)
        self._emit()

    def step_done(self, step: int, busy_s: float, wait_s: float, synced: bool = False) -> None:
        """Step `step`'s result is back: `busy_s` of this process's own work since the previous
        step's result, then `wait_s` blocked on this one's. `synced`: the loop waited for this
        step before dispatching the next (a checkpoint or a stop): not a steady step."""
        with self._lock:
            checkpoint = synced or self._overlapped
            self._overlapped = synced  # the save that follows a synced read lands in the next step
            if len(self._steps) == self._steps.maxlen:
                self._dropped += 1
            self._steps.append([step, round(busy_s, 6), round(wait_s, 6), int(checkpoint)])
            first = self._phase is not HostPhase.STEP
            self._moved(HostPhase.STEP, step)
        if first:
            self._emit()

    def waiting(self, flag: bool) -> None:
        """The main thread starts (True) or stops (False) waiting on the runtime for a step:
        where it waits for the other hosts. A hung job's hosts that are not waiting are the
        ones not in the collective the others wait in."""
        with self._lock:
            self._waiting = flag

    def _moved(self, phase: HostPhase, step: int | None) -> None:
        self._phase = phase
        if step is not None:
            self._step = step
        self._moved_at = self._clock()

    def line(self) -> str:
        """The next report line; the steps it carries are taken off the queue."""
        with self._lock:
            doc: dict[str, Any] = {"event": HOST_REPORT_EVENT, "time": round(self._clock(), 3),
                                   **self._identity, "phase": self._phase.value,
                                   "step": self._step, "moved_at": round(self._moved_at, 3),
                                   "interval_s": self._interval_s, "waiting": self._waiting}
            if self._steps:
                doc["steps"] = list(self._steps)
                self._steps.clear()
            if self._dropped:
                doc["dropped"] = self._dropped
                self._dropped = 0
        return json.dumps(doc, separators=(",", ":"))

    def _emit(self) -> None:
        with self._write_lock:
            text = self.line() + "\n"
            out = sys.stdout if self._out is None else self._out
            try:
                out.write(text)
                out.flush()
            except (OSError, ValueError):  # stdout closed on the way out: nothing to report to
                pass

    def close(self) -> None:
        """Stop beating; a last line carries the steps not yet reported."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._emit()
