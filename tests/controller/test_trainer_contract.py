"""The trainer and the operator speak one vocabulary (`tpujob_trainer.contract`): what the
trainer's own objects write, the operator's readers read, field by field, and a category, a
reason, a phase or a field on one side only fails here."""

from __future__ import annotations

import json

import pytest

from tpujob.api.status import Badput, FailureReason, TrainerSeconds
from tpujob.controller.goodput import BADPUT_OF_CATEGORY, UNMEASURED_WITHOUT_TIMELINE, account
from tpujob.controller.observe import TRAINER_REASONS, ContainerExit
from tpujob.controller.trainer_reports import (
    ProgressReading,
    TimelineReading,
    read_final_progress,
    read_final_timelines,
    termination_document,
)
from tpujob.log_progress import REGEX_GROUPS, compile_user_regex, parse_regex_line
from tpujob_trainer import contract
from tpujob_trainer import env as envvars
from tpujob_trainer.exits import build_termination_line, write_termination_message
from tpujob_trainer.telemetry.server import Progress
from tpujob_trainer.telemetry.timeline import Timeline, summarize_attempt

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def timeline_with_every_category() -> Timeline:
    """A timeline whose every category holds a different, non-zero number of seconds."""
    clock = Clock()
    t = Timeline(started_at=clock.now, process_index=0, clock=clock)
    for i, category in enumerate(contract.GOODPUT_CATEGORIES, start=1):
        clock.now += i
        t.charge_until_now(category)
    t.resumed_from_step = 3
    for step in (4, 5, 6):
        clock.now += 0.5
        t.step_done(step, 0.5)
    return t


def test_the_status_has_a_field_for_each_trainer_category_and_nothing_else():
    assert tuple(TrainerSeconds.model_fields) == contract.GOODPUT_CATEGORIES


def test_each_category_but_productive_is_one_badput_of_the_status():
    assert set(BADPUT_OF_CATEGORY) | {contract.PRODUCTIVE} == set(contract.GOODPUT_CATEGORIES)
    assert contract.PRODUCTIVE not in BADPUT_OF_CATEGORY
    mapped = list(BADPUT_OF_CATEGORY.values())
    assert len(set(mapped)) == len(mapped)
    # The status's own badput (what the operator measures itself) is all that is left.
    assert set(Badput.model_fields) - set(mapped) == {
        "wasted_progress_from_disruption", "infrastructure_recovery_from_disruption", "other"}
    names = {f.alias for f in Badput.model_fields.values()}
    assert set(UNMEASURED_WITHOUT_TIMELINE) - {"productive", "lostSteps", "stepTime"} <= names


def test_every_trainer_reason_but_completed_has_a_status_reason():
    assert set(TRAINER_REASONS) == {r.value for r in contract.Reason} - {"Completed"}
    assert all(isinstance(v, FailureReason) for v in TRAINER_REASONS.values())
    assert set(contract.EXIT_CODES) == set(contract.Reason)


def test_the_timeline_the_trainer_serves_reads_back_category_by_category():
    t = timeline_with_every_category()
    doc = t.document()
    assert tuple(doc) == contract.TIMELINE_FIELDS
    reading = TimelineReading.from_document(json.loads(json.dumps(doc)))
    assert reading is not None and reading.seconds is not None
    for category in contract.GOODPUT_CATEGORIES:
        assert getattr(reading.seconds, category) == pytest.approx(t.seconds[category]), category
    assert (reading.attempt, reading.step, reading.steps, reading.resumed_from_step) == \
        (t.attempt, 6, 3, 3)
    assert reading.step_time_median_s == pytest.approx(0.5)


def test_each_category_reaches_its_badput_in_the_status():
    from datetime import UTC, datetime

    from tpujob.api.status import Phase

    t = timeline_with_every_category()
    reading = TimelineReading.from_document(t.document())
    g = account(None, now=datetime(2026, 1, 1, tzinfo=UTC), phase_before=Phase.RUNNING,
                phase_after=Phase.RUNNING, reading=reading)
    for category, badput in BADPUT_OF_CATEGORY.items():
        assert getattr(g.badput, badput) == pytest.approx(t.seconds[category], abs=1e-3), category
    assert g.productive_seconds == pytest.approx(t.seconds[contract.PRODUCTIVE], abs=1e-3)


def test_the_termination_line_the_trainer_writes_is_what_the_operator_reads(tmp_path):
    t = timeline_with_every_category()
    path = tmp_path / "termination-log"
    progress = Progress(step=0, total_steps=100)
    progress.update(phase="done", step=6, loss=2.5, last_checkpoint_step=4)
    line = build_termination_line(contract.Reason.NAN_LOSS, "loss is nan",
                                  {"goodput": t.compact(), "progress": progress.final()})
    assert tuple(json.loads(line)) == contract.TERMINATION_FIELDS
    assert tuple(json.loads(line)["goodput"]) == contract.COMPACT_TIMELINE_FIELDS
    write_termination_message(contract.Reason.NAN_LOSS, "loss is nan",
                              {envvars.TERMINATION_LOG: str(path)})
    exit_ = ContainerExit(pod="p", container="trainer", exit_code=6,
                          message=path.read_text())
    assert (exit_.trainer_reason, exit_.trainer_message) == ("NaNLoss", "loss is nan")
    assert exit_.classify()[0] == FailureReason.NAN_LOSS
    pod = {"status": {"containerStatuses": [
        {"name": "trainer", "state": {"terminated": {"exitCode": 6, "message": line}}}]}}
    assert read_final_progress([pod]) == ProgressReading(
        step=6, total_steps=100, loss=2.5, last_checkpoint_step=4, trainer_phase="done")
    (final,) = read_final_timelines([pod])
    assert final.step == 6 and final.steps == 3 and final.resumed_from_step == 3
    for category in contract.GOODPUT_CATEGORIES:
        assert getattr(final.seconds, category) == pytest.approx(t.seconds[category], abs=1e-3)


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '"a string"'])
def test_a_message_that_is_no_trainer_line_reads_as_none(text):
    assert termination_document(text) is None


def test_an_earlier_attempt_summed_from_its_records_reads_back():
    main, other = timeline_with_every_category(), timeline_with_every_category()
    other.process_index = 1
    other.step_done(7)
    summary = summarize_attempt([other.document(), main.document()])
    assert tuple(summary) == contract.RECORD_SUMMARY_FIELDS
    reading = TimelineReading.from_document(json.loads(json.dumps(summary)))
    assert reading.step == 7 and reading.steps == main.steps
    assert reading.seconds.productive == pytest.approx(main.seconds["productive"])


def test_every_progress_figure_the_trainer_serves_reaches_the_reading():
    progress = Progress(step=0, total_steps=100)
    t = timeline_with_every_category()
    progress.attach("goodput", t.document)
    progress.update(phase="training", step=12, loss=2.5, step_time_s=0.25,
                    tokens_per_s_per_device=1000.0, tflops_per_device=1.5, mfu=0.4,
                    last_checkpoint_step=10)
    doc = json.loads(json.dumps(progress.document()))
    assert tuple(doc) == contract.PROGRESS_FIELDS
    reading = ProgressReading.from_document(doc)
    assert reading == ProgressReading(
        step=12, total_steps=100, loss=2.5, step_time_s=0.25, tokens_per_s_per_device=1000.0,
        tflops_per_device=1.5, mfu=0.4, last_checkpoint_step=10, training=True,
        trainer_phase="training", timeline=TimelineReading.from_document(t.document()))


def test_every_final_figure_the_trainer_leaves_reaches_the_reading():
    progress = Progress(step=0, total_steps=100)
    progress.update(phase="done", step=100, loss=2.5, step_time_s=0.25,
                    tokens_per_s_per_device=1000.0, tflops_per_device=1.5, mfu=0.4,
                    last_checkpoint_step=100, grad_norm=0.5)
    final = json.loads(json.dumps(progress.final()))
    assert tuple(final) == contract.FINAL_PROGRESS_FIELDS
    assert set(contract.FINAL_PROGRESS_FIELDS) < set(contract.PROGRESS_FIELDS)
    pod = {"status": {"containerStatuses": [{"name": "trainer", "state": {"terminated": {
        "exitCode": 0, "message": json.dumps({"reason": "Completed", "progress": final})}}}]}}
    assert read_final_progress([pod]) == ProgressReading(
        step=100, total_steps=100, loss=2.5, step_time_s=0.25, tokens_per_s_per_device=1000.0,
        tflops_per_device=1.5, mfu=0.4, last_checkpoint_step=100, training=True,
        trainer_phase="done")


def _ended(message: str, *, earlier: bool = False, attempt: str | None = None) -> dict:
    """A pod whose trainer container ended with `message` (`earlier`: and runs again)."""
    state = {"terminated": {"exitCode": 0, "message": message}}
    status = {"name": "trainer"} | ({"state": {"running": {}}, "lastState": state} if earlier
                                    else {"state": state})
    labels = {} if attempt is None else {"jobset.sigs.k8s.io/restart-attempt": attempt}
    return {"metadata": {"labels": labels}, "status": {"containerStatuses": [status]}}


@pytest.mark.parametrize("pods, step", [
    ([], None),
    ([{}, {"status": {"containerStatuses": [{"name": "trainer", "state": {"running": {}}}]}}],
     None),
    ([_ended("")], None),
    ([_ended("Error: not the trainer's line")], None),
    ([_ended('{"reason": "Completed", "goodput": {"attempt": "a", "step": 9}}')], None),
    ([_ended('{"reason": "Completed", "progress": {"step": "nine"}}')], None),
    ([_ended('{"reason": "Completed", "progress": {"step": 9}}')], 9),
    ([_ended('{"reason": "Completed", "progress": {"step": 9}}', earlier=True)], 9),
    # More than one left figures (a pod of an earlier attempt kept): the furthest one.
    ([_ended('{"progress": {"step": 9}}'), _ended('{"progress": {"step": 12}}'),
      _ended('{"progress": {"step": 10}}')], 12),
    # The newest JobSet attempt's, though an earlier one got further (it failed at step 45
    # after resuming from 40; the one before reached 50).
    ([_ended('{"progress": {"step": 50}}', attempt="1"),
      _ended('{"progress": {"step": 45}}', attempt="2"),
      _ended('{"progress": {"step": 30}}', attempt="0")], 45),
    # The same step twice (two containers of process 0's pod, one restarted in place): either.
    ([_ended('{"progress": {"step": 9, "loss": 2.0}}'),
      _ended('{"progress": {"step": 9, "loss": 2.1}}')], 9),
    ([_ended('{"progress": {"step": 50}}', attempt="x"),
      _ended('{"progress": {"step": 45}}', attempt="1")], 45),
])
def test_the_final_progress_is_process_zeros_furthest(pods, step):
    reading = read_final_progress(pods)
    assert (reading.step if reading else None) == step


@pytest.mark.parametrize("phase", contract.PHASES)
def test_the_operator_knows_which_phases_train(phase):
    progress = Progress()
    progress.update(phase=phase)
    reading = ProgressReading.from_document(progress.document())
    assert reading.training is (phase not in contract.NOT_TRAINING_PHASES)
    assert reading.trainer_phase == phase


def test_a_phase_outside_the_contract_is_refused_by_the_trainer():
    with pytest.raises(ValueError, match="not one of starting, initializing"):
        Progress().update(phase="warming")
    assert set(contract.NOT_TRAINING_PHASES) < set(contract.PHASES)
    assert "training" not in contract.NOT_TRAINING_PHASES


def test_the_log_progress_fields_are_progress_fields_and_each_is_read():
    assert REGEX_GROUPS == contract.LOG_PROGRESS_FIELDS
    assert set(contract.LOG_PROGRESS_FIELDS) <= set(contract.PROGRESS_FIELDS)
    pattern = compile_user_regex(" ".join(
        f"{name}=(?P<{name}>[0-9.]+)" for name in contract.LOG_PROGRESS_FIELDS))
    line = " ".join(f"{name}={i + 1}" for i, name in enumerate(contract.LOG_PROGRESS_FIELDS))
    reading = ProgressReading.from_document(parse_regex_line(pattern, line))
    for i, name in enumerate(contract.LOG_PROGRESS_FIELDS):
        assert getattr(reading, name) == i + 1, name
