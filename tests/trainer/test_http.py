"""The trainer's HTTP endpoint (/progress, /metrics) and TPUJOB_BIND_ADDRESS: the address the
endpoint and process 0's JAX coordinator listen on (a local executor gives each simulated pod its
own loopback IP, so two jobs on one machine share ports 9431/8476 without colliding)."""

from __future__ import annotations

import ipaddress
import json
import math
import socket
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.apiserver import wait_for
from tests.trainer.helpers import TINY_YAML, LiveRun, free_port
from tpujob_trainer import env as envvars
from tpujob_trainer.env import EnvError, ProcessEnv
from tpujob_trainer.telemetry.server import PROGRESS_FIELDS, Progress, ProgressServer

BIND = "127.0.0.2"


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        return r.read()


def listening_hosts(pid: int, port: int) -> set[str]:
    """The IPv4 addresses the process `pid` listens on at `port` (from /proc: its sockets'
    inodes and the kernel's TCP table), whatever other processes listen on that port."""
    import os
    from pathlib import Path

    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    hosts = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            ip_hex, port_hex = fields[1].split(":")
            if fields[3] != "0A" or int(port_hex, 16) != port or fields[9] not in inodes:
                continue                                        # not a LISTEN socket of pid's
            raw = bytes.fromhex(ip_hex)
            # The kernel writes each 32-bit word of the address in host (little-endian) order.
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            ip = ipaddress.ip_address(raw)
            hosts.add(str(ip.ipv4_mapped or ip) if ip.version == 6 else str(ip))
    return hosts


def is_refused(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.mark.unit
@pytest.mark.parametrize("value, bind, coordinator", [
    (None, None, None),
    ("127.0.0.2", "127.0.0.2", "127.0.0.2:8476"),
    (" 10.0.0.7 ", "10.0.0.7", "10.0.0.7:8476"),
    ("::1", "::1", "[::1]:8476"),
    ("[::1]", "::1", "[::1]:8476"),
])
def test_bind_address_parsing(value, bind, coordinator):
    env = {envvars.COORDINATOR_ADDRESS: "job-0.svc:8476"}
    if value is not None:
        env[envvars.BIND_ADDRESS] = value
    p = ProcessEnv.from_env(env)
    assert p.bind_address == bind
    assert p.coordinator_bind_address == coordinator


@pytest.mark.unit
@pytest.mark.parametrize("value", ["localhost", "127.0.0.2:9431", "300.1.1.1"])
def test_bind_address_must_be_an_ip(value):
    with pytest.raises(EnvError, match="TPUJOB_BIND_ADDRESS.*not an IP address"):
        ProcessEnv.from_env({envvars.BIND_ADDRESS: value})


@pytest.mark.unit
def test_coordinator_gets_the_bind_address(monkeypatch):
    import jax

    from tpujob_trainer import distributed

    seen = {}
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: seen.update(kw))
    distributed.initialize(ProcessEnv.from_env({
        envvars.COORDINATOR_ADDRESS: "127.0.0.2:8476", envvars.PROCESS_COUNT: "2",
        envvars.PROCESS_ID: "0", envvars.BIND_ADDRESS: "127.0.0.2"}))
    assert seen["coordinator_bind_address"] == "127.0.0.2:8476"
    seen.clear()
    distributed.initialize(ProcessEnv.from_env({
        envvars.COORDINATOR_ADDRESS: "127.0.0.2:8476", envvars.PROCESS_COUNT: "2",
        envvars.PROCESS_ID: "1"}))
    assert seen["coordinator_bind_address"] is None  # JAX's default: all interfaces


@pytest.mark.unit
def test_progress_document_has_every_field_from_the_start():
    progress = Progress(total_steps=10)
    server = ProgressServer(progress, 0, host=BIND)
    try:
        doc = json.loads(get(f"http://{BIND}:{server.port}/progress"))
        assert set(doc) == set(PROGRESS_FIELDS)
        assert doc["phase"] == "starting" and doc["step"] == 0 and doc["total_steps"] == 10
        assert doc["loss"] is None and doc["last_checkpoint_step"] is None
        assert is_refused("127.0.0.1", server.port)
    finally:
        server.close()


@pytest.mark.integration
def test_training_run_serves_progress_and_metrics_on_its_bind_address(tmp_path):
    args = ["--config", str(TINY_YAML), "train.steps=100000", "checkpoint.every=40",
            "metrics.port=0", "metrics.log_every=20", "metrics.memory_every=1000",
            "metrics.measure_peak=false", f"output={tmp_path}/out"]
    with LiveRun(args, tmp_path, env={"TPUJOB_BIND_ADDRESS": BIND}) as run:
        http = run.wait_for(lambda e: e["event"] == "http")
        assert http["host"] == BIND
        base = f"http://{BIND}:{http['port']}"
        run.wait_for(lambda e: e["event"] == "checkpoint" and e["step"] >= 80)

        def saved_80() -> dict | None:
            # The save started at step 80 counts once its background part has finished.
            doc = json.loads(get(f"{base}/progress"))
            return doc if (doc["last_checkpoint_step"] or 0) >= 80 else None

        doc = wait_for(saved_80, timeout=60, interval=0.05, message="checkpoint 80 complete")
        assert set(doc) == set(PROGRESS_FIELDS)
        assert doc["phase"] == "training" and doc["total_steps"] == 100000
        assert doc["step"] >= 80 and math.isfinite(doc["loss"])
        assert doc["step_time_s"] > 0 and doc["tokens_per_s_per_device"] > 0
        assert doc["tokens_per_s"] == pytest.approx(doc["tokens_per_s_per_device"])  # 1 device
        assert doc["last_checkpoint_step"] >= 80 and doc["last_checkpoint_step"] % 40 == 0
        assert doc["last_checkpoint_step"] <= doc["step"]
        assert doc["rss_bytes"] > 0 and doc["reason"] is None
        time.sleep(0.5)
        later = json.loads(get(f"{base}/progress"))
        assert later["step"] > doc["step"] and later["updated_at"] > doc["updated_at"]

        text = get(f"{base}/metrics").decode()
        gauges = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
        assert gauges["tpujob_train_total_steps"] == 100000
        assert gauges["tpujob_train_step"] >= later["step"]
        assert gauges["tpujob_train_last_checkpoint_step"] >= 80
        for name in ("tpujob_train_loss", "tpujob_train_step_time_seconds",
                     "tpujob_train_tokens_per_second_per_device", "tpujob_train_learning_rate",
                     "tpujob_train_process_rss_bytes"):
            assert gauges[name] > 0, name

        # Only the bind address listens: another loopback IP on the same port is refused.
        assert is_refused("127.0.0.1", http["port"])


@pytest.mark.integration
def test_coordinator_listens_only_on_the_bind_address(tmp_path):
    port = free_port(BIND)
    env = {"TPUJOB_BIND_ADDRESS": BIND, "TPUJOB_COORDINATOR_ADDRESS": f"{BIND}:{port}",
           "TPUJOB_PROCESS_COUNT": "2", "TPUJOB_PROCESS_ID": "0", "TPUJOB_INIT_TIMEOUT_S": "60"}
    with LiveRun(["--config", str(TINY_YAML), "metrics.port=null"], tmp_path, env=env) as run:
        # Process 0 serves the coordinator while it waits for process 1, which never comes.
        deadline = time.monotonic() + 60
        while is_refused(BIND, port):
            assert run.proc.poll() is None, run.stderr[-3000:]
            assert time.monotonic() < deadline, "the coordinator never listened on the bind address"
            time.sleep(0.2)
        # Only on the bind address: not on 127.0.0.1 nor on every address. Read from the
        # process's own sockets: another process may happen to listen on 127.0.0.1 at the
        # same port number (it did once, on a busy machine).
        assert listening_hosts(run.proc.pid, port) == {BIND}
