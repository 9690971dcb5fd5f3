"""From a change Kueue makes to a job's Workload to the job's status saying so: the latency of
status.queue, on local mode's real control plane (real Kueue v0.17, the operator as `tpujob
local up` runs it, its default settings).

    .venv/bin/python benchmarks/queue_latency.py --rounds 5

Two watches run side by side: one on Kueue's Workloads, one on the TpuTrainingJobs. Each time
a Workload reaches a new (state, reason) -- created and waiting, admitted, preempted, admitted
again -- the time its watch event arrives is noted, and the latency is the time until the job's
watch shows the same state and reason in status.queue. Each round: a low-priority job is
admitted, a second one waits for quota, a high-priority job preempts the first and ends, and the
first is admitted again. The real control plane must be built first (`tpujob local
build-control-plane`). Timing lives here, not in the tests (tests/e2e/test_kueue_queues.py
checks the same transitions for what they say).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tpujob.controller.kueue_workload import read_workload  # noqa: E402
from tpujob.local.controlplane.cluster import TPUJOBS  # noqa: E402
from tpujob.local.executor.client import ApiError, KubeApi, Resource  # noqa: E402
from tpujob.local.session import LocalCluster, LocalSettings  # noqa: E402

KUEUE = "kueue.x-k8s.io"
WORKLOADS = Resource(KUEUE, "v1beta2", "workloads")
NS = "default"
# Names of its own: local mode's real plane already has xpk's queue, flavors and priorities.
SETUP = [
    (Resource(KUEUE, "v1beta2", "resourceflavors"), None, {
        "kind": "ResourceFlavor", "metadata": {"name": "bench-v6e-2x4"}, "spec": {"nodeLabels": {
            "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
            "cloud.google.com/gke-tpu-topology": "2x4"}}}),
    (Resource(KUEUE, "v1beta2", "clusterqueues"), None, {
        "kind": "ClusterQueue", "metadata": {"name": "bench"}, "spec": {
            "namespaceSelector": {}, "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{"coveredResources": ["google.com/tpu"], "flavors": [{
                "name": "bench-v6e-2x4", "resources": [{"name": "google.com/tpu",
                                                  "nominalQuota": 8}]}]}]}}),
    (Resource(KUEUE, "v1beta2", "localqueues"), NS, {
        "kind": "LocalQueue", "metadata": {"name": "bench", "namespace": NS},
        "spec": {"clusterQueue": "bench"}}),
    (Resource(KUEUE, "v1beta2", "workloadpriorityclasses"), None, {
        "kind": "WorkloadPriorityClass", "metadata": {"name": "bench-low"}, "value": 100}),
    (Resource(KUEUE, "v1beta2", "workloadpriorityclasses"), None, {
        "kind": "WorkloadPriorityClass", "metadata": {"name": "bench-high"}, "value": 1000}),
]


def job(name: str, priority: str, seconds: float) -> dict[str, Any]:
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"slice": "v6e-8", "image": "stand-in:1", "output": f"gs://bench/{name}",
                     "trainer": {"command": ["python", "-c", f"import time; time.sleep({seconds})"]},
                     "restartPolicy": {"maxRestarts": 0},
                     "scheduling": {"queueName": "bench", "priority": priority}}}


class Recorder:
    """(job, state, reason) -> when the Workload's watch and the job's watch first showed it."""

    def __init__(self) -> None:
        self.kueue: dict[tuple[str, str, str], float] = {}
        self.status: dict[tuple[str, str, str], float] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def watch(self, api: KubeApi, resource: Resource, see) -> None:
        while not self.stop.is_set():
            try:
                items, rv = api.list(resource, NS)
                for item in items:
                    see(item)
                for event in api.watch(resource, NS, rv, timeout_s=5):
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        see(event["object"])
                    if self.stop.is_set():
                        return
            except (ApiError, OSError, ValueError):
                time.sleep(0.2)

    def see_workload(self, obj: dict[str, Any]) -> None:
        owner = next((r["name"] for r in obj["metadata"].get("ownerReferences") or []
                      if r.get("kind") == "JobSet"), None)
        if owner is None:
            return
        r = read_workload(obj)
        self._note(self.kueue, (owner, r.state.value, r.reason.value))

    def see_job(self, obj: dict[str, Any]) -> None:
        queue = (obj.get("status") or {}).get("queue") or {}
        if queue.get("workload"):
            self._note(self.status, (obj["metadata"]["name"], queue["state"], queue["reason"]))

    def _note(self, table: dict, key: tuple[str, str, str]) -> None:
        now = time.monotonic()
        with self.lock:
            table.setdefault(key, now)

    def missed(self) -> list[tuple[str, str, str]]:
        """Workload states the job's status never showed (Kueue moved on within a pass)."""
        with self.lock:
            return sorted(k for k in self.kueue if k not in self.status)

    def latencies(self) -> list[tuple[tuple[str, str, str], float]]:
        with self.lock:
            return sorted(((k, self.status[k] - t) for k, t in self.kueue.items()
                           if k in self.status), key=lambda kv: kv[1])


def wait_phase(cluster: LocalCluster, name: str, *phases: str, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ((cluster.job(NS, name) or {}).get("status") or {}).get("phase") in phases:
            return
        time.sleep(0.1)
    raise TimeoutError(f"{name} did not reach {phases}")


def one_round(cluster: LocalCluster, i: int) -> None:
    low, waiting, high = f"low-{i}", f"wait-{i}", f"high-{i}"
    cluster.apply([job(low, "bench-low", 600)])
    wait_phase(cluster, low, "Running")
    cluster.apply([job(waiting, "bench-low", 600)])
    time.sleep(3)   # let it wait: its WaitingForQuota is one of the transitions measured
    cluster.apply([job(high, "bench-high", 3)])
    wait_phase(cluster, high, "Succeeded", "Failed")
    wait_phase(cluster, low, "Running", "Starting")
    for name in (low, waiting, high):
        cluster.delete_job(NS, name)
    api = cluster.api
    end = time.monotonic() + 60
    while api.list(WORKLOADS, NS)[0] and time.monotonic() < end:
        time.sleep(0.2)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        cluster = LocalCluster(workdir, LocalSettings(control_plane="real")).start()
        try:
            api = cluster.api
            for resource, ns, body in SETUP:
                api.create(resource, ns, {"apiVersion": f"{KUEUE}/v1beta2", **body})
            time.sleep(2)   # the ClusterQueue becomes active
            rec = Recorder()
            threads = [threading.Thread(target=rec.watch, args=(api.session_copy(), WORKLOADS,
                                                                  rec.see_workload), daemon=True),
                       threading.Thread(target=rec.watch, args=(api.session_copy(), TPUJOBS,
                                                                  rec.see_job), daemon=True)]
            for t in threads:
                t.start()
            loads = []
            for i in range(args.rounds):
                one_round(cluster, i)
                loads.append(os.getloadavg()[0])
            time.sleep(2)
            rec.stop.set()
            rows, missed = rec.latencies(), rec.missed()
        finally:
            cluster.stop()
    print("| job | state | reason | Workload event -> status.queue, s |\n|---|---|---|---|")
    for (name, state, reason), seconds in rows:
        print(f"| {name} | {state} | {reason} | {seconds:.3f} |")
    values = [s for _, s in rows]
    print(f"\n{len(values)} transitions over {args.rounds} rounds; p50 {percentile(values, 0.5):.3f} s, "
          f"p99 {percentile(values, 0.99):.3f} s, max {max(values):.3f} s, "
          f"mean {statistics.mean(values):.3f} s; 1-minute load per round "
          f"{', '.join(f'{x:.1f}' for x in loads)}")
    print(f"Workload states the status never showed ({len(missed)}): "
          + (", ".join("/".join(k) for k in missed) or "none"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
