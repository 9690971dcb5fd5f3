"""The real trainer through the local executor: a 2-host v6e-8 job, scaled down to one CPU device
per process, trains two steps as 2 JAX processes wired by the JobSet's env (the coordinator's
DNS name resolved to pod 0's address) and the JobSet completes."""

from __future__ import annotations

import json

import pytest

from tests.executor.conftest import condition, terminated, unique

pytestmark = pytest.mark.integration

TINY = {"model": {"vocab_size": 257, "d_model": 32, "n_layers": 1, "n_heads": 2,
                  "n_kv_heads": 2, "head_dim": 16, "mlp_dim": 64, "remat": "none",
                  "dtype": "float32"},
        "train": {"steps": 2, "global_batch": 8, "seq_len": 32},
        "checkpoint": {"enabled": False}, "metrics": {"measure_peak": False}}


def test_two_hosts_train_and_the_jobset_completes(cluster, executor_factory, tmp_path):
    name = unique("train")
    cluster.submit(name, {"slice": "v6e-8", "image": "trainer:1", "output": str(tmp_path / "out"),
                          "trainer": {"config": TINY}, "parallelism": {"ici": {"fsdp": -1}},
                          "data": {"kind": "synthetic"}, "restartPolicy": {"maxRestarts": 0}})
    executor = executor_factory(cpu_devices_per_process=1)
    done = cluster.wait_jobset(name, lambda j: j.get("status", {}).get("terminalState"),
                               timeout=150, message="training to finish")
    pods = cluster.pods(name)
    logs = [executor.read_log(cluster.namespace, p["metadata"]["name"]) for p in pods]
    assert done["status"]["terminalState"] == "Completed", logs
    assert condition(done, "Completed")["status"] == "True"
    assert [p["status"]["phase"] for p in pods] == ["Succeeded", "Succeeded"]
    for pod in pods:
        assert json.loads(terminated(pod)["message"])["reason"] == "Completed"
    events = [json.loads(line) for line in logs[0].splitlines() if line.startswith("{")]
    start = next(e for e in events if e["event"] == "start")
    assert (start["processes"], start["devices"]) == (2, 2)
    assert [e["step"] for e in events if e["event"] == "step"] == [1, 2]
    http = next(e for e in events if e["event"] == "http")
    assert http["host"] == pods[0]["status"]["podIP"]  # bound to the pod's own address
