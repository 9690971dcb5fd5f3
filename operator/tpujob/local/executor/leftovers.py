"""The processes of one container start, wherever they went: what a runtime's cgroup is.

A container runtime puts every process of a container in the container's cgroup (and PID
namespace); when the container's main process ends, the rest are killed with it, so nothing a
container started outlives it. Here a container is a process group, and a process that starts
a session of its own leaves it: torchrun starts each worker so, and a worker whose launcher was
killed trains on, holds the log's pipe open, and talks to the other node's workers as no
process on a cluster could. So each container start's processes carry a marker in their
environment (inherited by everything they start, as a cgroup is), and when the start ends,
every process that carries it is killed, found through /proc.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

# The variable every process of a container start inherits; its value names the start.
MARKER = "TPUJOB_LOCAL_CONTAINER"
# Kill rounds at most: a process may start another while its siblings are being killed.
ROUNDS = 5


def marker_value(pod_uid: str, container: str, restart_count: int) -> str:
    """The marker of one start of one container of a pod."""
    return f"{pod_uid}/{container}/{restart_count}"


def _environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:  # gone, or not ours to read
        return b""


def marked(value: str) -> Iterator[int]:
    """The processes (other than this one) whose environment carries the marker `value`."""
    entry = f"{MARKER}={value}".encode()
    me = os.getpid()
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        if entry in _environ(int(name)).split(b"\0"):
            yield int(name)


def kill_marked(value: str) -> list[int]:
    """SIGKILL every process that carries the marker `value`, again while any is found (a
    zombie has no environment left to match); the pids killed."""
    killed: set[int] = set()
    for _ in range(ROUNDS):
        found = list(marked(value))
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            killed.add(pid)
    return sorted(killed)
