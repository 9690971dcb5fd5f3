"""The API server contract suite: the shared `kube` fixtures, the Widget test CRD, and servers
of a test's own for the request log, faults and restarts."""

from __future__ import annotations

import copy

import pytest

from tests.apiserver.crds import GROUP, WIDGET_CRD
from tests.support.apiserver import *  # noqa: F401,F403
from tests.support.apiserver import Kube


@pytest.fixture(scope="session")
def widgets(kube: Kube) -> str:
    """The Widget CRD, applied; returns the namespaced collection path for widgets."""
    kube.ensure_crd(copy.deepcopy(WIDGET_CRD))
    return f"/apis/{GROUP}/v1/namespaces/{kube.namespace}/widgets"


@pytest.fixture
def own_server(tmp_path):
    """A fresh embedded API server of this test alone (faults, restarts and the request log
    must not touch the shared one); its kubeconfig is `tmp_path / "kubeconfig"`."""
    from tpujob.local.apiserver import ApiServer
    with ApiServer(bookmark_interval_s=1.0) as server:
        server.write_kubeconfig(tmp_path / "kubeconfig")
        yield server


@pytest.fixture
def own_client(own_server, tmp_path):
    """A `kubernetes` ApiClient for `own_server`."""
    from kubernetes import config
    api_client = config.new_client_from_config(config_file=str(tmp_path / "kubeconfig"))
    yield api_client
    api_client.close()
