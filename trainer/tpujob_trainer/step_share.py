"""The programs of a start compiled once for all the processes of a job that share one machine's
CPUs, and divided among them.

JAX on CPU (local mode, the tests) runs every process of a job on one machine, and each process
would compile the same SPMD programs, at the same time, on the same cores. Here each program has
an owner (`owner_of`): process 0 the training step, the last process the initial state, so that
the two compile at once on two cores, not one after the other on each. The owner gets the program
as before (loaded whole from the job's executable cache, or compiled and saved there) and tells
the others through the job's coordination service whether an entry is there; they load the
owner's entry (its executable runs on every process: the program and the devices it names are
the job's, not the process's) and compile only when there is none. The owner always tells,
whatever happened, so no process waits on a program that will not come; a process that waited
too long, or could not read the entry, compiles its own as before.

On an accelerator each host has its own CPUs and compiles its own programs: nothing is shared
(`shares`).
"""

from __future__ import annotations

import itertools
import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)

ENTRY, NONE = "entry", "none"
# How long a process waits for the owner's word: a compile of a large model on CPU, and its save.
WAIT_S = 3600.0


class Coordination(Protocol):
    """The part of jax.distributed's coordination-service client used here."""

    def key_value_set(self, key: str, value: str) -> None: ...

    def blocking_key_value_get(self, key: str, timeout_in_ms: int) -> str: ...


class StepCache(Protocol):
    """The part of `executable_cache.ExecutableCache` used here."""

    def exists(self, key: str) -> bool: ...

    def load(self, key: str, what: str = ...) -> Any | None: ...

    def load_or_compile(self, key: str, compile_fn: Callable[[], Any],
                        cache_hits: Callable[[], int], what: str = ...) -> tuple[Any, str]: ...


def shares(platform: str, process_count: int) -> bool:
    """Whether the processes take each other's compiled programs (pure): JAX on CPU with several
    processes, which share one machine's cores."""
    return platform == "cpu" and process_count > 1


STEP, INIT = "step", "init"


def owner_of(program: str, process_count: int) -> int:
    """The process that compiles `program` for the job's others (pure): process 0 the training
    step, the last process the initial state (process 0 itself where it runs alone)."""
    return process_count - 1 if program == INIT else 0


def word_key(n: int, program: str = STEP) -> str:
    """The coordination-service key of the `n`-th `program` compiled in this run (the same count
    on every process: each runs the same code). Not the entry's key: that is made from the
    process's own config, which may differ between processes in a local path."""
    return f"tpujob/{program}-executable/{n}"


_compiles: dict[str, itertools.count] = defaultdict(itertools.count)


def compiled_once(cache: StepCache, client: Coordination, *, process_index: int, own_key: str,
                  compile_fn: Callable[[], Any], cache_hits: Callable[[], int],
                  program: str = STEP, owner: int = 0, wait_s: float = WAIT_S,
                  n: int | None = None) -> tuple[Any, str]:
    """(compiled program, "loaded" | "compiled"): the owner's own way, then its word to the
    others (`entry <its key>` or `none`); the others' program from the owner's entry where it
    says there is one, else their own way. `n`: which compile of `program` in the run this is
    (default: the next)."""
    key = word_key(next(_compiles[program]) if n is None else n, program)
    if process_index == owner:
        word = NONE
        try:
            compiled, how = cache.load_or_compile(own_key, compile_fn, cache_hits, program)
            if how == "loaded" or cache.exists(own_key):
                word = f"{ENTRY} {own_key}"
            return compiled, how
        finally:
            try:
                client.key_value_set(key, word)
            except Exception as e:  # the others wait out WAIT_S, then compile their own
                log.warning("could not tell the other processes of the compiled %s (%s: %s)",
                            program, type(e).__name__, str(e)[:300])
    try:
        word = client.blocking_key_value_get(key, int(wait_s * 1000))
    except Exception as e:
        log.warning("no word of process %d's compiled %s (%s: %s); compiling this process's",
                    owner, program, type(e).__name__, str(e)[:300])
        word = NONE
    said, _, key_of_owner = word.partition(" ")
    if said == ENTRY and key_of_owner:
        loaded = cache.load(key_of_owner, program)
        if loaded is not None:
            return loaded, "loaded"
    return cache.load_or_compile(own_key, compile_fn, cache_hits, program)
