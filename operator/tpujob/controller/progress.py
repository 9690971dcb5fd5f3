"""Reading the trainer's endpoints: progress from JAX process 0's (`GET /progress`, one JSON
document), and any process's stacks on a hang (`GET /stacks`). A program that does not serve
them (bring-your-own trainers may not) simply has none: a failed read is never an error of the
job."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

from tpujob.controller.trainer_reports import ProgressReading

log = logging.getLogger("tpujob.operator")
MAX_BYTES = 64 * 1024


def fetch_progress(address: str, port: int, timeout_s: float) -> ProgressReading | None:
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


STACKS_MAX_BYTES = 4 * 1024 * 1024


def fetch_stacks(address: str, port: int, label: str, timeout_s: float
                 ) -> tuple[dict | None, str | None]:
    """GET http://address:port/stacks?label=...: (the process's answer, None), or (None, why
    not): a stopped process, or one holding the GIL, does not answer in time."""
    host = f"[{address}]" if ":" in address else address
    url = f"http://{host}:{port}/stacks?label={label}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310
            body = response.read(STACKS_MAX_BYTES + 1)
    except TimeoutError:
        return None, f"no answer in {timeout_s:g} s"
    except urllib.error.HTTPError as err:
        return None, f"HTTP {err.code} (the program serves no stacks)"
    except (OSError, urllib.error.URLError) as err:
        reason = getattr(err, "reason", err)
        if isinstance(reason, TimeoutError):
            return None, f"no answer in {timeout_s:g} s"
        return None, f"unreachable: {reason}"
    if len(body) > STACKS_MAX_BYTES:
        return None, f"an answer over {STACKS_MAX_BYTES // 2**20} MiB"
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    return (doc, None) if isinstance(doc, dict) else (None, "not a stacks document")
