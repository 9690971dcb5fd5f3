"""Peer liveness over plain TCP: every process keeps one connection to process 0, so a process
that dies without a word (SIGKILL, the OOM killer, a crash) is noticed by the others as soon as
its connection closes. Without it, the survivors wait in a collective until JAX's heartbeat
timeout (100 s), and JAX then aborts them with no reason left behind.

Process 0 listens on a port of its own choosing (on TPUJOB_BIND_ADDRESS, else all interfaces)
and publishes it in the coordination service's key-value store; the others connect to it at the
coordinator's host. A process that ends normally says `done` first, so its close is not a loss.
Best effort: where the connection cannot be made, JAX's heartbeat remains the only watch.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

PORT_KEY = "tpujob/lifeline/port"
_HELLO, _DONE = "hello", "done"


def _keepalive(sock: socket.socket) -> None:
    """A host that vanishes without closing its sockets is noticed in about 25 s."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def _listen(bind_address: str | None) -> socket.socket:
    if bind_address:
        family = socket.AF_INET6 if ":" in bind_address else socket.AF_INET
        return socket.create_server((bind_address, 0), family=family)
    if socket.has_dualstack_ipv6():
        try:
            return socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
        except OSError:  # IPv6 present but disabled
            pass
    return socket.create_server(("", 0))


class Lifeline:
    """This process's end of the connections; `on_lost(process)` runs (in the lifeline's own
    thread) when a peer's connection closes without `done`, unless `close()` ran first."""

    def __init__(self, on_lost: Callable[[int], None]):
        self._on_lost = on_lost
        self._closing = threading.Event()
        self._peers: dict[socket.socket, int | None] = {}  # connection -> process (None: not said)
        self._lock = threading.Lock()

    @classmethod
    def start(cls, client, *, process_id: int, coordinator_address: str,
              bind_address: str | None, on_lost: Callable[[int], None],
              timeout_s: float = 60.0) -> Lifeline | None:
        """Process 0 listens; every other process connects to it. None when that failed."""
        line = cls(on_lost)
        try:
            if process_id == 0:
                server = _listen(bind_address)
                client.key_value_set(PORT_KEY, str(server.getsockname()[1]))
                target, args = line._serve, (server,)
            else:
                port = int(client.blocking_key_value_get(PORT_KEY, int(timeout_s * 1000)))
                host = coordinator_address.rsplit(":", 1)[0].strip("[]")
                conn = socket.create_connection((host, port), timeout=timeout_s)
                conn.settimeout(None)
                _keepalive(conn)
                conn.sendall(f"{_HELLO} {process_id}\n".encode())
                line._peers[conn] = 0
                target, args = line._follow, (conn,)
        except Exception as e:  # best effort: JAX's heartbeat still watches
            log.warning("no lifeline to the other processes (%s: %s); a process that dies "
                        "without a word is noticed only by JAX's heartbeat", type(e).__name__, e)
            return None
        threading.Thread(target=target, args=args, name="tpujob-lifeline", daemon=True).start()
        return line

    def close(self) -> None:
        """Normal end: tell every peer, so that this process's exit is not taken for a loss."""
        self._closing.set()
        with self._lock:
            conns = list(self._peers)
        for conn in conns:
            try:
                conn.sendall(f"{_DONE}\n".encode())
            except OSError:
                pass

    def _lost(self, process: int | None) -> None:
        if process is not None and not self._closing.is_set():
            self._on_lost(process)

    def _follow(self, conn: socket.socket) -> None:
        """Any other process: one connection, to process 0."""
        if not _read_until_done(conn):
            self._lost(0)

    def _serve(self, server: socket.socket) -> None:
        """Process 0: accept every other process and watch all connections in one thread."""
        sel = selectors.DefaultSelector()
        sel.register(server, selectors.EVENT_READ)
        buffers: dict[socket.socket, bytes] = {}
        while True:
            for key, _ in sel.select():
                sock = key.fileobj
                if sock is server:
                    conn, _ = server.accept()
                    _keepalive(conn)
                    with self._lock:
                        self._peers[conn] = None
                    buffers[conn] = b""
                    sel.register(conn, selectors.EVENT_READ)
                    continue
                try:
                    data = sock.recv(256)
                except OSError:
                    data = b""
                buffers[sock] += data
                *lines, buffers[sock] = buffers[sock].split(b"\n")
                for raw in lines:
                    word, _, arg = raw.decode(errors="replace").partition(" ")
                    if word == _HELLO and arg.isdigit():
                        self._peers[sock] = int(arg)
                    elif word == _DONE:
                        self._peers[sock] = None  # its close is no loss
                if not data:
                    sel.unregister(sock)
                    self._lost(self._peers.get(sock))


def _read_until_done(conn: socket.socket) -> bool:
    """True once the other side says done; False when the connection closes before."""
    buffer = b""
    while True:
        try:
            data = conn.recv(256)
        except OSError:
            return False
        if not data:
            return False
        buffer += data
        if f"{_DONE}\n".encode() in buffer:
            return True
