"""The built-in trainer's config for a job: `spec.trainer.config` with the job-level settings
(output, mesh, data, W&B) laid over it (the node-local checkpoint tier's are added by
builders/invocation.py), and the ConfigMap that carries it to every pod."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tpujob.api.spec import TpuTrainingJobSpec
from tpujob.builders.names import CONFIG_FILE


def build_trainer_config(spec: TpuTrainingJobSpec) -> dict[str, Any]:
    """The config every built-in trainer process loads (before its command-line overrides)."""
    config = copy.deepcopy(spec.trainer.config)
    config["output"] = spec.output
    mesh = config.setdefault("mesh", {})
    if spec.parallelism.ici:
        mesh["ici"] = spec.parallelism.ici_sizes
    if spec.parallelism.dcn:
        mesh["dcn"] = spec.parallelism.dcn_sizes
    if spec.data is not None:
        data = config.setdefault("data", {})
        data["kind"] = str(spec.data.kind)
        for key in ("path", "tokenizer"):
            if getattr(spec.data, key) is not None:
                data[key] = getattr(spec.data, key)
    if spec.wandb is not None:
        w = spec.wandb
        wandb = config.setdefault("metrics", {}).setdefault("wandb", {})
        wandb.update({"project": w.project, "mode": str(w.mode), "tags": list(w.tags)})
        wandb.update({k: v for k, v in (("entity", w.entity), ("run_name", w.run_name)) if v})
    return config


def build_config_map(name: str, namespace: str, config: dict[str, Any],
                     metadata: dict[str, Any]) -> dict[str, Any]:
    """ConfigMap `<job>-trainer` holding the trainer config (builders/invocation.py) as YAML."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {**metadata, "name": name, "namespace": namespace},
        "data": {CONFIG_FILE: yaml.safe_dump(config, sort_keys=False)},
    }
