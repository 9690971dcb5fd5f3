"""Local mode assembled: the embedded API server, a GCS emulator, the operator and the local
executor started as one (`LocalCluster`), and what `tpujob local run` / `tpujob local up` do
with it (`run_file`, `serve`).

Names are loaded on first use, so that `python -m tpujob.local.session.gcs` (the emulator's
process) imports nothing else."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"LocalCluster": "cluster", "LocalSettings": "cluster", "RunOptions": "run",
            "run_file": "run", "serve": "run"}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
