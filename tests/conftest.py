"""Test-wide plugins. pytest only honours `pytest_plugins` in the top-level conftest, so the
shared fixtures of tests/support are registered here for every suite.

JAX runs on the CPU in every test and every process a test starts: the dev install carries
libtpu (the TPU compiler, for the tests of compiling for a TPU topology), and with it JAX
would first try to bring up a TPU that is not there (and say so on stderr). Compiling for a TPU
topology needs no TPU backend (`tpujob_trainer.aot`).

One JAX compilation cache serves the whole run (`JAX_COMPILATION_CACHE_DIR`, JAX's own variable,
which the trainer honours where a config names no cache directory of its own): many tests start
the trainer on the same small config, and each would otherwise compile the same programs again.
It is a fresh directory per run, removed at its end; set the variable to keep one across runs.
The tests of the cache itself (tests/trainer/test_compile_cache.py, test_loop_train.py) take it
out of their environment and use a cache of their own."""

import os
import shutil
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_RUN_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _RUN_CACHE = os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(
        prefix="tpujob-tests-jax-cache-")

pytest_plugins = ["tests.support.gcs", "tests.support.ci_skips", "pytester"]


def pytest_unconfigure(config) -> None:
    if _RUN_CACHE is not None:
        shutil.rmtree(_RUN_CACHE, ignore_errors=True)
