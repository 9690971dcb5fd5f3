"""The training step compiled once for all the processes of a job that share one machine's CPUs.

JAX on CPU (local mode, the tests) runs every process of a job on one machine, and each process
would compile the same SPMD program, at the same time, on the same cores. Here process 0 gets
the step as before (loaded whole from the job's executable cache, or compiled and saved there)
and tells the others through the job's coordination service whether an entry is there; they
load process 0's entry (its executable runs on every process: the program and the devices it
names are the job's, not the process's) and compile only when there is none. Process 0 always
tells, whatever happened, so no process waits on a step that will not come; a process that
waited too long, or could not read the entry, compiles its own as before.

On an accelerator each host has its own CPUs and compiles its own step: nothing is shared
(`shares`).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)

ENTRY, NONE = "entry", "none"
# How long a process waits for process 0's word: a compile of a large model on CPU, and its save.
WAIT_S = 3600.0


class Coordination(Protocol):
    """The part of jax.distributed's coordination-service client used here."""

    def key_value_set(self, key: str, value: str) -> None: ...

    def blocking_key_value_get(self, key: str, timeout_in_ms: int) -> str: ...


class StepCache(Protocol):
    """The part of `executable_cache.ExecutableCache` used here."""

    def exists(self, key: str) -> bool: ...

    def load(self, key: str) -> Any | None: ...

    def load_or_compile(self, key: str, compile_fn: Callable[[], Any],
                        cache_hits: Callable[[], int]) -> tuple[Any, str]: ...


def shares(platform: str, process_count: int) -> bool:
    """Whether the processes take process 0's compiled step (pure): JAX on CPU with several
    processes, which share one machine's cores."""
    return platform == "cpu" and process_count > 1


def word_key(n: int) -> str:
    """The coordination-service key of the `n`-th step compiled in this run (the same count on
    every process: each runs the same code). Not the entry's key: that is made from the
    process's own config, which may differ between processes in a local path."""
    return f"tpujob/step-executable/{n}"


_compiles = itertools.count()


def step_of_process_0(cache: StepCache, client: Coordination, *, process_index: int,
                      own_key: str, compile_fn: Callable[[], Any],
                      cache_hits: Callable[[], int], wait_s: float = WAIT_S,
                      n: int | None = None) -> tuple[Any, str]:
    """(compiled step, "loaded" | "compiled"): process 0's own way, then its word to the others
    (`entry <its key>` or `none`); the others' step from process 0's entry where it says there
    is one, else their own way. `n`: which step compile of the run this is (default: the next)."""
    key = word_key(next(_compiles) if n is None else n)
    if process_index == 0:
        word = NONE
        try:
            compiled, how = cache.load_or_compile(own_key, compile_fn, cache_hits)
            if how == "loaded" or cache.exists(own_key):
                word = f"{ENTRY} {own_key}"
            return compiled, how
        finally:
            try:
                client.key_value_set(key, word)
            except Exception as e:  # the others wait out WAIT_S, then compile their own
                log.warning("could not tell the other processes of the compiled step (%s: %s)",
                            type(e).__name__, str(e)[:300])
    try:
        word = client.blocking_key_value_get(key, int(wait_s * 1000))
    except Exception as e:
        log.warning("no word of process 0's compiled step (%s: %s); compiling this process's",
                    type(e).__name__, str(e)[:300])
        word = NONE
    said, _, key_of_0 = word.partition(" ")
    if said == ENTRY and key_of_0:
        loaded = cache.load(key_of_0)
        if loaded is not None:
            return loaded, "loaded"
    return cache.load_or_compile(own_key, compile_fn, cache_hits)
