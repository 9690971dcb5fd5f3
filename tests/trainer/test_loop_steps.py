"""The step loop's verdicts without a model: a fake compiled step, data source and checkpointer
drive `_run_steps`, so how a run ends (trained to the end, data exhausted, stopped by SIGTERM,
a non-finite loss, a data error), which steps it checkpoints, and what it reports are checked
step by step. Also the step-time figures and the SIGTERM flag."""

from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass, field

import numpy as np
import pytest

from tpujob_trainer import loop
from tpujob_trainer.checkpoint import CheckpointReadError, CheckpointSaveError
from tpujob_trainer.checkpoint.tiered import LOCAL, PERSISTENT
from tpujob_trainer.config import TrainerConfig
from tpujob_trainer.data.errors import DataError, DataExhausted
from tpujob_trainer.env import ProcessEnv
from tpujob_trainer.exits import Reason, TrainerExit
from tpujob_trainer.loop import (
    WANDB_NAMES,
    Outcome,
    StepContext,
    StopSignal,
    _classify,
    _run_steps,
    _Timer,
)
from tpujob_trainer.telemetry.jsonlog import JsonLog
from tpujob_trainer.telemetry.timeline import Timeline

pytestmark = pytest.mark.unit


@dataclass
class Data:
    """`batches` batches, then exhausted (or a DataError when `broken`)."""

    batches: int = 1000
    broken: bool = False
    served: int = 0

    def next_batch(self):
        if self.served == self.batches:
            raise (DataError if self.broken else DataExhausted)("no more windows")
        self.served += 1
        return np.full((2, 3), self.served, np.int32)

    def state(self):
        return {"served": self.served}


@dataclass
class Checkpointer:
    every: int
    tier: str | None = PERSISTENT
    saves: list = field(default_factory=list)
    waited: bool = False
    last_save_blocking_s: float = 0.5
    committed_step: int | None = None   # a persistent save is complete once made, here

    def should_save(self, step):
        return step % self.every == 0

    def save(self, step, state, data_state, force):
        self.saves.append((step, state, data_state["served"], force))
        if self.tier == PERSISTENT:
            self.committed_step = step
        return self.tier

    def check(self):
        pass

    def wait(self):
        self.waited = True


@dataclass
class Recorder:
    """Stands in for the JSON log, the progress endpoint and the goodput timeline."""

    emitted: list = field(default_factory=list)
    progress: dict = field(default_factory=dict)
    steps_done: list = field(default_factory=list)
    charged: list = field(default_factory=list)
    logged: list = field(default_factory=list)

    def emit(self, kind, **fields):
        self.emitted.append((kind, fields))

    def update(self, **fields):
        self.progress.update(fields)

    def step_done(self, step, seconds):
        self.steps_done.append(step)

    def charge(self, what, seconds):
        self.charged.append((what, seconds))

    def log(self, step, row):  # as the W&B run
        self.logged.append((step, row))

    def kinds(self, kind):
        return [f for k, f in self.emitted if k == kind]


def run(steps=4, *, losses=None, data=None, checkpointer=None, sigterm_at=None, moe=False,
        log_every=1, memory_every=100, wandb=False):
    """Run the loop; `losses[i]` is step i+1's loss; SIGTERM arrives while step `sigterm_at`
    runs (the flag reaches the step after it, as on a slice)."""
    cfg = TrainerConfig.from_dict({}, [f"train.steps={steps}", f"metrics.log_every={log_every}",
                                       f"metrics.memory_every={memory_every}",
                                       *(["model.moe.num_experts=2"] if moe else [])])
    stop = StopSignal()
    rec = Recorder()
    memory_phases = []

    def compiled(state, batch):
        step = state + 1
        if step == sigterm_at:
            stop.requested = True
        loss = (losses or {}).get(step, 2.0 / step)
        return step, {"loss": np.float32(loss), "grad_norm": np.float32(1.5),
                      "lr": np.float32(1e-3), "aux_loss": np.float32(0.25),
                      "stop": np.int32(batch["stop"])}

    context = StepContext(
        cfg=cfg, compiled=compiled, data=data or Data(), checkpointer=checkpointer, stop=stop,
        log=rec, progress=rec, memory=lambda phase, **kw: memory_phases.append((phase, kw["step"])),
        wandb_run=rec if wandb else None, timeline=rec, timer=_Timer(0.0, 1e12, 6, 1, None),
        to_global=lambda local, flag: {"tokens": local, "stop": flag})
    outcome = _run_steps(context, 0, 0)
    return outcome, rec, memory_phases


def test_a_run_trains_to_its_last_step_and_saves_it():
    ckpt = Checkpointer(every=3)
    outcome, rec, _ = run(4, checkpointer=ckpt)
    assert outcome == Outcome(Reason.COMPLETED, "trained 4 steps", 4,
                              [pytest.approx(2.0 / s) for s in (1, 2, 3, 4)])
    assert [(s, state, served, force) for s, state, served, force in ckpt.saves] == [
        (3, 3, 3, False), (4, 4, 4, True)]
    assert ckpt.waited
    assert [c["step"] for c in rec.kinds("checkpoint")] == [3, 4]
    assert rec.kinds("end") == [{"reason": "Completed", "message": "trained 4 steps", "step": 4,
                                 "last_checkpoint_step": 4}]
    assert rec.progress["phase"] == "done" and rec.progress["last_checkpoint_step"] == 4
    assert rec.steps_done == [1, 2, 3, 4]


def test_a_local_checkpoint_is_reported_as_local_and_is_not_the_last_persistent_one():
    ckpt = Checkpointer(every=2, tier=LOCAL)
    _, rec, _ = run(3, checkpointer=ckpt)
    assert [c["step"] for c in rec.kinds("local_checkpoint")] == [2, 3]
    assert rec.kinds("checkpoint") == [] and rec.kinds("end")[0]["last_checkpoint_step"] is None


@pytest.mark.parametrize("loss, shown", [(math.nan, "nan"), (math.inf, "inf")])
@pytest.mark.parametrize("bad_step", [2, 3])
def test_a_non_finite_loss_ends_the_run_and_is_never_checkpointed(loss, shown, bad_step):
    ckpt = Checkpointer(every=2)
    with pytest.raises(TrainerExit) as err:
        run(6, losses={bad_step: loss}, checkpointer=ckpt)
    assert err.value.reason == Reason.NAN_LOSS
    assert err.value.message == f"loss is {shown} at step {bad_step} (grad norm 1.5, lr 0.001)"
    assert [s for s, *_ in ckpt.saves] == ([] if bad_step == 2 else [2])


def test_running_out_of_data_ends_the_run_cleanly_with_a_checkpoint_of_the_last_step():
    ckpt = Checkpointer(every=100)
    outcome, rec, _ = run(10, data=Data(batches=3), checkpointer=ckpt)
    assert (outcome.reason, outcome.step) == (Reason.DATA_EXHAUSTED, 3)
    assert outcome.message == "data ran out after step 3: no more windows"
    assert [(s, force) for s, _, _, force in ckpt.saves] == [(3, True)]
    assert rec.kinds("end")[0]["reason"] == "DataExhausted"


def test_data_that_runs_out_before_the_first_step_saves_nothing():
    ckpt = Checkpointer(every=1)
    outcome, _, _ = run(10, data=Data(batches=0), checkpointer=ckpt)
    assert (outcome.reason, outcome.step, ckpt.saves) == (Reason.DATA_EXHAUSTED, 0, [])


@pytest.mark.parametrize(("steps", "batches", "reason"), [
    (1, 1000, Reason.COMPLETED), (5, 1, Reason.DATA_EXHAUSTED)])
def test_a_run_that_ends_after_one_step_saves_it(steps, batches, reason):
    ckpt = Checkpointer(every=100)
    outcome, _, _ = run(steps, data=Data(batches=batches), checkpointer=ckpt)
    assert (outcome.reason, outcome.step) == (reason, 1)
    assert [(s, force) for s, _, _, force in ckpt.saves] == [(1, True)]


def test_sigterm_as_the_data_runs_out_ends_the_run_as_data_exhausted():
    # The flag rides step 3, the last batch: a restart would find no more data either.
    ckpt = Checkpointer(every=100)
    outcome, _, _ = run(10, data=Data(batches=3), sigterm_at=2, checkpointer=ckpt)
    assert (outcome.reason, outcome.step) == (Reason.DATA_EXHAUSTED, 3)
    assert [(s, force) for s, _, _, force in ckpt.saves] == [(3, True)]


def test_a_data_error_ends_the_run_as_a_data_error():
    with pytest.raises(TrainerExit) as err:
        run(10, data=Data(batches=2, broken=True))
    assert (err.value.reason, err.value.message) == (Reason.DATA_ERROR, "no more windows")


# (SIGTERM during step, checkpoint every, the step the run stops after, the saves (step, force))
@pytest.mark.parametrize(("sigterm_at", "every", "stopped", "saves"), [
    # The flag rides step 3 and is read back while step 4 runs: every process saves step 4.
    (2, 100, 4, [(4, True)]),
    (1, 2, 2, [(2, False)]),            # flag seen at the regular checkpoint of step 2
    (3, 2, 4, [(2, False), (4, False)]),
    (5, 100, 7, [(7, True)]),
])
def test_sigterm_checkpoints_and_stops_as_preempted(sigterm_at, every, stopped, saves):
    ckpt = Checkpointer(every=every)
    outcome, rec, _ = run(10, sigterm_at=sigterm_at, checkpointer=ckpt)
    assert (outcome.reason, outcome.step) == (Reason.PREEMPTED, stopped)
    assert outcome.message == f"stopped by SIGTERM after step {stopped}"
    assert [(s, force) for s, _, _, force in ckpt.saves] == saves
    assert len(outcome.losses) == stopped


def test_sigterm_during_the_last_step_still_completes():
    outcome, _, _ = run(3, sigterm_at=3)
    assert (outcome.reason, outcome.step) == (Reason.COMPLETED, 3)
    outcome, _, _ = run(3, sigterm_at=2)  # the flag rides step 3, the last
    assert (outcome.reason, outcome.step) == (Reason.COMPLETED, 3)


def test_step_lines_every_log_every_steps_and_the_last_with_moe_loss():
    _, rec, memory = run(7, log_every=3, memory_every=2, moe=True)
    rows = rec.kinds("step")
    assert [r["step"] for r in rows] == [3, 6, 7]
    assert rows[0]["aux_loss"] == 0.25 and rows[0]["grad_norm"] == 1.5
    assert memory == [("training", 2), ("training", 4), ("training", 6)]
    _, rec, _ = run(2)
    assert "aux_loss" not in rec.kinds("step")[0]


def test_step_time_figures():
    timer = _Timer(last_done=10.0, flops_per_step=4e12, tokens_per_step=100, num_devices=2,
                   peak_tflops=4.0)
    assert timer.figures(12.0, steps=2) == {
        "step_time_s": 1.0, "tokens_per_s": 100.0, "tokens_per_s_per_device": 50.0,
        "tflops_per_device": 2.0, "mfu": 0.5}
    assert timer.last_done == 12.0
    assert timer.figures(14.0)["step_time_s"] == 2.0
    no_peak = _Timer(0.0, 1e12, 10, 1, None)
    assert no_peak.figures(0.0) == {"step_time_s": 1e-9, "tokens_per_s": pytest.approx(1e10),
                                    "tokens_per_s_per_device": pytest.approx(1e10),
                                    "tflops_per_device": pytest.approx(1e9), "mfu": None}


def test_sigterm_sets_the_flag_and_the_previous_handler_comes_back():
    stop = StopSignal()
    previous = signal.getsignal(signal.SIGTERM)
    stop.install()
    try:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested
    finally:
        stop.uninstall()
    assert signal.getsignal(signal.SIGTERM) is previous


@pytest.mark.parametrize(("error", "reason"), [
    (RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate"),
     Reason.OUT_OF_MEMORY),
    (MemoryError("Out of memory"), Reason.OUT_OF_MEMORY),
    (RuntimeError("XLA: out of memory in HBM"), Reason.OUT_OF_MEMORY),
    (RuntimeError("DEADLINE_EXCEEDED: heartbeat"), None),  # one process has no peer to lose
    (ValueError("shapes do not match"), None),
])
def test_failures_the_loop_names(error, reason):
    assert _classify(error) == reason


@pytest.mark.parametrize(("text", "reason"), [
    ("DEADLINE_EXCEEDED: barrier timed out", Reason.PEER_LOST),
    ("UNAVAILABLE: failed to connect", Reason.PEER_LOST),
    ("missed heartbeat from task 3", Reason.PEER_LOST),
    ("Connection reset by peer", Reason.PEER_LOST),
    ("Connection closed by peer", Reason.PEER_LOST),
    ("Broken pipe", Reason.PEER_LOST),
    ("the task has died", Reason.PEER_LOST),
    ("RESOURCE_EXHAUSTED while UNAVAILABLE", Reason.OUT_OF_MEMORY),
    ("shapes do not match", None),
])
def test_with_several_processes_a_lost_connection_is_a_lost_peer(monkeypatch, text, reason):
    monkeypatch.setattr(loop.jax, "process_count", lambda: 2)
    assert _classify(RuntimeError(text)) == reason


def test_the_time_charged_is_durations_within_the_run():
    start = time.perf_counter()
    _, rec, _ = run(4, checkpointer=Checkpointer(every=2))
    elapsed = time.perf_counter() - start
    assert {what for what, _ in rec.charged} == {"data_loading", "checkpoint_save"}
    assert all(0 <= seconds <= elapsed for _, seconds in rec.charged)
    assert 0 <= rec.kinds("checkpoint_wait")[0]["seconds"] <= elapsed


def test_wandb_gets_each_logged_step_under_its_wandb_name_without_empty_figures():
    _, rec, _ = run(4, log_every=2, wandb=True)
    assert [step for step, _ in rec.logged] == [2, 4]
    row = rec.logged[0][1]
    assert set(row) == {WANDB_NAMES[k] for k in ("loss", "grad_norm", "lr", "step_time_s",
                                                "tflops_per_device",
                                                "tokens_per_s_per_device")} | {"tokens_per_s"}
    assert row["learning/loss"] == 1.0  # step 2's loss; mfu is unknown (no peak): left out


# (what the run raised, the exit it becomes, or None: raised as it is)
@pytest.mark.parametrize(("raised", "exit_"), [
    (CheckpointSaveError("save of step 4 was late"),
     (Reason.CHECKPOINT_ERROR, "save of step 4 was late")),
    (CheckpointReadError("no checkpoint reads back"),
     (Reason.CHECKPOINT_ERROR, "no checkpoint reads back")),
    (RuntimeError("RESOURCE_EXHAUSTED: " + "x" * 2000),
     (Reason.OUT_OF_MEMORY, "RuntimeError: " + ("RESOURCE_EXHAUSTED: " + "x" * 2000)[:1500])),
    (TrainerExit(Reason.NAN_LOSS, "loss is nan at step 3"), (Reason.NAN_LOSS,
                                                              "loss is nan at step 3")),
    (ValueError("a bug"), None),
])
def test_a_failure_of_the_run_becomes_its_exit(monkeypatch, raised, exit_):
    seen = {}

    def failing(cfg, penv, stop, log, timeline, reporter):
        seen.update(stop=stop, log=log, timeline=timeline, reporter=reporter)
        raise raised

    monkeypatch.setattr(loop, "_train", failing)
    if exit_ is None:
        with pytest.raises(type(raised)) as err:
            loop.train(TrainerConfig(), ProcessEnv())
        assert err.value is raised
    else:
        with pytest.raises(TrainerExit) as err:
            loop.train(TrainerConfig(), ProcessEnv())
        assert (err.value.reason, err.value.message) == exit_
    # Left to it, the run makes its own SIGTERM flag, JSON log (on, in process 0) and timeline.
    assert isinstance(seen["stop"], StopSignal) and isinstance(seen["timeline"], Timeline)
    assert isinstance(seen["log"], JsonLog) and seen["log"].enabled
    assert seen["timeline"].process_index == 0
    assert seen["reporter"] is None  # host reports come from the CLI's reporter only
