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


# The race a killed peer starts in the survivor: its collective fails ("Connection reset by
# peer") in the main thread while its lifeline sees the peer's connection close. The account
# that names the peer must win whichever comes first. Through the CLI's own path, in a child
# process (the account ends the process), with `train` raising what the collective raises.
_RACE = """
import sys, threading
from tpujob_trainer import cli, distributed, loop
from tpujob_trainer.exits import Reason, TrainerExit

class Started:  # stands in for the watcher and lifeline that watch_for_failures starts
    def close(self): pass

def watch(penv):
    distributed._lifeline = Started()

def train(*args, **kwargs):
    if sys.argv[1] == "account":
        # The lifeline's account comes only once the main thread has failed: the order of the
        # race that lost it before.
        threading.Thread(target=lambda: (failed.wait(), distributed._leave(
            Reason.PEER_LOST, "process 1 vanished without a reason"))).start()
    failed.set()
    raise TrainerExit(Reason.PEER_LOST, "JaxRuntimeError: Gloo all-reduce failed: "
                                        "Connection reset by peer")

failed = threading.Event()
distributed.initialize = lambda penv: None
distributed.watch_for_failures = watch
distributed.check_topology = lambda penv: None
distributed.PEER_ACCOUNT_WAIT_S = float(sys.argv[2])
loop.train = train
print(cli._run(["--config", sys.argv[3], "checkpoint.enabled=false"])[:2], flush=True)
"""


@pytest.mark.parametrize("account,wait_s,code,message", [
    ("account", 60.0, 42, "process 1 vanished without a reason"),
    ("none", 0.01, None, "JaxRuntimeError: Gloo all-reduce failed: Connection reset by peer"),
])
def test_a_failed_collective_waits_for_the_account_that_names_the_lost_peer(
        tmp_path, account, wait_s, code, message):
    import json
    import subprocess
    import sys

    from tests.trainer.helpers import TINY_YAML, clean_env

    term = tmp_path / "term"
    proc = subprocess.run([sys.executable, "-c", _RACE, account, str(wait_s), str(TINY_YAML)],
                          env=clean_env(TPUJOB_TERMINATION_LOG=str(term)), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert json.loads(term.read_text())["message"] == message, proc.stderr[-2000:]
    if code is not None:   # ended by the account, which never returns to the CLI
        assert proc.returncode == code and "(42" not in proc.stdout, proc.stdout
    else:                  # no account came: the CLI's own, after the wait
        assert "(42, <Reason.PEER_LOST" in proc.stdout, proc.stdout + proc.stderr[-2000:]
