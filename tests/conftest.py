"""Test-wide plugins. pytest only honours `pytest_plugins` in the top-level conftest, so the
shared fixtures of tests/support are registered here for every suite."""

pytest_plugins = ["tests.support.gcs", "tests.support.ci_skips", "pytester"]
