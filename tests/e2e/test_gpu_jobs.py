"""GPU jobs in local mode: each node's pod runs as CPU processes, wired exactly as on a cluster
(the JobSet, the launcher's command line and variables the operator writes, the pod host names,
the network daemon sidecar, stood in for). A 2-node torchrun job (A3 Mega: 8 processes per node,
16 in all, over gloo with real PyTorch from PyPI) trains to the end; killed on one node, it
restarts and resumes from its checkpoint. On the real control plane, where the real scheduler
places each pod on a GPU node shaped like GKE's (the accelerator label, `nvidia.com/gpu`
capacity, the GPU taint the pods tolerate); what the embedded plane does for it (the pods, the
restart) is the same as for the built-in trainer's jobs, tested on both in test_training.py. The JAX job on GPU nodes is in
test_gpu_jax_job.py."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.e2e.conftest import unique
from tests.support.apiserver import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
CONTROL_PLANES = ("embedded", "real")

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


def _pod_states(local, name: str) -> str:
    """Each pod's node, phase and container exits: what a failure message needs."""
    lines = []
    for p in local.pods(name):
        lines.append(f"{p['metadata']['name']} on {p['spec'].get('nodeName')}: "
                     f"{p['status'].get('phase')}")
        for c in ((p["status"].get("initContainerStatuses") or [])
                  + (p["status"].get("containerStatuses") or [])):
            ended = (c.get("state") or {}).get("terminated") or {}
            lines.append(f"  {c['name']}: exit {ended.get('exitCode')} {ended.get('reason')} "
                         f"{(ended.get('message') or '')[-300:]!r}")
    return "\n".join(lines)


@pytest.mark.control_planes("real")
def test_a_torchrun_job_on_two_nodes_of_eight_processes_is_killed_and_resumes(
        local, torch_bin, tmp_path, control_plane):
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
    assert status["phase"] == "Succeeded", f"{status}\n{_pod_states(local, name)}"
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
    if control_plane == "real":
        # The real scheduler bound every pod to a GPU node of its machine type.
        nodes = {p["spec"].get("nodeName") for p in local.pods(name)}
        assert nodes and all(n and n.startswith("gke-local-gpu-a3-megagpu-8g-") for n in nodes), \
            nodes
