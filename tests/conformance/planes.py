"""The two API servers the conformance suite sends its requests to: the embedded one, and the
real kube-apiserver v1.35.4 over etcd, started from the programs and command lines of local
mode's real control plane (`tpujob.local.controlplane`), and nothing else of it: no controller
manager, scheduler, JobSet controller, Kueue or chart. What the suite compares is what the API
server itself answers; the controllers' later work (the garbage collector ending a foreground
deletion, the namespace controller) is not part of it, and without them nothing changes an
object between two requests of a case."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

from tpujob.local.apiserver.kubeconfig import write_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "conformance"
TPUJOB_CRD = ROOT / "manifests" / "crd.yaml"
START_TIMEOUT_S = 120.0


@dataclass
class Plane:
    """One API server: its name, base URL and an authenticated session."""

    name: str
    url: str
    session: requests.Session

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", 30)
        kwargs.setdefault("verify", self.session.verify)  # not $REQUESTS_CA_BUNDLE's
        return self.session.request(method, self.url + path, **kwargs)


@contextlib.contextmanager
def embedded_plane() -> Iterator[Plane]:
    from tpujob.local.apiserver import ApiServer, bundled_crd_paths, load_crds
    with ApiServer(crds=load_crds(bundled_crd_paths())) as server:
        session = requests.Session()
        try:
            plane = Plane("embedded", server.url, session)
            _prepare(plane)
            yield plane
        finally:
            session.close()


@contextlib.contextmanager
def real_plane(workdir: Path) -> Iterator[Plane]:
    """etcd and kube-apiserver as `RealControlPlane` starts them (same programs, same flags:
    TLS, RBAC, service-account tokens, the default admission plugins), called as its admin."""
    from tpujob.local.controlplane import build, components
    from tpujob.local.controlplane.pki import build_pki
    from tpujob.local.controlplane.processes import Component, free_port
    programs = build.ensure_built()
    root = Path(workdir).resolve()
    pki = build_pki(root / "pki")
    ports = components.Ports(*(free_port() for _ in range(5)))
    started: list[Component] = []
    session = requests.Session()
    try:
        etcd = Component("etcd", [str(programs["etcd"]), *components.build_etcd_args(
            root / "etcd", ports)], root / "logs").start()
        started.append(etcd)
        etcd.wait_ready(lambda: requests.get(f"http://127.0.0.1:{ports.etcd}/health",
                                             timeout=1).json().get("health") == "true",
                        START_TIMEOUT_S)
        apiserver = Component("kube-apiserver", [str(programs["kube-apiserver"]),
                                                 *components.build_apiserver_args(pki, ports)],
                              root / "logs").start()
        started.append(apiserver)
        url = f"https://127.0.0.1:{ports.apiserver}"
        session.cert = tuple(str(p) for p in pki.client("admin"))
        session.verify = str(pki.ca)
        write_kubeconfig(root / "admin.kubeconfig", url, user={
            "client-certificate": session.cert[0], "client-key": session.cert[1]},
            ca_file=pki.ca)
        plane = Plane("real", url, session)
        apiserver.wait_ready(lambda: plane.request("GET", "/readyz", timeout=2).status_code
                             == 200, START_TIMEOUT_S)
        _prepare(plane)
        yield plane
    finally:
        session.close()
        for component in reversed(started):
            component.stop()


def _prepare(plane: Plane) -> None:
    """The same starting point on both: the namespace the cases use, its `default`
    ServiceAccount (the controller manager would make it; pods need it to pass admission), and
    the TpuTrainingJob CRD, served (the JobSet CRD: the embedded server preloads it, the real
    one gets the same file)."""
    from tpujob.local.apiserver import bundled_crd_paths
    ok = (200, 201, 409)
    answer = plane.request("POST", "/api/v1/namespaces", json={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    assert answer.status_code in ok, answer.text
    answer = plane.request("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", json={
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
    assert answer.status_code in ok, answer.text
    for path in [TPUJOB_CRD, *bundled_crd_paths()]:
        for crd in yaml.safe_load_all(Path(path).read_text()):
            if crd and crd.get("kind") == "CustomResourceDefinition":
                _ensure_crd(plane, crd)


def _ensure_crd(plane: Plane, crd: dict[str, Any]) -> None:
    answer = plane.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                           json=crd)
    assert answer.status_code in (201, 409), answer.text
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    version = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
    deadline = time.monotonic() + START_TIMEOUT_S
    # Served once discovery names it and a list answers (not 404, nor 429 while its storage
    # starts): the signal RealControlPlane waits on too.
    while True:
        listing = plane.request("GET", f"/apis/{group}/{version}")
        if listing.status_code == 200 and any(r["name"] == plural
                                              for r in listing.json()["resources"]):
            if plane.request("GET", f"/apis/{group}/{version}/{plural}").status_code == 200:
                return
        assert time.monotonic() < deadline, f"{plural}.{group} not served"
        time.sleep(0.1)
