"""Starting and stopping the real control plane's programs as processes of this machine, each
waited on by its own readiness signal, each writing its log under the work directory."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import requests


class ComponentError(RuntimeError):
    """A program of the control plane did not start; the message has its log's end."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Component:
    """One program: started in a session of its own (so stopping it stops its children),
    stdout and stderr to `<logs>/<name>.log`."""

    def __init__(self, name: str, argv: list[str], logs: Path,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = logs / f"{name}.log"
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self) -> Component:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env=self.env)
        return self

    def wait_ready(self, is_ready: Callable[[], bool], timeout_s: float) -> None:
        """Poll `is_ready` until it says yes; ComponentError when the process exits first or
        `timeout_s` passes."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise ComponentError(f"{self.name} exited with {self.proc.returncode} while "
                                     f"starting:\n{self.log_tail()}")
            try:
                if is_ready():
                    return
            except (OSError, requests.RequestException, ssl.SSLError):
                pass
            if time.monotonic() > deadline:
                raise ComponentError(f"{self.name} not ready after {timeout_s:.0f} s:\n"
                                     f"{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_s: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(5)


def is_tls_listening(port: int) -> bool:
    """Whether a TLS server accepts a handshake on 127.0.0.1:port (a webhook server is up)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=1) as raw:
        with context.wrap_socket(raw):
            return True
