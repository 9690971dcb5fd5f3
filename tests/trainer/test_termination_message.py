"""The exit contract as the operator and a person read it: each reason's exit code as
docs/trainer.md documents it, where the termination message is written, and the message itself,
which must stay one JSON line within the 4096 bytes Kubernetes keeps of it (a line cut short is
no JSON, and the operator would lose the reason)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

from tpujob_trainer import env as envvars
from tpujob_trainer import exits
from tpujob_trainer.exits import (
    EXIT_CODES,
    Reason,
    build_termination_line,
    termination_log_path,
    write_termination_message,
)

pytestmark = pytest.mark.unit
DOCS = Path(__file__).resolve().parents[2] / "docs" / "trainer.md"
LIMIT = 4096  # bytes: kubelet's limit on one container's termination message


def test_exit_codes_are_the_ones_docs_trainer_md_documents():
    section = DOCS.read_text().split("## Exit contract", 1)[1]
    documented = {m[1]: int(m[2]) for m in re.finditer(r"^\| `(\w+)` \| (\d+) \|", section, re.M)}
    assert documented == {r.value: code for r, code in EXIT_CODES.items()}


def test_termination_log_path(tmp_path, monkeypatch):
    default = tmp_path / "termination-log"
    monkeypatch.setattr(exits, "DEFAULT_TERMINATION_LOG", str(default))
    # Named in the environment: used as given, whatever exists.
    assert termination_log_path({envvars.TERMINATION_LOG: " /tmp/t "}) == "/tmp/t"
    # Not named: the pod's default file, only when it is there.
    assert termination_log_path({envvars.TERMINATION_LOG: ""}) is None
    default.write_text("")
    assert termination_log_path({}) == str(default)
    # There but not writable (a read-only mount; root passes any mode check, so say so):
    # nothing is written, and the exit code alone speaks.
    monkeypatch.setattr(exits.os, "access", lambda path, mode: False)
    assert termination_log_path({}) is None


GOODPUT = {"goodput": {"attempt": "a1", "process_index": 0, "step": 120, "steps": 120,
                       "seconds": {"productive": 812.5, "program_startup": 31.0,
                                   "tpu_initialization": 4.0, "checkpoint_save": 12.5}}}


# Fields that by themselves fill the 4096 bytes exactly: they stay, with no room for a message.
_BARE = len(json.dumps({"reason": "InternalError", "message": "", "goodput": {"blob": ""}})) + 1
FILLING = {"goodput": {"blob": "y" * (LIMIT - _BARE)}}


@pytest.mark.parametrize("message", [
    "loss is nan at step 3",
    "x" * 5000,
    'Traceback:\n  File "train.py", line 1\n' * 200,   # newlines and quotes escape to 2 bytes
    "déjà vu → " * 600,                                # \u escapes: 6 bytes a character
    "🙂" * 1000,                                       # a surrogate pair: 12 bytes
])
@pytest.mark.parametrize("extra", [{}, GOODPUT, FILLING, {"goodput": {"blob": "y" * 5000}}])
def test_the_line_keeps_as_much_of_the_message_as_fits(message, extra):
    line = build_termination_line(Reason.INTERNAL_ERROR, message, extra)
    assert len(line.encode()) <= LIMIT and line.endswith("}\n") and line.count("\n") == 1
    doc = json.loads(line)
    assert doc["reason"] == "InternalError"
    kept = doc["message"]
    assert message.startswith(kept)
    fields = {k: v for k, v in doc.items() if k not in ("reason", "message")}
    # The hooks' fields stay unless they alone leave no room for any message.
    alone = json.dumps({"reason": "InternalError", "message": "", **extra}) + "\n"
    assert fields == (extra if len(alone.encode()) <= LIMIT else {})
    if kept != message:  # cut: one more character would not have fitted
        longer = json.dumps({"reason": "InternalError", "message": message[:len(kept) + 1],
                             **fields}) + "\n"
        assert len(longer.encode()) > LIMIT


def test_hooks_add_their_fields_and_a_failing_one_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(exits, "_ENDING_HOOKS", {})

    def broken(reason):
        raise RuntimeError("no timeline")

    exits.on_ending("timeline", broken)
    exits.on_ending("first", lambda reason: {"ended_as": "an earlier run's"})
    exits.on_ending("first", lambda reason: {"ended_as": reason.value})  # replaces it
    exits.on_ending("second", lambda reason: {"then": 1})
    exits.on_ending("not-json", lambda reason: {"when": object()})  # no JSON: skipped too
    path = tmp_path / "term"
    write_termination_message(Reason.PREEMPTED, "SIGTERM", {envvars.TERMINATION_LOG: str(path)})
    assert json.loads(path.read_text()) == {"reason": "Preempted", "message": "SIGTERM",
                                            "ended_as": "Preempted", "then": 1}


def test_an_account_written_last_before_exit_is_never_replaced(tmp_path, monkeypatch):
    """A watcher thread's account (written `final`, right before os._exit) keeps the file: the
    main thread's, coming after, waits rather than writing over it (two writers of one file
    each from offset 0 left the longer one's tail after the shorter's line)."""
    monkeypatch.setattr(exits, "_ENDING_HOOKS", {})
    monkeypatch.setattr(exits, "_ACCOUNT_LOCK", threading.Lock())
    path = tmp_path / "term"
    env = {envvars.TERMINATION_LOG: str(path)}
    write_termination_message(Reason.INTERNAL_ERROR, "an earlier account, replaced", env)
    write_termination_message(Reason.PEER_LOST, "process 1 vanished", env, final=True)
    main = threading.Thread(target=write_termination_message,
                            args=(Reason.INTERNAL_ERROR, "x" * 500, env), daemon=True)
    main.start()
    main.join(0.5)   # blocked on the kept lock: the process would have ended by now
    assert main.is_alive()
    assert json.loads(path.read_text()) == {"reason": "PeerLost",
                                            "message": "process 1 vanished"}
    exits._ACCOUNT_LOCK.release()   # as if the process had not ended: the main's goes in whole
    main.join(10)
    assert json.loads(path.read_text())["message"] == "x" * 500
