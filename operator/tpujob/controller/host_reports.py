"""Each host's step times and heartbeat, read from the host report lines every trainer process
prints on its stdout (`tpujob_trainer.telemetry.host_report`, docs/trainer.md). Pure: log text
in (one pod's log tail, or several joined); per host, its steps as `stragglers.StepSample`s and
its newest heartbeat as a `hangs.HostBeat` out.

Lines that are not host reports are skipped (a program prints other things too, and kubectl's
`--timestamps` puts a stamp before the JSON). A line that says it is one but cannot be read (a
tail's first line cut short, a field of the wrong type, a phase this operator does not know) is
skipped and counted, never raised: one bad line must not blind the operator to every host.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tpujob.controller.hangs import HostBeat, HostPhase
from tpujob.controller.stragglers import StepSample, host_name, host_order
from tpujob_trainer.contract import HOST_REPORT_EVENT

_MARKER = f'"event":"{HOST_REPORT_EVENT}"'   # as the trainer writes it (compact JSON)


class UnreadableReport(ValueError):
    """A host report line with a field that is missing or not what the contract says."""


@dataclass(frozen=True)
class HostReports:
    """What a log tail says of each host: its steps in step order (the newest report of a step
    wins) and its newest heartbeat; `unreadable`: report lines skipped as malformed."""

    samples: dict[str, tuple[StepSample, ...]] = field(default_factory=dict)
    beats: dict[str, HostBeat] = field(default_factory=dict)
    unreadable: int = 0


def _index(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UnreadableReport(f"{key} {value!r} is not a whole number >= 0")
    return value


def _seconds(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0:
        raise UnreadableReport(f"{what} {value!r} is not a number of seconds")
    return float(value)


def _when(doc: dict[str, Any], key: str) -> datetime:
    return datetime.fromtimestamp(_seconds(doc.get(key), key), UTC)


def report_host(doc: dict[str, Any]) -> str:
    """The host a report is from, named as the straggler scores name hosts (a process of a
    host that runs several has its container after the host)."""
    name = host_name(_index(doc, "slice"), _index(doc, "host"))
    return f"{name}/container-{_index(doc, 'container')}" if "container" in doc else name


def _sample(entry: Any) -> StepSample | None:
    """[step, busy_s, wait_s, checkpoint] as a sample; None for a step without busy time (the
    straggler scores take only positive ones)."""
    if not isinstance(entry, list) or len(entry) != 4:
        raise UnreadableReport(f"step entry {entry!r} is not [step, busy_s, wait_s, checkpoint]")
    step, busy, wait, checkpoint = entry
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise UnreadableReport(f"step {step!r} is not a whole number >= 1")
    busy_s, wait_s = _seconds(busy, "busy_s"), _seconds(wait, "wait_s")
    if checkpoint not in (0, 1) or isinstance(checkpoint, bool):
        raise UnreadableReport(f"checkpoint {checkpoint!r} is not 0 or 1")
    if busy_s == 0:
        return None
    return StepSample(step, busy_s, busy_s + wait_s, checkpoint == 1)


def parse_host_report(line: str) -> tuple[HostBeat, list[StepSample]] | None:
    """One log line as (the host's heartbeat, the steps it carries), or None when it is not a
    host report. Raises UnreadableReport for a report line that cannot be read."""
    if HOST_REPORT_EVENT not in line:
        return None
    start = line.find("{")
    try:
        doc = json.loads(line[start:]) if start >= 0 else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("event") != HOST_REPORT_EVENT:
        if _MARKER in line:
            raise UnreadableReport("a host report line that is not whole JSON")
        return None
    try:
        phase = HostPhase(doc.get("phase"))
    except ValueError:
        raise UnreadableReport(f"phase {doc.get('phase')!r} is not one of "
                               f"{', '.join(HostPhase)}") from None
    steps = doc.get("steps", [])
    if not isinstance(steps, list):
        raise UnreadableReport(f"steps {steps!r} is not a list")
    samples = [s for s in map(_sample, steps) if s is not None]
    interval, waiting = doc.get("interval_s"), doc.get("waiting")
    if interval is not None and not _seconds(interval, "interval_s") > 0:
        raise UnreadableReport(f"interval_s {interval!r} must be > 0")
    if waiting is not None and not isinstance(waiting, bool):
        raise UnreadableReport(f"waiting {waiting!r} is not true or false")
    beat = HostBeat(report_host(doc), phase, _index(doc, "step"), _when(doc, "time"),
                    _when(doc, "moved_at"), None if interval is None else float(interval),
                    waiting)
    return beat, samples


def read_host_reports(text: str) -> HostReports:
    """Every host's steps and newest heartbeat in a log excerpt (hosts in host order)."""
    steps: dict[str, dict[int, StepSample]] = {}
    beats: dict[str, HostBeat] = {}
    unreadable = 0
    for line in text.splitlines():
        try:
            report = parse_host_report(line)
        except UnreadableReport:
            unreadable += 1
            continue
        if report is None:
            continue
        beat, samples = report
        known = beats.get(beat.host)
        if known is None or beat.beat_at >= known.beat_at:
            beats[beat.host] = beat
        mine = steps.setdefault(beat.host, {})
        for s in samples:
            mine[s.step] = s
    hosts = sorted(beats, key=host_order)
    return HostReports(
        samples={h: tuple(sorted(steps[h].values(), key=lambda s: s.step)) for h in hosts},
        beats={h: beats[h] for h in hosts}, unreadable=unreadable)
