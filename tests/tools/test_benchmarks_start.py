"""Every benchmark starts as its command line says (`python benchmarks/NAME.py --help`) in a plain
environment, without what the test run sets up (its JAX compilation cache variable): a benchmark
that imports the tests' helpers must not need pytest to have run first. One process for all, so
the imports are paid once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py"))
HELPERS = {"timing_table"}  # imported by the others, no command line of its own

RUN_ALL = """
import contextlib, io, runpy, sys
sys.path.insert(0, 'benchmarks')
for name in sys.argv[1:]:
    sys.argv = [f'benchmarks/{name}.py', '--help']
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(sys.argv[0], run_name='__main__')
        print(f'{name}: returned without exiting')
    except SystemExit as e:
        print(f'{name}: exit {e.code} usage={out.getvalue().startswith("usage:")}')
    except Exception as e:
        print(f'{name}: raised {type(e).__name__}: {e}')
"""


def test_the_benchmark_list_is_whole():
    assert len(BENCHMARKS) >= 20 and HELPERS <= set(BENCHMARKS)


def test_every_benchmark_prints_its_usage_outside_the_test_run():
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    names = [n for n in BENCHMARKS if n not in HELPERS]
    done = subprocess.run([sys.executable, "-c", RUN_ALL, *names], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if ": " in line]
    assert lines == [f"{n}: exit 0 usage=True" for n in names], done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
