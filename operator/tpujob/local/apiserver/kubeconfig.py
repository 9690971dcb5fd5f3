"""Kubeconfig files that point kubectl, the `kubernetes` client and kopf at a local server."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

CONTEXT = "tpujob-local"


def build_kubeconfig(url: str, namespace: str = "default", user: dict[str, str] | None = None,
                     ca_file: str | os.PathLike | None = None) -> dict[str, Any]:
    """`user`: the credentials (`token`, or `client-certificate` and `client-key` paths);
    the embedded server's any-token by default. `ca_file`: the CA a TLS server is checked
    against."""
    cluster: dict[str, Any] = {"server": url}
    if ca_file is not None:
        cluster["certificate-authority"] = str(ca_file)
    return {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": CONTEXT, "user": user or {"token": "tpujob-local"}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT,
                                                    "namespace": namespace}}],
        "current-context": CONTEXT,
    }


def write_kubeconfig(path: str | os.PathLike, url: str, namespace: str = "default",
                     user: dict[str, str] | None = None,
                     ca_file: str | os.PathLike | None = None) -> Path:
    target = Path(path).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.touch(mode=0o600, exist_ok=True)
    target.write_text(yaml.safe_dump(build_kubeconfig(url, namespace, user, ca_file),
                                     sort_keys=False))
    target.chmod(0o600)
    return target
