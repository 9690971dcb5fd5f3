"""Kubeconfig files that point kubectl, the `kubernetes` client and kopf at a local server."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

CONTEXT = "tpujob-local"


def build_kubeconfig(url: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": CONTEXT, "cluster": {"server": url}}],
        "users": [{"name": CONTEXT, "user": {"token": "tpujob-local"}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT,
                                                    "namespace": namespace}}],
        "current-context": CONTEXT,
    }


def write_kubeconfig(path: str | os.PathLike, url: str, namespace: str = "default") -> Path:
    target = Path(path).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(build_kubeconfig(url, namespace), sort_keys=False))
    target.chmod(0o600)
    return target
