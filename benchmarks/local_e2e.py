"""How fast local mode reacts: from a job's creation (what `kubectl apply` sends) to its first
trainer process, and from a host's death (SIGKILL) to training resumed (the first step a new
process reports after the JobSet's restart).

Runs the quickstart example (manifests/examples/quickstart.yaml: a v6e-8, 2 hosts, as 2
processes of 1 CPU device) through the same `LocalCluster` as `tpujob local run`, `--repeat`
times. Each run: create the job; note the first trainer process, Running, the first step; once
the first checkpoint is complete on the emulated gs://, SIGKILL host 1's process; note the
restart's first new process and its first step; wait for Succeeded.

    .venv/bin/python benchmarks/local_e2e.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from timing_table import print_run, print_timing_table
from tpujob.local.session import LocalCluster, LocalSettings
from tpujob_trainer.gcs_env import set_gcs_emulator_env

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "manifests" / "examples" / "quickstart.yaml"
POLL_S = 0.01


def wait(predicate, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:.0f} s")
        time.sleep(POLL_S)


def first_step_time(log: Path) -> float | None:
    """The Unix time of the first step line in a trainer log."""
    if not log.exists():
        return None
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith('{"event": "step"'):
            return json.loads(line)["time"]
    return None


def host_logs(cluster: LocalCluster, name: str, host: int) -> list[Path]:
    pods = cluster.workdir / "pods" / "default"
    return sorted(pods.glob(f"{name}-slice-0-{host}-*/containers/trainer/*.log"),
                  key=lambda p: p.stat().st_mtime)


def job_processes(cluster: LocalCluster, name: str) -> list[dict[str, Any]]:
    return [p for p in cluster.executor.processes() if p["pod"].startswith(f"{name}-slice-")]


def measure(cluster: LocalCluster, name: str) -> dict[str, float]:
    from tpujob_trainer.checkpoint import StepDirs

    job = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    job["metadata"]["name"] = name
    job["spec"]["output"] = f"gs://tpujob-bench/{name}"
    phase = lambda: ((cluster.job("default", name) or {}).get("status") or {}).get("phase")  # noqa: E731

    created = time.time()
    cluster.apply([job])
    first = wait(lambda: job_processes(cluster, name), 60, "trainer process")
    t_process = time.time()
    wait(lambda: phase() == "Running", 60, "Running phase")
    t_running = time.time()
    t_step = wait(lambda: (logs := host_logs(cluster, name, 0)) and first_step_time(logs[0]),
                  180, "first step")

    checkpoints = StepDirs(f"{job['spec']['output']}/checkpoints")
    wait(lambda: checkpoints.complete_steps(quiet=True), 180, "complete checkpoint")
    [host1] = [p for p in first if "-slice-0-1-" in p["pod"]]
    old, old_logs = {p["pid"] for p in first}, set(host_logs(cluster, name, 0))
    os.kill(host1["pid"], signal.SIGKILL)
    killed = time.time()
    wait(lambda: len([p for p in job_processes(cluster, name) if p["pid"] not in old]) == 2,
         120, "restarted processes")
    t_restarted = time.time()
    t_resumed = wait(lambda: (new := set(host_logs(cluster, name, 0)) - old_logs)
                     and first_step_time(new.pop()), 180, "first step after the restart")
    wait(lambda: phase() in ("Succeeded", "Failed"), 300, "the end")
    status = cluster.job("default", name)["status"]
    if status["phase"] != "Succeeded" or status["restarts"] != 1:
        raise RuntimeError(f"{name} ended {status['phase']} after {status['restarts']} restarts")
    return {"apply_to_process": t_process - created, "apply_to_running": t_running - created,
            "apply_to_first_step": t_step - created, "kill_to_processes": t_restarted - killed,
            "kill_to_resumed_step": t_resumed - killed}


LABELS = {
    "apply_to_process": "job created -> first trainer process started",
    "apply_to_running": "job created -> phase Running",
    "apply_to_first_step": "job created -> first training step",
    "kill_to_processes": "host SIGKILLed -> both hosts' new processes started",
    "kill_to_resumed_step": "host SIGKILLed -> first step after the resume",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()
    runs = []
    with tempfile.TemporaryDirectory(prefix="tpujob-bench-") as tmp, \
            LocalCluster(tmp, LocalSettings(cpu_devices_per_process=1)) as cluster:
        set_gcs_emulator_env(cluster.gcs.url)  # this process reads the checkpoints too
        for i in range(args.repeat):
            runs.append(measure(cluster, f"bench-{i}"))
            print_run(i, runs[-1])
    print_timing_table(runs, LABELS, load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
