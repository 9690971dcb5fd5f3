"""The trainer's goodput timeline: seconds charged to the right category by a moving mark, step
times against their median, exit records summed per attempt, and through the real CLI: a
second start reads the first start's record back as `previous`."""

from __future__ import annotations

import json

import pytest

from tests.trainer.helpers import TINY_YAML, run_cli
from tpujob_trainer.telemetry.timeline import (
    Timeline,
    read_previous,
    step_time_figures,
    summarize_attempt,
    write_record,
)


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.unit
@pytest.mark.parametrize("script, want", [
    # (advance seconds, call) ... -> seconds by category
    ([(2, ("charge_until_now", "tpu_initialization"))], {"tpu_initialization": 2}),
    ([(1, ("charge_until_now", "training_prep")), (3, ("charge_until_now", "program_startup")),
      (0.5, ("step_done", 1))],
     {"training_prep": 1, "program_startup": 3, "productive": 0.5}),
    # A data wait inside a step interval is taken out of the productive time.
    ([(0, ("charge_until_now", "program_startup")), (0.2, ("charge", "data_loading", 0.2)),
      (1.0, ("step_done", 1))],
     {"data_loading": 0.2, "productive": 1.0}),
    # A blocking save between two steps: not productive.
    ([(1, ("step_done", 1)), (0.4, ("charge", "checkpoint_save", 0.4)), (1, ("step_done", 2))],
     {"productive": 2.0, "checkpoint_save": 0.4}),
])
def test_a_moving_mark_charges_each_interval_to_one_category(script, want):
    clock = FakeClock()
    timeline = Timeline(started_at=clock.now, clock=clock)
    for advance, (method, *args) in script:
        clock.now += advance
        getattr(timeline, method)(*args)
    got = {k: round(v, 6) for k, v in timeline.seconds.items() if v}
    assert got == want


@pytest.mark.unit
def test_steps_resume_point_and_end_are_in_the_document():
    clock = FakeClock()
    timeline = Timeline(started_at=clock.now, clock=clock, process_index=3)
    timeline.resumed_from_step = 40
    for step, dt in [(41, 9.0), (42, 1.0), (43, 1.0), (44, 3.0)]:
        clock.now += dt
        timeline.step_done(step, dt)
    timeline.finish("PeerLost")
    timeline.finish("Completed")  # the first end stands
    doc = timeline.document()
    assert (doc["step"], doc["steps"], doc["resumed_from_step"]) == (44, 4, 40)
    assert doc["end"] == "PeerLost" and doc["process_index"] == 3
    # The first step of a start (warm-up) is not a step time: median of 1, 1, 3.
    assert doc["step_time_median_s"] == 1.0 and doc["step_time_max_s"] == 3.0
    assert doc["step_time_max_deviation_pct"] == pytest.approx(200.0)
    assert timeline.compact()["seconds"]["productive"] == 14.0


@pytest.mark.unit
def test_the_first_step_of_a_start_is_marked_once():
    """What a restart's recovery ends with: when the first step ended; later steps leave it."""
    clock = FakeClock()
    timeline = Timeline(started_at=clock.now, clock=clock)
    assert timeline.document()["first_step_at"] is None
    clock.now += 5
    timeline.charge_until_now("program_startup")
    clock.now += 2.5
    timeline.step_done(1, 2.5)
    clock.now += 1.0
    timeline.step_done(2, 1.0)
    assert timeline.document()["first_step_at"] == 1007.5


@pytest.mark.unit
@pytest.mark.parametrize("how, jax_hit, outcome", [
    ("loaded", False, "executable"), ("loaded", True, "executable"),
    ("compiled", True, "hit"), ("compiled", False, "miss"),
])
def test_compile_outcome(how, jax_hit, outcome):
    from tpujob_trainer.contract import COMPILE_CACHE_OUTCOMES
    from tpujob_trainer.telemetry.timeline import compile_outcome
    assert compile_outcome(how, jax_hit) == outcome and outcome in COMPILE_CACHE_OUTCOMES


@pytest.mark.unit
@pytest.mark.parametrize("times, median, worst_pct", [
    ([], None, None),
    ([2.0], 2.0, 0.0),
    ([1.0, 1.0, 1.5], 1.0, 50.0),
    ([2.0, 3.0], 2.5, 20.0),
    ([0.0, 0.0], 0.0, None),   # no median to measure against
])
def test_step_time_figures(times, median, worst_pct):
    fig = step_time_figures(times)
    assert fig["step_time_median_s"] == median
    assert fig["step_time_max_deviation_pct"] == (pytest.approx(worst_pct) if worst_pct
                                                  is not None else None)


@pytest.mark.unit
@pytest.mark.parametrize("records, step, seconds", [
    ([], None, None),
    # Process 1 got one step further than process 0 before its peer died: that step was computed.
    ([{"attempt": "a", "process_index": 0, "step": 57, "seconds": {"productive": 5.0}},
      {"attempt": "a", "process_index": 1, "step": 58, "seconds": {"productive": 5.1}}],
     58, {"productive": 5.0}),
    # Process 0 was killed and left nothing: the step is the survivors', the seconds unknown.
    ([{"attempt": "a", "process_index": 1, "step": 12}], 12, None),
])
def test_an_attempt_is_summed_from_its_processes_records(records, step, seconds):
    summary = summarize_attempt(records)
    if not records:
        assert summary is None
        return
    assert summary["step"] == step and summary["seconds"] == seconds


@pytest.mark.unit
def test_records_round_trip_and_the_newest_earlier_attempt_is_read(tmp_path):
    out = str(tmp_path / "out")
    for started, step in [(100.0, 10), (200.0, 20), (300.0, 30)]:
        t = Timeline(started_at=started, clock=lambda s=started: s + 1)
        t.step = step
        assert write_record(out, t)
    newest = Timeline(started_at=300.0).attempt
    middle = Timeline(started_at=200.0).attempt
    assert read_previous(out, newest)["step"] == 20
    assert read_previous(out, middle)["step"] == 10
    assert read_previous(out, Timeline(started_at=100.0).attempt) is None
    assert read_previous(str(tmp_path / "nothing"), newest) is None


@pytest.mark.integration
def test_a_second_start_serves_the_first_starts_record_as_previous(tmp_path):
    out = tmp_path / "out"
    args = ["--config", str(TINY_YAML), "metrics.port=null", "metrics.measure_peak=false",
            "checkpoint.every=10", f"output={out}"]
    first = run_cli([*args, "train.steps=20"], tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    mine = first.termination["goodput"]
    assert (mine["step"], mine["steps"], mine["resumed_from_step"], mine["end"]) == \
        (20, 20, 0, "Completed")
    assert mine["seconds"]["productive"] > 0 and mine["seconds"]["program_startup"] > 0
    second = run_cli([*args, "train.steps=30"], tmp_path, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    [folder] = [p for p in (out / "goodput").iterdir() if p.name == second.termination[
        "goodput"]["attempt"]]
    record = json.loads((folder / "process-0.json").read_text())
    assert record["resumed_from_step"] == 20 and record["step"] == 30
    assert record["seconds"]["checkpoint_restore"] > 0
    assert record["previous"]["attempt"] == mine["attempt"]
    assert record["previous"]["step"] == 20 and record["previous"]["end"] == "Completed"


@pytest.mark.unit
def test_a_process_knows_when_it_started():
    """What a restart's init part counts from: the process's start from /proc, not the
    timeline's creation (imports come before it)."""
    import subprocess
    import sys
    code = ("import time; time.sleep(1.0); "
            "from tpujob_trainer.telemetry.timeline import process_start_time; "
            "print(time.time() - process_start_time())")
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               check=True).stdout)
    assert 1.0 <= age < 30.0, age


@pytest.mark.unit
def test_a_timeline_is_named_by_its_start_and_waits_are_taken_out_of_the_next_phase():
    clock = FakeClock()
    timeline = Timeline(started_at=1.5, clock=clock)
    assert (timeline.attempt, timeline.process_index) == ("5dc", 0)
    clock.now += 2.0
    timeline.charge("data_loading", 0.5)
    timeline.charge_until_now("training_prep")
    # 998.5 s from the start to now, less the 0.5 s wait charged in between.
    assert timeline.seconds["training_prep"] == pytest.approx(1000.0 + 2.0 - 1.5 - 0.5)
    timeline.charge("checkpoint_save", 0.12345)
    assert timeline.compact()["seconds"]["checkpoint_save"] == 0.123


@pytest.mark.unit
def test_only_earlier_attempts_named_in_hexadecimal_are_read(tmp_path):
    for name in ("a", "f", "zz-not-an-attempt", "10"):
        folder = tmp_path / "goodput" / name
        folder.mkdir(parents=True)
        (folder / "process-0.json").write_text(json.dumps(
            {"attempt": name, "process_index": 0, "step": int(name, 16) if name != "zz-not-an-attempt" else 99}))
    assert read_previous(str(tmp_path), "10")["step"] == 15
    assert read_previous(str(tmp_path), "b")["step"] == 10
    assert read_previous(str(tmp_path), "a") is None
