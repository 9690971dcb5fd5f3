"""The operator's event recorder: Events leave in order from their own thread, a full queue drops
and counts, stopping sends what is queued, and a failing post does not end the others."""

from __future__ import annotations

import threading

from tpujob.controller.events import EventRecorder, event_subject
from tpujob.controller.metrics import OperatorMetrics


def _job(name: str) -> dict:
    return {"apiVersion": "tpujob.dev/v1alpha1",
            "metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}",
                         "resourceVersion": "7", "labels": {"big": "x" * 100}},
            "spec": {"slice": "v6e-16"}, "status": {"phase": "Running"}}


def _dropped(metrics: OperatorMetrics) -> float:
    return metrics.registry.get_sample_value("tpujob_operator_events_dropped_total") or 0.0


def test_events_keep_their_order_and_stop_sends_what_is_queued():
    sent: list[tuple[str, str]] = []
    gate = threading.Event()

    def post(job, type_, reason, message):
        gate.wait(5)
        sent.append((job["metadata"]["name"], reason))

    recorder = EventRecorder(post, OperatorMetrics())
    recorder.start()
    for i in range(20):
        recorder.record(_job(f"j{i}"), "Normal", f"R{i}", "m")
    gate.set()
    recorder.stop(timeout_s=5)
    assert sent == [(f"j{i}", f"R{i}") for i in range(20)]


def test_a_full_queue_drops_the_newest_and_counts_it_without_blocking():
    gate = threading.Event()
    sent: list[str] = []
    metrics = OperatorMetrics()
    recorder = EventRecorder(lambda job, t, reason, m: (gate.wait(5), sent.append(reason)),
                             metrics, capacity=3)
    # Not started: nothing drains, so the fourth and fifth do not fit.
    for i in range(5):
        recorder.record(_job("a"), "Normal", f"R{i}", "m")
    assert recorder.pending() == 3
    assert _dropped(metrics) == 2
    recorder.start()
    gate.set()
    recorder.stop(timeout_s=5)
    assert sent == ["R0", "R1", "R2"]


def test_a_failing_post_does_not_stop_the_ones_after_it():
    sent: list[str] = []

    def post(job, type_, reason, message):
        if reason == "Bad":
            raise RuntimeError("boom")
        sent.append(reason)

    recorder = EventRecorder(post, OperatorMetrics())
    recorder.start()
    for reason in ("A", "Bad", "B"):
        recorder.record(_job("a"), "Normal", reason, "m")
    recorder.stop(timeout_s=5)
    assert sent == ["A", "B"]


def test_a_queued_event_keeps_only_what_the_event_names():
    subject = event_subject(_job("a"))
    assert subject == {"apiVersion": "tpujob.dev/v1alpha1",
                       "metadata": {"namespace": "ns", "name": "a", "uid": "uid-a",
                                    "resourceVersion": "7"}}
