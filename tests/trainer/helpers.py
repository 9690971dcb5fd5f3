"""Shared pieces of the trainer tests: tiny configs and running the real `tpujob-train` CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TINY_YAML = REPO / "trainer" / "configs" / "tiny.yaml"

TINY_MODEL = dict(vocab_size=257, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                  mlp_dim=128, remat="none", dtype="float32")


@dataclass
class Run:
    returncode: int
    events: list[dict]
    stdout: str
    stderr: str
    termination: dict | None

    def of(self, event: str) -> list[dict]:
        return [e for e in self.events if e.get("event") == event]

    @property
    def steps(self) -> list[dict]:
        return self.of("step")


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's env without TPUJOB_* / XLA device flags, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TPUJOB_") and k not in ("XLA_FLAGS", "WANDB_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "trainer"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def parse_events(stdout: str) -> list[dict]:
    events = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            events.append(json.loads(line))
    return events


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tpujob_trainer.cli", *args]


def run_cli(args: list[str], tmp_path: Path, *, env: dict[str, str] | None = None,
            timeout: float = 180) -> Run:
    term = tmp_path / f"termination-{len(list(tmp_path.glob('termination-*')))}.log"
    proc = subprocess.run(cli_command(*args), capture_output=True, text=True, timeout=timeout,
                          env=clean_env(TPUJOB_TERMINATION_LOG=str(term), **(env or {})),
                          cwd=tmp_path)
    termination = json.loads(term.read_text()) if term.exists() else None
    return Run(proc.returncode, parse_events(proc.stdout), proc.stdout, proc.stderr, termination)
