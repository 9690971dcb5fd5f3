"""What a local container sees, table-driven: env resolved like a kubelet (values, `$(VAR)`,
the downward API, Secret and ConfigMap keys), container paths mapped to host paths, pod DNS
names resolved to loopback addresses, and the CPU-device arithmetic of the scale-down."""

from __future__ import annotations

import base64

import pytest

from tpujob.builders.gpu_network import TCPX_IMAGE, TCPXO_IMAGE
from tpujob.local.executor.container_env import apply_local_overrides, stand_in_argv
from tpujob.local.executor.kubelet import read_tail
from tpujob.local.executor.network import LocalNetwork
from tpujob.local.executor.pod_status import exit_code_of
from tpujob.local.executor.podenv import (
    ContainerConfigError,
    PathMap,
    expand_command,
    expand_references,
    resolve_env,
)
from tpujob.local.executor.settings import ExecutorSettings

pytestmark = pytest.mark.unit

POD = {"metadata": {"name": "js-slice-0-1-abcde", "namespace": "ns", "uid": "u1",
                    "labels": {"jobset.sigs.k8s.io/job-index": "0"},
                    "annotations": {"batch.kubernetes.io/job-completion-index": "1"}},
       "spec": {"hostname": "js-slice-0-1", "subdomain": "js"},
       "status": {"podIP": "127.9.9.2"}}
OBJECTS = {
    ("Secret", "ns", "wandb"): {"data": {"key": base64.b64encode(b"s3cret").decode()}},
    ("ConfigMap", "ns", "settings"): {"data": {"mode": "fast", "level": "3"}},
}


def lookup(kind, ns, name):
    return OBJECTS.get((kind, ns, name))


def test_resolve_env_like_a_kubelet():
    container = {"envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}], "env": [
        {"name": "A", "value": "x"},
        {"name": "B", "value": "$(A)-$(MISSING)-$$(A)"},
        {"name": "INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
        {"name": "SLICE", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}}},
        {"name": "NOLABEL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['x']"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "key"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
        {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k",
                                                       "optional": True}}},
    ]}
    env = resolve_env(POD, container, lookup, {"PATH": "/bin"})
    assert env == {"PATH": "/bin", "CFG_mode": "fast", "CFG_level": "3", "A": "x",
                   "B": "x-$(MISSING)-$(A)", "INDEX": "1", "SLICE": "0", "NOLABEL": "",
                   "IP": "127.9.9.2", "POD": "js-slice-0-1-abcde", "KEY": "s3cret",
                   "MODE": "fast"}


@pytest.mark.parametrize("ref, error", [
    ({"secretKeyRef": {"name": "gone", "key": "k"}}, 'secret "gone" not found'),
    ({"configMapKeyRef": {"name": "settings", "key": "nope"}},
     "couldn't find key nope in ConfigMap ns/settings"),
])
def test_missing_keys_are_config_errors(ref, error):
    with pytest.raises(ContainerConfigError, match=error):
        resolve_env(POD, {"env": [{"name": "X", "valueFrom": ref}]}, lookup)


def test_command_expansion():
    container = {"command": ["tpujob-train"], "args": ["--config", "$(CFG)", "x=$$(CFG)"]}
    assert expand_command(container, {"CFG": "/etc/tpujob/trainer.yaml"}) == \
        ["tpujob-train", "--config", "/etc/tpujob/trainer.yaml", "x=$(CFG)"]
    assert expand_references("$(A)$(A)", {"A": "1"}) == "11"


@pytest.mark.parametrize("text, mapped", [
    ("/etc/tpujob/trainer.yaml", "/w/config/trainer.yaml"),
    ("--config=/etc/tpujob/trainer.yaml", "--config=/w/config/trainer.yaml"),
    ("/etc/tpujob", "/w/config"),
    ("/etc/tpujobs/x", "/etc/tpujobs/x"),
    ("/opt/etc/tpujob/x", "/opt/etc/tpujob/x"),
    ("/dev/termination-log", "/w/trainer/termination-log"),
    ("a:/etc/tpujob/a.yaml,/etc/tpujob/b.yaml", "a:/w/config/a.yaml,/w/config/b.yaml"),
])
def test_path_map(text, mapped):
    paths = PathMap({"/etc/tpujob": "/w/config", "/dev/termination-log":
                     "/w/trainer/termination-log"})
    assert paths.apply(text) == mapped


def test_dns_names_resolve_to_sticky_loopback_addresses():
    net = LocalNetwork(block=(77, 5))
    assert net.pod_address(POD) == "127.77.5.1"  # its DNS name's address, published with it
    assert net.rewrite("ns", "js-slice-0-0.js:8476") == "127.77.5.2:8476"
    assert net.rewrite("ns", "js-slice-0-1.js") == "127.77.5.1"
    assert net.rewrite("ns", "js-slice-0-0.js.ns.svc.cluster.local:8476") == "127.77.5.2:8476"
    assert net.rewrite("other", "js-slice-0-0.js.ns:1") == "127.77.5.2:1"
    for unchanged in ("js-slice-0-0.js-other:1", "js-slice-0-0.elsewhere:1", "js.example.com",
                      "js-slice-0-0.js.ns.example.com", "127.0.0.1:8476"):
        assert net.rewrite("ns", unchanged) == unchanged
    replacement = {**POD, "metadata": {**POD["metadata"], "uid": "u2"}}
    assert net.pod_address(replacement) == "127.77.5.1"  # a replacement pod keeps the address
    bare = {"metadata": {"name": "p", "namespace": "ns", "uid": "u3"}, "spec": {}}
    assert net.pod_address(bare) == "127.77.5.3"


@pytest.mark.parametrize("env, scale, cpu, expected", [
    ({"TPUJOB_EXPECTED_DEVICES": "16", "TPUJOB_PROCESS_COUNT": "4"}, None, "4", "16"),
    ({"TPUJOB_EXPECTED_DEVICES": "16", "TPUJOB_PROCESS_COUNT": "4"}, 1, "1", "4"),
    ({"TPUJOB_EXPECTED_DEVICES": "64", "TPUJOB_PROCESS_COUNT": "16"}, 2, "2", "32"),
    ({"TPUJOB_EXPECTED_DEVICES": "6", "TPUJOB_PROCESS_COUNT": "4"}, None, None, "6"),
    ({}, None, None, None),
])
def test_cpu_devices_per_process(env, scale, cpu, expected):
    settings = ExecutorSettings(cpu_devices_per_process=scale)
    out = apply_local_overrides(env, "127.1.2.3", "/w/term", settings)
    assert (out.get("TPUJOB_CPU_DEVICES"), out.get("TPUJOB_EXPECTED_DEVICES")) == (cpu, expected)
    assert (out["TPUJOB_BIND_ADDRESS"], out["TPUJOB_TERMINATION_LOG"], out["JAX_PLATFORMS"]) == \
        ("127.1.2.3", "/w/term", "cpu")


def test_exit_codes_and_log_tail(tmp_path):
    assert (exit_code_of(0), exit_code_of(42), exit_code_of(-9), exit_code_of(-15)) == \
        (0, 42, 137, 143)
    log = tmp_path / "0.log"
    log.write_text("".join(f"line {i}\n" for i in range(200)))
    assert read_tail(log, 80, 2048).splitlines() == [f"line {i}" for i in range(120, 200)]
    assert len(read_tail(log, 80, 100)) <= 100
    assert ExecutorSettings().grace_seconds(120) == 6.0
    assert ExecutorSettings(max_grace_s=2).grace_seconds(None) == 1.5


@pytest.mark.parametrize("env, devices, bind", [
    ({"TPUJOB_EXPECTED_DEVICES": "16", "TPUJOB_PROCESS_COUNT": "4",
      "JAX_COORDINATOR_ADDRESS": "127.9.9.1:8482"}, "4", "127.1.2.3:8482"),
    ({"TPUJOB_EXPECTED_DEVICES": "16", "TPUJOB_PROCESS_COUNT": "4", "JAX_NUM_CPU_DEVICES": "2",
      "JAX_COORDINATOR_BIND_ADDRESS": "0.0.0.0:1"}, "2", "0.0.0.0:1"),  # the job's own win
    ({"JAX_COORDINATOR_ADDRESS": "bare-host"}, None, None),
    ({"JAX_COORDINATOR_ADDRESS": "bare-host", "JAX_COORDINATOR_PORT": "1234"}, None,
     "127.1.2.3:1234"),
])
def test_any_jax_program_gets_devices_and_a_bind_address(env, devices, bind):
    out = apply_local_overrides(env, "127.1.2.3", "/w/term", ExecutorSettings())
    assert (out.get("JAX_NUM_CPU_DEVICES"), out.get("JAX_COORDINATOR_BIND_ADDRESS")) == \
        (devices, bind)


@pytest.mark.parametrize("image", [TCPX_IMAGE, TCPXO_IMAGE])
def test_a_gpu_nodes_network_daemon_is_stood_in_for(image, tmp_path):
    """The sidecar runs as a process that says what it stands for and stays up until stopped."""
    import subprocess
    import sys

    argv = stand_in_argv({"name": "daemon", "image": image, "command": ["/daemon"]})
    assert argv[0] == "python3"
    proc = subprocess.Popen([sys.executable, *argv[1:]], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert f"standing in for {image}" in line and "up until the pod stops" in line
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert stand_in_argv({"name": "trainer", "image": "trainer:1", "command": ["x"]}) is None
