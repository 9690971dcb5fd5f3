"""The local executor against the embedded API server: each test creates a TpuTrainingJob (for
a real uid), builds its ConfigMap and JobSet with the operator's builders (as `tpujob render`
does), creates them through the API and lets an `Executor` run them as processes."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.apiserver import *  # noqa: F401,F403
from tests.support.apiserver import Kube, wait_for
from tpujob.builders.jobset import build_children
from tpujob.local.executor import Executor
from tpujob.validation import validate_job

ROOT = Path(__file__).resolve().parents[2]
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
TPUJOBS = "/apis/tpujob.dev/v1alpha1/namespaces/{ns}/tputrainingjobs"
FAST = dict(grace_scale=0.02, max_grace_s=2.0, stop_grace_s=2.0, job_backoff_s=0.1,
            resync_s=0.5)


class Cluster:
    """A namespace of the test API server, with the calls the executor tests make."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace

    def path(self, template: str) -> str:
        return template.format(ns=self.namespace)

    def get(self, path: str) -> dict[str, Any] | None:
        r = self.kube.get(self.path(path))
        return r.json() if r.status_code == 200 else None

    def items(self, path: str, selector: str | None = None) -> list[dict[str, Any]]:
        r = self.kube.get(self.path(path), params={"labelSelector": selector} if selector else {})
        assert r.status_code == 200, r.text
        return r.json()["items"]

    def jobset(self, name: str) -> dict[str, Any] | None:
        return self.get(JOBSETS + f"/{name}")

    def jobs(self, jobset: str) -> list[dict[str, Any]]:
        return sorted(self.items("/apis/batch/v1/namespaces/{ns}/jobs",
                                 f"jobset.sigs.k8s.io/jobset-name={jobset}"),
                      key=lambda j: j["metadata"]["name"])

    def pods(self, jobset: str) -> list[dict[str, Any]]:
        pods = self.items("/api/v1/namespaces/{ns}/pods",
                          f"jobset.sigs.k8s.io/jobset-name={jobset}")
        return sorted(pods, key=lambda p: (p["metadata"]["labels"].get(
            "batch.kubernetes.io/job-completion-index", ""), p["metadata"]["name"]))

    def patch_jobset(self, name: str, body: dict[str, Any]) -> None:
        r = self.kube.request("PATCH", self.path(JOBSETS + f"/{name}"), json=body,
                              headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text

    def submit(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """Create the TpuTrainingJob, then the objects the operator would build for it; returns
        the JobSet as created."""
        body = {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
                "metadata": {"name": name}, "spec": spec}
        r = self.kube.request("POST", self.path(TPUJOBS), json=body)
        assert r.status_code == 201, r.text
        job = r.json()
        verdict = validate_job(job)
        assert verdict.valid, verdict.message
        created = {}
        for child in build_children(job, verdict.job.spec, verdict.plan):
            plural = {"ConfigMap": "configmaps", "JobSet": "jobsets"}[child["kind"]]
            base = "/api/v1" if child["kind"] == "ConfigMap" else "/apis/jobset.x-k8s.io/v1alpha2"
            r = self.kube.request("POST", self.path(f"{base}/namespaces/{{ns}}/{plural}"),
                                  json=child)
            assert r.status_code == 201, r.text
            created[child["kind"]] = r.json()
        return created["JobSet"]

    def wait_jobset(self, name: str, predicate: Callable[[dict[str, Any]], Any],
                    timeout: float = 30, message: str = "the JobSet") -> dict[str, Any]:
        def check():
            js = self.jobset(name)
            return js if js is not None and predicate(js) else None
        return wait_for(check, timeout=timeout, interval=0.1, message=message)


def custom_job(code: str, slice_name: str = "v6e-8", max_restarts: int = 0,
               **extra: Any) -> dict[str, Any]:
    """A TpuTrainingJob spec whose processes run `python -c code` instead of the trainer."""
    return {"slice": slice_name, "image": "stand-in:1", "output": "gs://bucket/run",
            "trainer": {"command": ["python", "-c", code]},
            "restartPolicy": {"maxRestarts": max_restarts}, **extra}


def terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    state = pod["status"].get("containerStatuses", [{}])[0].get("state", {})
    return state.get("terminated")


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == ctype), None)


def is_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        # ProcessLookupError: it exited between the open and the read.
        return False


@pytest.fixture
def cluster(kube: Kube) -> Iterator[Cluster]:
    """A namespace of its own for each test: an executor runs every JobSet of its namespace, so
    a JobSet another test left running would start processes here too."""
    if not kube.embedded:
        pytest.skip("the local executor plays controllers a real cluster already runs")
    kube.ensure_crd(yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text()))
    namespace = f"executor-{secrets.token_hex(3)}"
    r = kube.request("POST", "/api/v1/namespaces", json={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    assert r.status_code == 201, r.text
    yield Cluster(kube, namespace)
    kube.request("DELETE", f"/api/v1/namespaces/{namespace}")


@pytest.fixture
def executor_factory(kube: Kube, cluster: Cluster, tmp_path: Path):
    """Start executors for the test's namespace; all are stopped (no process left) after it."""
    started: list[Executor] = []

    def start(**overrides: Any) -> Executor:
        ex = Executor(kube.kubeconfig, tmp_path / f"work{len(started)}",
                      namespace=cluster.namespace, **{**FAST, **overrides})
        ex.start()
        started.append(ex)
        return ex
    yield start
    for ex in started:
        pids = [p["pid"] for p in ex.processes()]
        ex.stop()
        assert not ex.processes()
        assert not [pid for pid in pids if is_alive(pid)], "processes left behind"


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(2)}"


PYTHON = sys.executable
