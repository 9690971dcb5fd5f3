"""The trainer's documents read at their edges: the attempt's name bounded, counts that are
missing, a phase that is empty, and readings that cannot be changed once made."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from tpujob.controller.trainer_reports import (
    MAX_ATTEMPT_CHARS,
    ProgressReading,
    TimelineReading,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("doc, attempt", [
    ({"attempt": "a" * MAX_ATTEMPT_CHARS}, "a" * MAX_ATTEMPT_CHARS),
    ({"attempt": "a" * (MAX_ATTEMPT_CHARS + 1)}, None),
    ({"attempt": ""}, None),
    ({"attempt": 7}, None),
])
def test_an_attempt_is_a_short_name(doc, attempt):
    reading = TimelineReading.from_document(doc)
    assert (reading.attempt if reading is not None else None) == attempt


@pytest.mark.parametrize("steps, read", [(None, 0), ("x", 0), (-3, 0), (0, 0), (5, 5)])
def test_steps_missing_or_not_a_count_read_as_none_done(steps, read):
    doc = {"attempt": "a"} | ({"steps": steps} if steps is not None else {})
    assert TimelineReading.from_document(doc).steps == read
    assert TimelineReading(attempt="a").steps == 0


@pytest.mark.parametrize("phase, said", [("", None), (None, None), (3, None),
                                         ("compiling", "compiling"), ("x" * 80, "x" * 63)])
def test_the_trainers_phase_in_its_own_words(phase, said):
    assert ProgressReading.from_document({"step": 1, "phase": phase}).trainer_phase == said


def test_a_reading_is_frozen():
    with pytest.raises(FrozenInstanceError):
        TimelineReading(attempt="a").steps = 3
