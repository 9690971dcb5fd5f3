"""Does a change to the trainer move its loss curve? Trains the vs_maxtext anchor model (bf16,
remat full, 1 CPU device) on the learnable synthetic pattern (`ramp`) with the trainer of this
checkout and with the trainer of a git revision, for two seeds each, alternating, and compares
the difference between the two trainers with the difference between two seeds of one trainer
(the noise).

    .venv/bin/python benchmarks/numerics_ab.py --rev HEAD~1 [--steps 80] [--dtype bfloat16]

Prints one JSON line per run and a summary: mean |loss difference| over the last 20 steps,
trainer against trainer (same seed) and seed against seed (same trainer).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import vs_maxtext  # noqa: E402


def extract_trainer(rev: str, into: str) -> str:
    """The trainer package of `rev`, unpacked under `into`; returns the path for PYTHONPATH."""
    data = subprocess.run(["git", "-C", str(REPO), "archive", rev, "trainer"], check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return os.path.join(into, "trainer")


def train(trainer_path: str, dtype: str, steps: int, seed: int) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="numerics-ab-") as workdir:
        cfg = vs_maxtext.tpujob_config({"devices": 1, "dtype": dtype}, steps, workdir)
        cfg["train"]["seed"] = seed
        cfg["data"] = {"kind": "synthetic", "synthetic_pattern": "ramp"}
        cfg["optimizer"] = {"kind": "adamw", "lr": 3e-3, "warmup_steps": 10}
        path = os.path.join(workdir, "config.json")
        Path(path).write_text(json.dumps(cfg))
        env = vs_maxtext.base_env(1)
        env["PYTHONPATH"] = trainer_path
        proc = subprocess.run([sys.executable, "-m", "tpujob_trainer.cli", "--config", path],
                              env=env, cwd=workdir, capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"training failed:\n{proc.stderr[-3000:]}")
        rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        return [r["loss"] for r in rows if r.get("event") == "step"]


def tail_gap(a: list[float], b: list[float], last: int = 20) -> float:
    return statistics.mean(abs(x - y) for x, y in zip(a[-last:], b[-last:], strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", required=True, help="the git revision to compare this checkout with")
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="numerics-rev-") as tmp:
        trainers = {"this checkout": str(REPO / "trainer"), args.rev: extract_trainer(args.rev, tmp)}
        curves: dict[tuple[str, int], list[float]] = {}
        for seed in (0, 1):
            for name, path in trainers.items():
                curves[(name, seed)] = train(path, args.dtype, args.steps, seed)
                c = curves[(name, seed)]
                print(json.dumps({"trainer": name, "seed": seed, "first": round(c[0], 4),
                                  "loss_at": {s: round(c[s - 1], 4) for s in
                                              (10, 20, 40, args.steps) if s <= len(c)}}))
    names = list(trainers)
    between = [tail_gap(curves[(names[0], s)], curves[(names[1], s)]) for s in (0, 1)]
    noise = [tail_gap(curves[(n, 0)], curves[(n, 1)]) for n in names]
    print(json.dumps({"mean_abs_loss_diff_last_20": {
        "trainer_vs_trainer_same_seed": [round(x, 4) for x in between],
        "seed_vs_seed_same_trainer": [round(x, 4) for x in noise]}}))


if __name__ == "__main__":
    main()
