"""The operator's stack request against the trainer's real endpoint: the answer as the trainer
gives it; a process that accepts the connection but never answers (stopped, or holding the GIL)
reported as no answer within the timeout; a program without /stacks, and no listener at all."""

from __future__ import annotations

import io
import socket
import threading

import pytest

from tpujob.controller.progress import fetch_stacks
from tpujob_trainer.telemetry.server import Progress, ProgressServer
from tpujob_trainer.telemetry.stacks import StackDumper

pytestmark = pytest.mark.integration
BIND = "127.0.0.3"


def test_the_answer_of_a_live_process(tmp_path):
    server = ProgressServer(Progress(), 0, host=BIND,
                            stacks=StackDumper("slice-0/host-0", str(tmp_path),
                                               err=io.StringIO()))
    try:
        doc, why = fetch_stacks(BIND, server.port, "hang-1")
    finally:
        server.close()
    assert why is None and doc["host"] == "slice-0/host-0"
    assert doc["saved"] == str(tmp_path / "stacks" / "hang-1" / "slice-0-host-0.txt")
    assert 'Thread "MainThread"' in doc["stacks"]


def test_a_process_that_never_answers_and_one_without_stacks():
    silent = socket.create_server((BIND, 0))   # accepts (the kernel does), never answers
    try:
        doc, why = fetch_stacks(BIND, silent.getsockname()[1], "hang-1", timeout_s=0.5)
    finally:
        silent.close()
    assert (doc, why) == (None, "no answer in 0.5 s")
    bare = ProgressServer(Progress(), 0, host=BIND)
    try:
        assert fetch_stacks(BIND, bare.port, "x") == (
            None, "HTTP 404 (the program serves no stacks)")
    finally:
        bare.close()
    free = socket.create_server((BIND, 0))
    port = free.getsockname()[1]
    free.close()
    doc, why = fetch_stacks(BIND, port, "x")
    assert doc is None and why.startswith("unreachable: ")


def test_an_answer_that_is_not_a_document():
    listener = socket.create_server((BIND, 0))

    def answer_once() -> None:
        conn, _ = listener.accept()
        conn.recv(4096)
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n[1, 2]")
        conn.close()

    thread = threading.Thread(target=answer_once)
    thread.start()
    try:
        assert fetch_stacks(BIND, listener.getsockname()[1], "x") == (
            None, "not a stacks document")
    finally:
        thread.join(10)
        listener.close()
