"""The operator's reads of the trainer's endpoints: a stack request against the real endpoint
(the answer as the trainer gives it); a process that accepts the connection but never answers
(stopped, or holding the GIL) reported as no answer within the timeout; a program without
/stacks, no listener at all, an answer that is not a document or is over 4 MiB; a progress
document read up to 64 KiB."""

from __future__ import annotations

import io
import socket
import threading

import pytest

from tpujob.controller.progress import fetch_progress, fetch_stacks
from tpujob_trainer.telemetry.server import Progress, ProgressServer
from tpujob_trainer.telemetry.stacks import StackDumper

pytestmark = pytest.mark.integration
BIND = "127.0.0.3"


def test_the_answer_of_a_live_process(tmp_path):
    server = ProgressServer(Progress(), 0, host=BIND,
                            stacks=StackDumper("slice-0/host-0", str(tmp_path),
                                               err=io.StringIO()))
    try:
        doc, why = fetch_stacks(BIND, server.port, "hang-1", 10.0)
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
        assert fetch_stacks(BIND, bare.port, "x", 10.0) == (
            None, "HTTP 404 (the program serves no stacks)")
    finally:
        bare.close()
    free = socket.create_server((BIND, 0))
    port = free.getsockname()[1]
    free.close()
    doc, why = fetch_stacks(BIND, port, "x", 10.0)
    assert doc is None and why.startswith("unreachable: ")


def answering(body: bytes):
    """A listener that answers one request with `body`; (port, the thread, the listener)."""
    listener = socket.create_server((BIND, 0))

    def answer_once() -> None:
        conn, _ = listener.accept()
        conn.recv(4096)
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + body)
        conn.close()

    thread = threading.Thread(target=answer_once)
    thread.start()
    return listener.getsockname()[1], thread, listener


@pytest.mark.parametrize("body, why", [
    (b"[1, 2]", "not a stacks document"),
    (b"{not json", "not a stacks document"),
    # 4 MiB and a little more: cut at 4 MiB, not read to the end.
    (b'{"stacks": "' + b"x" * (4 * 2**20) + b'"}', "an answer over 4 MiB"),
])
def test_an_answer_that_is_not_a_document(body, why):
    port, thread, listener = answering(body)
    try:
        assert fetch_stacks(BIND, port, "x", 10.0) == (None, why)
    finally:
        thread.join(10)
        listener.close()


def test_an_answer_of_4_mib_exactly_is_read():
    body = b'{"stacks": "' + b"x" * (4 * 2**20 - 14) + b'"}'
    assert len(body) == 4 * 2**20
    port, thread, listener = answering(body)
    try:
        doc, why = fetch_stacks(BIND, port, "x", 10.0)
    finally:
        thread.join(10)
        listener.close()
    assert why is None and len(doc["stacks"]) == 4 * 2**20 - 14


@pytest.mark.parametrize("size, read", [(64 * 1024, True), (64 * 1024 + 24, False)])
def test_a_progress_document_is_read_up_to_64_kib(size, read):
    body = b'{"step": 7, "pad": "' + b"x" * (size - 22) + b'"}'
    assert len(body) == size
    port, thread, listener = answering(body)
    try:
        reading = fetch_progress(BIND, port, 10.0)
    finally:
        thread.join(10)
        listener.close()
    assert (reading is not None and reading.step == 7) == read
