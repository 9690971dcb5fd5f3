"""Local mode, the whole system: one `LocalCluster` per test session (the embedded API server,
a GCS emulator, the operator in a thread, the local executor running pods as processes), and a
namespace of its own for each test module. Jobs go in as `kubectl apply` sends them and are
watched through their status, as a person would."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.apiserver import wait_for
from tpujob.controller.settings import OperatorSettings
from tpujob.local.session import LocalCluster, LocalSettings
from tpujob.local.session.cluster import LOCAL_OPERATOR

ROOT = Path(__file__).resolve().parents[2]
TERMINAL = ("Succeeded", "Failed", "Invalid")
# status.recoveries' parts, in order (each `<part>Seconds`).
RECOVERY_PARTS = ("detect", "schedule", "start", "init", "prepare", "restore", "compile",
                  "firstStep")

# Fast reactions: progress read often, short grace periods and back-offs.
E2E_OPERATOR = OperatorSettings(**(LOCAL_OPERATOR.__dict__ | dict(
    progress_interval_s=0.3, resync_interval_s=2.0, retry_delays_s=(0.2, 0.5, 1.0),
    host_report_interval_s=0.3)))
# Every pod's trainer shares the test run's JAX compilation cache (tests/conftest.py), as the
# trainer tests do: the jobs here train the same few small configs. (Imported outside pytest, by
# the benchmarks, there is none: their jobs compile as a user's would.)
E2E_EXECUTOR = dict(grace_scale=0.02, max_grace_s=2.0, stop_grace_s=2.0, job_backoff_s=0.1,
                    container_backoff_s=0.1, resync_s=0.5,
                    extra_env={k: os.environ[k] for k in ("JAX_COMPILATION_CACHE_DIR",)
                               if k in os.environ})

# A tiny decoder: fast on CPU, with enough steps that a run is still going a few seconds
# after its first checkpoint.
TINY = {"model": {"vocab_size": 257, "d_model": 32, "n_layers": 1, "n_heads": 2,
                  "n_kv_heads": 2, "head_dim": 16, "mlp_dim": 64, "remat": "none",
                  "dtype": "float32"},
        "train": {"steps": 120, "global_batch": 8, "seq_len": 32},
        "optimizer": {"lr": 3.0e-3, "warmup_steps": 5},
        "data": {"synthetic_pattern": "ramp"},
        "checkpoint": {"every": 20, "keep": 10},
        "metrics": {"measure_peak": False, "memory_every": 1000000}}


class Local:
    """A namespace of the session's local cluster, with the calls the tests make."""

    def __init__(self, cluster: LocalCluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace

    @property
    def executor(self):
        return self.cluster.executor

    @property
    def gcs(self):
        return self.cluster.gcs

    def apply(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """Create a TpuTrainingJob, as `kubectl apply -f` would."""
        body = {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
                "metadata": {"name": name, "namespace": self.namespace}, "spec": spec}
        return self.cluster.apply([body])[0]

    def job(self, name: str) -> dict[str, Any] | None:
        return self.cluster.job(self.namespace, name)

    def status(self, name: str) -> dict[str, Any]:
        return (self.job(name) or {}).get("status") or {}

    def wait(self, name: str, predicate: Callable[[dict[str, Any]], Any], timeout: float = 60,
             message: str = "the job") -> dict[str, Any]:
        """Poll the job's status until `predicate(status)` holds; returns the job."""
        def check():
            job = self.job(name)
            return job if job is not None and predicate(job.get("status") or {}) else None
        return wait_for(check, timeout=timeout, interval=0.1,
                        message=f"{message} (status now {self.status(name)})")

    def wait_phase(self, name: str, *phases: str, timeout: float = 60) -> dict[str, Any]:
        return self.wait(name, lambda s: s.get("phase") in phases, timeout,
                         f"{name} to reach {' or '.join(phases)}")

    def pods(self, name: str) -> list[dict[str, Any]]:
        return self.cluster.pods(self.namespace, name)

    def processes(self, name: str | None = None) -> list[dict[str, Any]]:
        """Live processes of this namespace (of one job's pods, when named)."""
        return [p for p in self.executor.processes() if p["namespace"] == self.namespace
                and (name is None or p["pod"].startswith(f"{name}-"))]

    def logs(self, name: str, slice_index: int = 0, host: int = 0) -> list[Path]:
        """Log files of one host's trainer container over every pod that played it (a restart
        of the JobSet makes new pods), oldest first."""
        pods = self.cluster.workdir / "pods" / self.namespace
        files = pods.glob(f"{name}-slice-{slice_index}-{host}-*/containers/trainer*/*.log")
        return sorted(files, key=lambda p: p.stat().st_mtime)

    def events(self, name: str) -> list[dict[str, Any]]:
        """The operator's Events for the job (not the JobSet's, which has the same name)."""
        return [e for e in self.cluster.events(self.namespace, name)
                if e["involvedObject"].get("kind") == "TpuTrainingJob"]

    def wait_events(self, name: str, *reasons: str, timeout: float = 60) -> dict[str, str]:
        """The job's Events by reason (the newest message of each) once every one of `reasons`
        is there: the operator posts its Events after the status patch that goes with them,
        from a queue, so a status seen is no sign that its Events are posted yet."""
        def ready():
            by_reason = {e["reason"]: e["message"] for e in self.events(name)}
            return by_reason if set(reasons) <= set(by_reason) else None

        return wait_for(ready, timeout=timeout, interval=0.2,
                        message=f"the Events {', '.join(reasons)} of {name}")


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The trainer's JSON lines in a log (other output, such as JAX's, skipped)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def steps(path: Path) -> dict[int, float]:
    """step -> loss, from a trainer log's per-step lines."""
    return {e["step"]: e["loss"] for e in json_lines(path) if e.get("event") == "step"}


def resumed_steps(local: Local, name: str) -> tuple[dict[int, float], dict[int, float], int]:
    """Host 0's two runs of a job that resumed once: (step -> loss before, after, the step
    the second run restored)."""
    first, second = local.logs(name)
    restored = [e["step"] for e in json_lines(second)
                if e["event"] == "memory" and e.get("phase") == "after_restore"]
    assert len(restored) == 1, restored
    return steps(first), steps(second), restored[0]


def is_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        # ProcessLookupError: it exited between the open and the read.
        return False


def command_line(process: psutil.Process) -> str:
    """A process's command line, "" once it is gone (a child listed a moment ago may have
    ended since: a short-lived helper, or a zombie whose command line is empty)."""
    try:
        return " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ""


def stop_tree(proc: subprocess.Popen, timeout: float = 30) -> None:
    """After a failed test: SIGTERM `proc` (so it stops what it started), wait, then SIGKILL
    it and whatever of its descendants is left."""
    if proc.poll() is not None:
        return
    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for child in descendants:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(2)}"


def stand_in(code: str, **extra: Any) -> dict[str, Any]:
    """A v6e-8 job (2 hosts) whose processes run `python -c code` instead of the trainer."""
    return {"slice": "v6e-8", "image": "stand-in:1", "output": "gs://tpujob-e2e/stand-in",
            "trainer": {"command": ["python", "-c", code]},
            "restartPolicy": {"maxRestarts": 0}, **extra}


def _start_cluster(workdir: Path, control_plane: str) -> LocalCluster:
    cluster = LocalCluster(workdir, LocalSettings(
        cpu_devices_per_process=1, operator=E2E_OPERATOR, executor=E2E_EXECUTOR,
        control_plane=control_plane))
    return cluster.start()


def _stop_cluster(cluster: LocalCluster) -> None:
    """Stop it; no process of it may be left."""
    pids = [p["pid"] for p in cluster.executor.processes()] + [cluster.gcs.proc.pid]
    if cluster.control_plane is not None:
        pids += [c.proc.pid for c in cluster.control_plane.components if c.proc]
    cluster.stop()
    left = [pid for pid in pids if is_alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"


@pytest.fixture(scope="session")
def embedded_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Local mode on the embedded API server, started once."""
    cluster = _start_cluster(tmp_path_factory.mktemp("local"), "embedded")
    try:
        yield cluster
    finally:
        _stop_cluster(cluster)


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Local mode on the real control plane (etcd, kube-apiserver, controller manager,
    scheduler, JobSet controller, the operator installed by helm), started once."""
    cluster = _start_cluster(tmp_path_factory.mktemp("real"), "real")
    try:
        yield cluster
    finally:
        _stop_cluster(cluster)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module that sets `CONTROL_PLANES = ("embedded", "real")` runs on both; any other on
    the embedded one. A test marked `control_planes(...)` runs on those only: where what it
    proves is the program's own (a third-party trainer's restart and resume), not the plane's,
    once is enough, on the real one."""
    if "control_plane" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("control_planes")
        planes = (marker.args if marker is not None
                  else getattr(metafunc.module, "CONTROL_PLANES", ("embedded",)))
        metafunc.parametrize("control_plane", planes, scope="module")


@pytest.fixture(scope="module")
def local_cluster(control_plane: str, request: pytest.FixtureRequest) -> LocalCluster:
    """The whole of local mode on the module's control plane."""
    return request.getfixturevalue(f"{control_plane}_cluster")


@pytest.fixture(scope="module")
def local(local_cluster: LocalCluster) -> Local:
    """A namespace of its own for the module."""
    return Local(local_cluster, unique("e2e"))


@pytest.fixture
def gcs_env(local_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process's GCS clients pointed at the local cluster's emulator."""
    import gcsfs

    for key, value in local_cluster.gcs.env.items():
        monkeypatch.setenv(key, value)
    gcsfs.GCSFileSystem.clear_instance_cache()
    yield local_cluster.gcs.env
    gcsfs.GCSFileSystem.clear_instance_cache()
