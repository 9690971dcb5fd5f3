"""The API server contract suite: the shared `kube` fixtures, the Widget test CRD, and servers
of a test's own for the request log, faults and restarts."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from tests.apiserver.crds import GROUP, WIDGET_CRD
from tests.support.apiserver import *  # noqa: F401,F403
from tests.support.apiserver import Kube, open_kube


@pytest.fixture(scope="session", params=["embedded", "real"])
def kube(request: pytest.FixtureRequest) -> Kube:
    """The contract suite runs on both API servers: the embedded one and the real
    kube-apiserver of local mode's real control plane (tpujob.local.controlplane), so every
    case is a check of the embedded server against the real one. Where they differ on purpose,
    the test asserts each one's answer (`kube.embedded`), and docs/local-apiserver.md says
    why."""
    return request.getfixturevalue(f"{request.param}_kube")


@pytest.fixture(scope="session")
def embedded_kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    from tpujob.local.apiserver import ApiServer, bundled_crd_paths, load_crds
    server = ApiServer(crds=load_crds(bundled_crd_paths()), bookmark_interval_s=1.0)
    server.start()
    try:
        kubeconfig = server.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
        with open_kube(kubeconfig, server) as kube:
            yield kube
    finally:
        server.stop()


@pytest.fixture(scope="session")
def real_kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """The real control plane (etcd, kube-apiserver, controller manager, scheduler, JobSet
    controller, Kueue, the chart), as `tpujob local up --control-plane real` starts it."""
    from tpujob.local.controlplane.cluster import RealControlPlane
    plane = RealControlPlane(tmp_path_factory.mktemp("real-kube")).start()
    try:
        with open_kube(plane.admin_kubeconfig) as kube:
            yield kube
    finally:
        plane.stop()


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
