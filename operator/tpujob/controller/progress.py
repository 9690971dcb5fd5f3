"""Reading the trainer's progress from JAX process 0's metrics endpoint (`GET /progress`, one
JSON document). A program that does not serve it (bring-your-own trainers may not) simply has no
progress: a failed read is never an error of the job."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

from tpujob.controller.trainer_reports import ProgressReading

log = logging.getLogger("tpujob.operator")
MAX_BYTES = 64 * 1024


def fetch_progress(address: str, port: int, timeout_s: float = 2.0) -> ProgressReading | None:
    """GET http://address:port/progress; None when unreachable, slow or not a progress document."""
    host = f"[{address}]" if ":" in address else address
    url = f"http://{host}:{port}/progress"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (http only)
            doc = json.loads(response.read(MAX_BYTES))
    except (OSError, urllib.error.URLError, ValueError) as err:
        log.debug("no progress from %s: %s", url, err)
        return None
    return ProgressReading.from_document(doc)
