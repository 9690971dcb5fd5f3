"""A controller work queue: keys wait until they are due, a key is never worked on twice at the
same time, and a key added while it is being worked on is done once more afterwards. Watch events,
retries and periodic looks all go through it, so bursts of events coalesce."""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Awaitable, Callable, Hashable

log = logging.getLogger("tpujob.operator")


class WorkQueue:
    """`work(key)` returns seconds until the key should be looked at again, or None."""

    def __init__(self, work: Callable[[Hashable], Awaitable[float | None]], workers: int = 4,
                 clock: Callable[[], float] = time.monotonic):
        self._work = work
        self._workers = workers
        self._clock = clock
        self._due: dict[Hashable, float] = {}
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = 0
        self._busy: set[Hashable] = set()
        self._again: set[Hashable] = set()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._idle = asyncio.Event()

    def __len__(self) -> int:
        return len(self._due)

    def add(self, key: Hashable, delay: float = 0.0) -> None:
        """Make `key` due in `delay` seconds (sooner wins if it is already waiting)."""
        if key in self._busy and delay <= 0:
            self._again.add(key)
            return
        due = self._clock() + max(0.0, delay)
        if key in self._due and self._due[key] <= due:
            return
        self._due[key] = due
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, key))
        self._wake.set()

    def forget(self, key: Hashable) -> None:
        self._due.pop(key, None)
        self._again.discard(key)

    def _pop_due(self) -> tuple[Hashable | None, float | None]:
        """A key that is due and not being worked on, else (None, seconds to the next due)."""
        deferred = []
        found: Hashable | None = None
        wait: float | None = None
        while self._heap:
            due, seq, key = self._heap[0]
            if self._due.get(key) != due:
                heapq.heappop(self._heap)  # superseded or forgotten
                continue
            now = self._clock()
            if due > now:
                wait = due - now
                break
            heapq.heappop(self._heap)
            if key in self._busy:
                deferred.append((due, seq, key))
                continue
            del self._due[key]
            found = key
            break
        for item in deferred:
            heapq.heappush(self._heap, item)
        return found, wait

    async def _worker(self) -> None:
        while True:
            key, wait = self._pop_due()
            if key is None:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=wait if wait else None)
                except TimeoutError:
                    pass
                continue
            self._busy.add(key)
            delay: float | None = None
            try:
                delay = await self._work(key)
            except asyncio.CancelledError:
                raise
            except Exception:  # the work function reports its own errors; keep the worker alive
                log.exception("reconcile of %s failed unexpectedly", key)
                delay = 30.0
            finally:
                self._busy.discard(key)
            if key in self._again:
                self._again.discard(key)
                self.add(key)
            elif delay is not None:
                self.add(key, delay)
            # another worker may be waiting for a key that was busy
            self._wake.set()

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._worker(), name=f"tpujob-worker-{i}")
                       for i in range(self._workers)]

    @property
    def alive(self) -> bool:
        return bool(self._tasks) and not any(t.done() for t in self._tasks)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
