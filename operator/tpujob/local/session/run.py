"""`tpujob local run FILE` and `tpujob local up`: local mode for a person at a terminal.

`run_file` starts a `LocalCluster`, applies the file, shows the jobs' progress until every
TpuTrainingJob in it has finished, and returns an exit status: 0 when all succeeded, 1 when one
failed or was refused (its reason printed), 2 for a file that cannot be used, 124 after
`timeout_s`, 128 + N when interrupted by signal N (130 for Ctrl-C, 143 for SIGTERM). `serve` keeps a cluster up for kubectl
until interrupted. Both stop every piece, and every process, before they return.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tpujob.local.session.cluster import LocalCluster, LocalSettings, StartError
from tpujob.local.session.display import Display, build_event_line
from tpujob.local.session.gcs import GcsEmulatorError
from tpujob.local.session.manifests import (
    DEFAULT_NAMESPACE,
    ApplyError,
    ManifestError,
    load_documents,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_TIMEOUT = 0, 1, 2, 124
SIGNAL_BASE = 128  # interrupted by signal N: exit 128 + N, as a shell reports it
TERMINAL = ("Succeeded", "Failed", "Invalid")
LOG_TAIL_LINES = 15


@dataclass(frozen=True)
class RunOptions:
    timeout_s: float | None = None     # None: wait as long as it takes
    workdir: Path | None = None        # None: a temporary directory, removed unless `keep`
    keep: bool = False
    cpu_devices_per_process: int | None = 1
    poll_s: float = 0.5
    control_plane: str = "embedded"    # or "real" (LocalSettings.control_plane)


class Interrupt:
    """Set by SIGINT/SIGTERM (see `handle_signals`); what the loops wait on."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal: int | None = None

    def set(self, signum: int | None = None) -> None:
        self.signal = signum
        self.event.set()

    def wait(self, seconds: float) -> bool:
        return self.event.wait(seconds)

    def is_set(self) -> bool:
        return self.event.is_set()


@contextlib.contextmanager
def handle_signals(interrupt: Interrupt) -> Iterator[Interrupt]:
    """SIGINT and SIGTERM set `interrupt` instead of killing the process, so that everything
    is stopped in order (a no-op outside the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield interrupt
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, lambda signum, _frame: interrupt.set(signum))
    try:
        yield interrupt
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def _workdir(options: RunOptions, err: TextIO) -> Iterator[Path]:
    if options.workdir is not None:
        path = Path(options.workdir).resolve()
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    path = Path(tempfile.mkdtemp(prefix="tpujob-local-"))
    try:
        yield path
    finally:
        if options.keep:
            err.write(f"work directory kept: {path}\n")
        else:
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _log_to_file(path: Path | None) -> Iterator[None]:
    """Send every log line (the operator's, kopf's) to `path` instead of the terminal, where
    it would break up the progress lines."""
    if path is None:
        yield
        return
    root = logging.getLogger()
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = root.level, list(root.handlers)
    for h in saved[1]:
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()
        for h in saved[1]:
            root.addHandler(h)
        root.setLevel(saved[0])


def run_file(path: str | Path, options: RunOptions = RunOptions(), *,
             out: TextIO | None = None, err: TextIO | None = None,
             interrupt: Interrupt | None = None, live: bool | None = None,
             log_file: bool = False) -> int:
    """Run the TpuTrainingJobs (and other objects) in `path` locally; see the module doc."""
    out, err = out or sys.stdout, err or sys.stderr
    interrupt = interrupt or Interrupt()
    try:
        documents = load_documents(path)
    except ManifestError as e:
        err.write(f"tpujob local run: {e}\n")
        return EXIT_USAGE
    jobs = [d for d in documents if d.get("kind") == "TpuTrainingJob"]
    if not jobs:
        err.write(f"tpujob local run: {path} holds no TpuTrainingJob\n")
        return EXIT_USAGE
    if refusals := _refuse_fields(jobs):
        for line in refusals:
            err.write(f"tpujob local run: {line}\n")
        return EXIT_FAILED
    with _workdir(options, err) as workdir, \
            _log_to_file(workdir / "operator.log" if log_file else None):
        display = Display(out=out, live=live)
        display.message(f"Starting local mode in {workdir}: Kubernetes API server, operator, "
                        "executor, GCS emulator")
        cluster = LocalCluster(workdir, LocalSettings(
            cpu_devices_per_process=options.cpu_devices_per_process,
            control_plane=options.control_plane))
        try:
            try:
                cluster.start()
            except (OSError, GcsEmulatorError, StartError) as e:
                err.write(f"tpujob local run: cannot start local mode: {e}\n")
                return EXIT_FAILED
            if interrupt.is_set():
                return _interrupted(interrupt, err)
            try:
                created = cluster.apply(documents)
            except ApplyError as e:
                err.write(f"tpujob local run: {e}\n")
                return EXIT_FAILED
            keys = [(o["metadata"].get("namespace", DEFAULT_NAMESPACE), o["metadata"]["name"])
                    for o in created if o.get("kind") == "TpuTrainingJob"]
            display.message("Applied " + ", ".join(
                f"{o['kind']} {o['metadata']['name']}" for o in created))
            code = _follow(cluster, keys, display, options, interrupt, err)
        finally:
            if interrupt.is_set():
                err.write("stopping: trainer processes, operator, GCS emulator, API server\n")
            cluster.stop()
        if options.keep or options.workdir is not None:
            display.message(f"Logs: {workdir}/pods/<namespace>/<pod>/containers/<container>/"
                            "<restart>.log; the emulated bucket: " f"{workdir}/gcs")
        return code


def _refuse_fields(jobs: list[dict[str, Any]]) -> list[str]:
    """`name: reason: message` for each job whose fields `tpujob render` would refuse (an
    unknown field above all: the API server would prune it, and the job run without it)."""
    from tpujob.validation import validate_fields

    lines = []
    for job in jobs:
        verdict = validate_fields(job)
        if not verdict.valid:
            lines.append(f"{job['metadata']['name']}: {verdict.reason}: {verdict.message}")
    return lines


def _follow(cluster: LocalCluster, keys: list[tuple[str, str]], display: Display,
            options: RunOptions, interrupt: Interrupt, err: TextIO) -> int:
    """Show progress until every job is terminal, the time is up or an interrupt."""
    started = time.monotonic()
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    seen_events: set[str] = set()
    names = {name for _, name in keys}
    while True:
        for key in keys:
            job = cluster.job(*key)
            if job is None:  # deleted by someone else
                job = _deleted(latest.get(key), key)
            latest[key] = job
        for namespace in sorted({ns for ns, _ in keys}):
            for event in cluster.events(namespace):
                involved = event.get("involvedObject") or {}
                uid = event["metadata"].get("uid", "")
                if (involved.get("kind") == "TpuTrainingJob" and involved.get("name") in names
                        and uid not in seen_events):
                    seen_events.add(uid)
                    prefix = f"{involved['name']}:" if len(keys) > 1 else ""
                    display.message(prefix + build_event_line(event))
        jobs = [latest[k] for k in keys]
        phases = [(j.get("status") or {}).get("phase") for j in jobs]
        done = all(p in TERMINAL for p in phases)
        display.update(jobs, final=done)
        if done:
            return _summarize(cluster, jobs, display, err, time.monotonic() - started)
        if interrupt.is_set():
            return _interrupted(interrupt, err)
        if options.timeout_s is not None and time.monotonic() - started > options.timeout_s:
            display.update(jobs, final=True)
            waiting = ", ".join(f"{j['metadata']['name']} ({p or 'Pending'})"
                                for j, p in zip(jobs, phases, strict=True) if p not in TERMINAL)
            err.write(f"tpujob local run: timed out after {options.timeout_s:g} s; still "
                      f"running: {waiting}\n")
            return EXIT_TIMEOUT
        interrupt.wait(options.poll_s)


def _deleted(last: dict[str, Any] | None, key: tuple[str, str]) -> dict[str, Any]:
    job = dict(last or {"metadata": {"namespace": key[0], "name": key[1]}})
    job["status"] = {**(job.get("status") or {}), "phase": "Failed",
                     "failure": {"reason": "Deleted", "message": "the job was deleted"}}
    return job


def _interrupted(interrupt: Interrupt, err: TextIO) -> int:
    signum = interrupt.signal or signal.SIGINT
    err.write(f"tpujob local run: {signal.Signals(signum).name} received\n")
    return SIGNAL_BASE + signum


def _summarize(cluster: LocalCluster, jobs: list[dict[str, Any]], display: Display,
               err: TextIO, elapsed_s: float) -> int:
    code = EXIT_OK
    for job in jobs:
        name, status = job["metadata"]["name"], job.get("status") or {}
        progress = status.get("progress") or {}
        goodput = _goodput_line(status)
        if status.get("phase") == "Succeeded":
            loss = progress.get("loss")
            loss_text = f", final loss {loss:.4f}" if loss is not None else ""
            steps = f"{progress['step']} steps" if progress.get("step") else "done"
            display.message(f"{name} succeeded: {steps}{loss_text} in "
                            f"{elapsed_s:.0f} s; output {job['spec'].get('output')}")
            if goodput:
                display.message(f"{name} {goodput}")
            continue
        if goodput:
            display.message(f"{name} {goodput}")
        code = EXIT_FAILED
        failure = status.get("failure") or {}
        err.write(f"{name} {status.get('phase', 'Failed').lower()}: "
                  f"{failure.get('reason', 'Error')}: {failure.get('message', '')}\n")
        tail = _failed_log_tail(cluster, job["metadata"].get("namespace", DEFAULT_NAMESPACE),
                                failure)
        if tail:
            err.write(tail)
    return code


def _goodput_line(status: dict[str, Any]) -> str | None:
    """status.goodput in one line (the operator's Goodput Event says the same)."""
    from pydantic import ValidationError

    from tpujob.api.status import Goodput
    from tpujob.controller.goodput import summary

    if not status.get("goodput"):
        return None
    try:
        return summary(Goodput.model_validate(status["goodput"]))
    except ValidationError:
        return None


def _failed_log_tail(cluster: LocalCluster, namespace: str, failure: dict[str, Any]) -> str:
    """The last lines of the log of the container status.failure names."""
    pod, container = failure.get("pod"), failure.get("container")
    if not pod or not container:
        return ""
    directory = cluster.workdir / "pods" / namespace / pod / "containers" / container
    logs = sorted(directory.glob("*.log"), key=lambda p: int(p.stem) if p.stem.isdigit() else 0)
    if not logs:
        return ""
    lines = logs[-1].read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    header = f"--- last lines of {pod}/{container} ({logs[-1]}) ---\n"
    return header + "".join(f"  {line}\n" for line in lines)


def serve(kubeconfig: Path, options: RunOptions, port: int = 0, *, out: TextIO | None = None,
          interrupt: Interrupt | None = None, log_file: bool = False) -> int:
    """Keep local mode up for kubectl until interrupted (`tpujob local up`)."""
    out = out or sys.stdout
    interrupt = interrupt or Interrupt()
    with _workdir(options, out) as workdir, \
            _log_to_file(workdir / "operator.log" if log_file else None):
        cluster = LocalCluster(workdir, LocalSettings(
            port=port, cpu_devices_per_process=options.cpu_devices_per_process,
            control_plane=options.control_plane))
        try:
            try:
                cluster.start()
            except (OSError, GcsEmulatorError, StartError) as e:
                out.write(f"tpujob local up: cannot start local mode: {e}\n")
                return EXIT_FAILED
            path = cluster.write_kubeconfig(kubeconfig).resolve()
            out.write(_up_message(cluster, path, workdir))
            out.flush()
            while not interrupt.wait(1.0):
                pass
            out.write("stopping: trainer processes, operator, GCS emulator, API server\n")
            out.flush()
        finally:
            cluster.stop()
    return EXIT_OK


def _up_message(cluster: LocalCluster, kubeconfig: Path, workdir: Path) -> str:
    gcs = cluster.gcs.url if cluster.gcs is not None else "off"
    return (
        "tpujob local mode is up\n"
        f"  Kubernetes API server  {cluster.url}\n"
        f"  operator               running (the same code as in a cluster)\n"
        f"  executor               JobSets run as local processes (JAX on CPU)\n"
        f"  GCS emulator           {gcs} (gs:// buckets created for each job's output)\n"
        f"  kubeconfig             {kubeconfig}\n"
        f"  work directory         {workdir} (container logs under pods/)\n"
        "\nUse it:\n"
        f"  export KUBECONFIG={kubeconfig}\n"
        "  kubectl apply -f manifests/examples/quickstart.yaml\n"
        "  kubectl get tpujobs -w\n"
        "  kubectl describe tpujob quickstart\n"
        "\nCtrl-C stops everything.\n")

