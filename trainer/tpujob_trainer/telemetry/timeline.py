"""The trainer's own timeline for one process start: where its seconds went (accelerator and
distributed init, training preparation, checkpoint restore, compilation up to the first step,
productive steps, waiting for data, checkpoint saves that block the loop), the steps it took, and
how it ended.

Served cumulatively in the `/progress` document (`goodput`) and as Prometheus gauges; written on
exit to `<output>/goodput/<attempt>/process-<i>.json` (storage that outlives the process) and,
compactly, into the termination message. The next start of the job reads the previous attempt's
records back and serves them as `previous`, so the operator learns the exact last step of an
attempt it may not have read to the end. Field names are a contract with the operator
(`contract.py`, docs/goodput.md).

Time is charged by moving a mark: `charge_until_now(category)` gives the seconds since the last
mark to `category`; a step's completion gives the seconds since the last mark, less the data and
checkpoint waits charged in between, to `productive`.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import threading
import time
from typing import Any

from tpujob_trainer.contract import GOODPUT_CATEGORIES, PRODUCTIVE, RECORD_DIR

log = logging.getLogger(__name__)

WRITE_TIMEOUT_S = 10.0
_MAX_STEP_TIMES = 100_000


def process_start_time() -> float:
    """When this OS process started (Unix seconds), from /proc; now where /proc is missing."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 (starttime), counted after the ")" of the name
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        started = boot + ticks / os.sysconf("SC_CLK_TCK")
        return min(started, time.time())
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def compile_outcome(how: str, jax_cache_hit: bool) -> str:
    """How a start got its step program (contract.COMPILE_CACHE_OUTCOMES): the whole compiled
    step loaded from the job's executable cache, a hit in JAX's compilation cache, or an XLA
    compile."""
    if how == "loaded":
        return "executable"
    return "hit" if jax_cache_hit else "miss"


def step_time_figures(step_times: list[float]) -> dict[str, float | None]:
    """Median and maximum step time, and the maximum's deviation from the median (percent)."""
    if not step_times:
        return {"step_time_median_s": None, "step_time_max_s": None,
                "step_time_max_deviation_pct": None}
    median = statistics.median(step_times)
    worst = max(step_times)
    return {"step_time_median_s": median, "step_time_max_s": worst,
            "step_time_max_deviation_pct": (worst - median) / median * 100 if median > 0 else None}


class Timeline:
    """One process start's seconds by category, steps and end; thread-safe."""

    def __init__(self, *, started_at: float | None = None, process_index: int = 0,
                 clock=time.time):
        self._lock = threading.Lock()
        self._clock = clock
        self.started_at = process_start_time() if started_at is None else started_at
        self.process_index = process_index
        self.attempt = f"{int(self.started_at * 1000):x}"
        self.seconds = dict.fromkeys(GOODPUT_CATEGORIES, 0.0)
        self._mark = self.started_at
        self._excluded = 0.0            # data/checkpoint waits charged since the mark
        self.resumed_from_step: int | None = None
        self.step: int | None = None    # last completed step
        self.steps = 0                  # steps completed by this process start
        self._step_times: list[float] = []
        self.end: str | None = None
        self.ended_at: float | None = None
        self.previous: dict[str, Any] | None = None
        # How this start got its step program, and its first step: the last parts of a
        # restart's recovery (docs/goodput.md).
        self.compile_cache: str | None = None   # COMPILE_CACHE_OUTCOMES
        self.first_step_at: float | None = None

    def charge_until_now(self, category: str) -> None:
        """The seconds since the last mark go to `category`; the mark moves to now."""
        with self._lock:
            now = self._clock()
            self.seconds[category] += max(0.0, now - self._mark - self._excluded)
            self._mark, self._excluded = now, 0.0

    def charge(self, category: str, seconds: float) -> None:
        """A wait inside the step loop (data, a blocking checkpoint save): not productive."""
        with self._lock:
            self.seconds[category] += max(0.0, seconds)
            self._excluded += max(0.0, seconds)

    def step_done(self, step: int, step_time_s: float | None = None) -> None:
        """Step `step` completed now: the time since the last mark, less waits, was productive."""
        with self._lock:
            now = self._clock()
            self.seconds[PRODUCTIVE] += max(0.0, now - self._mark - self._excluded)
            self._mark, self._excluded = now, 0.0
            first = self.steps == 0
            if first:
                self.first_step_at = now
            self.step, self.steps = step, self.steps + 1
            # The first step of a start carries what is left of warm-up: not a step time.
            if step_time_s is not None and not first and len(self._step_times) < _MAX_STEP_TIMES:
                self._step_times.append(step_time_s)

    def finish(self, end: str) -> None:
        with self._lock:
            if self.end is None:
                self.end, self.ended_at = end, self._clock()

    def document(self) -> dict[str, Any]:
        """The `goodput` field of /progress (and the exit record): cumulative, this start only."""
        with self._lock:
            return {"attempt": self.attempt, "process_index": self.process_index,
                    "started_at": self.started_at, "updated_at": self._clock(),
                    "resumed_from_step": self.resumed_from_step, "step": self.step,
                    "steps": self.steps, "seconds": dict(self.seconds),
                    **step_time_figures(self._step_times),
                    "compile_cache": self.compile_cache, "first_step_at": self.first_step_at,
                    "end": self.end, "ended_at": self.ended_at, "previous": self.previous}

    def compact(self) -> dict[str, Any]:
        """What goes into the termination message (Kubernetes keeps 4 KiB of it)."""
        doc = self.document()
        return {"attempt": doc["attempt"], "process_index": doc["process_index"],
                "step": doc["step"], "steps": doc["steps"],
                "resumed_from_step": doc["resumed_from_step"],
                "seconds": {k: round(v, 3) for k, v in doc["seconds"].items()},
                "step_time_median_s": doc["step_time_median_s"], "end": doc["end"]}


# -- records on storage ---------------------------------------------------------------------

def _fs(output: str):
    import fsspec
    return fsspec.core.url_to_fs(output.rstrip("/"))


def write_record(output: str, timeline: Timeline, timeout_s: float = WRITE_TIMEOUT_S) -> bool:
    """Write this start's timeline under `<output>/goodput/`; bounded, never raises (a process
    on its way out must not hang on storage)."""
    doc = timeline.document()
    done = threading.Event()

    def write() -> None:
        try:
            fs, root = _fs(output)
            folder = f"{root}/{RECORD_DIR}/{doc['attempt']}"
            fs.makedirs(folder, exist_ok=True)
            with fs.open(f"{folder}/process-{doc['process_index']}.json", "w") as f:
                f.write(json.dumps(doc, default=str))
            done.set()
        except Exception as e:  # storage trouble: the operator keeps what it last read
            log.warning("goodput record not written to %s: %s", output, e)

    thread = threading.Thread(target=write, name="tpujob-goodput-record", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return done.is_set()


def summarize_attempt(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One attempt from its processes' exit records: the furthest step any of them completed,
    process 0's seconds (the ones the operator reads while it runs), and how it ended."""
    if not records:
        return None
    main = next((r for r in records if r.get("process_index") == 0), None)
    steps = [r["step"] for r in records if isinstance(r.get("step"), int)]
    return {"attempt": records[0].get("attempt"), "step": max(steps) if steps else None,
            "started_at": min(r.get("started_at") or 0 for r in records),
            "ended_at": max((r.get("ended_at") or 0 for r in records), default=None),
            "end": (main or records[0]).get("end"),
            "seconds": main.get("seconds") if main else None,
            "steps": main.get("steps") if main else None,
            "step_time_median_s": main.get("step_time_median_s") if main else None,
            "processes": len(records)}


def read_previous(output: str, attempt: str) -> dict[str, Any] | None:
    """The newest earlier attempt's summary from its exit records; None when there is none or
    storage cannot be read."""
    try:
        fs, root = _fs(output)
        base = f"{root}/{RECORD_DIR}"
        if not fs.exists(base):
            return None
        names = sorted((p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(base, detail=False)),
                       key=lambda n: int(n, 16) if _is_hex(n) else -1)
        earlier = [n for n in names if _is_hex(n) and int(n, 16) < int(attempt, 16)]
        if not earlier:
            return None
        folder = f"{base}/{earlier[-1]}"
        records = []
        for path in fs.ls(folder, detail=False):
            try:
                records.append(json.loads(fs.cat_file(path)))
            except (OSError, ValueError):
                continue
        return summarize_attempt(records)
    except Exception as e:
        log.warning("goodput records under %s not read: %s", output, e)
        return None


def _is_hex(name: str) -> bool:
    try:
        int(name, 16)
    except ValueError:
        return False
    return True
