"""What a container's process gets on this machine in place of a container runtime: the local
JAX environment (CPU devices per process, the pod's address to bind), the host program for its
command, and its ConfigMap and Secret volumes written as files.
"""

from __future__ import annotations

import base64
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from tpujob.builders.gpu_network import NODE_DAEMON_IMAGES
from tpujob_trainer import env as trainer_env

from .podenv import ContainerConfigError, Lookup, PathMap
from .settings import ExecutorSettings


def apply_local_overrides(env: dict[str, str], ip: str, termination_log: str,
                          settings: ExecutorSettings) -> dict[str, str]:
    """What changes when a TPU container runs as a CPU process here: the address to bind, the
    termination log, JAX on CPU, and CPU devices per process (with the optional scale-down)."""
    env = dict(env)
    env[trainer_env.BIND_ADDRESS] = ip
    env[trainer_env.TERMINATION_LOG] = termination_log
    if settings.jax_platforms:
        env["JAX_PLATFORMS"] = settings.jax_platforms
    try:
        processes = int(env.get(trainer_env.PROCESS_COUNT) or 1)
        expected = int(env[trainer_env.EXPECTED_DEVICES]) \
            if env.get(trainer_env.EXPECTED_DEVICES) else None
    except ValueError:
        return env  # malformed: the trainer reports it
    if settings.cpu_devices_per_process:
        env[trainer_env.CPU_DEVICES] = str(settings.cpu_devices_per_process)
        if expected is not None:
            env[trainer_env.EXPECTED_DEVICES] = str(settings.cpu_devices_per_process * processes)
    elif expected is not None and processes > 0 and expected % processes == 0 and \
            not env.get(trainer_env.CPU_DEVICES):
        env[trainer_env.CPU_DEVICES] = str(expected // processes)
    return _local_jax_env(env, ip)


def _local_jax_env(env: dict[str, str], ip: str) -> dict[str, str]:
    """For any JAX program (not only the built-in trainer): as many CPU devices as a TPU host
    has chips' devices (JAX's own `JAX_NUM_CPU_DEVICES`), and JAX's coordinator bound to the
    pod's own address (`JAX_COORDINATOR_BIND_ADDRESS`, on the port of JAX_COORDINATOR_ADDRESS,
    else JAX_COORDINATOR_PORT; JAX binds every interface by default, where two local jobs would
    share the port)."""
    if env.get(trainer_env.CPU_DEVICES) and not env.get("JAX_NUM_CPU_DEVICES"):
        env["JAX_NUM_CPU_DEVICES"] = env[trainer_env.CPU_DEVICES]
    coordinator = env.get("JAX_COORDINATOR_ADDRESS", "")
    port = coordinator.rsplit(":", 1)[1] if ":" in coordinator else \
        env.get("JAX_COORDINATOR_PORT", "")
    if port and not env.get("JAX_COORDINATOR_BIND_ADDRESS"):
        env["JAX_COORDINATOR_BIND_ADDRESS"] = f"{ip}:{port}"
    return env


def stand_in_argv(spec: dict[str, Any]) -> list[str] | None:
    """For a GPU node's network daemon (GPUDirect-TCPX/TCPXO's receive-data-path manager, a
    sidecar of every A3 High and A3 Mega pod), which needs the node's GPU NICs: a process that
    says what it stands in for and stays up until the pod stops, as the daemon does. None for
    any other container."""
    image = spec.get("image")
    if image not in NODE_DAEMON_IMAGES:
        return None
    note = (f"local mode: standing in for {image} (a GPU node's network daemon; this machine "
            "has no GPU NICs), up until the pod stops")
    return ["python3", "-c", f"import signal; print({note!r}, flush=True); signal.pause()"]


def resolve_executable(spec: dict[str, Any], argv: list[str], env: dict[str, str],
                       paths: PathMap) -> str | None:
    """The host program for argv[0]: a mapped container path, the interpreter for python, the
    script next to this interpreter (the venv's `tpujob-train`), else on the container's PATH.
    None when the container has no command (its image entrypoint is unknown here)."""
    if not spec.get("command") or not argv:
        return None
    program = argv[0]
    if "/" in program:
        mapped = paths.host_path(program) or program
        return mapped if os.access(mapped, os.X_OK) else None
    if program in ("python", "python3"):
        return sys.executable
    beside = Path(sys.executable).parent / program
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(program, path=env.get("PATH"))
    return os.path.abspath(found) if found else None


def build_start_error_message(spec: dict[str, Any], argv: list[str]) -> str:
    if not spec.get("command"):
        return ("the container has no command and the image's entrypoint is not known "
                f"locally (image {spec.get('image', '')!r})")
    return (f'failed to create containerd task: exec: "{argv[0]}": executable file not found '
            "in $PATH")


def with_addresses(pod: dict[str, Any], ip: str) -> dict[str, Any]:
    status = dict(pod.get("status") or {})
    status.update(podIP=ip, hostIP=ip, podIPs=[{"ip": ip}], hostIPs=[{"ip": ip}])
    return {**pod, "status": status}


def write_items(kind: str, source: dict[str, Any], obj_name: str, ns: str, target: Path,
                 lookup: Lookup) -> None:
    obj = lookup(kind, ns, obj_name)
    if obj is None:
        if source.get("optional"):
            return
        raise ContainerConfigError(f'{kind.lower()} "{obj_name}" not found')
    data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()} \
        if kind == "Secret" else \
        {**{k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()},
         **{k: v.encode() for k, v in (obj.get("data") or {}).items()}}
    items = source.get("items")
    paths = {i["key"]: i["path"] for i in items} if items else {k: k for k in data}
    mode = int(source.get("defaultMode", 0o644))
    for key, rel in paths.items():
        if key not in data:
            if source.get("optional"):
                continue
            raise ContainerConfigError(f"couldn't find key {key} in {kind} {ns}/{obj_name}")
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data[key])
        path.chmod(mode | 0o600)
