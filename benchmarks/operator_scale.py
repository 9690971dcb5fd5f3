"""How the operator copes with many jobs at once: N TpuTrainingJobs created in a burst against
the embedded API server, each followed to its JobSet and to phase Starting, then all deleted.

    .venv/bin/python benchmarks/operator_scale.py --jobs 100              # CI size
    .venv/bin/python benchmarks/operator_scale.py --jobs 1000 --rounds 2  # the recorded size

The API server runs in this process (a thread); the operator runs as its own process, the
`tpujob operator` command as a Deployment runs it (default settings, 4 workers), so its CPU
time and memory are its own. Before the first burst, 20 jobs go through their whole life, so
that what the operator builds once (modules imported on first use, the slice catalog,
connections) is not counted per job. Measured, per burst:

- create -> JobSet: from just before this process sends the job's POST until a watch of this
  process sees the JobSet ADDED (one monotonic clock, sub-second; the server's
  creationTimestamp has whole seconds only, and its request log does not name created objects);
- all reconciled: from the first job's POST until every job reads phase Starting, as a watch
  of this process sees it; and until the operator's last request of the burst;
- API requests per job: the operator's requests from the burst until it goes quiet (no request
  for a second), by verb and resource, from the server's request log;
- operator CPU: user + system time of the operator process over the same span;
- memory per job: the operator's resident memory (RSS), peak during the burst and once quiet,
  minus its RSS before the burst, divided by N. A second round (`--rounds 2`) shows whether the
  memory of deleted jobs is reused;
- cleanup: one deletecollection of the jobs, until the jobs, their JobSets and ConfigMaps are
  gone and the operator's own count of jobs (its /metrics) is zero.

Exits 1 when a target of the first round is missed (`--no-check` to only report).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psutil
import requests

from tpujob.local.apiserver import ApiServer, bundled_crd_paths, load_crds

ROOT = Path(__file__).resolve().parents[1]
JOBS = "/apis/tpujob.dev/v1alpha1/namespaces/{ns}/tputrainingjobs"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
CONFIGMAPS = "/api/v1/namespaces/{ns}/configmaps"
EVENTS = "/api/v1/namespaces/{ns}/events"
TINY = {"model": {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4,
                  "n_kv_heads": 2, "head_dim": 16, "mlp_dim": 128},
        "train": {"steps": 100, "global_batch": 16, "seq_len": 64}}
BENCH_AGENT = "tpujob-operator-scale-benchmark"
TARGETS = {"p99_create_to_jobset_s": 1.0, "all_reconciled_s": 60.0, "memory_per_job_kib": 50.0}


def job_body(name: str) -> dict:
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": name},
            "spec": {"slice": "v6e-16", "image": "trainer:1", "output": f"gs://bucket/{name}",
                     "trainer": {"config": TINY}}}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    """Raw HTTP to the server (its requests are told apart from the operator's by User-Agent)."""

    def __init__(self, url: str, namespace: str):
        self.url = url
        self.namespace = namespace
        self.session = requests.Session()
        self.session.headers["User-Agent"] = BENCH_AGENT
        adapter = requests.adapters.HTTPAdapter(pool_connections=16, pool_maxsize=16)
        self.session.mount("http://", adapter)

    def request(self, method: str, path: str, **kw) -> requests.Response:
        kw.setdefault("timeout", 60)
        return self.session.request(method, self.url + path.format(ns=self.namespace), **kw)

    def count(self, path: str, **params) -> int:
        r = self.request("GET", path, params=params)
        r.raise_for_status()
        return len(r.json()["items"])


class Watch(threading.Thread):
    """Watches a collection; records when each object first satisfies `seen(event)` (this
    process's monotonic clock, so it compares with the request times taken here)."""

    def __init__(self, client: Client, path: str, seen):
        super().__init__(name=f"watch {path}", daemon=True)
        self.client = client
        self.path = path
        self.seen = seen
        self.reached: dict[str, float] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        r = client.request("GET", path)
        r.raise_for_status()
        self.rv = r.json()["metadata"]["resourceVersion"]

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                r = self.client.request("GET", self.path, stream=True, timeout=(5, 30), params={
                    "watch": "1", "resourceVersion": self.rv, "allowWatchBookmarks": "true"})
                for line in r.iter_lines():
                    if self.stopped.is_set():
                        return
                    if not line:
                        continue
                    event = json.loads(line)
                    self.rv = event["object"]["metadata"].get("resourceVersion", self.rv)
                    if event["type"] != "BOOKMARK" and self.seen(event):
                        with self.lock:
                            self.reached.setdefault(event["object"]["metadata"]["name"],
                                                    time.monotonic())
            except requests.RequestException:
                time.sleep(0.1)

    def count(self) -> int:
        with self.lock:
            return len(self.reached)


def is_starting(event: dict) -> bool:
    return event["type"] != "DELETED" and \
        (event["object"].get("status") or {}).get("phase") == "Starting"


def is_added(event: dict) -> bool:
    return event["type"] == "ADDED"


class ResourceSampler(threading.Thread):
    """Samples the operator's resident memory; keeps the peak."""

    def __init__(self, process: psutil.Process, interval_s: float = 0.05):
        super().__init__(name="rss-sampler", daemon=True)
        self.process = process
        self.interval_s = interval_s
        self.peak = process.memory_info().rss
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return


def cpu_seconds(process: psutil.Process) -> float:
    t = process.cpu_times()
    return t.user + t.system


def operator_jobs_metric(port: int) -> float:
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return sum(float(m.group(1)) for m in
               re.finditer(r'^tpujob_operator_jobs\{phase="[^"]*"\} (\S+)$', text, re.M))


def wait_until(predicate, timeout: float, what: str, interval: float = 0.05) -> float:
    """Poll until true; returns the time (monotonic) it first was."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
    return time.monotonic()


def leftovers(client: Client, port: int) -> dict[str, float]:
    """What is left of the jobs: objects in the namespace, and jobs the operator still has."""
    return {"jobs": client.count(JOBS), "JobSets": client.count(JOBSETS),
            "ConfigMaps": client.count(CONFIGMAPS), "operator's jobs": operator_jobs_metric(port)}


def wait_gone(client: Client, port: int, timeout: float, what: str) -> float:
    def gone() -> bool:  # one object is enough to know (lists of 1,000 would load the server)
        return not any(client.count(path, limit=1) for path in (JOBS, JOBSETS, CONFIGMAPS)) \
            and operator_jobs_metric(port) == 0
    try:
        return wait_until(gone, timeout, what, 0.1)
    except TimeoutError as err:
        raise TimeoutError(f"{err}; left: {leftovers(client, port)}") from None


def warm_up(client: Client, port: int, timeout: float, n: int = 20) -> None:
    """A few jobs through their whole life first, so that what the operator loads or builds
    once (modules imported on first use, the slice catalog, connections) is not counted per
    job."""
    warm = Watch(client, JOBS, is_starting)
    warm.start()
    for i in range(n):
        client.request("POST", JOBS, json=job_body(f"warm-up-{i}")).raise_for_status()
    wait_until(lambda: warm.count() >= n, timeout, "the warm-up jobs to start")
    warm.stopped.set()
    client.request("DELETE", JOBS).raise_for_status()
    wait_gone(client, port, timeout, "the warm-up jobs to go")
    clear_events(client)


def clear_events(client: Client) -> None:
    """Events outlive their jobs (a cluster drops them after an hour); the next round starts
    without them, as the embedded API server's garbage collection scans every object."""
    client.request("DELETE", EVENTS).raise_for_status()


def wait_quiet(server: ApiServer, timeout: float, quiet_s: float = 1.0) -> float:
    """Wait until the server has had no request for `quiet_s` (the operator has nothing left
    to do); returns the time of the last request."""
    deadline = time.monotonic() + timeout
    while True:
        last = max((r.at for r in server.requests()[-1:]), default=0.0)
        if time.monotonic() - last >= quiet_s:
            return last
        if time.monotonic() > deadline:
            raise TimeoutError("the operator kept sending requests")
        time.sleep(0.2)


def start_operator(kubeconfig: Path, namespace: str, port: int, workers: int, log_path: Path
                   ) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "tpujob.cli.main", "operator", "--kubeconfig", str(kubeconfig),
           "--namespace", namespace, "--http-port", str(port), "--workers", str(workers)]
    log = open(log_path, "wb")  # noqa: SIM115 -- kept open for the process's life
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


@dataclass
class Bench:
    """The running pieces one burst needs."""

    server: ApiServer
    client: Client
    port: int               # the operator's /metrics
    process: psutil.Process  # the operator
    timeout: float


def burst(b: Bench, n: int, prefix: str) -> dict:
    """Create n jobs at once, follow them to Starting, then delete them all; the figures."""
    client, server, process = b.client, b.server, b.process
    time.sleep(6.0)  # let the operator settle before the baseline
    rss_before = process.memory_info().rss
    cpu_before = cpu_seconds(process)
    own_cpu_before = cpu_seconds(psutil.Process())
    server.reset_requests()
    watch = Watch(client, JOBS, is_starting)
    jobset_watch = Watch(client, JOBSETS, is_added)
    watch.start()
    jobset_watch.start()
    sampler = ResourceSampler(process)
    sampler.start()
    names = [f"{prefix}-{i:04d}" for i in range(n)]
    sent: dict[str, float] = {}

    def create(name: str) -> int:
        sent[name] = time.monotonic()
        return client.request("POST", JOBS, json=job_body(name)).status_code
    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(create, names))
    t_created = time.monotonic()
    if set(codes) != {201}:
        raise RuntimeError(f"job creation answered {Counter(codes)}")
    t_all = wait_until(lambda: watch.count() >= n, b.timeout, f"all {n} jobs to reach Starting")
    wait_until(lambda: jobset_watch.count() >= n, 10, "every JobSet to be seen")
    t_quiet = wait_quiet(server, b.timeout)
    cpu_burst = cpu_seconds(process) - cpu_before
    own_cpu = cpu_seconds(psutil.Process()) - own_cpu_before
    rss_settled = process.memory_info().rss
    sampler.stopped.set()
    sampler.join()
    watch.stopped.set()
    jobset_watch.stopped.set()
    latencies = [jobset_watch.reached[k] - sent[k] for k in names]
    burst_calls = operator_calls(server)

    server.reset_requests()
    t_delete = time.monotonic()
    client.request("DELETE", JOBS).raise_for_status()
    t_gone = wait_gone(client, b.port, b.timeout, "jobs, JobSets and ConfigMaps to go")
    wait_quiet(server, b.timeout)
    cleanup_calls = operator_calls(server)
    clear_events(client)
    return {
        "create_burst_s": t_created - t0,
        "p50_create_to_jobset_s": percentile(latencies, 50),
        "p99_create_to_jobset_s": percentile(latencies, 99),
        "max_create_to_jobset_s": max(latencies),
        "all_reconciled_s": t_all - t0,
        "last_request_s": t_quiet - t0,
        "requests_per_job": {k: v / n for k, v in sorted(burst_calls.items())},
        "requests_per_job_total": sum(burst_calls.values()) / n,
        "cleanup_requests": dict(sorted(cleanup_calls.items())),
        "operator_cpu_s": cpu_burst,
        "operator_cpu_ms_per_job": 1e3 * cpu_burst / n,
        "server_and_client_cpu_s": own_cpu,
        "rss_before_mib": rss_before / 2**20,
        "memory_per_job_kib": (sampler.peak - rss_before) / n / 1024,
        "settled_memory_per_job_kib": (rss_settled - rss_before) / n / 1024,
        "rss_after_cleanup_mib": process.memory_info().rss / 2**20,
        "cleanup_s": t_gone - t_delete,
    }


def operator_calls(server: ApiServer) -> Counter[str]:
    """The operator's requests since the last reset, by verb and resource (its long-running
    watches aside)."""
    return Counter(f"{r.verb} {r.resource}" for r in server.requests()
                   if r.is_resource and r.user_agent != BENCH_AGENT and r.verb != "watch")


def run(n: int, workers: int, timeout: float, rounds: int) -> list[dict]:
    crds = load_crds(bundled_crd_paths() + [ROOT / "manifests" / "crd.yaml"])
    with tempfile.TemporaryDirectory() as tmp, \
            ApiServer(crds=crds, request_log_size=max(100_000, 40 * n),
                      watch_history=max(2000, 10 * n)) as server:
        kubeconfig = server.write_kubeconfig(Path(tmp) / "kubeconfig")
        namespace = f"scale-{secrets.token_hex(3)}"
        client = Client(server.url, namespace)
        client.request("POST", "/api/v1/namespaces", json={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        ).raise_for_status()
        port = free_port()
        log_path = Path(tmp) / "operator.log"
        proc = start_operator(kubeconfig, namespace, port, workers, log_path)
        try:
            def ready() -> bool:
                if proc.poll() is not None:
                    raise RuntimeError("the operator exited:\n" + log_path.read_text()[-4000:])
                try:
                    return requests.get(f"http://127.0.0.1:{port}/readyz", timeout=1).ok
                except requests.RequestException:
                    return False
            wait_until(ready, 60, "the operator to be ready", 0.1)
            warm_up(client, port, timeout)
            bench = Bench(server, client, port, psutil.Process(proc.pid), timeout)
            return [burst(bench, n, f"round{i + 1}") for i in range(rounds)]
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
            if proc.returncode not in (0, -15, None):
                print(log_path.read_text()[-4000:], file=sys.stderr)


def report(n: int, workers: int, rounds: list[dict]) -> str:
    def row(what: str, fmt) -> str:
        return f"| {what} | " + " | ".join(fmt(r) for r in rounds) + " |"

    def calls(counts: dict[str, float], per: float) -> str:
        return ", ".join(f"{k} {v / per:.2f}" for k, v in counts.items()) or "none"
    head = f"| {n} jobs, {workers} workers | " + " | ".join(
        f"round {i + 1}" for i in range(len(rounds))) + " |"
    lines = [head, "|---|" + "---|" * len(rounds), *[
        row("jobs created (8 client threads)", lambda r: f"{r['create_burst_s']:.2f} s"),
        row("create -> JobSet p50 / p99 / max", lambda r: (
            f"{r['p50_create_to_jobset_s'] * 1e3:.0f} / {r['p99_create_to_jobset_s'] * 1e3:.0f} "
            f"/ {r['max_create_to_jobset_s'] * 1e3:.0f} ms")),
        row("all jobs Starting (from the first create)",
            lambda r: f"{r['all_reconciled_s']:.2f} s"),
        row("the operator's last request", lambda r: f"{r['last_request_s']:.2f} s"),
        row("operator API requests per job", lambda r: (
            f"{r['requests_per_job_total']:.2f}: {calls(r['requests_per_job'], 1)}")),
        row("operator CPU", lambda r: (
            f"{r['operator_cpu_s']:.2f} s ({r['operator_cpu_ms_per_job']:.1f} ms per job)")),
        row("API server and this client, CPU", lambda r: f"{r['server_and_client_cpu_s']:.2f} s"),
        row("operator RSS growth per job, peak / settled", lambda r: (
            f"{r['memory_per_job_kib']:.1f} / {r['settled_memory_per_job_kib']:.1f} KiB "
            f"(from {r['rss_before_mib']:.0f} MiB)")),
        row("cleanup: deletecollection -> all gone", lambda r: f"{r['cleanup_s']:.2f} s"),
        row("operator requests during cleanup", lambda r: calls(r["cleanup_requests"], 1)),
        row("operator RSS after cleanup", lambda r: f"{r['rss_after_cleanup_mib']:.0f} MiB"),
    ]]
    return "\n".join(lines)


def missed_targets(n: int, r: dict) -> list[str]:
    """Against the first round (later rounds show whether memory is reused)."""
    missed = []
    if n <= 100 and r["p99_create_to_jobset_s"] >= TARGETS["p99_create_to_jobset_s"]:
        missed.append(f"p99 create -> JobSet {r['p99_create_to_jobset_s']:.2f} s >= 1 s")
    if r["all_reconciled_s"] >= TARGETS["all_reconciled_s"]:
        missed.append(f"all reconciled in {r['all_reconciled_s']:.1f} s >= 60 s")
    if r["memory_per_job_kib"] >= TARGETS["memory_per_job_kib"]:
        missed.append(f"memory per job {r['memory_per_job_kib']:.1f} KiB >= 50 KiB")
    return missed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100, help="jobs in the burst (default 100)")
    parser.add_argument("--rounds", type=int, default=1, help="bursts one after the other, "
                        "each deleted before the next (default 1; 2 shows whether the "
                        "operator's memory is reused)")
    parser.add_argument("--workers", type=int, default=4,
                        help="the operator's workers (default 4, its own default)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="give up after this many seconds per phase")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--no-check", action="store_true", help="exit 0 even if a target is "
                        "missed")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    rounds = run(args.jobs, args.workers, args.timeout, args.rounds)
    load_after = os.getloadavg()[0]
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    print(f"machine: {machine}; load average (1 min) before: {load_before:.2f}, after: "
          f"{load_after:.2f}")
    print(report(args.jobs, args.workers, rounds))
    if args.json:
        args.json.write_text(json.dumps({
            "jobs": args.jobs, "workers": args.workers, "machine": machine,
            "load_average_before": load_before, "load_average_after": load_after,
            "rounds": rounds}, indent=2) + "\n")
    missed = missed_targets(args.jobs, rounds[0])
    for m in missed:
        print(f"target missed: {m}")
    return 1 if missed and not args.no_check else 0


if __name__ == "__main__":
    sys.exit(main())
