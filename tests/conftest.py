"""Test-wide plugins. pytest only honours `pytest_plugins` in the top-level conftest, so the
shared fixtures of tests/support are registered here for every suite.

JAX runs on the CPU in every test and every process a test starts: the dev install carries
libtpu (the TPU compiler, for the tests of compiling for a TPU topology), and with it JAX
would first try to bring up a TPU that is not there (and say so on stderr). Compiling for a TPU
topology needs no TPU backend (`tpujob_trainer.aot`).

One JAX compilation cache serves the whole run and the runs after it (`JAX_COMPILATION_CACHE_DIR`,
JAX's own variable, which the trainer honours where a config names no cache directory of its
own): many tests start the trainer on the same small config, and each would otherwise compile
the same programs again, in this run and in every later one. Unless the variable is set, it is
`tests-jax-cache/` in tpujob's cache outside the repository (`tpujob.local.cache.cache_root()`,
where the real control plane is built), like a build cache: JAX keys every entry by the program,
the compile options and the jaxlib/XLA version, so a changed program is compiled again, never
served stale. At the start of a run the oldest entries go once the folder passes
`TPUJOB_TEST_JAX_CACHE_MAX_MIB` (2048). `JAX_COMPILATION_CACHE_DIR=$(mktemp -d)` gives a run that
compiles everything (a cold run). The tests of the cache itself (tests/trainer/test_compile_cache.py,
test_loop_train.py, test_step_compile.py) take it out of their environment and use a cache of
their own."""

import os

from tests.support.jax_cache import prune
from tpujob.local.cache import cache_root

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _cache = cache_root() / "tests-jax-cache"
    _cache.mkdir(parents=True, exist_ok=True)
    prune(_cache, int(os.environ.get("TPUJOB_TEST_JAX_CACHE_MAX_MIB", "2048")) << 20)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(_cache)
# Likewise the TPU compiler's answers (`tpujob_trainer.aot_cache`): a step compiled for a TPU
# topology takes 30-80 s of CPU even for the tests' small models, and is read back in a second
# by the later runs that lower the same program with the same compiler.
# `TPUJOB_TPU_COMPILE_CACHE_DIR=$(mktemp -d)` compiles them all again.
if "TPUJOB_TPU_COMPILE_CACHE_DIR" not in os.environ:
    os.environ["TPUJOB_TPU_COMPILE_CACHE_DIR"] = str(cache_root() / "tests-tpu-compile")

pytest_plugins = ["tests.support.gcs", "tests.support.ci_skips", "pytester"]
