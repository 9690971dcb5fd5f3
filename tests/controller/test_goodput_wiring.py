"""Goodput where it meets the rest of the operator: the timelines processes leave in their
termination messages, the decision that carries status.goodput and its end-of-job Event, and the
operator's Prometheus series."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from prometheus_client import generate_latest

from tests.controller.test_decide import T0, js, obs, status
from tpujob.api.status import Phase
from tpujob.controller.decide import decide
from tpujob.controller.metrics import OperatorMetrics
from tpujob.controller.trainer_reports import ProgressReading, TimelineReading, read_final_timelines

pytestmark = pytest.mark.unit


def pod(*messages: str) -> dict:
    return {"metadata": {"name": "p"}, "status": {"containerStatuses": [
        {"name": f"c{i}", "state": {"terminated": {"exitCode": 0, "message": m}}}
        for i, m in enumerate(messages)]}}


def message(process: int, step: int, productive: float) -> str:
    return json.dumps({"reason": "Completed", "message": "done", "goodput": {
        "attempt": "a1", "process_index": process, "step": step, "steps": step,
        "seconds": {"productive": productive}}})


def test_termination_messages_give_process_zeros_seconds_and_every_processs_step():
    finals = read_final_timelines([pod(message(1, 41, 9.0)),
                                   pod("not json", "", message(0, 40, 8.0)),
                                   pod('{"reason": "Completed", "message": "no timeline"}')])
    assert [(f.step, f.seconds.productive if f.seconds else None) for f in finals] == \
        [(40, 8.0), (41, None)]


def reading(step: int, productive: float) -> ProgressReading:
    return ProgressReading(step=step, timeline=TimelineReading.from_document(
        {"attempt": "a1", "step": step, "steps": step, "resumed_from_step": 0,
         "seconds": {"productive": productive, "program_startup": 2.0}}))


def test_the_decision_carries_goodput_and_a_job_that_ends_gets_the_summary_event():
    running = decide(status(Phase.RUNNING), obs(js(ready_jobs=1), progress=reading(10, 5.0)))
    assert running.status.goodput.current.step == 10
    assert not [e for e in running.events if e.reason == "Goodput"]
    finals = read_final_timelines([pod(message(0, 20, 9.0))])
    done = decide(running.status, obs(js(completed=True), now=T0 + timedelta(seconds=12),
                                      finals=finals))
    assert done.status.phase == Phase.SUCCEEDED
    assert done.status.goodput.productive_seconds == 9.0
    assert done.status.goodput.wall_seconds == 12
    [event] = [e for e in done.events if e.reason == "Goodput"]
    assert "goodput 75.0% (9.0 s productive of 12.0 s)" in event.message
    assert done.events[-1].reason == "Succeeded"  # the phase stays the last word
    again = decide(done.status, obs(js(completed=True), now=T0 + timedelta(seconds=20)))
    assert again.status.goodput == done.status.goodput and not again.events


def test_goodput_is_exported_per_job_and_dropped_with_it():
    metrics = OperatorMetrics()
    running = decide(status(Phase.RUNNING), obs(js(ready_jobs=1), progress=reading(10, 5.0)))
    later = decide(running.status, obs(js(ready_jobs=1), now=T0 + timedelta(seconds=10),
                                       progress=reading(20, 8.0)))
    metrics.record_goodput("ns", "j", later.status.goodput)
    text = generate_latest(metrics.registry).decode()
    assert 'tpujob_operator_job_goodput_percent{name="j",namespace="ns"} 80.0' in text
    assert 'tpujob_operator_job_goodput_seconds{kind="programStartup",name="j",namespace="ns"} ' \
           '2.0' in text
    metrics.forget_job("ns", "j")
    assert 'name="j"' not in generate_latest(metrics.registry).decode()
