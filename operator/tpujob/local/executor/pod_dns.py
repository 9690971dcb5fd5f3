"""Pod host names for a program that resolves them itself: each container process runs in a
mount namespace of its own whose /etc/hosts is a file the executor writes for the pod, as a
kubelet writes a pod's /etc/hosts (here with the pod DNS names of every headless Service known
to the local network, so that `<pod>.<subdomain>` resolves as cluster DNS would answer it).

Needs `unshare` and the right to make a mount namespace (root, or user namespaces); where that
is refused, processes start as before and only names in env values and arguments are replaced
with addresses (the network's `rewrite`).
"""

from __future__ import annotations

import functools
import shutil
import subprocess

HOSTS_FILE = "/etc/hosts"
# $0 is the hosts file, "$@" the container's command line; a failed mount leaves the machine's
# /etc/hosts in place rather than failing the container.
_BIND_THEN_EXEC = 'mount --bind "$0" /etc/hosts 2>/dev/null; exec "$@"'


@functools.cache
def can_bind_hosts() -> bool:
    """Whether this machine lets the executor give a process its own /etc/hosts."""
    unshare, mount = shutil.which("unshare"), shutil.which("mount")
    if unshare is None or mount is None:
        return False
    probe = [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
             'mount --bind /etc/hosts /etc/hosts']
    try:
        return subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def build_hosts_file(machine_hosts: str, entries: list[tuple[str, list[str]]]) -> str:
    """/etc/hosts text: the machine's own (localhost and this machine's name, which the
    processes still carry and some libraries resolve), then `address name...` per entry."""
    base = machine_hosts if machine_hosts.endswith("\n") or not machine_hosts else \
        machine_hosts + "\n"
    return base + "".join(f"{address}\t{' '.join(names)}\n" for address, names in entries)


def read_machine_hosts() -> str:
    try:
        with open(HOSTS_FILE) as f:
            return f.read()
    except OSError:
        return "127.0.0.1\tlocalhost\n"


def wrap_with_hosts(argv: list[str], hosts_path: str) -> list[str]:
    """argv run with `hosts_path` as its /etc/hosts (same process: unshare and sh exec it)."""
    return [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private", "--",
            "/bin/sh", "-c", _BIND_THEN_EXEC, hosts_path, *argv]
