"""A fixed sample of known bugs across the core (tools/mutation.py's SAMPLE), each planted in a
copy of the tree and each caught by its tests, in every CI run; and how a sample mutant is found
by its line."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mutation():
    spec = importlib.util.spec_from_file_location("mutation_sample_tool",
                                                  ROOT / "tools" / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation_sample_tool"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["mutation_sample_tool"]


@pytest.mark.unit
def test_a_sample_mutant_is_found_by_its_line_and_only_there(mutation):
    source = "def f(a, b):\n    x = a + 1\n    return x + b + 1\n"
    m = mutation.find_mutant(source, "x = a + 1", "1 -> 0")
    assert (m.line, m.what) == (2, "1 -> 0")
    with pytest.raises(LookupError, match="0 mutants"):
        mutation.find_mutant(source, "x = a + 2", "1 -> 0")
    with pytest.raises(LookupError, match="2 mutants"):  # two `+` on the line: ambiguous
        mutation.find_mutant(source, "return x + b + 1", "+ -> -")


@pytest.mark.unit
def test_each_sample_mutant_is_there_and_killed_by_tests_of_its_module(mutation):
    assert len(mutation.SAMPLE) >= 10
    assert len({module for module, *_ in mutation.SAMPLE}) == len(mutation.SAMPLE)
    for module, line_text, what, tests in mutation.SAMPLE:
        mutation.find_mutant((ROOT / module).read_text(), line_text, what)
        covering = mutation.MODULES[module]
        assert all(t.split("::")[0] in covering for t in tests), (module, tests)


@pytest.mark.integration
def test_every_sample_mutant_is_killed(mutation):
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "mutation.py"), "--sample"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    killed = [line for line in run.stdout.splitlines() if line.startswith("killed")]
    assert len(killed) == len(mutation.SAMPLE), run.stdout
