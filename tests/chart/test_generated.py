"""Files derived from other files stay in step: the chart's CRD is manifests/crd.yaml (which
the API models generate), the chart's RBAC rules are permissions.py's, and
manifests/install/tpujob.yaml is the chart's default install. Each test fails with the command
that brings the file up to date."""

from __future__ import annotations

import pytest
import yaml
from charts import generate

from tests.chart.k8s_objects import validation_errors
from tpujob.api.crd import REGENERATE_COMMAND, render_crd_yaml

pytestmark = pytest.mark.unit

FIX = f"run `{generate.COMMAND}`"


def test_chart_crd_is_manifests_crd():
    assert generate.CHART_CRD.read_bytes() == generate.CRD_SOURCE.read_bytes(), FIX


def test_chart_crd_is_the_models_crd():
    assert generate.CHART_CRD.read_text() == render_crd_yaml(), \
        f"run `{REGENERATE_COMMAND}`, then `{generate.COMMAND}`"


def test_chart_rules_are_permissions_py():
    assert generate.CHART_RULES.read_text() == generate.build_rules_tpl(), FIX


def test_install_yaml_is_the_rendered_chart():
    assert generate.INSTALL.read_text() == generate.build_install_yaml(), FIX


def test_check_command_agrees(capsys):
    assert generate.main(["--check"]) == 0, capsys.readouterr().err


def test_check_command_notices_a_stale_file(tmp_path, monkeypatch, capsys):
    # Up-to-date chart inputs and a hand-edited install file, all in a scratch folder.
    for name, text in (("CHART_CRD", generate.CRD_SOURCE.read_text()),
                       ("CHART_RULES", generate.build_rules_tpl())):
        (tmp_path / name).write_text(text)
        monkeypatch.setattr(generate, name, tmp_path / name)
    stale = tmp_path / "tpujob.yaml"
    stale.write_text(generate.build_install_yaml().replace("replicas: 1", "replicas: 2"))
    monkeypatch.setattr(generate, "INSTALL", stale)
    assert generate.main(["--check"]) == 1
    assert f"{stale} is out of date" in capsys.readouterr().err


def test_install_yaml_is_complete_and_valid():
    docs = [d for d in yaml.safe_load_all(generate.INSTALL.read_text()) if d]
    kinds = [d["kind"] for d in docs]
    # kubectl applies in file order: the namespace and the CRD before what uses them.
    assert kinds[:2] == ["Namespace", "CustomResourceDefinition"]
    assert sorted(kinds[2:]) == ["ClusterRole", "ClusterRoleBinding", "Deployment", "Service",
                                 "ServiceAccount"]
    assert docs[1] == yaml.safe_load(generate.CRD_SOURCE.read_text())
    namespaced = [d for d in docs[2:] if not d["kind"].startswith("Cluster")]
    assert {d["metadata"]["namespace"] for d in namespaced} == {generate.NAMESPACE}
    assert [e for d in docs for e in validation_errors(d)] == []
