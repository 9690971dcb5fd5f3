"""The lifeline between processes, both ends in one test process over 127.0.0.1, with a
key-value store standing in for the coordination service."""

from __future__ import annotations

import queue
import socket
import struct
import threading
import time

import pytest

from tpujob_trainer.lifeline import PORT_KEY, Lifeline

pytestmark = pytest.mark.integration  # loopback sockets


class KeyValues:
    """The two calls of the coordination-service client the lifeline makes."""

    def __init__(self):
        self.values: dict[str, str] = {}
        self.waits_ms: list[int] = []
        self._cond = threading.Condition()

    def key_value_set(self, key: str, value: str) -> None:
        with self._cond:
            self.values[key] = value
            self._cond.notify_all()

    def blocking_key_value_get(self, key: str, timeout_ms: int) -> str:
        self.waits_ms.append(timeout_ms)
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


def test_every_connection_probes_a_silent_host_within_25_seconds():
    """A host that vanishes without closing its sockets (power lost, network cut) answers no
    keepalive probe: noticed 10 s idle + 3 probes 5 s apart later, on both ends."""
    hub, spoke, _, _ = start_pair()
    conns = list(hub._peers) + list(spoke._peers)
    assert len(conns) == 2
    for conn in conns:
        assert conn.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert [conn.getsockopt(socket.IPPROTO_TCP, getattr(socket, name)) for name in
                ("TCP_KEEPIDLE", "TCP_KEEPINTVL", "TCP_KEEPCNT")] == [10, 5, 3]
    hub.close()
    spoke.close()


def test_without_ipv6_process_0_listens_on_a_free_ipv4_port(monkeypatch):
    """Where IPv6 is off, process 0 listens on IPv4, on a port the system picks: several jobs'
    processes on one host each get their own."""
    from tpujob_trainer import lifeline

    monkeypatch.setattr(lifeline.socket, "has_dualstack_ipv6", lambda: False)
    servers = [lifeline._listen(None) for _ in range(2)]
    try:
        assert all(s.family == socket.AF_INET for s in servers)
        assert servers[0].getsockname()[1] != servers[1].getsockname()[1]
    finally:
        for server in servers:
            server.close()


def test_process_0_vanishing_mid_word_is_a_loss():
    """Killed while its `done` was on the way (half of it sent): not a normal end."""
    hub, spoke, _, lost1 = start_pair()
    for conn in list(hub._peers):
        conn.sendall(b"do")
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
    kv = KeyValues()
    assert Lifeline.start(kv, process_id=1, coordinator_address="127.0.0.1:1",
                          bind_address=None, on_lost=print, timeout_s=1.0) is None
    assert kv.waits_ms == [1000]   # it waited as long as it was told


def test_the_lifeline_never_holds_a_process_open_at_its_end():
    start_pair()
    threads = [t for t in threading.enumerate() if t.name == "tpujob-lifeline"]
    assert len(threads) >= 2 and all(t.daemon for t in threads)


def test_process_0_listens_for_ipv4_and_ipv6_on_a_free_port():
    """Without a bind address (a pod's), process 0 takes IPv4 and IPv6 connections on one port
    the system picks, as the coordinator's address may be either."""
    from tpujob_trainer.lifeline import _listen

    assert socket.has_dualstack_ipv6()
    servers = [_listen(None) for _ in range(2)]
    try:
        ports = [server.getsockname()[1] for server in servers]
        assert ports[0] != ports[1]
        for port in ports:
            for host in ("127.0.0.1", "::1"):
                socket.create_connection((host, port), timeout=5).close()
    finally:
        for server in servers:
            server.close()


def test_what_is_not_a_peer_on_the_port_changes_nothing():
    """Something else connecting to process 0's port (a scanner, a health check) and sending
    what is not a greeting: no loss when it goes, and the real peers are still watched."""
    hub, spoke, lost0, _ = start_pair()
    port = next(iter(spoke._peers)).getpeername()[1]
    for junk in (b"hello x\n", b"GET / HTTP/1.0\r\n\r\n", b"done 3\n"):
        stranger = socket.create_connection(("127.0.0.1", port), timeout=5)
        stranger.sendall(junk)
        stranger.close()
    cut(spoke)
    assert lost0.get(timeout=5) == 1
    assert lost0.empty()


def test_process_0_s_connection_reset_is_a_loss():
    """A reset (the peer's host rebooted, a firewall dropped the flow) rather than a close."""
    hub, spoke, _, lost1 = start_pair()
    for conn in list(hub._peers):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
    assert lost1.get(timeout=5) == 0


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
