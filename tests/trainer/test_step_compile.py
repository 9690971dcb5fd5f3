"""The step compiled in its own thread (`step_compile.py`) where the process has 2 CPUs to
itself, else in the caller's: under the run's mesh, its error handed to whoever waits, and a persistent-cache hit told from that thread's lookups only, so
the init compiling beside it does not count (`compile_cache.counts(thread=...)`)."""

from __future__ import annotations

import os
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

from tpujob_trainer import compile_cache
from tpujob_trainer.config.compile_cache import CompileCacheConfig
from tpujob_trainer.step_compile import StepCompile, available_cpus, overlaps


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """JAX's persistent cache in a folder of this test's, and none open before or after."""
    from jax.experimental.compilation_cache import compilation_cache
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    before = (jax.config.jax_compilation_cache_dir,
              jax.config.jax_persistent_cache_min_compile_time_secs,
              jax.config.jax_persistent_cache_min_entry_size_bytes)
    compilation_cache.reset_cache()
    yield compile_cache.enable(CompileCacheConfig(directory=str(tmp_path / "cc")), str(tmp_path))
    for name, value in zip(("jax_compilation_cache_dir",
                            "jax_persistent_cache_min_compile_time_secs",
                            "jax_persistent_cache_min_entry_size_bytes"), before, strict=True):
        jax.config.update(name, value)
    compilation_cache.reset_cache()


def _mesh() -> Mesh:
    return Mesh(np.array(jax.devices()[:1]), ("data",))


def _program(scale: float):
    """A fresh function each call: JAX's in-memory caches miss, its persistent cache decides."""
    return jax.jit(lambda x: jnp.sin(x) * scale + jnp.cos(x))


def test_a_hit_is_counted_for_the_thread_that_compiled(cache):
    x = jnp.ones((64,))
    _program(3.25).lower(x).compile()          # this thread: a miss, written to the cache
    here = compile_cache.counts(threading.get_ident())
    assert here["misses"] >= 1
    every = compile_cache.counts()
    job = StepCompile(lambda hits: (_program(3.25).lower(x).compile(), "compiled"), _mesh())
    compiled, how = job.result()
    assert job.cache_hit and how == "compiled"
    assert compile_cache.counts(threading.get_ident()) == here   # none of it counted here
    assert compile_cache.counts() == {"hits": every["hits"] + 1, "misses": every["misses"]}
    assert np.asarray(compiled(x)) == pytest.approx(np.sin(np.ones(64)) * 3.25 + np.cos(1))
    # The other way round: a miss in the thread, while this thread's hit stays its own.
    _program(3.25).lower(x).compile()
    assert compile_cache.hits_in_this_thread() == here["hits"] + 1
    job = StepCompile(lambda hits: (_program(-7.5).lower(x).compile(), "compiled"), _mesh())
    job.result()
    assert not job.cache_hit


def test_the_compile_runs_under_the_mesh_and_hands_its_error_over():
    mesh = _mesh()
    seen = {}

    def compile_fn(hits):
        seen["mesh"] = jax.sharding.get_abstract_mesh()
        seen["thread"] = threading.current_thread().name
        seen["hits"] = hits()
        return "step", "loaded"

    job = StepCompile(compile_fn, mesh)
    assert job.result() == ("step", "loaded") and not job.cache_hit
    assert seen["mesh"] == mesh.abstract_mesh and seen["thread"] == "tpujob-step-compile"
    assert isinstance(seen["hits"], int) and job.seconds >= 0

    def failing(hits):
        raise RuntimeError("RESOURCE_EXHAUSTED: out of memory compiling the step")

    job = StepCompile(failing, mesh)
    with pytest.raises(RuntimeError, match="RESOURCE_EXHAUSTED"):
        job.result()
    assert not job.cache_hit


def test_the_compile_runs_in_a_daemon_thread_and_times_itself():
    go = threading.Event()

    def compile_fn(hits):
        go.wait(timeout=30)
        return "step", "compiled"

    t0 = time.perf_counter()
    job = StepCompile(compile_fn, _mesh())
    [thread] = [t for t in threading.enumerate() if t.name == "tpujob-step-compile"]
    assert thread.daemon          # a run that fails before it is done does not wait for it
    assert job.seconds == 0.0     # not done yet
    go.set()
    job.wait()
    assert job._done.is_set()
    assert job.result() == ("step", "compiled")
    assert 0 < job.seconds <= time.perf_counter() - t0


def test_no_cache_counts_nothing(monkeypatch):
    monkeypatch.setattr(compile_cache, "_counter", None)
    assert compile_cache.counts() == compile_cache.counts(threading.get_ident()) == {
        "hits": 0, "misses": 0}
    assert compile_cache.hits_in_this_thread() == 0


def test_the_cpus_this_process_may_run_on(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2} if pid == 0 else {0},
                        raising=False)
    assert available_cpus() == 3
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)   # not Linux
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert available_cpus() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)            # unknown
    assert available_cpus() == 1


@pytest.mark.parametrize("cpus,processes,platform,overlap", [
    (2, 1, "cpu", True),      # one process on 2 cores
    (2, 2, "cpu", False),     # local mode's v6e-8 on a 2-core machine: 1 core each
    (3, 2, "cpu", False),
    (4, 2, "cpu", True),
    (16, 8, "cpu", True),
    (1, 1, "cpu", False),
    (1, 1, "tpu", False),
    (180, 4, "tpu", True),    # a TPU host runs one process: the job's count does not share it
    (2, 64, "gpu", True),
])
def test_the_compile_overlaps_where_the_process_has_two_cpus_to_itself(cpus, processes,
                                                                       platform, overlap):
    assert overlaps(cpus, processes, platform) is overlap


def test_without_background_the_compile_runs_in_the_waiting_thread():
    seen = []
    job = StepCompile(lambda hits: (seen.append(threading.current_thread().name), "compiled"),
                      _mesh(), background=False)
    assert seen == [] and not job.background and job.seconds == 0.0   # nothing before asked
    assert job.result() == (None, "compiled") and job.result() == (None, "compiled")
    assert seen == [threading.current_thread().name]   # once, here
    assert available_cpus() >= 1
