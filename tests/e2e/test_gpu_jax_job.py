"""The built-in JAX trainer on GPU nodes in local mode, on the real control plane: a 2-node A3
Ultra job (one JAX process per node, each node's devices on the CPU) whose pods the real
scheduler places on GPU nodes shaped like GKE's; killed on one node once a checkpoint is
complete, it restarts, resumes from its checkpoint and trains to the end."""

from __future__ import annotations

import os
import signal

import pytest

from tests.e2e.conftest import TINY, resumed_steps, unique
from tests.support.apiserver import wait_for
from tpujob_trainer.checkpoint import StepDirs

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
CONTROL_PLANES = ("real",)


def test_a_jax_job_on_gpu_nodes_trains_is_killed_and_resumes(local, gcs_env):
    from tests.e2e.test_training import TOTAL  # the tiny run's steps

    name = unique("jaxgpu")
    local.apply(name, {"slice": "a3-ultragpu-8g", "nodes": 2, "image": "trainer:1",
                       "output": f"gs://tpujob-e2e/{name}",
                       # 16 sequences: the batch splits over the 16 GPUs' batch shards.
                       "trainer": {"config": {**TINY, "train": {**TINY["train"],
                                                                "global_batch": 16}}},
                       # Each node's 8 devices scaled down to 1 here (E2E_EXECUTOR): fsdp fills
                       # a node, data spans the nodes.
                       "parallelism": {"ici": {"fsdp": -1}, "dcn": {"data": 2}},
                       "data": {"kind": "synthetic"}, "restartPolicy": {"maxRestarts": 2}})
    # A checkpoint complete on GCS, read from GCS itself, then SIGKILL node 1's process.
    checkpoints = StepDirs(f"gs://tpujob-e2e/{name}/checkpoints")
    wait_for(lambda: checkpoints.complete_steps(quiet=True), timeout=180, interval=0.2,
             message="a complete checkpoint")
    [node1] = [p for p in local.processes(name) if "-slice-0-1-" in p["pod"]]
    os.kill(node1["pid"], signal.SIGKILL)
    job = local.wait_phase(name, "Succeeded", "Failed", timeout=240)
    status = job["status"]
    assert status["phase"] == "Succeeded", status
    assert status["restarts"] == 1 and status["progress"]["step"] == TOTAL
    assert (status["slice"]["machineType"], status["slice"]["processes"]) == (
        "a3-ultragpu-8g", 2)
    before, after, resumed = resumed_steps(local, name)
    assert resumed >= TINY["checkpoint"]["every"]
    assert sorted(after) == list(range(resumed + 1, TOTAL + 1))
    assert max(before) >= resumed
    nodes = {p["spec"].get("nodeName") for p in local.pods(name)}
    assert nodes and all(n and n.startswith("gke-local-gpu-a3-ultragpu-8g-") for n in nodes), nodes
