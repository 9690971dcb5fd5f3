"""Turning on JAX's persistent compilation cache (before anything compiles).

JAX reads and writes the cache through etils.epath, so `gs://` works with the same gcsfs that
Orbax uses. Several processes may share it: an entry is written once under its key (an existing
key is never rewritten), and an entry that cannot be read is compiled again with a warning
(jax/_src/compiler.py), so a half-written file never fails a run.
"""

from __future__ import annotations

import os
import threading
from collections import Counter

import jax

from tpujob_trainer.config.compile_cache import CompileCacheConfig

_EVENTS = {"/jax/compilation_cache/cache_hits": "hits",
           "/jax/compilation_cache/cache_misses": "misses"}


class CacheCounter:
    """Persistent-cache hits and misses counted from JAX's monitoring events, in all and per
    thread (JAX reports a lookup in the thread that compiles). A thread's ident may be reused
    once it has ended: compare two counts taken in the same thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._by_thread: Counter[tuple[int, str]] = Counter()
        jax.monitoring.register_event_listener(self._on_event)

    def _on_event(self, event: str, **kwargs) -> None:
        if event in _EVENTS:
            with self._lock:
                self._counts[_EVENTS[event]] += 1
                self._by_thread[threading.get_ident(), _EVENTS[event]] += 1

    def counts(self, thread: int | None = None) -> dict[str, int]:
        with self._lock:
            if thread is None:
                return {"hits": self._counts["hits"], "misses": self._counts["misses"]}
            return {"hits": self._by_thread[thread, "hits"],
                    "misses": self._by_thread[thread, "misses"]}


_counter: CacheCounter | None = None


def counts(thread: int | None = None) -> dict[str, int]:
    """Hits and misses since `enable` (of one thread's compiles: `threading.get_ident()`);
    zeros when the cache is off."""
    return _counter.counts(thread) if _counter is not None else {"hits": 0, "misses": 0}


def hits_in_this_thread() -> int:
    """Persistent-cache hits of the compiles this thread made since `enable`."""
    return counts(threading.get_ident())["hits"]


def enable(cfg: CompileCacheConfig, output: str) -> str | None:
    """Point JAX at the cache for this run; the directory, or None when the cache is off."""
    directory = cfg.resolve_directory(output, os.environ)
    if directory is None:
        return None
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", cfg.min_compile_time_s)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    global _counter
    if _counter is None:
        _counter = CacheCounter()
    return directory
