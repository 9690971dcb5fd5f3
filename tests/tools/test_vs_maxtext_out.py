"""The side by side's `--out` may name a file anywhere: the report's command line names it
relative to the repository when it is inside, as given otherwise (a file outside once made the
report fail after the whole run, losing it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _benchmark():
    spec = importlib.util.spec_from_file_location("vs_maxtext", ROOT / "benchmarks" / "vs_maxtext.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_out_inside_and_outside_the_repository(tmp_path):
    shown = _benchmark()._shown
    assert shown(ROOT / "benchmarks" / "results" / "x.md") == "benchmarks/results/x.md"
    assert shown(tmp_path / "x.md") == str(tmp_path / "x.md")
