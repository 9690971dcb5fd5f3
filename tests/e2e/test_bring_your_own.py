"""Programs that know nothing of tpujob, in local mode (2 hosts of a v6e-8, JAX on CPU): a plain
JAX script whose `jax.distributed.initialize()` takes no arguments trains to Succeeded, wired
only by the standard variables (JAX's coordinator address, GKE's TPU webhook variables, which
local mode gives as a cluster would)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import json_lines, unique

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
PROGRAMS = Path(__file__).resolve().parent / "programs"


def test_plain_jax_with_no_arguments_to_initialize(local):
    name = unique("plain-jax")
    local.apply(name, {
        "slice": "v6e-8", "image": "jax:1", "output": "gs://tpujob-e2e/plain",
        "trainer": {"command": ["python3", str(PROGRAMS / "plain_jax_train.py")],
                    "progress": {"source": "log", "format": "jsonl"}},
        "restartPolicy": {"maxRestarts": 0}})
    job = local.wait_phase(name, "Succeeded", "Failed", timeout=180)
    assert job["status"]["phase"] == "Succeeded", (job["status"], [p.read_text()[-3000:] for p in local.logs(name)])
    valid = next(c for c in job["status"]["conditions"] if c["type"] == "Valid")
    assert "mesh, batch and memory not checked" in valid["message"]
    for host in (0, 1):
        [log] = local.logs(name, host=host)
        lines = json_lines(log)
        start = next(e for e in lines if e.get("event") == "start")
        # Both hosts joined one 2-process JAX job, each as the process its pod's index says.
        assert (start["process"], start["processes"], start["devices"]) == (host, 2, 2)
        losses = [e["loss"] for e in lines if "step" in e]
        assert len(losses) == 8 and losses[-1] < losses[0] / 2, losses
