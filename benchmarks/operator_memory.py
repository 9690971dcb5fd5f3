"""Whether the operator's memory stays flat over many jobs, one after another: each created,
started, restarted once, then deleted, through the operator's own event handlers and
reconciler, against the embedded API server.

    .venv/bin/python benchmarks/operator_memory.py --jobs 2000   # the recorded size

A long-lived operator sees every job ever run in its namespaces; whatever it keeps per job and
never drops grows without bound. One cycle, as a cluster runs it:

- the job is created, comes in as a watch event (`Operator.on_job_event`), and is reconciled
  (`Operator._work`, the worker's call): ConfigMap and JobSet created;
- the JobSet reports every host ready and process 0's pod runs: the next reconcile looks up
  process 0 and reads its progress (phase Running);
- the JobSet restarts once (a new attempt, a new process 0): the next reconcile looks it up;
- the job is deleted and its DELETED event comes in; the JobSet and the pods go.

The API server and the operator run in this process, without kopf (its watches would only
deliver the same events; the operator's Events go out from its own thread, as in a cluster).
The server keeps no request log and a short watch history, so that what it holds stays the same
from one job to the next. After a warm-up (whatever is built once, and the server's watch
history filled), every `--every` jobs it records what the operator keeps per job (the entries of
each of its caches: where process 0 is, verdicts, refusals, jobs, JobSets, failures),
the memory Python has allocated and still holds in the whole process (tracemalloc, after a
garbage collection, once the queued Events are sent) and its resident memory (RSS, which the
allocator returns to the system only in part). Exits 1 when a cache still holds entries of
deleted jobs or the memory held grows by more than `--max-growth-kib` per 1,000 jobs from the
second record on (`--no-check` to only report). `--growth-sites N` prints the N source lines
whose held memory grew most between the second record and the last.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import secrets
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import psutil
import requests

from tpujob.controller.operator import Operator
from tpujob.controller.runner import load_api_config
from tpujob.controller.settings import OperatorSettings
from tpujob.controller.trainer_reports import ProgressReading
from tpujob.local.apiserver import ApiServer, bundled_crd_paths, load_crds

ROOT = Path(__file__).resolve().parents[1]
JOBS = "/apis/tpujob.dev/v1alpha1/namespaces/{ns}/tputrainingjobs"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
PODS = "/api/v1/namespaces/{ns}/pods"
EVENTS = "/api/v1/namespaces/{ns}/events"
TINY = {"model": {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4,
                  "n_kv_heads": 2, "head_dim": 16, "mlp_dim": 128},
        "train": {"steps": 100, "global_batch": 16, "seq_len": 64}}
READY = [{"name": "slice", "ready": 4, "succeeded": 0, "failed": 0, "active": 4,
          "suspended": 0}]


class Client:
    """Raw HTTP to the server, in the benchmark's namespace."""

    def __init__(self, url: str, namespace: str):
        self.url = url
        self.namespace = namespace
        self.session = requests.Session()

    def request(self, method: str, path: str, **kw) -> requests.Response:
        kw.setdefault("timeout", 60)
        r = self.session.request(method, self.url + path.format(ns=self.namespace), **kw)
        r.raise_for_status()
        return r

    def merge(self, path: str, body: dict) -> dict:
        return self.request("PATCH", path, json=body, headers={
            "Content-Type": "application/merge-patch+json"}).json()


def pod_body(jobset: str, attempt: int) -> dict:
    """Process 0's pod of a JobSet attempt, as the JobSet controller makes it."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{jobset}-slice-0-0-a{attempt}",
                         "labels": {"jobset.sigs.k8s.io/jobset-name": jobset,
                                    "jobset.sigs.k8s.io/job-index": "0",
                                    "jobset.sigs.k8s.io/restart-attempt": str(attempt)},
                         "annotations": {"batch.kubernetes.io/job-completion-index": "0"}},
            "spec": {"containers": [{"name": "trainer", "image": "trainer:1",
                                     "ports": [{"name": "metrics", "containerPort": 9431}]}]}}


class Cycle:
    """One job's life through the operator (see the module doc)."""

    def __init__(self, op: Operator, client: Client, loop: asyncio.AbstractEventLoop):
        self.op = op
        self.client = client
        self.loop = loop

    def reconcile(self, key: tuple[str, str]) -> None:
        self.loop.run_until_complete(self.op._work(key))

    def jobset_event(self, name: str, kind: str = "MODIFIED") -> None:
        jobset = self.client.request("GET", JOBSETS + f"/{name}").json()
        self.op.on_jobset_event({"type": kind, "object": jobset})

    def start_pod(self, name: str, attempt: int) -> None:
        pod = self.client.request("POST", PODS, json=pod_body(name, attempt)).json()
        self.client.merge(PODS + f"/{pod['metadata']['name']}/status",
                          {"status": {"phase": "Running", "podIP": "127.0.0.1"}})

    def run(self, name: str) -> str:
        """The job's phase after its restart was seen."""
        client, key = self.client, (self.client.namespace, name)
        job = client.request("POST", JOBS, json={
            "apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": name},
            "spec": {"slice": "v6e-16", "image": "trainer:1", "output": f"gs://bucket/{name}",
                     "trainer": {"config": TINY}}}).json()
        self.op.on_job_event({"type": "ADDED", "object": job})
        self.reconcile(key)                                    # children created
        client.merge(JOBSETS + f"/{name}/status", {"status": {"replicatedJobsStatus": READY}})
        self.start_pod(name, 0)
        self.jobset_event(name)
        self.reconcile(key)                                    # process 0 of attempt 0 read
        client.request("DELETE", PODS + f"/{name}-slice-0-0-a0")
        client.merge(JOBSETS + f"/{name}/status", {"status": {"restarts": 1}})
        self.start_pod(name, 1)
        self.jobset_event(name)
        self.reconcile(key)                                    # the restart seen
        self.reconcile(key)                                    # process 0 of attempt 1 read
        phase = (self.op.jobs[key].get("status") or {}).get("phase", "")
        self.jobset_event(name, "DELETED")
        job = client.request("GET", JOBS + f"/{name}").json()
        client.request("DELETE", JOBS + f"/{name}")   # its JobSet goes by owner reference
        client.request("DELETE", PODS + f"/{name}-slice-0-0-a1")
        self.op.on_job_event({"type": "DELETED", "object": job})
        return phase


def kept(op: Operator) -> dict[str, int]:
    """Entries of each of the operator's per-job caches."""
    r = op.reconciler
    return {"process 0": len(r._process_zero), "verdicts": len(r._verdicts),
            "refusals": len(r._refusals), "jobs": len(op.jobs), "JobSets": len(op.jobsets),
            "failures": len(op._failures)}


def held_kib(op: Operator) -> float:
    """Python memory allocated and still held, once the queued Events are sent."""
    deadline = time.monotonic() + 30
    while op.events.pending() and time.monotonic() < deadline:
        time.sleep(0.01)
    gc.collect()
    return tracemalloc.get_traced_memory()[0] / 1024


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares growth per job."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def growth_sites(first: tracemalloc.Snapshot, last: tracemalloc.Snapshot, top: int) -> list[str]:
    """The `top` source lines whose held memory grew most from `first` to `last`."""
    stats = last.compare_to(first, "lineno")
    return [f"{stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  {stat.traceback}"
            for stat in sorted(stats, key=lambda st: -st.size_diff)[:top]]


def run(jobs: int, every: int, warm_up: int,
        sites: int = 0) -> tuple[list[dict], list[str], list[str]]:
    crds = load_crds(bundled_crd_paths() + [ROOT / "manifests" / "crd.yaml"])
    with tempfile.TemporaryDirectory() as tmp, \
            ApiServer(crds=crds, request_log_size=0, watch_history=100) as server:
        namespace = f"memory-{secrets.token_hex(3)}"
        client = Client(server.url, namespace)
        client.request("POST", "/api/v1/namespaces", json={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        settings = OperatorSettings(http_port=None)
        op = Operator(settings, load_api_config(server.write_kubeconfig(
            Path(tmp) / "kubeconfig")), read_progress=lambda ip, port: ProgressReading(step=5))
        loop = asyncio.new_event_loop()
        cycle = Cycle(op, client, loop)
        phases = set()
        op.events.start()
        tracemalloc.start()
        try:
            for i in range(warm_up):  # what is built once is not counted per job
                phases.add(cycle.run(f"warm-{i}"))
            rows, snapshots = [], []
            t0 = time.monotonic()
            for i in range(jobs + 1):
                if i % every == 0:
                    client.request("DELETE", EVENTS)  # the server's, not the operator's
                    rows.append({"jobs": i, "kept": kept(op), "held_kib": held_kib(op),
                                 "rss_mib": psutil.Process().memory_info().rss / 2**20,
                                 "seconds": time.monotonic() - t0})
                    if sites and len(rows) in (2, jobs // every + 1):  # the second, the last
                        snapshots.append(tracemalloc.take_snapshot())
                if i < jobs:
                    phases.add(cycle.run(f"job-{i:05d}"))
            tracemalloc.stop()
            grown = growth_sites(snapshots[0], snapshots[-1], sites) if len(snapshots) > 1 else []
        finally:
            op.events.stop()
            loop.close()
        return rows, sorted(phases), grown


def report(rows: list[dict]) -> str:
    names = list(rows[0]["kept"])
    lines = ["| jobs run | " + " | ".join(f"{n} kept" for n in names)
             + " | Python memory held | RSS | seconds |",
             "|---|" + "---|" * (len(names) + 3)]
    for r in rows:
        lines.append(f"| {r['jobs']} | " + " | ".join(str(r["kept"][n]) for n in names)
                     + f" | {r['held_kib']:.0f} KiB | {r['rss_mib']:.0f} MiB"
                     f" | {r['seconds']:.0f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs run one after another "
                        "(default 1000)")
    parser.add_argument("--every", type=int, default=0,
                        help="record every this many jobs (default: 10 records)")
    parser.add_argument("--warm-up", type=int, default=100,
                        help="jobs run before recording (default 100)")
    parser.add_argument("--max-growth-kib", type=float, default=50.0,
                        help="the most the memory held may grow per 1,000 jobs (default 50)")
    parser.add_argument("--no-check", action="store_true", help="exit 0 even if it grows")
    parser.add_argument("--growth-sites", type=int, default=0, metavar="N",
                        help="also print the N source lines whose held memory grew most from "
                        "the second record to the last (tracemalloc snapshots)")
    args = parser.parse_args()
    every = args.every or max(1, args.jobs // 10)
    load_before = os.getloadavg()[0]
    rows, phases, grown = run(args.jobs, every, args.warm_up, args.growth_sites)
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    print(f"machine: {machine}; load average (1 min) before: {load_before:.2f}, after: "
          f"{os.getloadavg()[0]:.2f}; phases seen after the restart: {', '.join(phases)}")
    print(report(rows))
    # From the second record on: up to it, memory still grows once (buffers and pools that
    # reach their size), per job or not.
    settled = rows[1:] if len(rows) > 2 else rows
    growth = 1000 * slope([(r["jobs"], r["held_kib"]) for r in settled])
    rss_growth = 1000 * slope([(r["jobs"], r["rss_mib"] * 1024) for r in settled])
    print(f"growth per 1,000 jobs (least squares from {settled[0]['jobs']} jobs on): Python "
          f"memory held {growth:.1f} KiB, RSS {rss_growth:.0f} KiB")
    if grown:
        print(f"where the held memory grew most, from {rows[1]['jobs']} to {rows[-1]['jobs']} "
              "jobs:")
        print("\n".join(grown))
    problems = [f"{name}: {n} entries after every job was deleted"
                for name, n in rows[-1]["kept"].items() if n]
    if growth > args.max_growth_kib:
        problems.append(f"the memory held grows {growth:.1f} KiB per 1,000 jobs "
                        f"(> {args.max_growth_kib:g})")
    for p in problems:
        print(f"target missed: {p}")
    return 1 if problems and not args.no_check else 0


if __name__ == "__main__":
    sys.exit(main())
