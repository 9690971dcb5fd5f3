"""The train step compiled in a thread of its own, started as soon as its shapes are known, so
that the compile overlaps what a start does before its first step: building the data source and
the checkpointer, finding the newest checkpoint, and restoring it (reading storage) or
initializing the state (the init's own compile and run). The loop waits for it only when it
needs the step; the wait is what goodput charges to program startup.

It overlaps only where the process has at least 2 CPUs to itself (`overlaps`): the step's and
the init's compiles each take a core. JAX on CPU (local mode, tests) runs every process of a
job on one machine, so they share its CPUs; on an accelerator each host runs one process. On a
2-core x86-64 VM, the quickstart model, three runs each, alternated: one process went from
start to its compiled step in 7.6 to 9.1 s overlapped against 8.1 to 9.4 s in turn (medians
7.65 and 9.11 s); two processes on those 2 cores took 17.8 and 21.2 s overlapped against 16.4
and 17.9 s in turn, so there the step compiles after the init, as before.

The compile loads the step whole from the job's executable cache when it can
(`executable_cache.py`); where the job's processes share one machine's CPUs (JAX on CPU) they
take process 0's (`step_share.py`). Whether JAX's persistent cache served it is told from the
lookups of this thread only (`compile_cache.hits_in_this_thread`): the init compiling beside
it must not count. Nothing here runs a computation or a collective (process 0's word to the
others goes through the coordination service's key-value store), so the main thread's
collectives keep their order on every process.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import jax

from tpujob_trainer import compile_cache
from tpujob_trainer.config.root import TrainerConfig


def available_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def overlaps(cpus: int, process_count: int, platform: str) -> bool:
    """Whether to compile the step beside the start's other work (pure): when this process has
    at least 2 of the machine's `cpus` to itself."""
    per_process = cpus / process_count if platform == "cpu" else cpus
    return per_process >= 2


class StepCompile:
    """`compile_fn(cache_hits)` -> (compiled, how), under `mesh` (JAX's mesh context is per
    thread): in a thread from construction on when `background`, else in `result()`'s caller.
    `result()` waits for it."""

    def __init__(self, compile_fn: Callable[[Callable[[], int]], tuple[Any, str]], mesh, *,
                 background: bool = True):
        self._compile_fn, self._mesh = compile_fn, mesh
        self.background = background
        self._done = threading.Event()
        self._value: tuple[Any, str] | None = None
        self._error: BaseException | None = None
        self.cache_hit = False
        self.seconds = 0.0
        if background:
            threading.Thread(target=self._run, name="tpujob-step-compile", daemon=True).start()

    def _run(self) -> None:
        t0 = time.perf_counter()
        hits = compile_cache.hits_in_this_thread()
        try:
            with jax.set_mesh(self._mesh):
                self._value = self._compile_fn(compile_cache.hits_in_this_thread)
            self.cache_hit = compile_cache.hits_in_this_thread() > hits
        except BaseException as e:  # handed to the thread that waits for the result
            self._error = e
        finally:
            self.seconds = time.perf_counter() - t0
            self._done.set()

    def wait(self) -> None:
        """Until a compile started in the background has ended (never raises): a run that
        fails before it needs the step must not exit with the thread inside XLA, where the
        interpreter's end aborts the process ("FATAL: exception not rethrown", signal 6)."""
        if self.background:
            self._done.wait()

    def result(self) -> tuple[Any, str]:
        """(compiled step, "loaded" | "compiled"), once the compile is done; its error, raised
        here, if it failed."""
        if not self.background and not self._done.is_set():
            self._run()
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def start_step_compile(cfg: TrainerConfig, fns: Any, abstract_batch: dict[str, Any], mesh: Any,
                       cache_dir: str | None) -> StepCompile:
    """The step's compile (loaded whole from the job's executable cache when it can), started
    now in its own thread where the process has the CPUs for it: it overlaps the data,
    checkpointer, restore or init. Where the job's processes share one machine's CPUs they take
    process 0's step (`step_share`)."""
    from tpujob_trainer.distributed import coordination_client
    from tpujob_trainer.executable_cache import ExecutableCache
    from tpujob_trainer.executable_cache import current_key as executable_key
    from tpujob_trainer.step_share import shares, step_of_process_0

    def compile_fn() -> Any:
        return fns.step.lower(fns.abstract_state, abstract_batch).compile()

    platform = jax.devices()[0].platform

    def compile_step(cache_hits: Callable[[], int]) -> tuple[Any, str]:
        if cache_dir is None or not cfg.compile_cache.executables:
            return compile_fn(), "compiled"
        cache, config = ExecutableCache(cache_dir), cfg.model_dump(mode="json")
        client = coordination_client()
        if shares(platform, jax.process_count()) and client is not None:
            return step_of_process_0(
                cache, client, process_index=jax.process_index(), own_key=executable_key(config),
                compile_fn=compile_fn, cache_hits=cache_hits)
        return cache.load_or_compile(executable_key(config), compile_fn, cache_hits)

    background = overlaps(available_cpus(), jax.process_count(), platform)
    return StepCompile(compile_step, mesh, background=background)
