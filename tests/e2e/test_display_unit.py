"""What `tpujob local run` prints, from job objects alone: the status line, the progress bar,
plain lines on a pipe (a line per phase change, at most one per interval while steps move) and
in-place redrawing on a terminal; and reading a file of objects."""

from __future__ import annotations

import io

import pytest

from tpujob.local.session.display import (
    Display,
    _fmt_count,
    _fmt_duration,
    build_bar,
    build_event_line,
    build_job_line,
    tokens_per_step,
)
from tpujob.local.session.manifests import ManifestError, load_documents

pytestmark = pytest.mark.unit


def job(phase="Running", step=None, total=60, **status):
    obj = {"metadata": {"name": "quickstart"},
           "spec": {"trainer": {"config": {"train": {"global_batch": 16, "seq_len": 128}}}},
           "status": {"phase": phase, **status}}
    if step is not None:
        obj["status"]["progress"] = {"step": step, "totalSteps": total, "loss": 2.34567,
                                     "stepTimeSeconds": 0.2, "tokensPerSecondPerDevice": 5120.0,
                                     "lastCheckpointStep": 20}
    return obj


def test_the_line_of_a_running_job():
    line = build_job_line(job(step=30, restarts=1), elapsed_s=75)
    assert line == ("quickstart  Running     [############------------]  30/60  loss 2.3457  "
                    "10.2k tok/s  ckpt 20  restarts 1  1:15")
    # Without the batch shape in the spec, the per-device figure the trainer reports.
    bare = job(step=30)
    bare["spec"] = {}
    assert "5.1k tok/s/dev" in build_job_line(bare, 0, bar=False)
    assert "[" not in build_job_line(bare, 0, bar=False)


def test_the_line_before_progress_and_after_a_failure():
    assert build_job_line(job("Pending"), 3) == "quickstart  Pending     0:03"
    failed = job("Failed", failure={"reason": "OutOfMemory", "message": "..."})
    assert build_job_line(failed, 3661) == "quickstart  Failed      OutOfMemory  1:01:01"


@pytest.mark.parametrize("step,total,bar", [
    (0, 4, "[----]"), (1, 4, "[#---]"), (4, 4, "[####]"), (9, 4, "[####]"), (3, None, "[    ]"),
])
def test_the_bar(step, total, bar):
    assert build_bar(step, total, width=4) == bar


def test_an_event_line():
    event = {"type": "Warning", "reason": "Restarting", "message": "pod p was killed"}
    assert build_event_line(event) == "  Warning Restarting: pod p was killed"


def test_plain_lines_on_phase_changes_and_at_most_one_per_interval():
    out = io.StringIO()
    display = Display(out=out, live=False, plain_interval_s=3600)
    display.update([job("Starting")])
    display.update([job("Starting")])           # nothing changed: nothing written
    display.update([job("Running", step=1)])    # a new phase
    display.update([job("Running", step=2)])    # only the step moved, within the interval
    display.message("  Normal Succeeded: training finished")
    display.update([job("Succeeded", step=60)], final=True)
    lines = out.getvalue().splitlines()
    assert [line.split()[1] for line in lines if line.startswith("quickstart")] == [
        "Starting", "Running", "Succeeded"]
    assert "  Normal Succeeded: training finished" in lines
    assert "\x1b" not in out.getvalue()


def test_a_terminal_gets_its_lines_redrawn_in_place():
    out = io.StringIO()
    display = Display(out=out, live=True)
    display.update([job(step=1), job(step=2)])
    display.update([job(step=3), job(step=4)])
    display.message("  Normal Running: phase Running")
    text = out.getvalue()
    # Two job lines drawn, then moved up over both and cleared before each redraw or message.
    assert text.count("\x1b[2F\x1b[J") == 2
    assert text.endswith("\x1b[2F\x1b[J  Normal Running: phase Running\n")


def test_reading_a_file_of_objects(tmp_path):
    path = tmp_path / "jobs.yaml"
    path.write_text("---\napiVersion: v1\nkind: List\nitems:\n"
                    "- {apiVersion: v1, kind: Namespace, metadata: {name: team}}\n---\n"
                    "apiVersion: tpujob.dev/v1alpha1\nkind: TpuTrainingJob\n"
                    "metadata: {name: a, namespace: team}\nspec: {}\n")
    assert [d["kind"] for d in load_documents(path)] == ["Namespace", "TpuTrainingJob"]
    for text, problem in [("", "holds no Kubernetes objects"),
                          ("kind: X\n", "needs apiVersion and kind"),
                          ("apiVersion: v1\nkind: X\nmetadata: {}\n", "has no metadata.name"),
                          ("a: [\n", "not valid YAML")]:
        path.write_text(text)
        with pytest.raises(ManifestError, match=problem):
            load_documents(path)


@pytest.mark.parametrize("trainer_phase, shown", [
    ("compiling", "quickstart  Running     compiling  0:12"),
    ("initializing", "quickstart  Running     initializing  0:12"),
])
def test_the_line_says_what_the_trainer_does_before_its_first_step(trainer_phase, shown):
    starting = job(step=0)
    starting["status"]["progress"]["trainerPhase"] = trainer_phase
    assert build_job_line(starting, 12) == shown
    assert build_job_line(job(), 12) == "quickstart  Running     starting  0:12"
    training = job(step=3)
    training["status"]["progress"]["trainerPhase"] = "training"
    assert "3/60" in build_job_line(training, 12)
    # Finished: the trainer's last word is "done", and the line shows where the run ended.
    done = job(step=60)
    done["status"]["phase"] = "Succeeded"
    done["status"]["progress"] |= {"trainerPhase": "done", "lastCheckpointStep": 60}
    line = build_job_line(done, 40, bar=False)
    assert line.startswith("quickstart  Succeeded   60/60  loss ") and "ckpt 60" in line


@pytest.mark.parametrize("x, shown", [
    (999, "999"), (1000, "1.0k"), (999_999, "1000.0k"), (1_000_000, "1.0M"), (1_400_000, "1.4M"),
])
def test_counts(x, shown):
    assert _fmt_count(x) == shown


@pytest.mark.parametrize("seconds, shown", [
    (-5, "0:00"), (0, "0:00"), (59.9, "0:59"), (61, "1:01"), (3600, "1:00:00"), (3725, "1:02:05"),
])
def test_durations(seconds, shown):
    assert _fmt_duration(seconds) == shown


def test_tokens_per_step_needs_both_the_batch_and_the_sequence():
    assert tokens_per_step(job()) == 16 * 128
    unsized = job()
    del unsized["spec"]["trainer"]["config"]["train"]["seq_len"]
    assert tokens_per_step(unsized) is None
    unsized["spec"]["trainer"]["config"]["train"] = {"seq_len": 128}
    assert tokens_per_step(unsized) is None


def test_a_progress_without_a_step_reads_as_step_zero_and_a_failure_without_a_cause():
    bare = job(step=1)
    del bare["status"]["progress"]["step"]
    assert "  0/60  " in build_job_line(bare, 5, bar=False)
    failed = job(phase="Failed")
    assert build_job_line(failed, 5) == "quickstart  Failed      0:05"
