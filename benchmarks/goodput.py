"""Goodput of local-mode jobs of at least `--minutes` (3) each: (a) no faults, (b) host 1
SIGKILLed every `--kill-every` (120) seconds, with the compilation cache and node-local
checkpoints on (`spec.localCheckpoints`, medium Node, every `--local-checkpoint-seconds` of
training), (c) the same kills with both off.
For each: the product's figure (`status.goodput.percent`) against one computed independently
from the trainer processes' own logs, the lost steps both ways, and the time from each kill to
the first new step.

The independent figure: productive = the sum of `step_time_s` (time between step completions,
as host 0 logged it) over the steps that were kept (a step a later start computed again is not
kept), less the blocking part of the checkpoint saves made between them (`blocking_s` of the
`checkpoint` and `local_checkpoint` lines); wall = from the moment the benchmark created the job until it saw it Succeeded, less the
time the status says it was queued. Lost steps = for each start but the last, its last logged
step minus the step the next start resumed from.

The quickstart model (manifests/examples/quickstart.yaml, 2 hosts as 2 processes of one CPU
device) with `--steps` chosen from a short probe so that an undisturbed run takes `--minutes`.

    .venv/bin/python benchmarks/goodput.py [--minutes 3] [--kill-every 120] [--scenarios abc]
        [--logs DIR]

`--logs DIR` keeps every start's log of both hosts (DIR/<job>-host<h>-<n>.log), to see where the
badput went.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from local_e2e import EXAMPLE, ROOT, host_logs, job_processes, wait
from tpujob.local.session import LocalCluster, LocalSettings
from tpujob_trainer.gcs_env import set_gcs_emulator_env

sys.path.insert(0, str(ROOT))
from tests.e2e.conftest import json_lines  # noqa: E402

# key: (label, kill host 1?, trainer config overrides, node-local checkpoints?)
SCENARIOS = {
    "a": ("no faults", False, [], True),
    "b": ("host SIGKILLed every kill-every s; compile cache and local checkpoints on", True, [],
          True),
    "c": ("same kills, compile cache and local checkpoints off", True,
          ["compile_cache.enabled=false"], False),
}


events = json_lines  # the trainer's JSON lines in a log, as the end-to-end tests read them


def independent(logs: list[list[dict[str, Any]]]) -> dict[str, float]:
    """Productive seconds and lost steps from host 0's logs, one per start."""
    starts = []
    for evs in sorted((evs for evs in logs if evs), key=lambda evs: evs[0]["time"]):
        steps = {e["step"]: e["step_time_s"] for e in evs if e["event"] == "step"}
        # A save's blocking part falls inside the next step's interval: not productive.
        for e in evs:
            if e["event"] in ("checkpoint", "local_checkpoint") and e["step"] + 1 in steps:
                steps[e["step"] + 1] -= e.get("blocking_s") or 0.0
        resumed = next((e["step"] for e in evs
                        if e["event"] == "memory" and e.get("phase") == "after_restore"), 0)
        starts.append((resumed, steps))
    productive, lost = 0.0, 0
    for i, (_, steps) in enumerate(starts):
        next_resume = starts[i + 1][0] if i + 1 < len(starts) else None
        kept = {s: t for s, t in steps.items() if next_resume is None or s <= next_resume}
        productive += sum(kept.values())
        if next_resume is not None and steps:
            lost += max(0, max(steps) - next_resume)
    return {"productive_s": productive, "lost_steps": lost}


def first_step_after(log: Path, since: float) -> float | None:
    for e in events(log):
        if e["event"] == "step" and e["time"] >= since:
            return e["time"]
    return None


def run_scenario(cluster: LocalCluster, name: str, steps: int, every: int, kill: bool,
                 kill_every: float, extra: list[str], local: dict | None,
                 keep_logs: Path | None = None) -> dict[str, Any]:
    job = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    job["metadata"]["name"] = name
    job["spec"]["output"] = f"gs://tpujob-bench/{name}"
    config = job["spec"]["trainer"]["config"]
    config["train"]["steps"] = steps
    config["checkpoint"]["every"] = every
    config["metrics"] = {"measure_peak": False, "memory_every": 1000000}
    for override in extra:
        key, value = override.split("=", 1)
        section, field = key.split(".")
        config.setdefault(section, {})[field] = yaml.safe_load(value)
    job["spec"]["restartPolicy"]["maxRestarts"] = 100
    if local is not None:
        job["spec"]["localCheckpoints"] = local
    status = lambda: (cluster.job("default", name) or {}).get("status") or {}  # noqa: E731

    created = time.time()
    cluster.apply([job])
    wait(lambda: (logs := host_logs(cluster, name, 0)) and first_step_after(logs[0], 0), 600,
         "first step")
    recoveries = []
    next_kill = time.time() + kill_every
    while status().get("phase") not in ("Succeeded", "Failed"):
        if kill and time.time() >= next_kill:
            procs = job_processes(cluster, name)
            host1 = [p for p in procs if "-slice-0-1-" in p["pod"]]
            if len(procs) == 2 and host1:
                old_logs = set(host_logs(cluster, name, 0))
                os.kill(host1[0]["pid"], signal.SIGKILL)
                killed = time.time()
                # A start that resumes at the last step trains none: the job just ends.
                resumed = wait(lambda old=old_logs, t=killed: (
                    (new := set(host_logs(cluster, name, 0)) - old) and first_step_after(
                        new.pop(), t)) or status().get("phase") in ("Succeeded", "Failed"),
                    600, "first step after the kill")
                if resumed is not True:
                    recoveries.append(resumed - killed)
                next_kill = killed + kill_every
        time.sleep(0.2)
    ended = time.time()
    final = status()
    if final["phase"] != "Succeeded":
        raise RuntimeError(f"{name} ended {final['phase']}: {final.get('failure')}")
    goodput = final["goodput"]
    if keep_logs is not None:
        keep_logs.mkdir(parents=True, exist_ok=True)
        for host in (0, 1):
            for n, path in enumerate(host_logs(cluster, name, host)):
                (keep_logs / f"{name}-host{host}-{n}.log").write_bytes(Path(path).read_bytes())
    logs = [events(p) for p in host_logs(cluster, name, 0)]
    mine = independent(logs)
    tiers = [e.get("tier", "?") for evs in logs for e in evs if e["event"] == "restore"]
    wall = ended - created - goodput["queuedSeconds"]
    print(json.dumps({"name": name, "goodput": goodput, "independent": mine, "wall": wall},
                     indent=1), file=sys.stderr, flush=True)
    return {"goodput": goodput, "restarts": final["restarts"], "recoveries": recoveries,
            "tiers": tiers,
            "independent_pct": 100 * mine["productive_s"] / wall,
            "independent_lost": mine["lost_steps"], "wall_s": wall}


def probe_step_time(cluster: LocalCluster) -> float:
    """Median step time of the quickstart job on this machine now (a 150-step run)."""
    job = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    job["metadata"]["name"] = "probe"
    job["spec"]["output"] = "gs://tpujob-bench/probe"
    job["spec"]["trainer"]["config"]["train"]["steps"] = 150
    cluster.apply([job])
    wait(lambda: ((cluster.job("default", "probe") or {}).get("status") or {}).get("phase")
         in ("Succeeded", "Failed"), 600, "probe end")
    times = [e["step_time_s"] for e in events(host_logs(cluster, "probe", 0)[-1])
             if e["event"] == "step" and e["step"] > 10]
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--kill-every", type=float, default=120.0)
    parser.add_argument("--checkpoint-seconds", type=float, default=10.0,
                        help="checkpoint interval, in seconds of training")
    parser.add_argument("--local-checkpoint-seconds", type=float, default=1.0,
                        help="node-local checkpoint interval, in seconds of training")
    parser.add_argument("--scenarios", default="abc")
    parser.add_argument("--logs", type=Path, help="keep the hosts' logs in this folder")
    args = parser.parse_args()
    load_before = os.getloadavg()
    results = {}
    with tempfile.TemporaryDirectory(prefix="tpujob-bench-") as tmp, \
            LocalCluster(tmp, LocalSettings(cpu_devices_per_process=1)) as cluster:
        set_gcs_emulator_env(cluster.gcs.url)
        step_s = probe_step_time(cluster)
        steps = int(args.minutes * 60 / step_s)
        every = max(1, int(args.checkpoint_seconds / step_s))
        local_every = max(1, int(args.local_checkpoint_seconds / step_s))
        print(f"probe: {step_s * 1000:.1f} ms/step -> {steps} steps, a checkpoint every "
              f"{every} steps, a local one every {local_every}", file=sys.stderr, flush=True)
        for key in args.scenarios:
            label, kill, extra, with_local = SCENARIOS[key]
            local = ({"everySteps": local_every, "medium": "Node",
                      "hostPath": f"{tmp}/node-local"} if with_local else None)
            results[key] = run_scenario(cluster, f"goodput-{key}", steps, every, kill,
                                        args.kill_every, extra, local, args.logs)
            r = results[key]
            print(f"({key}) {label}: product {r['goodput']['percent']}%, independent "
                  f"{r['independent_pct']:.2f}%", file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, {platform.machine()}, Python "
          f"{platform.python_version()}; load average (1/5/15 min) before "
          f"{'/'.join(f'{x:.1f}' for x in load_before)}, after "
          f"{'/'.join(f'{x:.1f}' for x in load_after)}")
    print(f"{steps} steps of {step_s * 1000:.1f} ms (probe median), checkpoint every {every} "
          f"steps, local checkpoint every {local_every} steps (a, b), kills every "
          f"{args.kill_every:.0f} s\n")
    print("| scenario | goodput (status) | goodput (from logs) | wall s | restarts | lost steps "
          "(status / logs) | resumed from | kill -> first new step s | compile s (all starts) "
          "| badput s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key, r in results.items():
        g = r["goodput"]
        badput = ", ".join(f"{k} {v:.1f}" for k, v in g["badput"].items() if v >= 0.05)
        kills = ", ".join(f"{x:.1f}" for x in r["recoveries"]) or "-"
        print(f"| ({key}) {SCENARIOS[key][0]} | {g['percent']:.2f}% | "
              f"{r['independent_pct']:.2f}% | {g['wallSeconds']:.1f} | {r['restarts']} | "
              f"{g['lostSteps']} / {r['independent_lost']} | "
              f"{', '.join(r['tiers']) or '-'} | {kills} | "
              f"{g['badput'].get('programStartup', 0):.1f} | {badput} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
