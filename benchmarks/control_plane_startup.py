"""Local mode on its two control planes, side by side: how long `LocalCluster.start()` takes
(what `tpujob local up` waits for before it prints its kubeconfig), and how long a job then takes
from `kubectl apply` to phase Running and to Succeeded.

    .venv/bin/python benchmarks/control_plane_startup.py --rounds 3

Rounds alternate embedded, real, embedded, real, ... in one process, so both see the same
machine load (recorded with each round). The job is a stand-in v6e-8 (2 hosts) that sleeps 3 s and
exits, so that the figures are the control plane's and the operator's, not the trainer's. The real
control plane must be built first (`tpujob local build-control-plane`); its build is not timed
here (docs/local-control-plane.md has the build's cost).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tpujob.local.session import LocalCluster, LocalSettings  # noqa: E402

JOB = {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
       "metadata": {"name": "startup", "namespace": "default"},
       "spec": {"slice": "v6e-8", "image": "stand-in:1", "output": "gs://tpujob-bench/startup",
                "trainer": {"command": ["python", "-c", "import time; time.sleep(3)"]},
                "restartPolicy": {"maxRestarts": 0}}}


def one_round(plane: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as workdir:
        t0 = time.monotonic()
        cluster = LocalCluster(workdir, LocalSettings(control_plane=plane)).start()
        try:
            started = time.monotonic() - t0
            t1 = time.monotonic()
            cluster.apply([JOB])
            phases: dict[str, float] = {}
            while "Succeeded" not in phases and "Failed" not in phases:
                phase = ((cluster.job("default", "startup") or {}).get("status") or {}).get(
                    "phase")
                if phase and phase not in phases:
                    phases[phase] = time.monotonic() - t1
                if time.monotonic() - t1 > 300:
                    raise TimeoutError(f"{plane}: the job did not end ({phases})")
                time.sleep(0.05)
            return {"start": started, "running": phases.get("Running", float("nan")),
                    "done": phases.get("Succeeded", phases.get("Failed")),
                    "ok": "Succeeded" in phases, "load": os.getloadavg()[0]}
        finally:
            cluster.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    results: dict[str, list[dict[str, float]]] = {"embedded": [], "real": []}
    print("round  plane     start s  apply->Running s  apply->Succeeded s  load(1m)")
    for i in range(args.rounds):
        for plane in ("embedded", "real"):
            r = one_round(plane)
            results[plane].append(r)
            print(f"{i + 1:5}  {plane:8}  {r['start']:7.1f}  {r['running']:16.1f}  "
                  f"{r['done']:18.1f}  {r['load']:8.1f}{'' if r['ok'] else '  FAILED'}",
                  flush=True)
    print("\nmedians")
    for plane, rows in results.items():
        med = {k: statistics.median(r[k] for r in rows) for k in ("start", "running", "done")}
        print(f"  {plane:8}  start {med['start']:.1f} s, apply->Running {med['running']:.1f} s, "
              f"apply->Succeeded {med['done']:.1f} s")
    return 0 if all(r["ok"] for rows in results.values() for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
