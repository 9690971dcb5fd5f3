"""Pytest plugin: a Kubernetes API server for integration tests.

By default the `kube` fixture starts tpujob's embedded API server (JobSet CRD preloaded) once
per session. With `TPUJOB_TEST_KUBECONFIG=<kubeconfig>` it talks to that cluster instead, so
the same tests run unchanged against a real kube-apiserver. Either way the session gets its own
namespace, deleted at the end, and CRDs a test needs are applied through `kube.ensure_crd`.

Load it from a conftest with `from tests.support.apiserver import *  # noqa: F401,F403`
(or list "tests.support.apiserver" in the root conftest's `pytest_plugins`).
"""

from __future__ import annotations

import contextlib
import copy
import os
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

ENV_KUBECONFIG = "TPUJOB_TEST_KUBECONFIG"

__all__ = ["Kube", "kube", "kube_client", "open_kube", "wait_for"]


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05,
             message: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy; fail the test after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


@dataclass
class Kube:
    """A reachable API server: its kubeconfig, a per-session namespace, raw HTTP access."""

    kubeconfig: Path
    namespace: str
    base_url: str
    session: requests.Session
    server: Any = None  # the embedded ApiServer, or None against a real cluster
    _crds: list[str] = field(default_factory=list)

    @property
    def embedded(self) -> bool:
        return self.server is not None

    def api_client(self):
        """A new `kubernetes` ApiClient for this server (never the global configuration)."""
        from kubernetes import config
        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """Raw HTTP to the server, authenticated as the kubeconfig says."""
        kwargs.setdefault("timeout", 30)
        # verify named on each request: $REQUESTS_CA_BUNDLE would override the session's CA.
        kwargs.setdefault("verify", self.session.verify)
        return self.session.request(method, self.base_url + path, **kwargs)

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("GET", path, **kwargs)

    def ensure_crd(self, crd: dict[str, Any], keep: bool = False) -> None:
        """Create `crd` unless it exists, then wait until it is Established and discoverable;
        CRDs this created are deleted at the end of the session unless `keep`."""
        name = crd["metadata"]["name"]
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        if self.get(path).status_code == 404:
            response = self.request("POST", "/apis/apiextensions.k8s.io/v1/"
                                    "customresourcedefinitions", json=crd)
            assert response.status_code == 201, response.text
            if not keep:
                self._crds.append(name)
        group = crd["spec"]["group"]
        version = next(v["name"] for v in crd["spec"]["versions"] if v.get("served", True))
        plural = crd["spec"]["names"]["plural"]

        def served() -> bool:
            established = any(c["type"] == "Established" and c["status"] == "True"
                              for c in (self.get(path).json().get("status") or {})
                              .get("conditions") or [])
            listing = self.get(f"/apis/{group}/{version}")
            return established and listing.status_code == 200 and any(
                r["name"] == plural for r in listing.json()["resources"])
        wait_for(served, timeout=60, interval=0.2, message=f"CRD {name} to be served")

    def delete_crd(self, name: str) -> None:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        self.request("DELETE", path)
        wait_for(lambda: self.get(path).status_code == 404, timeout=60, interval=0.2,
                 message=f"CRD {name} to be deleted")
        if name in self._crds:
            self._crds.remove(name)

    def cleanup(self) -> None:
        for name in list(self._crds):
            self.delete_crd(name)


def _session_for(kubeconfig: Path) -> tuple[str, requests.Session]:
    from kubernetes import client, config
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    session = requests.Session()
    token = (configuration.api_key or {}).get("authorization") or \
        (configuration.api_key or {}).get("BearerToken")
    if token:
        session.headers["Authorization"] = token if token.lower().startswith("bearer ") \
            else f"Bearer {token}"
    if configuration.cert_file and configuration.key_file:
        session.cert = (configuration.cert_file, configuration.key_file)
    session.verify = configuration.ssl_ca_cert or configuration.verify_ssl
    return configuration.host.rstrip("/"), session


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """The API server the integration tests talk to, with a fresh namespace."""
    server = None
    external = os.environ.get(ENV_KUBECONFIG)
    if external:
        kubeconfig = Path(external)
    else:
        from tpujob.local.apiserver import ApiServer, bundled_crd_paths, load_crds
        server = ApiServer(crds=load_crds(bundled_crd_paths()), bookmark_interval_s=1.0)
        server.start()
        kubeconfig = server.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
    try:
        with open_kube(kubeconfig, server) as opened:
            yield opened
    finally:
        if server is not None:
            server.stop()


@contextlib.contextmanager
def open_kube(kubeconfig: Path, server: Any = None) -> Iterator[Kube]:
    """A `Kube` for the server `kubeconfig` names, with a namespace of its own (deleted at the
    end, with the CRDs it applied)."""
    base_url, session = _session_for(kubeconfig)
    namespace = f"tpujob-test-{secrets.token_hex(3)}"
    kube = Kube(kubeconfig, namespace, base_url, session, server)
    created = kube.request("POST", "/api/v1/namespaces", json={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    assert created.status_code == 201, created.text
    try:
        yield kube
    finally:
        kube.request("DELETE", f"/api/v1/namespaces/{namespace}")
        kube.cleanup()
        session.close()


@pytest.fixture
def kube_client(kube: Kube):
    """A `kubernetes` ApiClient for `kube`, closed after the test."""
    api_client = kube.api_client()
    yield api_client
    api_client.close()


def unique_name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def jobset_crd() -> dict[str, Any]:
    """The bundled JobSet CRD (kubernetes-sigs/jobset v0.12.0)."""
    from tpujob.local.apiserver import bundled_crd_paths, load_crds
    return copy.deepcopy(load_crds(bundled_crd_paths())[0])
