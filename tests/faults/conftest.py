"""The operator against an API server that misbehaves: requests that fail, replies lost after
the write, watches cut off, the server restarted, the operator killed. Every test gets its own
embedded API server (both CRDs served) and checks the same end state: every job in the phase
it should reach, with its whole status, and each valid job's children created exactly once.

The tests' own requests go through an HTTP client that retries refused connections and 429/5xx
answers, so that the faults injected for the operator do not fail the test's bookkeeping."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from tests.operator.conftest import JOBS, JOBSETS, ROOT, Cluster, start_operator
from tests.support.apiserver import wait_for
from tpujob.local.apiserver import ApiServer, bundled_crd_paths, load_crds

CONFIGMAPS = "/api/v1/namespaces/{ns}/configmaps"
BAD_SLICE = "v6e-12"   # not a size v6e comes in: the job is Invalid
TEST_AGENT = "python-requests"


def _retrying(cluster: Cluster) -> Cluster:
    retry = Retry(total=30, connect=30, read=5, status=30, backoff_factor=0.05, backoff_max=0.5,
                  status_forcelist=(429, 500, 502, 503, 504), allowed_methods=None,
                  respect_retry_after_header=False, raise_on_status=False)
    cluster.session.mount("http://", HTTPAdapter(max_retries=retry))
    return cluster


@pytest.fixture
def cluster(tmp_path):
    crds = load_crds(bundled_crd_paths() + [ROOT / "manifests" / "crd.yaml"])
    with ApiServer(crds=crds, bookmark_interval_s=1.0) as srv:
        c = _retrying(Cluster(srv, srv.write_kubeconfig(tmp_path / "kubeconfig"),
                              f"faults-{secrets.token_hex(3)}"))
        c.request("POST", "/api/v1/namespaces", json={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": c.namespace}})
        yield c


def create_jobs(cluster: Cluster, valid: list[str], invalid: list[str]) -> None:
    for n in valid:
        cluster.create_job(n)
    for n in invalid:
        cluster.create_job(n, slice=BAD_SLICE)


def phases(cluster: Cluster) -> dict[str, str | None]:
    items = cluster.request("GET", JOBS).json()["items"]
    return {j["metadata"]["name"]: (j.get("status") or {}).get("phase") for j in items}


def count(cluster: Cluster, path: str) -> int:
    return len(cluster.request("GET", path).json()["items"])


def wait_until_ended(cluster: Cluster, valid: list[str], invalid: list[str],
                     timeout: float) -> None:
    want = {n: "Starting" for n in valid} | {n: "Invalid" for n in invalid}

    def ended() -> bool:
        got = phases(cluster)
        return all(got.get(n) == p for n, p in want.items())
    wait_for(ended, timeout=timeout, interval=0.2,
             message=f"every job to end right; wrong: "
                     f"{ {n: p for n, p in phases(cluster).items() if want.get(n) != p} }")


def run_burst_through_faults(cluster: Cluster, valid: list[str], invalid: list[str],
                            **faults: Any) -> None:
    """With the server's `faults` on, an operator takes a burst of jobs until every one has
    ended (faults cleared and operator stopped after, whatever happens)."""
    cluster.server.set_faults(**faults)
    op = start_operator(cluster)
    try:
        create_jobs(cluster, valid, invalid)
        wait_until_ended(cluster, valid, invalid, timeout=60)
    finally:
        op.stop()
        cluster.server.set_faults()


def operator_requests(cluster: Cluster):
    return [r for r in cluster.server.requests()
            if r.is_resource and not r.user_agent.startswith(TEST_AGENT)]


def assert_every_job_ended_right(cluster: Cluster, valid: list[str], invalid: list[str],
                                 *, creates_logged: bool = True) -> None:
    """Phases, whole statuses, one JobSet and one ConfigMap per valid job (created once,
    owned by the job), nothing for an invalid one, at most one Created and one Starting
    Event per job."""
    jobs = {j["metadata"]["name"]: j for j in cluster.request("GET", JOBS).json()["items"]}
    for n in valid:
        job = jobs[n]
        status = job["status"]
        assert status["phase"] == "Starting", (n, status)
        assert status["observedGeneration"] == job["metadata"]["generation"], (n, status)
        assert status["slice"]["hosts"] == 4 and status["slice"]["chips"] == 16, (n, status)
        conditions = {c["type"]: c for c in status["conditions"]}
        assert conditions["Valid"]["status"] == "True", (n, status)
        assert (conditions["Running"]["status"], conditions["Running"]["reason"]) == \
            ("False", "Starting"), (n, status)
        assert "failure" not in status, (n, status)
    for n in invalid:
        status = jobs[n]["status"]
        assert status["phase"] == "Invalid", (n, status)
        assert status["failure"]["reason"] == "InvalidSlice", (n, status)
        assert "spec.slice" in status["failure"]["message"], (n, status)

    jobsets = {js["metadata"]["name"]: js for js in
               cluster.request("GET", JOBSETS).json()["items"]}
    assert sorted(jobsets) == sorted(valid)
    for n in valid:
        owners = [r["uid"] for r in jobsets[n]["metadata"]["ownerReferences"]
                  if r.get("controller")]
        assert owners == [jobs[n]["metadata"]["uid"]], n
    configmaps = sorted(c["metadata"]["name"] for c in
                        cluster.request("GET", CONFIGMAPS).json()["items"])
    assert configmaps == sorted(f"{n}-trainer" for n in valid)
    if creates_logged:
        created = Counter(r.resource for r in operator_requests(cluster)
                          if r.verb == "create" and r.status == 201)
        assert created["jobsets"] == len(valid), created
        assert created["configmaps"] == len(valid), created

    events = cluster.request("GET", "/api/v1/namespaces/{ns}/events").json()["items"]
    per_job = Counter((e["involvedObject"]["name"], e["reason"]) for e in events)
    twice = {k: v for k, v in per_job.items() if k[1] in ("Created", "Starting") and v > 1}
    assert twice == {}, f"Events emitted more than once: {twice}"


def spawn_operator(cluster: Cluster, log_path, workers: int = 1) -> subprocess.Popen:
    """`tpujob operator` as its own process (default settings), watching the test namespace."""
    log = open(log_path, "ab")  # noqa: SIM115 -- closed with the process
    return subprocess.Popen(
        [sys.executable, "-m", "tpujob.cli.main", "operator", "--kubeconfig",
         str(cluster.kubeconfig), "--namespace", cluster.namespace, "--http-port", "-1",
         "--workers", str(workers)], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
