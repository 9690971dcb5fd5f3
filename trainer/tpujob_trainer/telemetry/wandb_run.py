"""Weights & Biases, optional: used only when `metrics.wandb.project` is set and `wandb` is
installed. The API key is read by wandb itself from WANDB_API_KEY; it is never in the config.
Offline mode writes under WANDB_DIR (or the output directory) and needs no key."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from tpujob_trainer import env as envvars
from tpujob_trainer.config.metrics import WandbConfig


class WandbRun:
    def __init__(self, run: Any):
        self._run = run

    @classmethod
    def start(cls, cfg: WandbConfig, *, config: dict, output: str) -> tuple[WandbRun | None, str | None]:
        """(run, None), or (None, why W&B is off)."""
        if not cfg.project:
            return None, "metrics.wandb.project is not set"
        if importlib.util.find_spec("wandb") is None:
            return None, "the wandb package is not installed"
        if cfg.mode == "online" and not os.environ.get(envvars.WANDB_API_KEY):
            return None, f"online mode needs {envvars.WANDB_API_KEY} in the environment"
        import wandb

        wandb_dir = os.environ.get("WANDB_DIR") or (output if "://" not in output else None)
        if wandb_dir:
            os.makedirs(wandb_dir, exist_ok=True)
        run = wandb.init(project=cfg.project, entity=cfg.entity, name=cfg.run_name, tags=cfg.tags,
                         mode=cfg.mode, config=config, dir=wandb_dir, resume="allow")
        return cls(run), None

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self._run.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step)

    def finish(self, exit_code: int = 0) -> None:
        self._run.finish(exit_code=exit_code)
