"""The same losses on 1 device, on an 8-device mesh (data=2, fsdp=2, tensor=2), and on 2
processes x 4 devices wired with jax.distributed on 127.0.0.1 - all through the real CLI."""

from __future__ import annotations

import socket
import subprocess

import pytest

from tests.trainer.helpers import TINY_YAML, clean_env, cli_command, parse_events, run_cli

pytestmark = pytest.mark.integration

ARGS = ["--config", str(TINY_YAML), "train.steps=3", "metrics.measure_peak=false",
        "metrics.port=null"]
MESH = "mesh.ici={data: 2, fsdp: 2, tensor: 2}"


def losses(run):
    return [s["loss"] for s in run.steps]


@pytest.mark.slow
def test_one_device_and_eight_device_mesh_agree(tmp_path):
    one = run_cli([*ARGS, "checkpoint.enabled=false", f"output={tmp_path}/a"], tmp_path)
    eight = run_cli([*ARGS, MESH, "checkpoint.enabled=false", f"output={tmp_path}/b"], tmp_path,
                    env={"TPUJOB_CPU_DEVICES": "8"})
    assert one.returncode == 0 and eight.returncode == 0, eight.stderr
    assert eight.of("start")[0]["mesh"] == {"data": 2, "fsdp": 2, "context": 1, "tensor": 2, "expert": 1}
    assert losses(eight) == pytest.approx(losses(one), rel=2e-4)


@pytest.mark.slow
def test_two_processes_train_and_checkpoint(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for pid in range(2):
        env = clean_env(TPUJOB_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", TPUJOB_PROCESS_ID=str(pid),
                        TPUJOB_PROCESS_COUNT="2", TPUJOB_EXPECTED_DEVICES="8",
                        TPUJOB_CPU_DEVICES="4", TPUJOB_INIT_TIMEOUT_S="60",
                        TPUJOB_TERMINATION_LOG=str(tmp_path / f"term{pid}"))
        procs.append(subprocess.Popen(
            cli_command(*ARGS, MESH, "checkpoint.every=2", f"output={tmp_path}/out"),
            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=200) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    events = parse_events(outs[0][0])
    assert [e["step"] for e in events if e["event"] == "step"] == [1, 2, 3]
    assert next(e for e in events if e["event"] == "start")["processes"] == 2
    assert not [e for e in parse_events(outs[1][0]) if e.get("event") == "step"]  # process 0 reports
    assert (tmp_path / "out" / "checkpoints" / "3").exists()
