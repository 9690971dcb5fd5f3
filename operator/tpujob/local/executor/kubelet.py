"""The kubelet of the local executor: runs each pod's containers as local processes and reports
their state back as pod status.

A pod gets its own loopback address (its podIP and hostIP, see `network`), a directory with its
volumes (ConfigMap and Secret files, emptyDirs), and per container a working directory, a
termination message file and a log file (stdout and stderr together, one file per start).
Container paths in command, args and env values are mapped to those host paths, and pod DNS
names to addresses. Processes run in a process group of their own. Stopping a container sends
SIGTERM to its main process only (a runtime sends it to the container's PID 1), then SIGKILL to
everything it started when the (scaled) grace period is over; when a container's main process
ends, what it left running is killed, in its process group or not (`leftovers`, a runtime's
cgroup).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tpujob.local import containerlog
from tpujob.local.apiserver.podlogs import ContainerLog, LogUnavailable

from . import keys, leftovers
from .container_env import (
    apply_local_overrides,
    build_start_error_message,
    resolve_executable,
    stand_in_argv,
    with_addresses,
    write_items,
)
from .keys import PodPhase
from .network import LocalNetwork
from .objects import format_time, is_deleting, is_pod_terminal, meta, uid
from .pod_dns import build_hosts_file, can_bind_hosts, read_machine_hosts, wrap_with_hosts
from .pod_status import (
    ContainerRun,
    PodRun,
    build_lost_status,
    build_pod_status,
    exit_code_of,
    has_started,
    is_init_done,
    is_sidecar,
    pod_outcome,
    should_restart,
)
from .podenv import ContainerConfigError, Lookup, PathMap, expand_command, resolve_env
from .settings import ExecutorSettings
from .spawn import popen_tied
from .tpu_webhook import build_local_jax_env, build_tpu_webhook_env

log = logging.getLogger(__name__)


def read_tail(path: Path, max_lines: int, max_bytes: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    lines = data.decode(errors="replace").splitlines()[-max_lines:]
    return "\n".join(lines)


class Kubelet:
    """Runs pods as processes; `sync` is called from the executor's loop only."""

    def __init__(self, workdir: Path, network: LocalNetwork, settings: ExecutorSettings,
                 lookup: Lookup, wake: Callable[[], None]) -> None:
        self.workdir = workdir
        self.network = network
        self.settings = settings
        self.lookup = lookup
        self.wake = wake
        self.runs: dict[str, PodRun] = {}  # pod uid -> run
        self.finished: dict[str, PodRun] = {}  # stopped runs, kept for their logs
        self.lock = threading.RLock()

    # -- the sync ----------------------------------------------------------------------------

    def sync(self, pods: list[dict[str, Any]], now: float
             ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """Bring processes in line with `pods` (the pods this node runs); returns the status
        writes to make, as (pod, new status) pairs."""
        writes = []
        with self.lock:
            seen = {uid(pod) for pod in pods}
            for pod_uid, run in list(self.runs.items()):
                if pod_uid not in seen:
                    run.gone = True
                    self._begin_stop(run, now)
                    self._step(run, now)
                    self._retire_if_done(pod_uid, run)
            # Running pods first, so that a stopped one frees its address for its successor.
            ordered = sorted(pods, key=lambda p: uid(p) not in self.runs)
            for pod in ordered:
                status = self._sync_pod(pod, now)
                if status is not None and status != (pod.get("status") or {}):
                    writes.append((pod, status))
                if uid(pod) in self.runs:
                    self._retire_if_done(uid(pod), self.runs[uid(pod)])
        return writes

    def _sync_pod(self, pod: dict[str, Any], now: float) -> dict[str, Any] | None:
        run = self.runs.get(uid(pod))
        if run is None:
            if is_pod_terminal(pod):
                return None
            if uid(pod) in self.finished:  # its final status has not been written yet
                return build_pod_status(self.finished[uid(pod)], now)
            if has_started(pod):  # started by an earlier executor: its processes are gone
                return build_lost_status(pod, now)
            if is_deleting(pod):
                return build_lost_status(pod, now, started=False)
            run = self._admit(pod, now)
            if run is None:
                return None
        run.pod = pod
        if is_deleting(pod):
            self._begin_stop(run, now)
        self._step(run, now)
        return build_pod_status(run, now)

    def _retire_if_done(self, pod_uid: str, run: PodRun) -> None:
        if run.live():
            return
        phase = build_pod_status(run, time.time())["phase"]
        if run.gone or phase in (PodPhase.SUCCEEDED, PodPhase.FAILED):
            for c in run.init_containers + run.containers:
                _close_log(c, timeout=0)
            self.finished[pod_uid] = self.runs.pop(pod_uid)

    def busy_addresses(self) -> set[str]:
        with self.lock:
            return {run.ip for run in self.runs.values()}

    # -- admission ---------------------------------------------------------------------------

    def _admit(self, pod: dict[str, Any], now: float) -> PodRun | None:
        ip = self.network.pod_address(pod)
        if ip in self.busy_addresses():
            return None  # the previous pod with this DNS name is still stopping
        ns, name = meta(pod).get("namespace", ""), meta(pod).get("name", "")
        pod_dir = self.workdir / "pods" / ns / name
        if pod_dir.exists():
            pod_dir = pod_dir.with_name(f"{name}.{uid(pod)[:8]}")
        spec = pod.get("spec") or {}

        def containers(items: list[dict[str, Any]], init: bool) -> list[ContainerRun]:
            return [ContainerRun(spec=c, dir=pod_dir / "containers" / c["name"], init=init)
                    for c in items]
        run = PodRun(pod=pod, ip=ip, dir=pod_dir, admitted_at=now,
                     containers=containers(spec.get("containers") or [], False),
                     init_containers=containers(spec.get("initContainers") or [], True))
        for c in run.init_containers + run.containers:
            c.dir.mkdir(parents=True, exist_ok=True)
        self.runs[uid(pod)] = run
        return run

    def _prepare_volumes(self, run: PodRun) -> dict[str, Path]:
        """Materialize the pod's volumes (once): ConfigMap/Secret keys as files, emptyDirs."""
        if run.volumes is not None:
            return run.volumes
        ns = run.key[0]
        volumes: dict[str, Path] = {}
        for volume in (run.pod.get("spec") or {}).get("volumes") or []:
            target = run.dir / "volumes" / volume["name"]
            if "hostPath" in volume:
                volumes[volume["name"]] = Path(volume["hostPath"]["path"])
                continue
            target.mkdir(parents=True, exist_ok=True)
            for kind, key, ref in (("ConfigMap", "configMap", "name"),
                                   ("Secret", "secret", "secretName")):
                source = volume.get(key)
                if source is not None:
                    write_items(kind, source, source.get(ref, ""), ns, target, self.lookup)
            volumes[volume["name"]] = target
        run.volumes = volumes
        return volumes

    def _path_map(self, run: PodRun, container: ContainerRun) -> PathMap:
        mapping: dict[str, str] = {}
        volumes = run.volumes or {}
        for mount in container.spec.get("volumeMounts") or []:
            base = volumes.get(mount["name"])
            if base is not None:
                host = base / mount["subPath"] if mount.get("subPath") else base
                mapping[mount["mountPath"]] = str(host)
        term = container.spec.get("terminationMessagePath") or keys.DEFAULT_TERMINATION_MESSAGE_PATH
        mapping[term] = str(container.term_path)
        workdir = container.spec.get("workingDir")
        if workdir and workdir.startswith("/") and PathMap(mapping).host_path(workdir) is None:
            mapping[workdir] = str(container.dir)
        return PathMap(mapping)

    # -- starting and stopping ---------------------------------------------------------------

    def _step(self, run: PodRun, now: float) -> None:
        """Reap exited processes, kill past the grace period, start what is due."""
        for c in run.init_containers + run.containers:
            if c.is_alive and c.proc.poll() is not None:
                self._record_exit(run, c, now)
        if run.stopping:
            if now >= run.stop_deadline:
                for c in run.live():
                    _signal_group(c.proc, signal.SIGKILL)
            return
        if pod_outcome(run) is not None:
            # The regular containers are done for good: the sidecars are stopped.
            for c in run.init_containers:
                if not (is_sidecar(c) and c.is_alive):
                    continue
                if c.stop_deadline is None:
                    c.stop_deadline = now + self.settings.stop_grace_s
                    _terminate(c.proc)
                elif now >= c.stop_deadline:
                    _signal_group(c.proc, signal.SIGKILL)
            return
        restart = (run.pod.get("spec") or {}).get("restartPolicy", "Always")
        for c in run.init_containers + run.containers:
            if c.terminated is not None and should_restart(c, restart):
                if c.next_start == 0.0:
                    delay = min(self.settings.container_backoff_s * 2 ** c.restart_count, 300)
                    c.next_start = now + delay
                    c.waiting = ("CrashLoopBackOff", f"back-off {delay:g}s restarting failed "
                                 f"container={c.name} pod={run.key[1]}")
                if now >= c.next_start:
                    c.last_terminated, c.terminated = c.terminated, None
                    c.restart_count += 1
                    c.next_start = 0.0
                    self._start(run, c, now)
        pending_init = [c for c in run.init_containers if not is_init_done(c)]
        if pending_init:
            first = pending_init[0]
            if first.proc is None and first.terminated is None:
                self._start(run, first, now)
            return
        for c in run.containers:
            if c.proc is None and c.terminated is None:
                self._start(run, c, now)

    def _start(self, run: PodRun, c: ContainerRun, now: float) -> None:
        try:
            self._prepare_volumes(run)
            paths = self._path_map(run, c)
            env = self._container_env(run, c, paths)
        except ContainerConfigError as err:
            c.waiting = ("CreateContainerConfigError", str(err))
            return
        except OSError as err:
            c.waiting = ("ContainerCreating", f"MountVolume.SetUp failed: {err}")
            return
        argv = stand_in_argv(c.spec) or [self.network.rewrite(run.key[0], paths.apply(a))
                                         for a in expand_command(c.spec, env)]
        c.terminated, c.waiting = None, None
        executable = resolve_executable(c.spec, argv, env, paths)
        if executable is None:
            c.started_at = now
            c.terminated = {
                "exitCode": 128, "reason": "StartError", "startedAt": format_time(now),
                "finishedAt": format_time(now),
                "message": build_start_error_message(c.spec, argv)}
            return
        workdir = paths.host_path(c.spec.get("workingDir") or "") or str(c.dir)
        Path(workdir).mkdir(parents=True, exist_ok=True)
        c.term_path.write_bytes(b"")
        c.log_path = c.dir / f"{c.restart_count}.log"
        # Output goes through a pipe per stream, as to a container runtime, so that each line's
        # time is recorded (for `kubectl logs --timestamps` and `--since`) and a line of one
        # stream is never cut by the other's (containerlog.py).
        command = [executable, *argv[1:]]
        if self.settings.pod_hosts and can_bind_hosts():
            hosts = c.dir / "hosts"
            hosts.write_text(build_hosts_file(read_machine_hosts(),
                                              self.network.hosts_entries(run.key[0])))
            command = wrap_with_hosts(command, str(hosts))
        (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe()
        try:
            c.proc = popen_tied(command, cwd=workdir, env=env,
                                stdin=subprocess.DEVNULL, stdout=out_write,
                                stderr=err_write, start_new_session=True)
        except OSError as err:
            os.close(out_read)
            os.close(err_read)
            c.terminated = {"exitCode": 128, "reason": "StartError",
                            "startedAt": format_time(now), "finishedAt": format_time(now),
                            "message": f"failed to start {argv[0]!r}: {err}"}
            return
        finally:
            os.close(out_write)
            os.close(err_write)
        c._pump = threading.Thread(target=containerlog.pump,
                                   args=((out_read, err_read), c.log_path),
                                   daemon=True, name=f"log-{c.proc.pid}")
        c._pump.start()
        c.started_at = now
        threading.Thread(target=self._await_exit, args=(c.proc,), daemon=True,
                         name=f"wait-{c.proc.pid}").start()

    def _await_exit(self, proc: subprocess.Popen) -> None:
        proc.wait()
        self.wake()

    def _record_exit(self, run: PodRun, c: ContainerRun, now: float) -> None:
        code = exit_code_of(c.proc.returncode)
        # Whatever the container left behind goes too, in its process group or not.
        _signal_group(c.proc, signal.SIGKILL)
        left = leftovers.kill_marked(_marker(run, c))
        if left:
            log.info("pod %s/%s container %s: killed %d process(es) it left running: %s",
                     *run.key, c.name, len(left), left)
        _close_log(c)
        message = _read_text(c.term_path, keys.TERMINATION_MESSAGE_MAX_BYTES)
        policy = c.spec.get("terminationMessagePolicy", "File")
        if not message and code != 0 and policy == "FallbackToLogsOnError" and c.log_path:
            message = read_tail(c.log_path, keys.FALLBACK_LOG_LINES, keys.FALLBACK_LOG_BYTES)
        c.terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                        "startedAt": format_time(c.started_at or now),
                        "finishedAt": format_time(now),
                        "containerID": f"local://{c.proc.pid}"}
        if message:
            c.terminated["message"] = message

    def _begin_stop(self, run: PodRun, now: float) -> None:
        if run.stopping:
            return
        grace = (run.pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        run.stop_deadline = now + self.settings.grace_seconds(grace, keys.DEFAULT_GRACE_SECONDS)
        for c in run.live():
            _terminate(c.proc)
        if run.live():
            timer = threading.Timer(max(0.0, run.stop_deadline - now) + 0.01, self.wake)
            timer.daemon = True
            timer.start()

    def stop_all(self, timeout: float) -> None:
        """Stop every process: SIGTERM, SIGKILL after `timeout` at most, and reap them."""
        with self.lock:
            runs = list(self.runs.values())
            deadline = time.time() + timeout
            for run in runs:
                for c in run.live():
                    _terminate(c.proc)
            for run in runs:
                for c in run.live():
                    try:
                        c.proc.wait(timeout=max(0.0, deadline - time.time()))
                    except subprocess.TimeoutExpired:
                        _signal_group(c.proc, signal.SIGKILL)
                        c.proc.wait()
                    self._record_exit(run, c, time.time())
            self.finished.update(self.runs)
            self.runs.clear()

    # -- environment -------------------------------------------------------------------------

    def _container_env(self, run: PodRun, c: ContainerRun, paths: PathMap) -> dict[str, str]:
        spec = run.pod.get("spec") or {}
        base = {k: os.environ[k] for k in self.settings.inherit_env if k in os.environ}
        venv_bin = str(Path(sys.executable).parent)
        base["PATH"] = os.pathsep.join(p for p in (venv_bin, base.get("PATH")) if p)
        base.update(self.settings.extra_env)
        base["HOSTNAME"] = spec.get("hostname") or run.key[1]
        pod = with_addresses(run.pod, run.ip)
        ns = run.key[0]
        # What GKE's TPU webhook would have added to the pod spec (the container's own env wins).
        webhook = build_tpu_webhook_env(pod, self._owner_job(pod))
        base.update({k: self.network.rewrite(ns, v) for k, v in webhook.items()})
        base.update(build_local_jax_env(pod, webhook))
        env = resolve_env(pod, c.spec, self.lookup, base)
        for k, v in env.items():
            if base.get(k) != v:
                env[k] = self.network.rewrite(ns, paths.apply(v))
        env = apply_local_overrides(env, run.ip, str(c.term_path), self.settings)
        env[leftovers.MARKER] = _marker(run, c)
        return env

    def _owner_job(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        for ref in meta(pod).get("ownerReferences") or []:
            if ref.get("kind") == "Job" and ref.get("controller"):
                return self.lookup("Job", meta(pod).get("namespace", ""), ref.get("name", ""))
        return None

    # -- inspection --------------------------------------------------------------------------

    def find_run(self, namespace: str, name: str) -> PodRun | None:
        with self.lock:
            candidates = [r for r in list(self.runs.values()) + list(self.finished.values())
                          if r.key == (namespace, name)]
        return max(candidates, key=lambda r: r.admitted_at) if candidates else None

    def container_log(self, namespace: str, pod: str, pod_uid: str, container: str,
                      previous: bool) -> ContainerLog | None:
        """The kubelet's part of `pods/log` (a `PodLogSource`): the log file of the container's
        current start, or of the one before with `previous`; refusals in the kubelet's words.
        None when this kubelet never ran the pod."""
        with self.lock:
            run = self.runs.get(pod_uid) or self.finished.get(pod_uid)
            if run is None:
                return None
            c = next((c for c in run.containers + run.init_containers if c.name == container),
                     None)
            if c is None:
                raise LogUnavailable(f'container "{container}" in pod "{pod}" is not available')
            if previous:
                if not c.restart_count:
                    raise LogUnavailable(f'previous terminated container "{container}" in pod '
                                         f'"{pod}" not found')
                return ContainerLog(c.dir / f"{c.restart_count - 1}.log", lambda: False)
            if c.log_path is None:
                if c.terminated is not None:
                    raise LogUnavailable(f'container "{container}" in pod "{pod}" is terminated')
                reason = (c.waiting or ("ContainerCreating", ""))[0]
                raise LogUnavailable(f'container "{container}" in pod "{pod}" is waiting to '
                                     f"start: {reason}")
            proc, pump = c.proc, c._pump
            return ContainerLog(c.log_path, lambda: (proc is not None and proc.returncode is None)
                                or (pump is not None and pump.is_alive()))

    def processes(self) -> list[dict[str, Any]]:
        with self.lock:
            return [{"namespace": run.key[0], "pod": run.key[1], "uid": uid(run.pod),
                     "container": c.name, "pid": c.proc.pid, "ip": run.ip}
                    for run in self.runs.values() for c in run.live()]


def _marker(run: PodRun, c: ContainerRun) -> str:
    return leftovers.marker_value(uid(run.pod), c.name, c.restart_count)


def _terminate(proc: subprocess.Popen | None) -> None:
    """The stop signal, to the container's main process only, as a runtime sends it to the
    container's PID 1: what the main process started gets it only if the main process passes it
    on, and is SIGKILLed with the rest when the grace period is over or the main process ends."""
    _send(os.kill, proc, signal.SIGTERM)


def _signal_group(proc: subprocess.Popen | None, sig: int) -> None:
    _send(os.killpg, proc, sig)


def _send(kill: Callable[[int, int], None], proc: subprocess.Popen | None, sig: int) -> None:
    """`kill(pid, sig)` for a started process; one already gone is no error."""
    if proc is None:
        return
    try:
        kill(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _close_log(c: ContainerRun, timeout: float = 2.0) -> None:
    """Wait for the output of a container whose processes are gone to be in its log (a
    process that left the container's process group may hold the pipe open: not waited for
    longer than `timeout`)."""
    if c._pump is not None:
        c._pump.join(timeout)
        if not c._pump.is_alive():
            c._pump = None


def _read_text(path: Path, limit: int) -> str:
    try:
        return path.read_bytes()[:limit].decode(errors="replace").strip()
    except OSError:
        return ""
