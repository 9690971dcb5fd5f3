"""Pytest plugin: in CI (`CI` set to true, as `.ci/run` and most CI services do) a skipped test
fails the run, with the reason it gave. A test that needs a tool (kubectl, the GCS emulator)
skips on a machine without it; in CI the tool must be there, so a skip there is a test that did
not run, not a pass.

An expected failure (`xfail`) is not a skip and is left alone."""

from __future__ import annotations

import os

import pytest

CI_ENV = "CI"


def in_ci() -> bool:
    return os.environ.get(CI_ENV, "").strip().lower() in ("1", "true", "yes")


def _reason(longrepr: object) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _fail(report: pytest.TestReport | pytest.CollectReport) -> None:
    report.outcome = "failed"
    report.longrepr = (f"{_reason(report.longrepr)} -> skipped in CI ({CI_ENV}="
                       f"{os.environ.get(CI_ENV)}): CI runs every test; install what it needs "
                       "(.ci/run does) instead of skipping")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        _fail(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped:  # a whole module skipped (importorskip, allow_module_level)
        _fail(report)
