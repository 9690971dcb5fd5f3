"""Slow-host detection on real local-mode runs: `--healthy` (20) runs of a 2-host job with no
fault, and `--slowed` (5) runs of the same job with process 1 slowed by `--slowdown` (0.2:
every step of the job about 20% longer, `TPUJOB_FAULT_STEP_SLOWDOWN`). The job is
manifests/examples/slow-host.yaml (the quickstart's model, 2 hosts as 2 processes of one CPU
device) with `--steps` steps, run through the same `LocalCluster` as `tpujob local run`
(the operator reading every host's log every 2 s).

For each run, from the job's status polled every 0.2 s: whether any host was ever flagged
(`status.hosts.slowHost`), which, the step of the job when one first was (detection latency in
steps, read lag included), and the lowest score any host had while the job ran.

    .venv/bin/python benchmarks/stragglers.py [--healthy 20] [--slowed 5] [--steps 150]
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from local_e2e import ROOT, wait
from tpujob.local.session import LocalCluster, LocalSettings
from tpujob_trainer.gcs_env import set_gcs_emulator_env

EXAMPLE = ROOT / "manifests" / "examples" / "slow-host.yaml"
SLOW = "slice-0/host-1"


def job(name: str, steps: int, slowdown: float | None) -> dict[str, Any]:
    doc = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    doc["metadata"]["name"] = name
    spec = doc["spec"]
    spec["output"] = f"gs://tpujob-bench/{name}"
    spec["trainer"]["config"]["train"]["steps"] = steps
    spec["trainer"]["config"]["checkpoint"]["every"] = steps
    env = [e for e in spec["env"] if not e["name"].startswith("TPUJOB_FAULT_")]
    if slowdown:
        env += [{"name": "TPUJOB_FAULT_STEP_SLOWDOWN", "value": str(slowdown)},
                {"name": "TPUJOB_FAULT_PROCESSES", "value": "1"}]
    spec["env"] = env
    return doc


def run(cluster: LocalCluster, name: str, steps: int, slowdown: float | None) -> dict[str, Any]:
    cluster.apply([job(name, steps, slowdown)])
    flagged: set[str] = set()
    first_step, lowest, looks = None, 1.0, 0

    def look() -> str | None:
        nonlocal first_step, lowest, looks
        status = (cluster.job("default", name) or {}).get("status") or {}
        hosts = status.get("hosts") or {}
        if hosts.get("scored"):
            looks += 1
            lowest = min([lowest] + [h["score"] for h in hosts.get("slowest") or []])
        if hosts.get("slowHost"):
            flagged.update(h["host"] for h in hosts["slowest"] if h.get("flagged"))
            if first_step is None:
                first_step = (status.get("progress") or {}).get("step")
        phase = status.get("phase")
        if phase in ("Succeeded", "Failed"):
            return phase
        time.sleep(0.2)
        return None

    phase = wait(look, 600, f"{name} to finish")
    failure = (((cluster.job("default", name) or {}).get("status") or {}).get("failure")
               or {}).get("message")
    cluster.delete_job("default", name)
    return {"name": name, "phase": phase, "slowed": bool(slowdown), "flagged": sorted(flagged),
            "first_step": first_step, "lowest": round(lowest, 3), "looks": looks,
            **({"failure": failure[:600]} if failure else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--healthy", type=int, default=20)
    parser.add_argument("--slowed", type=int, default=5)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--slowdown", type=float, default=0.2)
    args = parser.parse_args()
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f} at the start; python {sys.version.split()[0]}")
    results = []
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(Path(tmp), LocalSettings(cpu_devices_per_process=1)) as cluster:
        set_gcs_emulator_env(cluster.gcs.url)
        plan = [None] * args.healthy + [args.slowdown] * args.slowed
        for i, slowdown in enumerate(plan):
            r = run(cluster, f"{'slow' if slowdown else 'even'}-{i}", args.steps, slowdown)
            r["load"] = round(os.getloadavg()[0], 1)
            results.append(r)
            print(r, flush=True)
    healthy = [r for r in results if not r["slowed"]]
    slowed = [r for r in results if r["slowed"]]
    print(f"\nhealthy runs: {len(healthy)}, with a host flagged: "
          f"{sum(bool(r['flagged']) for r in healthy)}, lowest score "
          f"{min((r['lowest'] for r in healthy), default=None)}")
    print(f"slowed runs: {len(slowed)}, {SLOW} named in "
          f"{sum(r['flagged'] == [SLOW] for r in slowed)}, another host named in "
          f"{sum(bool(set(r['flagged']) - {SLOW}) for r in slowed)}, first named at steps "
          f"{[r['first_step'] for r in slowed]}")


if __name__ == "__main__":
    main()
