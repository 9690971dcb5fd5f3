"""GPU jobs in local mode: each node's pod runs as CPU processes, wired exactly as on a cluster
(the JobSet, the launcher's command line and variables the operator writes, the pod host names,
the network daemon sidecar, stood in for). A 2-node torchrun job (A3 Mega: 8 processes per node,
16 in all, over gloo with real PyTorch from PyPI) and a 2-node JAX job (A3 Ultra: the built-in
trainer, one process per node) train to the end; killed on one node, each restarts and resumes
from its checkpoint."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.e2e.conftest import TINY, resumed_steps, unique
from tests.support.apiserver import wait_for
from tpujob_trainer.checkpoint import StepDirs

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCRIPT = str(Path(__file__).resolve().parent / "programs" / "torch_ddp_train.py")
STEPS, EVERY = 40, 10


@pytest.fixture(scope="module")
def torch_bin() -> str:
    from tools.torch_env import torch_bin as build

    return build()


def torchrun_job(torch_bin: str, ckpt: Path, step_seconds: float, max_restarts: int) -> dict:
    """A 2-node A3 Mega torchrun job of the script, its checkpoints in `ckpt`."""
    return {"slice": "a3-megagpu-8g", "nodes": 2, "image": "torch-trainer:1",
            "output": str(ckpt.parent),
            # The job's own environment: its torchrun (and the python torchrun starts).
            "env": [{"name": "PATH", "value": f"{torch_bin}:/usr/bin:/bin"}],
            "trainer": {"launcher": "torchrun",
                        "command": ["python3", SCRIPT, "--steps", str(STEPS), "--every",
                                    str(EVERY), "--ckpt", str(ckpt), "--step-seconds",
                                    str(step_seconds)],
                        "progress": {"source": "log", "format": "jsonl"}},
            # No retryableExitCodes: torchrun's default ([1, 42]) restarts on its exit 1 when
            # the peer is lost, whichever node's exit the JobSet sees first.
            "restartPolicy": {"maxRestarts": max_restarts}}


def _rank0_lines(local, name: str) -> list[list[dict]]:
    """Rank 0's JSON lines, one list per pod that played node 0 (oldest first)."""
    return [[json.loads(line) for line in log.read_text().splitlines()
             if line.startswith("{")] for log in local.logs(name)]


def test_a_torchrun_job_on_two_nodes_of_eight_processes_is_killed_and_resumes(
        local, torch_bin, tmp_path):
    name = unique("torchkill")
    ckpt = tmp_path / "ckpt"
    local.apply(name, torchrun_job(torch_bin, ckpt, 0.25, 2))
    wait_for(lambda: (ckpt / f"step-{EVERY}.pt").exists(), timeout=240, interval=0.2,
             message="the first checkpoint")
    # The node 1 pod's main process is its torchrun agent; SIGKILL it, as a lost node would.
    [node1] = [p for p in local.processes(name)
               if "-slice-0-1-" in p["pod"] and p["container"] == "trainer"]
    os.kill(node1["pid"], signal.SIGKILL)
    job = local.wait_phase(name, "Succeeded", "Failed", timeout=300)
    status = job["status"]
    assert status["phase"] == "Succeeded", status
    assert status["restarts"] == 1
    # The cause is node 1's kill, or node 0's lost peer when that exit is all that was read
    # (or nothing, when the pods were gone first): never node 0's exit 1 as a crash of its own.
    [recovery] = status["recoveries"]
    cause = recovery["cause"]
    assert ("signal 9" in cause or "lost a peer" in cause
            or cause.startswith("the JobSet restarted")), recovery
    assert status["slice"] == {"topology": "2x8", "machineType": "a3-megagpu-8g", "hosts": 2,
                               "chips": 16, "devices": 16, "processes": 16}
    assert status["progress"]["step"] == STEPS and status["progress"]["totalSteps"] == STEPS
    assert status["progress"]["lastCheckpointStep"] == STEPS
    first, second = _rank0_lines(local, name)
    # Each attempt: one world of 16 processes, rank 0 on node 0.
    assert {(d["world_size"], d["node_rank"], d["rank"]) for d in first + second} == {
        (16, 0, 0)}
    resumed = second[0]["resumed_from"]
    assert resumed >= EVERY and resumed % EVERY == 0
    assert [d["step"] for d in first] == list(range(1, len(first) + 1))
    assert max(d["step"] for d in first) >= resumed
    assert [d["step"] for d in second] == list(range(resumed + 1, STEPS + 1))
    assert second[-1]["loss"] < first[0]["loss"]
    assert {p.name for p in ckpt.iterdir()} == {f"step-{s}.pt"
                                                for s in range(EVERY, STEPS + 1, EVERY)}


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
    # A checkpoint complete on GCS (the status's lastCheckpointStep is a save begun, which a
    # kill can still leave unfinished), then SIGKILL node 1's process.
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
