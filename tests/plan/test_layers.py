"""The import layers hold (the contracts in pyproject.toml: the operator over the trainer over the
planner, the floors inside each, pure planning, decide and build, no local mode in what runs in a
cluster, no JAX in the operator), and the operator's planning path never pulls in JAX."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def test_import_linter_contracts():
    lint = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_operator_planning_does_not_import_jax():
    code = ("import sys, tpujob.planning, tpujob.cli.plan_cmd, tpujob_trainer.config; "
            "bad = [m for m in ('jax', 'flax', 'optax', 'orbax') if m in sys.modules]; "
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": ""})
    assert r.returncode == 0, r.stderr


def test_no_top_level_operator_package_shadows_the_stdlib():
    import operator

    assert hasattr(operator, "itemgetter")
    assert not (ROOT / "operator" / "__init__.py").exists()
