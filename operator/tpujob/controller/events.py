"""Events leave from one background thread, as client-go's event recorder sends them: a reconcile
hands its Events over and goes on to the next job, so that in a burst of new jobs the JobSets
are created first and the Events that describe them follow. Events are best effort: they keep
their order, a full queue drops the newest with a warning (and counts it) rather than hold up a
reconcile, and stopping sends what is queued within a time limit."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from tpujob.controller.metrics import OperatorMetrics

log = logging.getLogger("tpujob.operator")
# (the job, type, reason, message): KubeApi.create_event's signature.
PostEvent = Callable[[dict[str, Any], str, str, str], None]
_STOP = object()


def event_subject(job: dict[str, Any]) -> dict[str, Any]:
    """What an Event needs of its job: a small copy, so that a queued Event does not keep the
    whole object (spec, status) alive."""
    meta = job.get("metadata") or {}
    return {"apiVersion": job.get("apiVersion"),
            "metadata": {k: meta.get(k) for k in ("namespace", "name", "uid",
                                                   "resourceVersion")}}


class EventRecorder:
    """Queues Events and posts them, in order, from its own thread once `start`ed."""

    def __init__(self, post: PostEvent, metrics: OperatorMetrics, capacity: int = 1000):
        self._post = post
        self._metrics = metrics
        self._queue: queue.Queue = queue.Queue(maxsize=capacity)
        self._thread: threading.Thread | None = None

    def record(self, job: dict[str, Any], type_: str, reason: str, message: str) -> None:
        try:
            self._queue.put_nowait((event_subject(job), type_, reason, message))
        except queue.Full:
            self._metrics.events_dropped.inc()
            meta = job.get("metadata") or {}
            log.warning("Event %s for %s/%s dropped: %d Events are waiting to be sent",
                        reason, meta.get("namespace"), meta.get("name"), self._queue.maxsize)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tpujob-events", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (for at most `timeout_s`), then stop the thread."""
        if self._thread is None:
            return
        try:
            self._queue.put(_STOP, timeout=timeout_s)
        except queue.Full:
            pass  # still sending: the thread is a daemon and goes with the process
        self._thread.join(timeout_s)
        self._thread = None

    def pending(self) -> int:
        return self._queue.qsize()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            try:
                self._post(*item)
            except Exception:  # noqa: BLE001 -- one bad Event must not end the others
                log.exception("could not send Event %s", item[2])
