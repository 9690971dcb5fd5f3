"""The next batch read ahead, in a thread of its own, while the device runs the step.

The loop asks for batch N+1 right after it dispatched step N, then waits for step N-1's result:
with a source read inline, the host's time in `next_batch()` (making synthetic rows, reading and
checking token windows) is time the loop is not feeding the device, and goodput charges it as
`dataLoadingSync`. `Prefetched` hands out the batch a thread read meanwhile and starts reading the
next one at once, so that read overlaps the step the loop then waits for.

What a caller sees is what the source gives, in the same order: the same batches, the same
`DataExhausted` or `DataError` at the same call (a read that failed in the thread raises when its
batch is asked for, never before), and `state()` is the position after the batches handed out,
not after the one read ahead, so a checkpoint resumes exactly where the run was. The source is
only ever used by one thread at a time: the reading thread while a read is under way, the
caller's otherwise (`state()` and `restore()` wait for a read under way).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np


class _Read:
    """One `next_batch()` of the source, in a daemon thread (a read stuck on storage must not
    keep a finished run's process alive)."""

    def __init__(self, source: Any):
        self._source = source
        self._batch: np.ndarray | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tpujob-data-prefetch",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._batch = self._source.next_batch()
        except BaseException as e:  # raised in the caller's thread, when the batch is asked for
            self._error = e

    def result(self) -> np.ndarray:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._batch is not None
        return self._batch


class Prefetched:
    """`source` (a DataSource) with its next batch read ahead; a DataSource itself."""

    def __init__(self, source: Any):
        self.source = source
        self._ahead: _Read | None = None
        # The position after the batches handed out, taken before the read ahead moved the
        # source on; None until the first batch (the source's own position is then the same).
        self._handed_out: dict | None = None

    def next_batch(self) -> np.ndarray:
        ahead, self._ahead = self._ahead, None
        batch = ahead.result() if ahead is not None else self.source.next_batch()
        self._handed_out = self.source.state()
        self._ahead = _Read(self.source)
        return batch

    def state(self) -> dict:
        return self.source.state() if self._handed_out is None else dict(self._handed_out)

    def restore(self, state: dict) -> None:
        self._settle()
        self.source.restore(state)
        self._handed_out = None

    def _settle(self) -> None:
        """Wait out a read under way and drop its batch (or its error): the source is the
        caller's again."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead._thread.join()
