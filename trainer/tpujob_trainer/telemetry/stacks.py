"""This process's Python stacks, every thread, on request: what the operator asks every process
of a hung job for (`GET /stacks` on its HTTP endpoint) before it restarts the job. Answered from
the endpoint's own thread, so a main thread waiting in a collective, a compile or a data read
still answers; a process stopped (SIGSTOP, a lost node) or holding the GIL does not, and the
operator says so.

The text goes three ways: back in the answer, to this process's stderr between two marker lines
(so `kubectl logs --previous` has it after the restart), and, where the run has an output, to
`<output>/stacks/<label>/<host>.txt` (the label names the restart: several hosts' stacks of one
hang sit side by side), written after the answer goes out (a failed write is said on stderr).
"""

from __future__ import annotations

import re
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, TextIO

import fsspec

BEGIN, END = "----- tpujob stacks: {} -----", "----- end of tpujob stacks -----"
LABEL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def format_stacks(frames: dict[int, Any] | None = None,
                  threads: list[threading.Thread] | None = None) -> str:
    """Every thread's Python stack, the main thread first, each under its name."""
    frames = sys._current_frames() if frames is None else frames
    names = {t.ident: t.name for t in (threading.enumerate() if threads is None else threads)}
    main = threading.main_thread().ident
    parts = []
    for ident in sorted(frames, key=lambda i: (i != main, names.get(i, ""), i)):
        name = names.get(ident, "unknown")
        stack = "".join(traceback.format_stack(frames[ident]))
        parts.append(f'Thread "{name}" ({ident}){" (main)" if ident == main else ""}:\n{stack}')
    return "\n".join(parts)


class StackDumper:
    """Answers a stack request: the text, written where it is kept."""

    def __init__(self, host: str, output: str | None, *, err: TextIO | None = None,
                 clock: Callable[[], float] = time.time,
                 format_: Callable[[], str] = format_stacks):
        self.host = host
        self.output = output.rstrip("/") if output else None
        self._err = err
        self._clock = clock
        self._format = format_
        self.saving: threading.Thread | None = None   # the last save, while it runs

    def path(self, label: str) -> str | None:
        if self.output is None:
            return None
        return f"{self.output}/stacks/{label}/{self.host.replace('/', '-')}.txt"

    def __call__(self, label: str | None) -> dict[str, Any]:
        """The stacks now, as the endpoint answers them. A label that is not a short name
        (letters, digits, `.`, `_`, `-`) is refused: it becomes part of a path."""
        if label is not None and not LABEL_PATTERN.match(label):
            raise ValueError(f"label {label!r} must be 1 to 63 letters, digits, '.', '_' or '-'")
        text = self._format()
        err = sys.stderr if self._err is None else self._err
        err.write(f"{BEGIN.format(label or 'on request')}\n{text}{END}\n")
        err.flush()
        where = self.path(label) if label else None
        answer: dict[str, Any] = {"host": self.host, "time": round(self._clock(), 3),
                                  "stacks": text, "saved": where}
        if where is not None:
            # Written after the answer, from a thread of its own: a first write to gs:// can
            # take seconds, and the operator waits for every process's answer.
            self.saving = threading.Thread(target=self._save, args=(where, text, err),
                                           name="tpujob-stacks-save", daemon=True)
            self.saving.start()
        return answer

    def _save(self, where: str, text: str, err: TextIO) -> None:
        try:
            with fsspec.open(where, "w") as f:
                f.write(text)
        except Exception as e:  # noqa: BLE001 - the log has the stacks either way
            line = f"tpujob: the stacks were not saved to {where}: {type(e).__name__}: {e}"
            err.write(line[:599] + "\n")
            err.flush()
