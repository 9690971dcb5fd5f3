"""Every example in manifests/examples is accepted by a Kubernetes API server serving the
TpuTrainingJob CRD, as `kubectl apply` sends it (strict field validation), and is stored as
written: nothing is pruned."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests.support.apiserver import Kube

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "manifests" / "examples").glob("*.yaml"))
CRD = yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text())
STRICT = {"fieldValidation": "Strict"}


@pytest.fixture(scope="module")
def jobs(kube: Kube) -> str:
    """The TpuTrainingJob CRD, applied; returns the namespaced collection path."""
    kube.ensure_crd(copy.deepcopy(CRD))
    version = CRD["spec"]["versions"][0]["name"]
    return (f"/apis/{CRD['spec']['group']}/{version}/namespaces/{kube.namespace}/"
            f"{CRD['spec']['names']['plural']}")


def _is_within(written, stored, path="spec") -> list[str]:
    """Where `written` is not found unchanged inside `stored` (defaults may add fields)."""
    if isinstance(written, dict):
        if not isinstance(stored, dict):
            return [path]
        return [p for k, v in written.items()
                for p in ([f"{path}.{k}"] if k not in stored else _is_within(v, stored[k],
                                                                             f"{path}.{k}"))]
    if isinstance(written, list):
        if not isinstance(stored, list) or len(stored) != len(written):
            return [path]
        return [p for i, (w, s) in enumerate(zip(written, stored, strict=True))
                for p in _is_within(w, s, f"{path}[{i}]")]
    return [] if written == stored else [path]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_is_accepted_as_written(kube: Kube, jobs: str, path: Path):
    example = yaml.safe_load(path.read_text())
    response = kube.request("POST", jobs, json=example, params=STRICT)
    assert response.status_code == 201, response.text
    assert "Warning" not in response.headers, response.headers["Warning"]
    name = example["metadata"]["name"]
    stored = kube.get(f"{jobs}/{name}").json()
    assert _is_within(example["spec"], stored["spec"]) == []
    assert kube.request("DELETE", f"{jobs}/{name}").status_code == 200


def test_a_broken_example_is_refused(kube: Kube, jobs: str):
    # Guards the test above against a server that accepts anything.
    example = yaml.safe_load((ROOT / "manifests" / "examples" / "quickstart.yaml").read_text())
    example["metadata"]["name"] = "broken-quickstart"
    unknown = copy.deepcopy(example)
    unknown["spec"]["slicee"] = "v6e-8"
    response = kube.request("POST", jobs, json=unknown, params=STRICT)
    assert response.status_code == 400 and "slicee" in response.text, response.text
    invalid = copy.deepcopy(example)
    invalid["spec"]["slices"] = 0
    invalid["spec"]["wandb"] = {"project": "p", "mode": "online"}  # online needs a key Secret
    response = kube.request("POST", jobs, json=invalid, params=STRICT)
    assert response.status_code == 422, response.text
    fields = {c["field"] for c in response.json()["details"]["causes"]}
    assert {"spec.slices", "spec.wandb.apiKeySecret"} <= fields, fields
    assert kube.get(f"{jobs}/broken-quickstart").status_code == 404
