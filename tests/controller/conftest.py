"""One embedded API server per test module, the operator's KubeApi on it, and a fresh namespace
per test (`c`), with no faults and no pod logs left from the test before."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from kubernetes import client

from tests.operator.conftest import KUEUE_WORKLOADS, ROOT, Cluster
from tpujob.controller.kube import KubeApi
from tpujob.controller.runner import load_api_config
from tpujob.local.apiserver import ApiServer, bundled_crd_paths, load_crds


@pytest.fixture(scope="module")
def server():
    crds = load_crds(bundled_crd_paths() + [ROOT / "manifests" / "crd.yaml", KUEUE_WORKLOADS])
    with ApiServer(crds=crds) as srv:
        yield srv


@pytest.fixture(scope="module")
def kubeconfig(server, tmp_path_factory) -> Path:
    return server.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")


@pytest.fixture(scope="module")
def kube(kubeconfig) -> KubeApi:
    return KubeApi(client.ApiClient(load_api_config(kubeconfig)))


@pytest.fixture
def c(server, kubeconfig) -> Cluster:
    server.set_faults()
    server.set_pod_logs(None)
    cluster = Cluster(server, kubeconfig, f"ctl-{secrets.token_hex(3)}")
    cluster.request("POST", "/api/v1/namespaces", json={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": cluster.namespace}})
    yield cluster
    server.set_faults()
