"""The lifeline between processes, both ends in one test process over 127.0.0.1, with a
key-value store standing in for the coordination service."""

from __future__ import annotations

import queue
import socket
import threading
import time

import pytest

from tpujob_trainer.lifeline import PORT_KEY, Lifeline

pytestmark = pytest.mark.integration  # loopback sockets


class KeyValues:
    """The two calls of the coordination-service client the lifeline makes."""

    def __init__(self):
        self.values: dict[str, str] = {}
        self._cond = threading.Condition()

    def key_value_set(self, key: str, value: str) -> None:
        with self._cond:
            self.values[key] = value
            self._cond.notify_all()

    def blocking_key_value_get(self, key: str, timeout_ms: int) -> str:
        with self._cond:
            assert self._cond.wait_for(lambda: key in self.values, timeout_ms / 1000)
            return self.values[key]


def start_pair() -> tuple[Lifeline, Lifeline, queue.Queue, queue.Queue]:
    kv, lost0, lost1 = KeyValues(), queue.Queue(), queue.Queue()
    hub = Lifeline.start(kv, process_id=0, coordinator_address="127.0.0.1:1",
                         bind_address="127.0.0.1", on_lost=lost0.put)
    spoke = Lifeline.start(kv, process_id=1, coordinator_address="127.0.0.1:1",
                           bind_address=None, on_lost=lost1.put)
    assert hub is not None and spoke is not None and PORT_KEY in kv.values
    deadline = time.monotonic() + 5
    while not hub._peers:  # process 0 takes the connection in its own thread
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return hub, spoke, lost0, lost1


def cut(line: Lifeline) -> None:
    """What the kernel does to the connections of a process that is killed."""
    for conn in list(line._peers):
        conn.shutdown(socket.SHUT_RDWR)


def test_a_process_that_vanishes_is_reported_by_process_0():
    hub, spoke, lost0, _ = start_pair()
    cut(spoke)
    assert lost0.get(timeout=5) == 1


def test_process_0_vanishing_is_reported_by_the_others():
    hub, spoke, _, lost1 = start_pair()
    cut(hub)
    assert lost1.get(timeout=5) == 0


@pytest.mark.parametrize("leaving", ["process 0", "process 1"])
def test_a_process_that_says_done_first_is_no_loss(leaving):
    hub, spoke, lost0, lost1 = start_pair()
    line, watcher = (hub, lost1) if leaving == "process 0" else (spoke, lost0)
    line.close()
    cut(line)
    with pytest.raises(queue.Empty):
        watcher.get(timeout=1)


def test_no_lifeline_when_process_0_never_publishes_its_port():
    assert Lifeline.start(KeyValues(), process_id=1, coordinator_address="127.0.0.1:1",
                          bind_address=None, on_lost=print, timeout_s=0.2) is None
