"""tools/mutation.py: the mutants it makes from a small module, and that each changes exactly
one thing (docstrings and type annotations are never mutated)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]

SOURCE = '''"""Doc 1."""


def f(a: int = 3, b: bool = True) -> bool:
    """Doc 2."""
    if not b and a < 2:
        return a + 1 == 0
    return a % 2 in (0,)
'''


@pytest.fixture(scope="module")
def mutation():
    spec = importlib.util.spec_from_file_location("mutation_tool", ROOT / "tools" / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation_tool"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["mutation_tool"]


def test_the_mutants_of_a_small_function(mutation):
    found = sorted((m.line, m.what) for m in mutation.mutants(SOURCE))
    assert found == sorted([
        (4, "3 -> 4"), (4, "True -> False"),
        (6, "and -> or"), (6, "not x -> x"), (6, "< -> <="), (6, "2 -> 3"),
        (7, "== -> !="), (7, "+ -> -"), (7, "1 -> 0"), (7, "0 -> 1"),
        (8, "in -> not in"), (8, "% -> //"), (8, "2 -> 3"), (8, "0 -> 1")])


def test_each_mutant_changes_one_thing_and_keeps_the_rest(mutation):
    ms = mutation.mutants(SOURCE)
    sources = {mutation.mutated_source(SOURCE, m.index) for m in ms}
    assert len(sources) == len(ms)  # all different
    namespace: dict = {}
    by_what = {m.what: m for m in ms if m.line == 6}
    exec(mutation.mutated_source(SOURCE, by_what["not x -> x"].index), namespace)
    assert namespace["f"](0, True) is False  # was True; now: b and a < 2 -> a + 1 == 0
    assert namespace["f"].__doc__ == "Doc 2."
    with pytest.raises(IndexError):
        mutation.mutated_source(SOURCE, len(ms))
