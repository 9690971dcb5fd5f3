"""A real operator (kopf, the same code as in a cluster) running in a thread against an embedded
API server of this module's own, with both CRDs served; the tests play the JobSet controller and
the pods by writing JobSet status and pod objects."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.apiserver import _session_for, wait_for
from tpujob.controller.operator import Operator
from tpujob.controller.runner import OperatorThread, load_api_config
from tpujob.controller.settings import OperatorSettings
from tpujob.local.apiserver import ApiServer, bundled_crd_paths, load_crds

ROOT = Path(__file__).resolve().parents[2]
TINY = {"model": {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4,
                  "n_kv_heads": 2, "head_dim": 16, "mlp_dim": 128},
        "train": {"steps": 100, "global_batch": 16, "seq_len": 64}}
JOBS = "/apis/tpujob.dev/v1alpha1/namespaces/{ns}/tputrainingjobs"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
FAST = OperatorSettings(http_host="127.0.0.1", http_port=0, progress_interval_s=0.3,
                        resync_interval_s=1.0, retry_delays_s=(0.2, 0.5, 1.0, 2.0),
                        watch_server_timeout_s=30, watch_client_timeout_s=40)


class Cluster:
    """The server, raw HTTP to it, and helpers to play the JobSet controller."""

    def __init__(self, server: ApiServer, kubeconfig: Path, namespace: str):
        self.server = server
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.base_url, self.session = _session_for(kubeconfig)

    def request(self, method: str, path: str, **kw: Any):
        kw.setdefault("timeout", 30)
        # Named on each request: $REQUESTS_CA_BUNDLE would override the session's own CA
        # (psf/requests#3829), and a TLS server's certificate is of its own local CA.
        kw.setdefault("verify", self.session.verify)
        return self.session.request(method, self.base_url + path.format(ns=self.namespace), **kw)

    def create_job(self, name: str, **spec: Any) -> dict:
        body = {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
                "metadata": {"name": name},
                "spec": {"slice": "v6e-16", "image": "trainer:1", "output": "gs://bucket/run",
                         "trainer": {"config": TINY}} | spec}
        r = self.request("POST", JOBS, json=body)
        assert r.status_code == 201, r.text
        return r.json()

    def job(self, name: str) -> dict | None:
        r = self.request("GET", JOBS + f"/{name}")
        return r.json() if r.status_code == 200 else None

    def jobset(self, name: str) -> dict | None:
        r = self.request("GET", JOBSETS + f"/{name}")
        return r.json() if r.status_code == 200 else None

    def patch(self, path: str, body: dict) -> dict:
        r = self.request("PATCH", path, json=body,
                         headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text
        return r.json()

    def set_jobset_status(self, name: str, **status: Any) -> dict:
        return self.patch(JOBSETS + f"/{name}/status", {"status": status})

    def phase(self, name: str) -> str | None:
        return ((self.job(name) or {}).get("status") or {}).get("phase")

    def wait_phase(self, name: str, phase: str, timeout: float = 15) -> dict:
        wait_for(lambda: self.phase(name) == phase, timeout=timeout,
                 message=f"{name} to reach {phase} (now {self.phase(name)})")
        return self.job(name)

    def events(self, name: str) -> list[dict]:
        r = self.request("GET", "/api/v1/namespaces/{ns}/events")
        return [e for e in r.json()["items"] if e["involvedObject"]["name"] == name]

    def event_reasons(self, name: str) -> list[str]:
        return [e["reason"] for e in self.events(name)]

    def create(self, path: str, body: dict) -> dict:
        r = self.request("POST", path, json=body)
        assert r.status_code == 201, r.text
        return r.json()


KUEUE_WORKLOADS = Path(__file__).parent / "crds" / "kueue-workloads.yaml"


def start_operator(cluster: Cluster, operator_kwargs: dict | None = None,
                   **overrides: Any) -> OperatorThread:
    """An operator with fast settings (and `overrides`), started in a thread."""
    settings = OperatorSettings(**(FAST.__dict__ | overrides))
    operator = Operator(settings, load_api_config(cluster.kubeconfig), **(operator_kwargs or {}))
    return OperatorThread(operator).start()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    crds = load_crds(bundled_crd_paths() + [ROOT / "manifests" / "crd.yaml", KUEUE_WORKLOADS])
    with ApiServer(crds=crds, bookmark_interval_s=1.0) as srv:
        yield srv, srv.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")


@pytest.fixture
def fresh(tmp_path) -> Cluster:
    """An API server and namespace of the test's own (its request log holds only its requests)."""
    crds = load_crds(bundled_crd_paths() + [ROOT / "manifests" / "crd.yaml", KUEUE_WORKLOADS])
    with ApiServer(crds=crds, bookmark_interval_s=1.0) as srv:
        c = Cluster(srv, srv.write_kubeconfig(tmp_path / "kubeconfig"),
                    f"fresh-{secrets.token_hex(3)}")
        c.request("POST", "/api/v1/namespaces", json={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": c.namespace}})
        yield c


@pytest.fixture(scope="module")
def cluster(server) -> Cluster:
    srv, kubeconfig = server
    c = Cluster(srv, kubeconfig, f"team-{secrets.token_hex(3)}")
    c.request("POST", "/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": c.namespace}})
    return c


@pytest.fixture(scope="module")
def operator(cluster):
    runner = start_operator(cluster)
    yield runner
    runner.stop()


def name() -> str:
    return f"job-{secrets.token_hex(3)}"


def load_example(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def create_trainer_pod(cluster: Cluster, jobset: str, index: int, port: int,
                       **status) -> dict:
    """A pod of slice 0 as the JobSet controller makes it (host `index`), with `status` set."""
    pod = cluster.create("/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{jobset}-slice-0-{index}-x",
                     "labels": {"jobset.sigs.k8s.io/jobset-name": jobset,
                                "jobset.sigs.k8s.io/job-index": "0",
                                "jobset.sigs.k8s.io/restart-attempt": "0"},
                     "annotations": {"batch.kubernetes.io/job-completion-index": str(index)}},
        "spec": {"containers": [{"name": "trainer", "image": "trainer:1",
                                 "ports": [{"name": "metrics", "containerPort": port}]}]},
    })
    if not status:
        return pod
    return cluster.patch(f"/api/v1/namespaces/{{ns}}/pods/{pod['metadata']['name']}/status",
                         {"status": status})
