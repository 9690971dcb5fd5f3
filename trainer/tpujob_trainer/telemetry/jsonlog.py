"""One JSON object per line on stdout, from process 0 only: the operator and tests parse these."""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any, TextIO


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


class JsonLog:
    """`emit(event, **fields)` writes {"event": ..., "time": ..., **fields}; silent off process 0."""

    def __init__(self, enabled: bool, out: TextIO | None = None):
        self.enabled = enabled
        self.out = out

    def emit(self, event: str, **fields: Any) -> None:
        if not self.enabled:
            return
        line = json.dumps({"event": event, "time": round(time.time(), 3), **_clean(fields)})
        out = self.out or sys.stdout
        out.write(line + "\n")
        out.flush()
