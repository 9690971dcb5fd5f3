"""Progress from log lines, table-driven: MaxText's step line as its metric logger writes it
(absl prefix included), JSON lines, a user's regex; the newest line wins; malformed progress
lines raise, other lines are ignored."""

import pytest

from tpujob.log_progress import (
    LogFormatError,
    compile_user_regex,
    latest_progress,
    parse_jsonl_line,
    parse_maxtext_line,
    parse_regex_line,
)

pytestmark = pytest.mark.unit

ABSL = "I1123 20:10:00.123456 140213 metric_logger.py:230] "
MAXTEXT = (ABSL + "completed step: 12, seconds: 1.234, TFLOP/s/device: 0.101, "
           "Tokens/s/device: 1519.874, total_weights: 2048, loss: 9.876, lm_loss: 9.870, "
           "perplexity: 19468.381")


@pytest.mark.parametrize("line, expected", [
    (MAXTEXT, {"step": 12, "step_time_s": 1.234, "tflops_per_device": 0.101,
               "tokens_per_s_per_device": 1519.874, "loss": 9.876}),
    # Batch-size ramp-up: a leading tag and no speed figures.
    ("[Rampup Batch Size Phase], completed step: 3, seconds: 2.000, total_weights: 512, "
     "loss: 10.500, lm_loss: 10.500, perplexity: 36315.503",
     {"step": 3, "step_time_s": 2.0, "loss": 10.5}),
    # lm_loss / dpo_loss before loss must not be taken for it.
    ("completed step: 4, seconds: 1.000, total_weights: 8, dpo_loss: 0.250, loss: 1.500",
     {"step": 4, "step_time_s": 1.0, "loss": 1.5}),
    ("completed profiler activation/deactivation step: 5, total_weights: 8, loss: 1.0", None),
    ("Completed eval after train step 10, loss=3.000, perplexity=20.085", None),
    ("some other line: step 3", None),
])
def test_maxtext_line(line, expected):
    assert parse_maxtext_line(line) == expected


@pytest.mark.parametrize("line, expected", [
    ('{"step": 7, "loss": 2.5, "step_time_s": 0.5}', {"step": 7, "loss": 2.5, "step_time_s": 0.5}),
    ('  {"step": 0}  ', {"step": 0}),
    ('{"event": "checkpoint"}', None),
    ("step 7 loss 2.5", None),
    ('{"step": 7, broken', None),
    ("[1, 2]", None),
])
def test_jsonl_line(line, expected):
    assert parse_jsonl_line(line) == expected


@pytest.mark.parametrize("line", ['{"step": "seven"}', '{"step": true}'])
def test_jsonl_bad_step_is_an_error(line):
    with pytest.raises(LogFormatError, match="step"):
        parse_jsonl_line(line)


REGEX = r"it (?P<step>\d+)/\d+ loss=(?P<loss>\S+)"


@pytest.mark.parametrize("line, expected", [
    ("train it 40/100 loss=0.75 lr=1e-4", {"step": 40, "loss": 0.75}),
    ("train it 40/100", None),
])
def test_regex_line(line, expected):
    assert parse_regex_line(compile_user_regex(REGEX), line) == expected


def test_regex_bad_number_is_an_error():
    with pytest.raises(LogFormatError, match="loss 'x1' is not a number"):
        parse_regex_line(compile_user_regex(REGEX), "it 4/9 loss=x1")


@pytest.mark.parametrize("pattern, message", [
    (r"loss=(?P<loss>\S+)", "named group for the step"),
    (r"(?P<step>\d+) (?P<lr>\S+)", "unknown named group(s) lr"),
    (r"(?P<step>\d+", "does not compile"),
])
def test_user_regex_refused(pattern, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compile_user_regex(pattern)


@pytest.mark.parametrize("fmt, regex, text, step", [
    ("maxtext", None, "\n".join([MAXTEXT.replace("step: 12", "step: 11"), MAXTEXT, "done"]), 12),
    ("jsonl", None, '{"step": 1}\nnoise\n{"step": 2, "loss": 1.0}\n', 2),
    ("regex", REGEX, "it 1/9 loss=1\nit 2/9 loss=0.5\n", 2),
    ("maxtext", None, "nothing yet\n", None),
])
def test_latest_progress(fmt, regex, text, step):
    doc = latest_progress(text, fmt, regex)
    assert (doc or {}).get("step") == step


@pytest.mark.parametrize("progress, message", [
    ({"source": "log", "format": "regex"}, "regex is required when format is regex"),
    ({"source": "log", "format": "maxtext", "regex": "(?P<step>\\d+)"}, "and only then"),
    ({"source": "log", "format": "regex", "regex": "loss (?P<loss>\\S+)"},
     "named group for the step"),
    ({"source": "file"}, "'http' or 'log'"),
])
def test_progress_spec_refused(progress, message):
    from tpujob.api.resource import InvalidJobError, load_job
    job = {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
           "metadata": {"name": "j"},
           "spec": {"slice": "v6e-16", "image": "i", "output": "gs://bucket/run",
                    "trainer": {"command": ["python", "t.py"], "progress": progress}}}
    with pytest.raises(InvalidJobError) as err:
        load_job(job)
    assert "spec.trainer.progress" in str(err.value) and message in str(err.value)
