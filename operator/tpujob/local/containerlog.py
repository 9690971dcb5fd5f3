"""Container log files of local mode: the output of one container start, and when each line
came.

A container runtime reads a container's stdout and stderr through a pipe each and writes each
line with the time it was read whole (CRI logs: one record per line, tagged with its stream,
a line of over 16 KiB cut into partial records); the kubelet's log endpoint reads those to
answer `timestamps`, `sinceSeconds` and `tailLines`. Here the same is split in two files so
that the log itself stays plain text: `<restart>.log` (stdout and stderr together, line by
line) and `<restart>.times` (one RFC 3339 time with nanoseconds per line of the log, the time
it was written there). `pump` writes both; `read_lines` reads them back as (time, line) pairs.

Line by line, as a runtime's records are, matters where two processes share a container: a
program's line written in two pieces (Python's `print` under `-u`, as torchrun starts its
workers, writes the text, then the newline) is never split by a line of the other stream
(the launcher's own log on stderr).
"""

from __future__ import annotations

import os
import selectors
import time
from datetime import UTC, datetime
from pathlib import Path

CHUNK = 64 * 1024
# A line longer than this is written in pieces, as CRI's partial records (the kubelet's and
# containerd's limit), so that a stream that never ends its line is not held in memory.
MAX_LINE = 16 * 1024


def times_path(log_path: Path) -> Path:
    """The file of line times that goes with a log file."""
    return log_path.with_suffix(".times")


def format_timestamp(epoch_ns: int) -> str:
    """RFC 3339 with nine fractional digits, in UTC: the form the kubelet prefixes to each line
    with `timestamps=true` (2006-01-02T15:04:05.000000000Z07:00)."""
    seconds, nanos = divmod(epoch_ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"


def pump(fds: tuple[int, ...], log_path: Path) -> None:
    """Copy a container's output from the pipes `fds` (its stdout's and its stderr's) into its
    log, whole lines at a time, recording when each line came, until every pipe closes (every
    writer gone). A stream's unfinished line waits for its newline (or MAX_LINE, or the end of
    the stream). Closes the `fds`."""
    selector = selectors.DefaultSelector()
    pending: dict[int, bytes] = {}
    for fd in fds:
        selector.register(fd, selectors.EVENT_READ)
        pending[fd] = b""
    at_line_start = True
    with open(log_path, "ab", buffering=0) as log_file, \
            open(times_path(log_path), "ab", buffering=0) as times_file:

        def write(data: bytes) -> None:
            nonlocal at_line_start
            if not data:
                return
            starts = data.count(b"\n") + (1 if at_line_start else 0) - \
                (1 if data.endswith(b"\n") else 0)
            if starts:
                # Times first: a reader never sees a line whose time is not written yet.
                stamp = (format_timestamp(time.time_ns()) + "\n").encode()
                times_file.write(stamp * starts)
            log_file.write(data)
            at_line_start = data.endswith(b"\n")

        try:
            while pending:
                for key, _ in selector.select():
                    fd = key.fd
                    chunk = os.read(fd, CHUNK)
                    if not chunk:  # the stream's end: its unfinished line as it is
                        selector.unregister(fd)
                        write(pending.pop(fd))
                        continue
                    data = pending[fd] + chunk
                    whole = data.rfind(b"\n") + 1
                    if len(data) - whole >= MAX_LINE:
                        whole = len(data)
                    write(data[:whole])
                    pending[fd] = data[whole:]
        finally:
            selector.close()
            for fd in fds:
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
