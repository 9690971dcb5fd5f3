"""The host report, in this process: the line's form and identity, the steps batched onto the
next line (the newest kept, the rest counted), a line at each phase change, the heartbeat that
keeps coming while the main thread is blocked; the step loop splitting each step into busy and
wait time with no read-back of its own, and marking the steps a checkpoint touched; the
environment that switches it and names the host."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from tests.trainer.test_loop_steps import Checkpointer, Data, Recorder
from tpujob_trainer.config import TrainerConfig
from tpujob_trainer.contract import HOST_REPORT_FIELDS, HostPhase
from tpujob_trainer.env import EnvError, ProcessEnv
from tpujob_trainer.loop import StepContext, StopSignal, _run_steps, _Timer
from tpujob_trainer.telemetry.fault import StepFault
from tpujob_trainer.telemetry.host_report import HostReporter

pytestmark = pytest.mark.unit
ME = {"process": 3, "slice": 1, "host": 1}


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class Lines:
    """A stdout that keeps the JSON lines and signals each one."""

    def __init__(self):
        self.docs: list[dict] = []
        self.arrived = threading.Condition()

    def write(self, text: str) -> None:
        assert text.endswith("\n") and text.count("\n") == 1
        with self.arrived:
            self.docs.append(json.loads(text))
            self.arrived.notify_all()

    def flush(self) -> None:
        pass

    def wait_for(self, predicate, timeout: float = 30) -> dict:
        with self.arrived:
            assert self.arrived.wait_for(
                lambda: any(predicate(d) for d in self.docs), timeout), self.docs
            return next(d for d in self.docs if predicate(d))


def reporter(clock=None, max_steps=100, interval_s=3600.0) -> tuple[HostReporter, Lines]:
    out = Lines()
    return HostReporter(ME, interval_s=interval_s, out=out, clock=clock or Clock(),
                        max_steps=max_steps), out


def test_a_line_is_compact_json_with_the_contracts_fields_and_takes_the_steps_with_it():
    clock = Clock(1000.0)
    r, out = reporter(clock)
    clock.now = 1001.25
    r.step_done(1, 0.5, 0.25)           # the first step: a line now (its phase begins)
    clock.now = 1002.50049
    r.step_done(2, 0.0000014, 1.2345678)
    clock.now = 1002.7505
    r.step_done(3, 0.25, 0.5)
    clock.now = 1003.0004
    line = r.line()
    assert " " not in line
    assert out.docs == [{"event": "host_report", "time": 1001.25, "process": 3, "slice": 1,
                         "host": 1, "phase": "step", "step": 1, "moved_at": 1001.25,
                         "interval_s": 3600.0, "waiting": False, "steps": [[1, 0.5, 0.25, 0]]}]
    assert json.loads(line) == {
        "event": "host_report", "time": 1003.0, "process": 3, "slice": 1, "host": 1,
        "phase": "step", "step": 3, "moved_at": 1002.75, "interval_s": 3600.0, "waiting": False,
        "steps": [[2, 0.000001, 1.234568, 0], [3, 0.25, 0.5, 0]]}
    assert set(json.loads(line)) <= set(HOST_REPORT_FIELDS)
    assert "steps" not in json.loads(r.line())  # taken by the line before


def test_the_newest_steps_ride_the_line_and_the_older_ones_are_counted_as_dropped():
    r, _ = reporter(max_steps=3)
    r.phase(HostPhase.STEP)
    for step in range(1, 6):
        r.step_done(step, 0.1, 0.2)
    doc = json.loads(r.line())
    assert ([s[0] for s in doc["steps"]], doc["dropped"]) == ([3, 4, 5], 2)
    r.step_done(6, 0.1, 0.2)
    assert "dropped" not in json.loads(r.line())
    r = HostReporter(ME, interval_s=1, out=Lines())  # by default, 100 steps a line
    r.phase(HostPhase.STEP)
    for step in range(1, 102):
        r.step_done(step, 0.1, 0.2)
    doc = json.loads(r.line())
    assert (doc["steps"][0][0], len(doc["steps"]), doc["dropped"]) == (2, 100, 1)


def test_a_line_at_each_phase_change_and_the_steps_a_checkpoint_touched_are_marked():
    clock = Clock(1000.0)
    r, out = reporter(clock)
    r.start()                                  # startup
    clock.now = 1010.0
    r.phase(HostPhase.CHECKPOINT_RESTORE)
    clock.now = 1020.0
    r.phase(HostPhase.COMPILE, 40)
    clock.now = 1030.0
    r.step_done(41, 9.0, 1.0)                  # the first step ends the compile
    r.step_done(42, 0.1, 0.2)
    r.step_done(43, 0.1, 0.2, synced=True)     # read at once: a save follows
    r.phase(HostPhase.CHECKPOINT_SAVE)
    clock.now = 1031.0
    r.phase(HostPhase.STEP)
    r.step_done(44, 2.0, 0.1)                  # carries the save's blocking time
    r.step_done(45, 0.1, 0.2)
    r.close()
    assert [(d["phase"], d["step"], d["moved_at"]) for d in out.docs] == [
        ("startup", 0, 1000.0), ("checkpoint_restore", 0, 1010.0), ("compile", 40, 1020.0),
        ("step", 41, 1030.0), ("checkpoint_save", 43, 1030.0), ("step", 43, 1031.0),
        ("step", 45, 1031.0)]
    steps = [s for d in out.docs for s in d.get("steps", [])]
    assert [(s[0], s[3]) for s in steps] == [(41, 1), (42, 0), (43, 1), (44, 1), (45, 0)]


def test_the_heartbeat_keeps_coming_while_the_main_thread_is_blocked():
    clock = Clock(1000.0)
    r, out = reporter(clock, interval_s=0.01)
    r.start()
    r.phase(HostPhase.COMPILE, 7)
    clock.now = 1600.0   # ten minutes in the compile, as the heartbeat thread's clock says
    try:
        # The main thread waits here, as in a compile or a collective, until a beat arrives.
        beat = out.wait_for(lambda d: d["time"] == 1600.0)
    finally:
        r.close()
    assert (beat["phase"], beat["step"], beat["moved_at"]) == ("compile", 7, 1000.0)
    assert "steps" not in beat


def test_a_reporter_for_this_process_names_its_host_and_can_be_switched_off():
    out = Lines()
    env = ProcessEnv.from_env({"TPUJOB_PROCESS_ID": "5", "TPUJOB_PROCESS_COUNT": "8",
                               "TPUJOB_COORDINATOR_ADDRESS": "h:1", "TPUJOB_SLICE_ID": "1",
                               "TPUJOB_NUM_SLICES": "2", "TPUJOB_CONTAINERS_PER_HOST": "2",
                               "TPUJOB_HOST_REPORT_INTERVAL_S": "3600"})
    r = HostReporter.for_process(env, out=out)
    # A thread that never keeps the process from exiting.
    assert [t.daemon for t in threading.enumerate() if t.name == "tpujob-host-report"] == [True]
    r.close()
    first = out.docs[0]
    assert {k: first[k] for k in ("process", "slice", "host", "container", "phase")} == {
        "process": 5, "slice": 1, "host": 0, "container": 1, "phase": "startup"}
    assert len(out.docs) == 2  # the first line and the last: no beat within the hour
    one_container = Lines()
    HostReporter.for_process(ProcessEnv.from_env({"TPUJOB_HOST_REPORT_INTERVAL_S": "3600"}),
                             out=one_container).close()
    assert "container" not in one_container.docs[0]  # the host alone names the process
    assert HostReporter.for_process(ProcessEnv.from_env({"TPUJOB_HOST_REPORTS": "off"})) is None


@pytest.mark.parametrize("env, want", [
    ({}, (0, 0, 1, True, 10.0, 0.0)),
    # As the operator sets them: the pod's host and container indexes.
    ({"TPUJOB_PROCESS_COUNT": "8", "TPUJOB_COORDINATOR_ADDRESS": "h:1", "TPUJOB_HOST_INDEX": "2",
      "TPUJOB_HOSTS_PER_SLICE": "4", "TPUJOB_CONTAINER_INDEX": "1",
      "TPUJOB_CONTAINERS_PER_HOST": "2"}, (2, 1, 2, True, 10.0, 0.0)),
    # A process id alone (a test, a bring-your-own launcher): one host per process.
    ({"TPUJOB_PROCESS_ID": "1", "TPUJOB_PROCESS_COUNT": "2", "TPUJOB_COORDINATOR_ADDRESS": "h:1"},
     (1, 0, 1, True, 10.0, 0.0)),
    ({"TPUJOB_PROCESS_ID": "6", "TPUJOB_PROCESS_COUNT": "8", "TPUJOB_COORDINATOR_ADDRESS": "h:1",
      "TPUJOB_NUM_SLICES": "2", "TPUJOB_SLICE_ID": "1"}, (2, 0, 1, True, 10.0, 0.0)),
    ({"TPUJOB_PROCESS_ID": "3", "TPUJOB_PROCESS_COUNT": "8", "TPUJOB_COORDINATOR_ADDRESS": "h:1",
      "TPUJOB_CONTAINERS_PER_HOST": "2"}, (1, 1, 2, True, 10.0, 0.0)),
    # Fewer processes than one host's containers: still host 0.
    ({"TPUJOB_PROCESS_ID": "0", "TPUJOB_CONTAINERS_PER_HOST": "2"}, (0, 0, 2, True, 10.0, 0.0)),
    ({"TPUJOB_HOST_REPORTS": "0", "TPUJOB_HOST_REPORT_INTERVAL_S": "2.5",
      "TPUJOB_FAULT_STEP_SLEEP_S": "0.2"}, (0, 0, 1, False, 2.5, 0.2)),
    ({"TPUJOB_HOST_REPORTS": "On"}, (0, 0, 1, True, 10.0, 0.0)),
    # The faults apply to the processes named, and only to them.
    ({"TPUJOB_PROCESS_ID": "1", "TPUJOB_PROCESS_COUNT": "2", "TPUJOB_COORDINATOR_ADDRESS": "h:1",
      "TPUJOB_FAULT_STEP_SLEEP_S": "0.2", "TPUJOB_FAULT_PROCESSES": "1"},
     (1, 0, 1, True, 10.0, 0.2)),
    ({"TPUJOB_PROCESS_ID": "0", "TPUJOB_PROCESS_COUNT": "2", "TPUJOB_COORDINATOR_ADDRESS": "h:1",
      "TPUJOB_FAULT_STEP_SLEEP_S": "0.2", "TPUJOB_FAULT_PROCESSES": "1, 3"},
     (0, 0, 1, True, 10.0, 0.0)),
])
def test_the_environment_names_the_host_and_sets_the_reports(env, want):
    p = ProcessEnv.from_env(env)
    assert (p.host_index, p.container_index, p.containers_per_host, p.host_reports,
            p.host_report_interval_s, p.fault_step_sleep_s) == want


@pytest.mark.parametrize("env, match", [
    ({"TPUJOB_HOST_REPORTS": "maybe"}, "TPUJOB_HOST_REPORTS='maybe' must be one of"),
    ({"TPUJOB_HOST_REPORT_INTERVAL_S": "0"}, "TPUJOB_HOST_REPORT_INTERVAL_S=0.0 must be > 0"),
    ({"TPUJOB_FAULT_STEP_SLEEP_S": "x"}, "TPUJOB_FAULT_STEP_SLEEP_S='x' is not a number"),
    ({"TPUJOB_FAULT_STEP_SLOWDOWN": "-0.2"}, "TPUJOB_FAULT_STEP_SLOWDOWN=-0.2 must be > 0"),
    ({"TPUJOB_FAULT_PROCESSES": "1,b"}, "TPUJOB_FAULT_PROCESSES='1,b' is not a comma-separated"),
    ({"TPUJOB_FAULT_PROCESSES": "-1"}, "TPUJOB_FAULT_PROCESSES='-1' must name process indices"),
    ({"TPUJOB_FAULT_PROCESSES": " , "}, "TPUJOB_FAULT_PROCESSES=',' must name process indices"),
    ({"TPUJOB_PROCESS_ID": "0", "TPUJOB_CONTAINERS_PER_HOST": "0"},
     "TPUJOB_CONTAINERS_PER_HOST=0 must be >= 1"),
    ({"TPUJOB_PROCESS_ID": "0", "TPUJOB_HOSTS_PER_SLICE": "0"},
     "TPUJOB_HOSTS_PER_SLICE=0 must be >= 1"),
])
def test_a_malformed_report_variable_names_itself(env, match):
    with pytest.raises(EnvError, match=match):
        ProcessEnv.from_env(env)


# -- the step loop's split ------------------------------------------------------------------

class Slow:
    """A metric whose read-back blocks for `seconds`, as a step still running on the device."""

    def __init__(self, value: float, seconds: float, reads: list):
        self.value, self.seconds, self.reads = value, seconds, reads

    def __array__(self, dtype=None, copy=None):
        self.reads.append(self.value)
        time.sleep(self.seconds)
        return np.asarray(self.value, dtype=dtype)


def run_loop(steps, *, sleep_s=0.0, wait_s=0.0, dispatch_s=0.0, every=100, seen=None):
    """`seen`: where the reporter's `waiting` goes, as a line made in dispatch and in the
    read-back, and in the step's host work, says it."""
    cfg = TrainerConfig.from_dict({}, [f"train.steps={steps}", "metrics.log_every=1"])
    rec, reads = Recorder(), []
    r, out = reporter(Clock())

    def look(where: str) -> None:
        if seen is not None:
            seen.append((where, json.loads(r.line())["waiting"]))

    class Looking(Slow):
        def __array__(self, dtype=None, copy=None):
            look("read-back")
            return super().__array__(dtype, copy)

    class LookingData(Data):
        def next_batch(self):
            look("host work")
            return super().next_batch()

    def compiled(state, batch):
        look("dispatch")
        time.sleep(dispatch_s)  # a backend that blocks in dispatch on the state it donates
        step = state + 1
        return step, {"loss": Looking(1.0 / step, wait_s, reads), "grad_norm": np.float32(1.0),
                      "lr": np.float32(1e-3), "stop": np.int32(0)}

    context = StepContext(
        cfg=cfg, compiled=compiled, data=LookingData(), checkpointer=Checkpointer(every=every),
        stop=StopSignal(), log=rec, progress=rec, memory=lambda phase, **kw: None,
        wandb_run=None, timeline=rec, timer=_Timer(time.perf_counter(), 1e12, 6, 1, None),
        to_global=lambda local, flag: {"tokens": local, "stop": flag}, reporter=r,
        fault=StepFault(sleep_s))
    _run_steps(context, 0, 0)
    r.close()
    return rec, reads, out


def test_each_step_is_split_into_busy_and_wait_that_add_up_to_its_step_time():
    rec, reads, out = run_loop(4, sleep_s=0.04, wait_s=0.01, dispatch_s=0.02)
    assert len(reads) == 4  # one read-back per step: the reports add none
    steps = [s for d in out.docs for s in d.get("steps", [])]
    rows = {row["step"]: row for row in rec.kinds("step")}
    assert [s[0] for s in steps] == [1, 2, 3, 4]
    # Between two read-backs the loop takes a batch (the injected host work: busy) and
    # dispatches a step (blocked: wait), twice before step 1's and never before the last's.
    # Wait: those dispatches, then the read-back.
    least = [(0.08, 0.05), (0.04, 0.03), (0.04, 0.03), (0.0, 0.01)]
    assert [(busy >= b, wait >= w) for (_, busy, wait, _), (b, w) in zip(steps, least,
                                                                         strict=True)] == \
        [(True, True)] * 4, steps
    for step, busy, wait, _ in steps:
        assert busy + wait == pytest.approx(rows[step]["step_time_s"], abs=2e-6)


def test_the_report_says_when_the_main_thread_waits_on_a_step():
    seen: list[tuple[str, bool]] = []
    run_loop(3, seen=seen)
    assert set(seen) == {("host work", False), ("dispatch", True), ("read-back", True)}


def test_the_steps_around_a_checkpoint_are_marked_and_the_save_is_a_phase():
    _, _, out = run_loop(6, every=3)
    steps = [s for d in out.docs for s in d.get("steps", [])]
    # 3 is read at once for its save, 4 carries the save; 6 the same, and the run ends.
    assert [(s[0], s[3]) for s in steps] == [(1, 0), (2, 0), (3, 1), (4, 1), (5, 0), (6, 1)]
    # The first step, then each save (3, 6, the last one again) and its end, the final wait.
    assert [(d["phase"], d["step"]) for d in out.docs] == [
        ("step", 1), ("checkpoint_save", 3), ("step", 3), ("checkpoint_save", 6), ("step", 6),
        ("checkpoint_save", 6), ("step", 6), ("checkpoint_save", 6), ("checkpoint_save", 6)]
