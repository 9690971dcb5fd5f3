"""The trainer's `/metrics` gauges of the goodput timeline: seconds by category and the process's
start, read at scrape time from the timeline attached to the progress document."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tpujob_trainer.telemetry.server import Progress

pytestmark = pytest.mark.unit


def _samples(progress: Progress) -> dict[tuple[str, tuple], float]:
    text = generate_latest(progress.registry).decode()
    samples = [((s.name, tuple(sorted(s.labels.items()))), s.value)
               for family in text_string_to_metric_families(text) for s in family.samples]
    assert len(dict(samples)) == len(samples), "a series served twice"
    return dict(samples)


def _goodput(samples: dict) -> dict[str, float]:
    return {dict(labels)["category"]: v for (name, labels), v in samples.items()
            if name == "tpujob_train_goodput_seconds"}


def test_the_timeline_seconds_and_the_start_are_gauges_read_at_scrape_time():
    progress = Progress(step=0)
    doc = {"seconds": {"productive": 2.5, "program_startup": 1.0}, "started_at": 1700.0}
    progress.attach("goodput", lambda: doc)
    progress.attach("goodput", lambda: doc)  # attached again: one collector, not two
    samples = _samples(progress)
    assert _goodput(samples) == {"productive": 2.5, "program_startup": 1.0}
    assert samples[("tpujob_train_process_start_time_seconds", ())] == 1700.0
    doc["seconds"]["productive"] = 4.0
    assert _goodput(_samples(progress))["productive"] == 4.0


@pytest.mark.parametrize("doc", [{}, {"seconds": None, "started_at": None}])
def test_a_timeline_without_figures_has_no_samples(doc):
    progress = Progress(step=0)
    progress.attach("goodput", lambda: doc)
    samples = _samples(progress)
    assert _goodput(samples) == {}
    assert ("tpujob_train_process_start_time_seconds", ()) not in samples


def test_without_a_timeline_only_the_progress_gauges_are_served():
    progress = Progress(step=3)
    names = {name for name, _ in _samples(progress)}
    assert "tpujob_train_step" in names
    assert not any(n.startswith(("tpujob_train_goodput", "tpujob_train_process_start"))
                   for n in names)
    progress.attach("other", lambda: {"seconds": {"productive": 1.0}})
    assert _goodput(_samples(progress)) == {}  # only the `goodput` document is the timeline
