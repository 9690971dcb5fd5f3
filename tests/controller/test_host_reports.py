"""The host report lines read by the operator: the trainer's phases are the hang judge's, what
the trainer's own reporter writes reads back step for step, other lines are skipped, a report
line that cannot be read is counted and skipped (never raised), and a log captured from a real
2-process run (process 1 slowed by 0.1 s a step) gives each host its steps, its last heartbeat,
and the slowed one flagged."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tpujob.controller import hangs
from tpujob.controller.host_reports import (
    HostReports,
    UnreadableReport,
    parse_host_report,
    read_host_reports,
    report_host,
)
from tpujob.controller.stragglers import StepSample, score_hosts
from tpujob.log_progress import latest_progress, parse_jsonl_line
from tpujob_trainer import contract
from tpujob_trainer.telemetry.host_report import HostReporter

pytestmark = pytest.mark.unit
CAPTURED = Path(__file__).with_name("host_report_sample.log")


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def line(**fields) -> str:
    doc = {"event": "host_report", "time": 100.5, "process": 1, "slice": 0, "host": 1,
           "phase": "step", "step": 7, "moved_at": 99.25} | fields
    return json.dumps({k: v for k, v in doc.items() if v is not ...}, separators=(",", ":"))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lines(list):
    def write(self, text: str) -> None:
        self.append(text)

    def flush(self) -> None:
        pass


def test_the_trainers_phases_are_the_hang_judges():
    assert [p.value for p in contract.HostPhase] == [p.value for p in hangs.HostPhase]


def test_what_the_trainers_reporter_writes_reads_back_step_for_step():
    clock, out = Clock(), Lines()
    r = HostReporter({"process": 5, "slice": 1, "host": 0, "container": 1}, interval_s=3600,
                     out=out, clock=clock)
    r.start()
    clock.now = 1010.0
    r.phase(contract.HostPhase.COMPILE, 40)
    clock.now = 1020.0
    r.step_done(41, 9.5, 0.5)
    r.step_done(42, 0.25, 0.125, synced=True)
    r.phase(contract.HostPhase.CHECKPOINT_SAVE)
    clock.now = 1021.0
    r.phase(contract.HostPhase.STEP)
    r.step_done(43, 1.5, 0.25)
    clock.now = 1022.0
    r.close()
    host = "slice-1/host-0/container-1"
    reports = read_host_reports("".join(out))
    assert reports == HostReports(
        samples={host: (StepSample(41, 9.5, 10.0), StepSample(42, 0.25, 0.375, True),
                        StepSample(43, 1.5, 1.75, True))},
        beats={host: hangs.HostBeat(host, hangs.HostPhase.STEP, 43, at(1022.0), at(1021.0),
                                    3600.0, False)})
    assert all(set(json.loads(x)) <= set(contract.HOST_REPORT_FIELDS) for x in out)


@pytest.mark.parametrize("text", [
    "",
    "[Gloo] Rank 1 is connected to 1 peer ranks.",
    '{"event": "step", "time": 1.0, "step": 3, "loss": 2.5}',
    '{"event": "warning", "message": "a host_report that is not one"}',
    "host_report: just a word in a line",
    '["host_report"]',
])
def test_a_line_that_is_not_a_host_report_is_none(text):
    assert parse_host_report(text) is None


def test_a_report_line_reads_as_a_beat_and_its_steps():
    stamped = "2026-01-02T03:04:05.123456789Z " + line(
        steps=[[6, 0.5, 0.25, 0], [7, 0.0, 0.75, 1], [8, 1, 0, 1]], dropped=4)
    beat, samples = parse_host_report(stamped)
    assert beat == hangs.HostBeat("slice-0/host-1", hangs.HostPhase.STEP, 7, at(100.5), at(99.25))
    # A step without busy time cannot be scored (score_hosts takes positive ones): left out.
    assert samples == [StepSample(6, 0.5, 0.75, False), StepSample(8, 1.0, 1.0, True)]
    assert parse_host_report(line(phase="checkpoint_restore", step=0, time=0, moved_at=0)) == (
        hangs.HostBeat("slice-0/host-1", hangs.HostPhase.CHECKPOINT_RESTORE, 0, at(0), at(0)),
        [])


@pytest.mark.parametrize("text, match", [
    (line(phase="training"), "phase 'training' is not one of startup, compile, step, "
                             "checkpoint_save, checkpoint_restore"),
    (line(phase=...), "phase None"),
    (line(step=-1), "step -1 is not a whole number"),
    (line(step=2.0), "step 2.0 is not a whole number"),
    (line(step=True), "step True"),
    (line(host="1"), "host '1'"),
    (line(slice=...), "slice None"),
    (line(container=-2), "container -2"),
    (line(time="now"), "time 'now' is not a number of seconds"),
    (line(time=-1.0), "time -1.0"),
    (line(moved_at=False), "moved_at False"),
    (line(moved_at=float("nan")), "moved_at nan"),
    (line(moved_at=float("inf")), "moved_at inf"),
    (line(steps={"1": 2}), "steps {'1': 2} is not a list"),
    (line(steps=[[1, 0.5, 0.25]]), r"step entry \[1, 0.5, 0.25\] is not"),
    (line(steps=[[1, 0.5, 0.25, 0, 9]]), "step entry"),
    (line(steps=[7]), "step entry 7"),
    (line(steps=[[0, 0.5, 0.25, 0]]), "step 0 is not a whole number >= 1"),
    (line(steps=[[1.5, 0.5, 0.25, 0]]), "step 1.5"),
    (line(steps=[[False, 0.5, 0.25, 0]]), "step False"),
    (line(steps=[[1, -0.5, 0.25, 0]]), "busy_s -0.5"),
    (line(steps=[[1, "0.5", 0.25, 0]]), "busy_s '0.5'"),
    (line(steps=[[1, 0.5, -0.25, 0]]), "wait_s -0.25"),
    (line(steps=[[1, 0.5, None, 0]]), "wait_s None"),
    (line(steps=[[1, 0.5, 0.25, 2]]), "checkpoint 2 is not 0 or 1"),
    (line(steps=[[1, 0.5, 0.25, True]]), "checkpoint True"),
    (line(interval_s=0), "interval_s 0"),
    (line(interval_s="10"), "interval_s '10' is not a number of seconds"),
    (line(waiting=1), "waiting 1 is not true or false"),
    (line(waiting="yes"), "waiting 'yes'"),
    (line()[:-20], "not whole JSON"),                       # a line cut short
    (line()[1:], "not whole JSON"),
    ('{"event":"host_report","time":1} {"x"', "not whole JSON"),   # another write inside it
])
def test_a_report_line_that_cannot_be_read_says_why(text, match):
    with pytest.raises(UnreadableReport, match=match):
        parse_host_report(text)


def test_hosts_are_named_as_the_straggler_scores_name_them():
    assert report_host({"slice": 2, "host": 10}) == "slice-2/host-10"
    assert report_host({"slice": 0, "host": 3, "container": 0}) == "slice-0/host-3/container-0"


def test_a_log_gives_each_host_its_steps_once_and_its_newest_beat_counting_bad_lines():
    text = "\n".join([
        line()[1:],                                               # cut at its start
        line(host=0, step=3, time=50.0, steps=[[2, 0.5, 0.1, 0], [3, 0.5, 0.1, 0]]),
        "a line of the program's own",
        line(host=2, step=5, time=60.0, steps=[[5, 0.25, 0.5, 0]]),
        line(host=0, step=4, time=49.0, steps=[[3, 0.75, 0.2, 1], [4, 0.5, 0.1, 0]]),
        line(host=0, step=4, time=50.0, phase="checkpoint_save"),  # a tie: the later line wins
        line(host=1, phase="bogus"),
    ])
    reports = read_host_reports(text)
    assert reports.unreadable == 2
    assert list(reports.beats) == ["slice-0/host-0", "slice-0/host-2"]
    assert reports.beats["slice-0/host-0"] == hangs.HostBeat(
        "slice-0/host-0", hangs.HostPhase.CHECKPOINT_SAVE, 4, at(50.0), at(99.25))
    assert reports.samples == {
        "slice-0/host-0": (StepSample(2, 0.5, 0.6), StepSample(3, 0.75, 0.95, True),
                           StepSample(4, 0.5, 0.6)),
        "slice-0/host-2": (StepSample(5, 0.25, 0.75),)}
    assert read_host_reports("nothing here\n") == HostReports()
    with pytest.raises(FrozenInstanceError):
        reports.unreadable = 0  # a reading is what the log said, passed on as it is


def test_a_log_captured_from_a_real_run_names_the_slowed_host():
    # `tpujob-train` on 2 processes x 4 CPU devices, 20 steps, TPUJOB_FAULT_STEP_SLEEP_S=0.1 on
    # process 1, heartbeats every second: both processes' stdout (repeated beats thinned out).
    reports = read_host_reports(CAPTURED.read_text())
    fast, slow = "slice-0/host-0", "slice-0/host-1"
    assert reports.unreadable == 0 and list(reports.samples) == [fast, slow]
    assert [s.step for s in reports.samples[fast]] == list(range(1, 21))
    assert [s.step for s in reports.samples[slow]] == list(range(1, 21))
    assert {h: (b.phase, b.step) for h, b in reports.beats.items()} == {
        fast: (hangs.HostPhase.STEP, 20), slow: (hangs.HostPhase.STEP, 20)}
    scores = {s.host: s for s in score_hosts(reports.samples)}
    assert (scores[fast].flagged, scores[slow].flagged) == (False, True)
    assert scores[slow].busy_s > 0.1 > scores[fast].busy_s


def test_log_based_progress_skips_the_host_reports():
    report = line(step=9)
    assert parse_jsonl_line(report) is None
    text = '{"event": "step", "step": 8, "loss": 2.0}\n' + report + "\n"
    assert latest_progress(text, "jsonl") == {"event": "step", "step": 8, "loss": 2.0}


def test_a_short_interval_and_the_waiting_flag_are_read():
    beat, _ = parse_host_report(line(interval_s=0.5, waiting=True))
    assert (beat.interval_s, beat.waiting) == (0.5, True)
    beat, _ = parse_host_report(line())
    assert (beat.interval_s, beat.waiting) == (None, None)   # a program that says neither
