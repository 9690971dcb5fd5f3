"""Reading progress from process 0's log: which pod and container, what is asked of pods/log,
and what one look reports (a reading, a problem, or nothing yet)."""

import pytest

from tpujob.api.trainer_spec import ProgressSpec
from tpujob.controller.log_source import (
    SINCE_SECONDS,
    TAIL_LINES,
    find_process_zero_container,
    read_log_progress,
)

pytestmark = pytest.mark.unit


def _pod(name, job_index="0", index="0", phase="Running", containers=("trainer",)):
    return {"metadata": {"name": name, "labels": {"jobset.sigs.k8s.io/job-index": job_index},
                         "annotations": {"batch.kubernetes.io/job-completion-index": index}},
            "spec": {"containers": [{"name": c} for c in containers]},
            "status": {"phase": phase}}


@pytest.mark.parametrize("pods, expected", [
    ([_pod("a", index="1"), _pod("b")], ("b", "trainer")),
    ([_pod("a", job_index="1"), _pod("b", containers=("trainer-1", "trainer-2"))],
     ("b", "trainer-1")),
    ([_pod("a", phase="Pending")], None),
    ([_pod("a", phase="Succeeded")], None),
    ([_pod("a", containers=())], None),
    ([{**_pod("a"), "metadata": {"labels": {}, "annotations": {
        "batch.kubernetes.io/job-completion-index": "0"}}}], None),   # no name yet
    ([], None),
])
def test_process_zero_container(pods, expected):
    assert find_process_zero_container(pods) == expected


@pytest.mark.parametrize("pods, expected", [
    ([_pod("a"), _pod("b", phase="Succeeded")], ("b", "trainer")),
    ([_pod("a"), _pod("b", phase="Failed")], ("b", "trainer")),
    ([_pod("a", index="1", phase="Succeeded"), _pod("b", phase="Pending")], None),
])
def test_process_zero_container_of_a_finished_run(pods, expected):
    assert find_process_zero_container(pods, phases=("Succeeded", "Failed")) == expected


MAXTEXT = ProgressSpec(source="log", format="maxtext")


@pytest.mark.parametrize("log, spec, step, problem", [
    ("I1123 x.py:1] completed step: 4, seconds: 1.5, TFLOP/s/device: 0.1, "
     "Tokens/s/device: 10.0, total_weights: 8, loss: 3.25\n", MAXTEXT, 4, None),
    ("compiling...\n", MAXTEXT, None, None),
    (None, MAXTEXT, None, None),
    ('{"step": "x"}\n', ProgressSpec(source="log", format="jsonl"), None,
     "process 0's log (p0/trainer) has a jsonl progress line that cannot be read: "
     "step 'x' is not a number"),
])
def test_one_look(log, spec, step, problem):
    asked = []

    def read_log(*args):
        asked.append(args)
        return log

    found = read_log_progress(read_log, "ns", ("p0", "trainer"), spec)
    assert asked == [("ns", "p0", "trainer", TAIL_LINES, SINCE_SECONDS)]
    assert (found.progress.step if found.progress else None, found.problem) == (step, problem)
    # Only a log that could not be read at all sends the reconciler to look for the pod again.
    assert found.missing == (log is None)
    with pytest.raises(AttributeError):  # a reading is a value: what the reconciler got stays
        found.missing = not found.missing
