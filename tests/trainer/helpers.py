"""Shared pieces of the trainer tests: tiny configs and running the real `tpujob-train` CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tpujob_trainer.checkpoint import StepDirs

REPO = Path(__file__).resolve().parents[2]
TINY_YAML = REPO / "trainer" / "configs" / "tiny.yaml"

TINY_MODEL = dict(vocab_size=257, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                  mlp_dim=128, remat="none", dtype="float32")


@dataclass
class Run:
    returncode: int
    events: list[dict]
    stdout: str
    stderr: str
    termination: dict | None

    def of(self, event: str) -> list[dict]:
        return [e for e in self.events if e.get("event") == event]

    @property
    def steps(self) -> list[dict]:
        return self.of("step")


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's env without TPUJOB_* / XLA device flags, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TPUJOB_") and k not in ("XLA_FLAGS", "WANDB_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "trainer"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def parse_events(stdout: str) -> list[dict]:
    events = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            events.append(json.loads(line))
    return events


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tpujob_trainer.cli", *args]


def run_cli(args: list[str], tmp_path: Path, *, env: dict[str, str] | None = None,
            timeout: float = 180) -> Run:
    term = tmp_path / f"termination-{len(list(tmp_path.glob('termination-*')))}.log"
    proc = subprocess.run(cli_command(*args), capture_output=True, text=True, timeout=timeout,
                          env=clean_env(TPUJOB_TERMINATION_LOG=str(term), **(env or {})),
                          cwd=tmp_path)
    termination = _termination(term)
    return Run(proc.returncode, parse_events(proc.stdout), proc.stdout, proc.stderr, termination)


class LiveRun:
    """A `tpujob-train` subprocess whose stdout JSON lines are read as they come, so a test can
    act mid-run (query its HTTP endpoint, send a signal, kill it after a checkpoint)."""

    def __init__(self, args: list[str], tmp_path: Path, *, env: dict[str, str] | None = None,
                 name: str = "live"):
        self.termination_path = tmp_path / f"termination-{name}.log"
        self.events: list[dict] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            cli_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=clean_env(TPUJOB_TERMINATION_LOG=str(self.termination_path), **(env or {})),
            cwd=tmp_path)
        self._stderr: list[str] = []
        self._reading = threading.Event()
        self._reading.set()
        self._threads = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for t in self._threads:
            t.start()

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            self._reading.wait()
            if line.startswith("{"):
                with self._cond:
                    self.events.append(json.loads(line))
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self._stderr.append(line)

    def pause_reading(self) -> None:
        """Stop draining stdout: once the pipe is full (64 KiB) the trainer blocks in its next
        print, so it cannot run far past this point however fast it trains."""
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def wait_for(self, predicate, timeout: float = 120) -> dict:
        """The first event for which `predicate(event)` holds; fails on timeout or early exit."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for e in self.events[seen:]:
                    if predicate(e):
                        return e
                seen = len(self.events)
                if self.proc.poll() is not None and not self._threads[0].is_alive():
                    raise AssertionError(f"trainer exited ({self.proc.returncode}) before the "
                                         f"awaited event; stderr tail:\n{self.stderr[-3000:]}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no awaited event within {timeout}s; last events: "
                                         f"{self.events[-3:]}")
                self._cond.wait(min(left, 0.5))

    def finish(self, timeout: float = 120) -> Run:
        """Wait for the exit (kill on timeout, then fail) and return what it left behind."""
        self.resume_reading()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"trainer did not exit within {timeout}s") from None
        for t in self._threads:
            t.join(timeout=10)
        termination = _termination(self.termination_path)
        return Run(self.proc.returncode, list(self.events), "", self.stderr, termination)

    def kill(self) -> None:
        self.resume_reading()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def __enter__(self) -> LiveRun:
        return self

    def __exit__(self, *exc) -> None:
        self.kill()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_until_complete(directory: str, step: int, timeout: float = 60) -> None:
    """Until checkpoint `step` in `directory` is complete (read straight from storage)."""
    dirs = StepDirs(directory)
    deadline = time.monotonic() + timeout
    while step not in dirs.complete_steps(quiet=True):
        assert time.monotonic() < deadline, f"checkpoint {step} never completed in {directory}"
        time.sleep(0.2)


def process_env(process_id: int, port: int, *, processes: int = 2, devices: int = 4,
                init_timeout_s: int = 60) -> dict[str, str]:
    """The TPUJOB_* variables of one process of a multi-process job on 127.0.0.1:`port`."""
    return {"TPUJOB_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
            "TPUJOB_PROCESS_ID": str(process_id), "TPUJOB_PROCESS_COUNT": str(processes),
            "TPUJOB_EXPECTED_DEVICES": str(processes * devices),
            "TPUJOB_CPU_DEVICES": str(devices), "TPUJOB_INIT_TIMEOUT_S": str(init_timeout_s)}


def run_two_processes(args: list[str], tmp_path: Path, *, timeout: float = 240,
                      env: list[dict[str, str]] | None = None,
                      ) -> list[tuple[int, str, str, dict | None]]:
    """Both processes of a 2 x 4-device job to their end: (exit code, stdout, stderr,
    termination message) each; `env`: each process's own extra variables. On timeout both are
    killed and the test fails with what they printed (a hang must fail, not block)."""
    port = free_port()
    procs = []
    for pid in range(2):
        extra = env[pid] if env else {}
        process_vars = clean_env(**process_env(pid, port), **extra,
                                 TPUJOB_TERMINATION_LOG=str(tmp_path / f"term{pid}"))
        procs.append(subprocess.Popen(cli_command(*args), env=process_vars, cwd=tmp_path,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + timeout
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic())))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        tails = [p.communicate()[1][-2000:] for p in procs]
        pytest.fail(f"2-process run did not finish within {timeout}s; stderr tails:\n"
                    + "\n---\n".join(tails))
    terms = [_termination(tmp_path / f"term{pid}") for pid in range(2)]
    return [(p.returncode, out, err, term)
            for p, (out, err), term in zip(procs, outs, terms, strict=True)]


def _termination(path: Path) -> dict | None:
    """The termination message a process wrote, or None where it wrote none (a process killed
    before its end leaves no file or an empty one): the test then fails on the exit codes and
    stderr it asserts, not on a JSON error that hides them."""
    text = path.read_text() if path.exists() else ""
    return json.loads(text) if text else None
