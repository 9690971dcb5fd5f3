"""The training loop end to end in this process: `loop.train` with a tiny model on JAX's CPU
device for a few steps. `test_loop_steps.py` pins the step loop with fakes; this pins what
`_train` wires around it: the start line's figures, the progress endpoint (served while the
state is made, closed at the end), W&B left off or said to be off, the compiled step saved and
loaded whole on a restart, resuming (or not) from the newest checkpoint, the parts a run without
checkpoints, endpoint, cache or log of its own does without, and one attempt name for every
process of a start."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any

import jax
import pytest

from tests.trainer.helpers import TINY_MODEL, clean_env, free_port, process_env
from tpujob_plan.flops import train_flops_per_step
from tpujob_trainer import loop, step_compile
from tpujob_trainer.config import TrainerConfig
from tpujob_trainer.env import ProcessEnv
from tpujob_trainer.exits import Reason, TrainerExit
from tpujob_trainer.step_compile import StepCompile
from tpujob_trainer.telemetry.timeline import Timeline

pytestmark = pytest.mark.integration
B = 8


class Log:
    """The JSON log, kept as (event, fields)."""

    def __init__(self):
        self.events: list[dict[str, Any]] = []

    def emit(self, event: str, **fields: Any) -> None:
        self.events.append({"event": event, **fields})

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]

    def one(self, event: str) -> dict[str, Any]:
        found = self.of(event)
        assert len(found) == 1, (event, self.events)
        return found[0]


class Looking(Timeline):
    """A timeline that, when the state is being made (the first `training_prep` charge), reads
    the run's progress endpoint as an operator would."""

    def __init__(self, log: Log):
        super().__init__()
        self.log = log
        self.seen: dict | None = None

    def charge_until_now(self, category: str) -> None:
        if category == "training_prep" and self.seen is None and self.log.of("http"):
            port = self.log.one("http")["port"]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/progress", timeout=10) as r:
                self.seen = json.loads(r.read())
        super().charge_until_now(category)


def config(tmp_path, *, seq_len: int, steps: int, **sections: Any) -> TrainerConfig:
    """A tiny run; each test its own seq_len, so no two compile the same program."""
    base = {"model": TINY_MODEL,
            "train": {"steps": steps, "global_batch": B, "seq_len": seq_len, "seed": 0},
            "mesh": {"ici": {"data": -1}},
            "data": {"kind": "synthetic", "synthetic_pattern": "ramp"},
            "checkpoint": {"every": 2, "keep": 3},
            "metrics": {"log_every": 1, "memory_every": 100, "port": None,
                        "measure_peak": False},
            "output": str(tmp_path / "out")}
    for key, value in sections.items():
        base[key] = base.get(key, {}) | value if isinstance(value, dict) else value
    return TrainerConfig.model_validate(base)


@pytest.fixture(autouse=True)
def own_compile_cache(monkeypatch):
    """`train` points JAX's persistent cache at the run's output (not the test run's shared
    one); JAX keeps the first directory it opened for the whole process, so start and end each
    test with none open."""
    from jax.experimental.compilation_cache import compilation_cache
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    before = jax.config.jax_compilation_cache_dir
    compilation_cache.reset_cache()
    yield
    jax.config.update("jax_compilation_cache_dir", before)
    compilation_cache.reset_cache()


def _closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_a_run_without_checkpoints_endpoint_cache_or_log_of_its_own(tmp_path, capsys,
                                                                     monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setattr(step_compile, "available_cpus", lambda: 1)   # the step compiles after the init
    cfg = config(tmp_path, seq_len=8, steps=2, checkpoint={"enabled": False},
                 compile_cache={"enabled": False},
                 metrics={"wandb": {"project": "p", "mode": "online"}})
    out = loop.train(cfg, ProcessEnv())
    assert (out.reason, out.step) == (Reason.COMPLETED, 2)
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()
              if line.startswith("{")]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "end" and "http" not in kinds
    assert [e["step"] for e in events if e["event"] == "step"] == [1, 2]
    assert next(e for e in events if e["event"] == "start")["compile_cache"] is None
    compiled = next(e for e in events if e["event"] == "compiled")
    assert compiled["executable"] == "compiled" and compiled["overlapped"] is False
    assert compiled["waited_s"] >= compiled["compile_s"] > 0
    assert [e["message"] for e in events if e["event"] == "warning"] == [
        "W&B off: online mode needs WANDB_API_KEY in the environment"]


def test_a_run_reports_its_start_serves_progress_and_cleans_up(tmp_path, monkeypatch):
    monkeypatch.setattr(step_compile, "available_cpus", lambda: 8)   # room to compile beside the init
    L = 16
    cfg = config(tmp_path, seq_len=L, steps=3, metrics={"port": 0})
    log = Log()
    timeline = Looking(log)
    t0 = time.perf_counter()
    out = loop.train(cfg, ProcessEnv(bind_address="127.0.0.1"), log=log, timeline=timeline)
    wall = time.perf_counter() - t0
    assert (out.reason, out.message, out.step, len(out.losses)) == (
        Reason.COMPLETED, "trained 3 steps", 3, 3)
    start = log.one("start")
    shape = cfg.model.to_shape()
    devices = jax.devices()
    assert {k: start[k] for k in ("processes", "devices", "device_kind", "params",
                                  "flops_per_step", "total_steps", "peak_tflops_per_device")} == {
        "processes": 1, "devices": len(devices), "device_kind": devices[0].device_kind,
        "params": shape.total_params, "flops_per_step": train_flops_per_step(shape, B, L),
        "total_steps": 3, "peak_tflops_per_device": None}
    assert start["compile_cache"] == f"{tmp_path}/out/compile-cache"
    # While the state was made, the endpoint already answered: step 0, initializing.
    assert {k: timeline.seen[k] for k in ("step", "total_steps", "phase")} == {
        "step": 0, "total_steps": 3, "phase": "initializing"}
    compiled = log.one("compiled")
    assert 0 < compiled["compile_s"] <= compiled["startup_s"] < wall
    # The step compiled in its own thread from the state's making on: the loop waited for
    # less than the compile took (the init and the checkpointer went on beside it).
    assert compiled["overlapped"] is True
    assert 0 <= compiled["waited_s"] < compiled["compile_s"]
    assert compiled["executable"] == "compiled"
    after_compile = [m for m in log.of("memory") if m["phase"] == "after_compile"]
    assert [m["compile_s"] for m in after_compile] == [round(compiled["compile_s"], 3)]
    steps = log.of("step")
    assert [s["step"] for s in steps] == [1, 2, 3]
    for s in steps:  # B x L tokens a step
        assert s["tokens_per_s"] == pytest.approx(B * L / s["step_time_s"])
    assert [c["step"] for c in log.of("checkpoint")] == [2, 3]
    assert not log.of("warning") and not log.of("restore")  # W&B not asked for: no word of it
    assert (timeline.resumed_from_step, timeline.step) == (0, 3)
    assert _closed(log.one("http")["port"])


def test_a_restart_loads_the_compiled_step_and_resumes_where_the_stop_left_off(tmp_path):
    cfg = config(tmp_path, seq_len=24, steps=4)
    first, stop = Log(), loop.StopSignal()
    stop.requested = True   # SIGTERM before the first step: the flag rides step 1
    out = loop.train(cfg, ProcessEnv(), stop=stop, log=first)
    assert (out.reason, out.step) == (Reason.PREEMPTED, 2)
    assert [c["step"] for c in first.of("checkpoint")] == [2]
    again = Log()
    timeline = Timeline()
    out = loop.train(cfg, ProcessEnv(), log=again, timeline=timeline)
    assert (out.reason, out.step) == (Reason.COMPLETED, 4)
    assert again.one("restore")["step"] == 2 and timeline.resumed_from_step == 2
    assert again.one("compiled")["executable"] == "loaded"
    assert [s["step"] for s in again.of("step")] == [3, 4]
    # checkpoint.resume false: the checkpoints are there, and the run starts over.
    anew = Log()
    out = loop.train(config(tmp_path, seq_len=24, steps=1, checkpoint={"resume": False}),
                     ProcessEnv(), log=anew)
    assert not anew.of("restore") and [s["step"] for s in anew.of("step")] == [1]


def test_a_start_that_fails_waits_for_its_step_compile_to_end(tmp_path, monkeypatch):
    # A process leaving with the compile's thread still inside XLA is aborted as the interpreter
    # ends ("FATAL: exception not rethrown", signal 6) instead of exiting with its reason.
    monkeypatch.setattr(step_compile, "available_cpus", lambda: 8)
    ended: list[bool] = []
    plain_wait = StepCompile.wait

    def wait(self):
        plain_wait(self)
        ended.append(self._done.is_set())

    monkeypatch.setattr(StepCompile, "wait", wait)
    loop.train(config(tmp_path, seq_len=12, steps=2), ProcessEnv(), log=Log())
    ended.clear()
    other = config(tmp_path, seq_len=12, steps=2,
                   model={"n_layers": TINY_MODEL["n_layers"] + 1})   # another model, same output
    with pytest.raises(TrainerExit) as failed:
        loop.train(other, ProcessEnv(), log=Log())
    assert failed.value.reason == Reason.CONFIG_ERROR
    assert ended == [True]


ATTEMPT = """
import sys
from tpujob_trainer import distributed
from tpujob_trainer.env import ProcessEnv
from tpujob_trainer.loop import _shared_attempt
from tpujob_trainer.telemetry.timeline import Timeline
penv = ProcessEnv.from_env()
distributed.initialize(penv)
timeline = Timeline(started_at=float(sys.argv[1]), process_index=penv.process_id)
_shared_attempt(timeline)
print(timeline.attempt)
"""


def test_every_process_of_a_start_takes_process_zeros_attempt_name(tmp_path):
    port = free_port()
    started = {0: 1_790_000_000.25, 1: 1_790_000_003.5}  # process 1 started 3.25 s later
    procs = [subprocess.Popen([sys.executable, "-c", ATTEMPT, str(started[i])],
                              env=clean_env(**process_env(i, port, devices=1)), cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _, e in outs]
    # The last line: JAX's CPU collectives (gloo) print their own lines to stdout first.
    assert [o.strip().splitlines()[-1] for o, _ in outs] == [f"{int(started[0] * 1000):x}"] * 2
