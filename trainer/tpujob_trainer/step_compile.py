"""The train step compiled in a thread of its own, started as soon as its shapes are known, so
that the compile overlaps what a start does before its first step: building the data source and
the checkpointer, finding the newest checkpoint, and restoring it (reading storage) or
initializing the state (the init's own compile and run). The loop waits for it only when it
needs the step; the wait is what goodput charges to program startup.

A process that compiles both programs itself overlaps them only where it has at least 2 CPUs
to itself (`overlaps`): the step's and the init's compiles each take a core. On a 2-core x86-64
VM, the quickstart model, three runs each, alternated: one process went from start to its
compiled step in 7.6 to 9.1 s overlapped against 8.1 to 9.4 s in turn (medians 7.65 and
9.11 s); two processes on those 2 cores, each compiling both, took 17.8 and 21.2 s overlapped
against 16.4 and 17.9 s in turn.

JAX on CPU (local mode, tests) runs every process of a job on one machine, so they share its
CPUs (on an accelerator each host runs one process). There the job's processes divide the two
programs instead of each compiling both (`step_share.py`): process 0 compiles the step, always
in this thread from the start, while the last process compiles the initial state
(`compile_init`); each saves its program whole to the job's executable cache and the others
load it. Two compiles on two cores, not four: `benchmarks/startup_cost.py --processes 2` went
from start to step 1 in a median 16.3 s against 23.6 s when each process compiled both
(benchmarks/results/startup_cost.md).

The compile loads the step whole from the job's executable cache when it can
(`executable_cache.py`). Whether JAX's persistent cache served it is told from the lookups of
this thread only (`compile_cache.hits_in_this_thread`): the init compiling beside it must not
count. Nothing here runs a computation or a collective (the owner's word to the others goes
through the coordination service's key-value store), so the main thread's collectives keep
their order on every process.
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


def _shared_cache(cfg: TrainerConfig, cache_dir: str | None) -> tuple[Any, Any] | None:
    """(the job's executable cache, the coordination client) where the job's processes share one
    machine's CPUs and take each other's compiled programs (`step_share`); else None."""
    from tpujob_trainer.distributed import coordination_client
    from tpujob_trainer.executable_cache import ExecutableCache
    from tpujob_trainer.step_share import shares

    if cache_dir is None or not cfg.compile_cache.executables:
        return None
    if not shares(jax.devices()[0].platform, jax.process_count()):
        return None
    client = coordination_client()
    return None if client is None else (ExecutableCache(cache_dir), client)


def start_step_compile(cfg: TrainerConfig, fns: Any, abstract_batch: dict[str, Any], mesh: Any,
                       cache_dir: str | None) -> StepCompile:
    """The step's compile (loaded whole from the job's executable cache when it can), started
    now in its own thread where the process has the CPUs for it: it overlaps the data,
    checkpointer, restore or init. Where the job's processes share one machine's CPUs they take
    process 0's step, and it always starts now: the last process compiles the initial state
    meanwhile (`compile_init`), so the two programs take two cores at once (`step_share`)."""
    from tpujob_trainer.executable_cache import current_key as executable_key
    from tpujob_trainer.step_share import STEP, compiled_once, owner_of

    def compile_fn() -> Any:
        return fns.step.lower(fns.abstract_state, abstract_batch).compile()

    shared = _shared_cache(cfg, cache_dir)

    def compile_step(cache_hits: Callable[[], int]) -> tuple[Any, str]:
        if cache_dir is None or not cfg.compile_cache.executables:
            return compile_fn(), "compiled"
        config = cfg.model_dump(mode="json")
        if shared is not None:
            cache, client = shared
            return compiled_once(
                cache, client, process_index=jax.process_index(),
                own_key=executable_key(config, STEP), compile_fn=compile_fn,
                cache_hits=cache_hits, program=STEP, owner=owner_of(STEP, jax.process_count()))
        from tpujob_trainer.executable_cache import ExecutableCache
        return ExecutableCache(cache_dir).load_or_compile(executable_key(config, STEP),
                                                          compile_fn, cache_hits)

    background = (shared is not None
                  or overlaps(available_cpus(), jax.process_count(), jax.devices()[0].platform))
    return StepCompile(compile_step, mesh, background=background)


def compile_init(cfg: TrainerConfig, fns: Any, cache_dir: str | None) -> tuple[Any, str]:
    """(the initial state's program, how): where the job's processes share one machine's CPUs,
    the last process compiles it (while process 0 compiles the step) and saves it whole, and the
    others load that entry ("compiled" | "loaded", `step_share`); elsewhere the jitted init,
    compiled at its call as before ("jit"). Call it with no arguments for the sharded state."""
    from tpujob_trainer.executable_cache import current_key as executable_key
    from tpujob_trainer.step_share import INIT, compiled_once, owner_of

    shared = _shared_cache(cfg, cache_dir)
    if shared is None:
        return fns.init, "jit"
    cache, client = shared
    return compiled_once(
        cache, client, process_index=jax.process_index(),
        own_key=executable_key(cfg.model_dump(mode="json"), INIT),
        compile_fn=lambda: fns.init.lower().compile(),
        cache_hits=compile_cache.hits_in_this_thread, program=INIT,
        owner=owner_of(INIT, jax.process_count()))
