"""kubectl against the server: apply (client- and server-side), get (server-side Table),
get -o yaml, patch, a schema violation refused with the field named, and delete."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.apiserver.crds import WIDGET_CRD
from tests.support.apiserver import Kube, unique_name

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")]


@pytest.fixture
def kubectl(kube: Kube, tmp_path: Path):
    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            ["kubectl", f"--kubeconfig={kube.kubeconfig}", f"--cache-dir={tmp_path / 'cache'}",
             f"--namespace={kube.namespace}", *args],
            capture_output=True, text=True, timeout=60)
        if check:
            assert result.returncode == 0, result.stderr
        return result
    return run


def test_kubectl_lifecycle(kube: Kube, widgets: str, kubectl, tmp_path: Path) -> None:
    crd_file = tmp_path / "crd.yaml"
    crd_file.write_text(yaml.safe_dump(copy.deepcopy(WIDGET_CRD)))
    assert "widgets.contract.tpujob.dev" in kubectl("apply", "-f", str(crd_file)).stdout
    name = unique_name("kw")
    manifest = tmp_path / "widget.yaml"
    manifest.write_text(f"apiVersion: contract.tpujob.dev/v1\nkind: Widget\n"
                        f"metadata:\n  name: {name}\nspec:\n  size: large-4\n  replicas: 2\n")
    assert "created" in kubectl("apply", "-f", str(manifest)).stdout
    table = kubectl("get", "widgets").stdout.splitlines()
    assert table[0].split() == ["NAME", "SIZE", "REPLICAS", "PHASE", "READY", "AGE"]
    row = next(line.split() for line in table if line.startswith(name))
    assert row[:3] == [name, "large-4", "2"] and row[-1].endswith("s")
    manifest.write_text(manifest.read_text().replace("replicas: 2", "replicas: 3"))
    assert "configured" in kubectl("apply", "-f", str(manifest)).stdout
    as_yaml = yaml.safe_load(kubectl("get", "wdg", name, "-o", "yaml").stdout)
    assert as_yaml["spec"] == {"size": "large-4", "replicas": 3, "mode": "safe",
                               "nested": {"level": 3}}
    assert as_yaml["metadata"]["generation"] == 2
    assert "serverside-applied" in kubectl("apply", "--server-side", "-f",
                                           str(manifest)).stdout
    kubectl("patch", "wdg", name, "--subresource=status", "--type=merge",
            "-p", '{"status":{"phase":"Running"}}')
    assert kubectl("get", "wdg", name, "-o", "jsonpath={.status.phase}").stdout == "Running"
    bad = tmp_path / "bad.yaml"
    bad.write_text(manifest.read_text().replace(name, unique_name("bad"))
                   .replace("replicas: 3", "replicas: -1"))
    refused = kubectl("apply", "-f", str(bad), check=False)
    assert refused.returncode != 0 and "spec.replicas" in refused.stderr
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(manifest.read_text().replace(name, unique_name("unk")) +
                       "  color: red\n")
    strict = kubectl("apply", "-f", str(unknown), check=False)
    assert strict.returncode != 0 and 'unknown field "spec.color"' in strict.stderr
    assert "deleted" in kubectl("delete", "-f", str(manifest)).stdout
    assert kube.get(f"{widgets}/{name}").status_code == 404


def test_kubectl_core_objects(kube: Kube, kubectl, tmp_path: Path) -> None:
    name = unique_name("kcm")
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n"
                        f"  labels: {{app: contract}}\ndata:\n  k: v\n")
    kubectl("apply", "-f", str(manifest))
    manifest.write_text(manifest.read_text().replace("k: v", "k: w"))
    kubectl("apply", "-f", str(manifest))
    assert kubectl("get", "cm", name, "-o", "jsonpath={.data.k}").stdout == "w"
    assert name in kubectl("get", "cm", "-l", "app=contract").stdout
    assert "Active" in kubectl("get", "namespace", kube.namespace).stdout
    kubectl("delete", "-f", str(manifest))
