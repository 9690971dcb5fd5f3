"""How the trainer ends: the exception that carries a reason, and the termination message.

The reasons, their exit codes and the message's shape are the contract with the operator
(`contract.py`): 42 (and signals, 128+) restart the JobSet; every other non-zero code fails it.
The operator maps the reason in the termination message to the job's status.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable

from tpujob_trainer import env as envvars
from tpujob_trainer.contract import (  # noqa: F401 (the exit contract, re-exported)
    EXIT_CODES,
    RETRY_EXIT_CODE,
    TERMINATION_MESSAGE_BYTES,
    Reason,
)

DEFAULT_TERMINATION_LOG = "/dev/termination-log"


class TrainerExit(Exception):
    """Stop the run with this reason; the CLI turns it into the exit code and message."""

    def __init__(self, reason: Reason, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.reason]


def is_retryable(reason: Reason) -> bool:
    return EXIT_CODES[reason] == RETRY_EXIT_CODE


def termination_log_path(env: dict[str, str] | None = None) -> str | None:
    """TPUJOB_TERMINATION_LOG, else /dev/termination-log when it can be written, else None."""
    env = os.environ if env is None else env
    path = (env.get(envvars.TERMINATION_LOG) or "").strip()
    if path:
        return path
    if os.path.exists(DEFAULT_TERMINATION_LOG) and os.access(DEFAULT_TERMINATION_LOG, os.W_OK):
        return DEFAULT_TERMINATION_LOG
    return None


# Called with the reason as the process ends, from any thread; each returns fields to add to the
# termination message (the goodput timeline writes its record here: see telemetry/timeline.py;
# the loop adds process 0's final progress). One hook per name: a later one replaces it.
_ENDING_HOOKS: dict[str, Callable[[Reason], dict]] = {}
# One account written at a time, whole: the main thread's ending and a watcher thread's
# (distributed._leave) may come at the same moment, and two writers of one file, each from
# offset 0, leave the longer one's tail after the shorter one's line.
_ACCOUNT_LOCK = threading.Lock()


def on_ending(name: str, hook: Callable[[Reason], dict]) -> None:
    """Run `hook(reason)` when the termination message is written; its dict joins the message.
    Registered under `name`: a second hook of that name (a later run in the same process)
    replaces the first."""
    _ENDING_HOOKS[name] = hook


def build_termination_line(reason: Reason, message: str, extra: dict) -> str:
    """`{"reason", "message", **extra}` as one JSON line, newline included, within the bytes
    Kubernetes keeps (a line cut short is no JSON, and the operator could not read the reason):
    the message keeps as much of its start as fits once escaped, and `extra` is left out only
    when it alone leaves no room."""

    def line(keep: int, fields: dict) -> str:
        return json.dumps({"reason": reason.value, "message": message[:keep], **fields}) + "\n"

    def fits(keep: int, fields: dict) -> bool:
        return len(line(keep, fields).encode()) <= TERMINATION_MESSAGE_BYTES

    if not fits(0, extra):
        extra = {}
    # Every character takes at least a byte: the longest start that fits is found by halving.
    short, long = 0, min(len(message), TERMINATION_MESSAGE_BYTES)
    while short < long:
        middle = (short + long + 1) // 2
        if fits(middle, extra):
            short = middle
        else:
            long = middle - 1
    return line(short, extra)


def write_termination_message(reason: Reason, message: str, env: dict[str, str] | None = None,
                              *, final: bool = False) -> None:
    """One JSON line `{"reason", "message", ...}` (see build_termination_line). `final`: the
    process ends right after, from this thread (os._exit): no other thread's account may
    replace this one, so the write's lock is kept (another writer waits until the end)."""
    extra: dict = {}
    for hook in list(_ENDING_HOOKS.values()):
        try:
            record = hook(reason)
            json.dumps(record)  # a record that is no JSON is left out, as a failing hook is
        except Exception:  # noqa: S112 (an ending never fails on a report)
            continue
        extra.update(record)
    path = termination_log_path(env)
    if path is None:
        return
    line = build_termination_line(reason, message, extra)
    _ACCOUNT_LOCK.acquire()
    try:
        with open(path, "w") as f:
            f.write(line)
    except OSError:
        pass  # the exit code still tells the operator what happened
    finally:
        if not final:
            _ACCOUNT_LOCK.release()
