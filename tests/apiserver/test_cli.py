"""`tpujob local api`: serves in the foreground, writes a usable kubeconfig, stops on Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.apiserver.crds import WIDGET_CRD

pytestmark = pytest.mark.integration


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell's background job inherits it


@pytest.mark.parametrize("stop, inherited", [
    (signal.SIGINT, None), (signal.SIGTERM, None), (signal.SIGINT, _ignore_sigint)])
def test_local_api_command(tmp_path: Path, stop, inherited) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    crd_file = tmp_path / "widget-crd.yaml"
    crd_file.write_text(yaml.safe_dump(WIDGET_CRD))
    process = subprocess.Popen(
        [sys.executable, "-m", "tpujob.cli.main", "local", "api", "--port", "0",
         "--kubeconfig", str(kubeconfig), "--crd", str(crd_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=inherited)
    try:
        first = process.stdout.readline()
        assert first.startswith("Kubernetes API server listening on http://127.0.0.1:"), (
            first + process.stderr.read() if process.poll() is not None else first)
        from kubernetes import client, config
        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        with api_client:
            names = [n.metadata.name for n in client.CoreV1Api(api_client).list_namespace().items]
            assert "default" in names
            groups = {g.name for g in client.ApisApi(api_client).get_api_versions().groups}
            assert {"jobset.x-k8s.io", "contract.tpujob.dev"} <= groups
        process.send_signal(stop)
        assert process.wait(timeout=60) == 0  # a bound for a loaded machine, not a pause
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()


def test_local_api_refuses_a_file_that_is_not_a_crd(tmp_path: Path) -> None:
    not_crd = tmp_path / "cm.yaml"
    not_crd.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    result = subprocess.run(
        [sys.executable, "-m", "tpujob.cli.main", "local", "api", "--crd", str(not_crd),
         "--kubeconfig", str(tmp_path / "kc")], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "expected a CustomResourceDefinition" in result.stderr
