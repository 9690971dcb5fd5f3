"""In CI a skip fails the run (tests/support/ci_skips.py); elsewhere it stays a skip. Run on a
small test file in a pytest of its own (pytester), with and without CI set."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.unit

SKIPPING = '''
import shutil
import pytest

def test_passes():
    pass

@pytest.mark.skipif(True, reason="kubectl not installed")
def test_marked():
    pass

def test_skips_inside():
    pytest.skip("the GCS emulator is not installed")

@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False
'''
MODULE_SKIP = '''
import pytest
pytest.importorskip("a_module_that_is_not_there")

def test_never_runs():
    pass
'''


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str | None,
         source: str) -> pytest.RunResult:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    pytester.makepyfile(test_tool=source)
    return pytester.runpytest_subprocess("-p", "tests.support.ci_skips", "-rA",
                                         "-p", "no:cacheprovider")


@pytest.mark.parametrize("ci", [None, "false"])
def test_outside_ci_a_skip_is_a_skip(pytester, monkeypatch, ci):
    result = _run(pytester, monkeypatch, ci, SKIPPING)
    result.assert_outcomes(passed=1, skipped=2, xfailed=1)
    assert result.ret == 0


@pytest.mark.parametrize("ci", ["true", "1"])
def test_in_ci_a_skip_fails_the_run_with_its_reason(pytester, monkeypatch, ci):
    result = _run(pytester, monkeypatch, ci, SKIPPING)
    # A skipif marker skips in setup (an error), pytest.skip() in the call (a failure).
    result.assert_outcomes(passed=1, failed=1, errors=1, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*kubectl not installed*skipped in CI*",
                                 "*GCS emulator is not installed*skipped in CI*"])


def test_in_ci_a_module_skipped_at_import_fails_the_run(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, "true", MODULE_SKIP)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*a_module_that_is_not_there*skipped in CI*"])
    outside = _run(pytester, monkeypatch, None, MODULE_SKIP)
    outside.assert_outcomes(skipped=1)
