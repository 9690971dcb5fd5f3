"""Training progress read from a program's own log lines, for a trainer that does not serve
`/progress`: MaxText's step line, JSON lines with `step` (and `loss`, ...), or a user's regular
expression with named groups. Pure: text in, the newest reading out, as a progress document
with the built-in trainer's `/progress` field names (`step`, `loss`, `step_time_s`,
`tokens_per_s_per_device`, `tflops_per_device`), which the operator reads the same way.

MaxText's line (`src/maxtext/common/metric_logger.py`, `_log_training_metrics`, written through
absl logging, so after a `I1123 20:10:00.123456 1234 metric_logger.py:230] ` prefix):

    completed step: 12, seconds: 1.234, TFLOP/s/device: 0.101, Tokens/s/device: 1519.874,
    total_weights: 2048, loss: 9.876, lm_loss: 9.876, perplexity: 19468.381

(one line; `[Rampup Batch Size Phase], ` may lead it and the speed figures are left out during
batch-size ramp-up.)

DeepSpeed's engine (deepspeed 0.19: runtime/engine.py `_report_progress`, utils/timer.py's
throughput timer, through `log_dist`, so after a `[date] [INFO] [logging.py:..:log_dist] ` prefix):

    [Rank 0] step=10, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]
    [Rank 0] epoch=0/micro_step=20/global_step=10, RunningAvgSamplesPerSec=46.3, ...

(no loss: DeepSpeed does not print one). Hugging Face's Trainer (transformers 5: its
`ProgressCallback`) draws a tqdm bar of the training steps and writes its log dict above it:

    {'loss': '2.345', 'grad_norm': '1.2', 'learning_rate': '4.5e-05', 'epoch': '0.12'}
     30%|███       | 300/1000 [02:00<04:40,  2.50it/s]

(older versions print the floats unquoted). The step is the bar's (the longest bar in the
excerpt: an evaluation bar counts batches), its rate the step time, the loss the newest dict's.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tpujob_trainer.contract import HOST_REPORT_EVENT, LOG_PROGRESS_FIELDS

Doc = dict[str, Any]

FORMATS = ("maxtext", "jsonl", "regex", "deepspeed", "transformers")
# Named groups a user's regex may have, and the reading's fields they fill.
REGEX_GROUPS = LOG_PROGRESS_FIELDS
_NUMBER = r"(-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|nan|inf|-inf)"
_MAXTEXT_STEP = re.compile(r"(?:^|[\s\],])completed step: ([0-9]+), seconds: " + _NUMBER)
_MAXTEXT_FIELDS = {
    "loss": re.compile(r",\s*loss: " + _NUMBER),
    "tflops_per_device": re.compile(r"TFLOP/s/device: " + _NUMBER),
    "tokens_per_s_per_device": re.compile(r"Tokens/s/device: " + _NUMBER),
}


class LogFormatError(ValueError):
    """A line that claims to be a progress line but cannot be read (a number that is not one,
    a regex whose step is not a whole number)."""


def compile_user_regex(pattern: str) -> re.Pattern[str]:
    """A user's progress regex, checked: it compiles and has a named group `step`, and its other
    named groups are ones a reading has. Raises ValueError saying what would be valid."""
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        raise ValueError(f"regex does not compile: {err}") from None
    groups = set(compiled.groupindex)
    if "step" not in groups:
        raise ValueError("regex needs a named group for the step, e.g. "
                         r"'step (?P<step>\d+) .* loss (?P<loss>[0-9.]+)'")
    unknown = sorted(groups - set(REGEX_GROUPS))
    if unknown:
        raise ValueError(f"regex has unknown named group(s) {', '.join(unknown)}; use "
                         f"{', '.join(REGEX_GROUPS)}")
    return compiled


def _number(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise LogFormatError(f"{what} {text!r} is not a number") from None


def _step(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise LogFormatError(f"step {text!r} is not a whole number") from None


def parse_maxtext_line(line: str) -> Doc | None:
    """MaxText's `completed step: N, seconds: S, ...` line, or None for any other line."""
    m = _MAXTEXT_STEP.search(line)
    if m is None:
        return None
    doc: dict[str, Any] = {"step": _step(m.group(1)),
                           "step_time_s": _number(m.group(2), "seconds")}
    for key, pattern in _MAXTEXT_FIELDS.items():
        found = pattern.search(line, m.end())
        if found is not None:
            doc[key] = _number(found.group(1), key)
    return doc


def parse_jsonl_line(line: str) -> Doc | None:
    """A JSON object with a numeric `step` (the built-in trainer's stdout lines have this form),
    or None for a line that is not one (a program prints other things too, and the trainer's
    host reports, which carry a step, are read by `tpujob.controller.host_reports`)."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or "step" not in doc or doc.get("event") == HOST_REPORT_EVENT:
        return None
    if isinstance(doc["step"], bool) or not isinstance(doc["step"], int | float):
        raise LogFormatError(f"step {doc['step']!r} is not a number")
    return doc


def parse_regex_line(pattern: re.Pattern[str], line: str) -> Doc | None:
    m = pattern.search(line)
    if m is None or m.group("step") is None:
        return None
    doc: dict[str, Any] = {"step": _step(m.group("step"))}
    for key in REGEX_GROUPS[1:]:
        if key in pattern.groupindex and m.group(key) is not None:
            doc[key] = _number(m.group(key), key)
    return doc


_DEEPSPEED_STEP = re.compile(r"\[Rank 0\] (?:step=|epoch=[0-9]+/micro_step=[0-9]+/global_step=)"
                             r"([0-9]+),")
_TQDM_BAR = re.compile(r"\|\s*([0-9]+)/([0-9]+) \[[0-9:]+<[0-9:?]+,\s*" + _NUMBER +
                       r"(it/s|s/it)\]")
_HF_LOSS = re.compile(r"\{[^{}]*'loss': '?" + _NUMBER + r"'?[,}]")


def parse_deepspeed_line(line: str) -> Doc | None:
    """DeepSpeed's `[Rank 0] step=N, ...` or throughput line, or None for any other line."""
    m = _DEEPSPEED_STEP.search(line)
    return None if m is None else {"step": _step(m.group(1))}


def latest_transformers_progress(text: str) -> Doc | None:
    """Hugging Face Trainer's newest training-bar step, its step time and the newest loss."""
    lines = text.splitlines()
    bars = [(i, m) for i, line in enumerate(lines) if (m := _TQDM_BAR.search(line))]
    if not bars:
        return None
    total = max(int(m.group(2)) for _, m in bars)
    index, bar = next((i, m) for i, m in reversed(bars) if int(m.group(2)) == total)
    rate = _number(bar.group(3), "rate")
    doc: Doc = {"step": _step(bar.group(1))}
    if rate > 0:
        doc["step_time_s"] = rate if bar.group(4) == "s/it" else 1.0 / rate
    for line in reversed(lines[:index]):
        loss = _HF_LOSS.search(line)
        if loss is not None:
            doc["loss"] = _number(loss.group(1), "loss")
            break
    return doc


def latest_progress(text: str, fmt: str, regex: str | None = None) -> Doc | None:
    """The newest progress line of a log excerpt, or None when no line is one. Raises
    LogFormatError for the newest line that looks like progress but cannot be read."""
    if fmt == "maxtext":
        parse = parse_maxtext_line
    elif fmt == "jsonl":
        parse = parse_jsonl_line
    elif fmt == "deepspeed":
        parse = parse_deepspeed_line
    elif fmt == "transformers":
        return latest_transformers_progress(text)
    elif fmt == "regex" and regex:
        compiled = compile_user_regex(regex)

        def parse(line: str) -> Doc | None:
            return parse_regex_line(compiled, line)
    else:
        raise ValueError(f"unknown log format {fmt!r}; use one of {', '.join(FORMATS)}")
    for line in reversed(text.splitlines()):
        reading = parse(line)
        if reading is not None:
            return reading
    return None
