"""Starting container processes so that they go with the process that runs the executor, even
when it is SIGKILLed: on Linux each child asks, before it runs its program, for SIGKILL when its
parent goes (prctl PR_SET_PDEATHSIG). Linux sends that signal when the *thread* that forked the
child ends, not the process, so every child is forked by one thread that lives as long as the
process. Elsewhere processes start as usual (and outlive a killed parent)."""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import threading
from typing import Any

_PR_SET_PDEATHSIG = 1
try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
    _PRCTL.argtypes = [ctypes.c_int, ctypes.c_ulong]
except (OSError, AttributeError):  # not Linux
    _PRCTL = None


def _die_with(parent: int):
    def preexec() -> None:  # in the child, between fork and exec: no locks, no allocation
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent went before the request was made
            os._exit(128 + signal.SIGKILL)
    return preexec


class _Spawner:
    def __init__(self) -> None:
        self._requests: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="tpujob-spawner",
                                                daemon=True)
                self._thread.start()

    def _serve(self) -> None:
        while True:
            args, kwargs, reply = self._requests.get()
            try:
                reply.put((subprocess.Popen(*args, **kwargs), None))
            except BaseException as err:  # noqa: BLE001 -- handed back to the caller
                reply.put((None, err))

    def popen(self, *args: Any, **kwargs: Any) -> subprocess.Popen:
        self._ensure_thread()
        reply: queue.Queue = queue.Queue(maxsize=1)
        self._requests.put((args, {**kwargs, "preexec_fn": _die_with(os.getpid())}, reply))
        proc, err = reply.get()
        if err is not None:
            raise err
        return proc


_SPAWNER = _Spawner()


def popen_tied(*args: Any, **kwargs: Any) -> subprocess.Popen:
    """`subprocess.Popen(*args, **kwargs)`, with the child SIGKILLed when this process ends
    (Linux). Raises what Popen raises."""
    if _PRCTL is None:
        return subprocess.Popen(*args, **kwargs)
    return _SPAWNER.popen(*args, **kwargs)

