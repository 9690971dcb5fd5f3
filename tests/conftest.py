"""Test-wide plugins. pytest only honours `pytest_plugins` in the top-level conftest, so the
shared fixtures of tests/support are registered here for every suite.

JAX runs on the CPU in every test and every process a test starts: the dev install carries
libtpu (the TPU compiler, for the tests of compiling for a TPU topology), and with it JAX
would first try to bring up a TPU that is not there (and say so on stderr). Compiling for a TPU
topology needs no TPU backend (`tpujob_trainer.aot`)."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

pytest_plugins = ["tests.support.gcs", "tests.support.ci_skips", "pytester"]
