"""Container log files of local mode: the output of one container start, and when each line
came.

A container runtime reads a container's stdout and stderr through a pipe and writes each line
with the time it arrived (CRI logs); the kubelet's log endpoint reads those to answer
`timestamps`, `sinceSeconds` and `tailLines`. Here the same is split in two files so that the
log itself stays plain text: `<restart>.log` (stdout and stderr together, as written) and
`<restart>.times` (one RFC 3339 time with nanoseconds per line of the log, the time its first
byte arrived). `pump` writes both; `read_lines` reads them back as (time, line) pairs.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path

CHUNK = 64 * 1024


def times_path(log_path: Path) -> Path:
    """The file of line times that goes with a log file."""
    return log_path.with_suffix(".times")


def format_timestamp(epoch_ns: int) -> str:
    """RFC 3339 with nine fractional digits, in UTC: the form the kubelet prefixes to each line
    with `timestamps=true` (2006-01-02T15:04:05.000000000Z07:00)."""
    seconds, nanos = divmod(epoch_ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"


def pump(fd: int, log_path: Path) -> None:
    """Copy a container's output from the pipe `fd` into its log, recording when each line
    came, until the pipe closes (every writer gone). Closes `fd`."""
    at_line_start = True
    with open(log_path, "ab", buffering=0) as log_file, \
            open(times_path(log_path), "ab", buffering=0) as times_file:
        try:
            while True:
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    return
                starts = chunk.count(b"\n") + (1 if at_line_start else 0) - \
                    (1 if chunk.endswith(b"\n") else 0)
                if starts:
                    # Times first: a reader never sees a line whose time is not written yet.
                    stamp = (format_timestamp(time.time_ns()) + "\n").encode()
                    times_file.write(stamp * starts)
                log_file.write(chunk)
                at_line_start = chunk.endswith(b"\n")
        finally:
            os.close(fd)


def read_lines(log_path: Path, start: int = 0) -> tuple[list[tuple[str, bytes]], int]:
    """The complete lines of a log from byte `start` on, each with its time, and the offset
    after the last complete line (a partial last line is left for a later read, unless the log
    will not grow: see `read_rest`)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(start)
            data = f.read()
    except OSError:
        return [], start
    end = data.rfind(b"\n") + 1
    return _with_times(log_path, data[:end], start), start + end


def read_rest(log_path: Path, start: int = 0) -> list[tuple[str, bytes]]:
    """Every line from byte `start` on, a last line without its newline included."""
    try:
        with open(log_path, "rb") as f:
            f.seek(start)
            data = f.read()
    except OSError:
        return []
    return _with_times(log_path, data, start)


def _with_times(log_path: Path, data: bytes, start: int) -> list[tuple[str, bytes]]:
    lines = data.splitlines(keepends=True)
    if not lines:
        return []
    try:
        with open(log_path, "rb") as f:
            skipped = f.read(start).count(b"\n") if start else 0
        times = times_path(log_path).read_text().splitlines()[skipped:]
    except OSError:
        times = []
    fallback = format_timestamp(time.time_ns())
    return [(times[i] if i < len(times) else fallback, line) for i, line in enumerate(lines)]
