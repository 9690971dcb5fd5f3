"""What the cached environments of other people's programs share (`tools/maxtext_env.py`,
`tools/tunix_env.py`): where they live, the trainer's versions they take, running a build step,
and the marker file that makes a second call return at once.

Each environment is a virtual environment under `cache_root()` (`$TPUJOB_CACHE_DIR`, else
`$XDG_CACHE_HOME/tpujob`, else `~/.cache/tpujob`), never inside the repository, in a directory
named after its pins. A finished build writes a marker (its python and pins); `ensure` returns
that marker without starting any process when the pins match and the python is there, and
otherwise builds under a file lock beside the directory, so two processes never build at once.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tpujob.local.cache import cache_root, locked  # noqa: F401 - defined once, there

REPO = Path(__file__).resolve().parents[1]

# The libraries that decide JAX's numerics: an environment beside the trainer takes the
# trainer's versions of these, so both sides compile with the same XLA.
SAME_AS_TRAINER = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy", "ml-dtypes",
                   "scipy", "opt-einsum", "tensorstore")


class EnvBuildError(RuntimeError):
    """An environment cannot be built here; the message says what is missing."""


def pins_digest(pins: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(pins, sort_keys=True).encode()).hexdigest()[:10]


def installed_versions(names: tuple[str, ...], path: list[str] | None) -> dict[str, str]:
    found = {}
    for dist in importlib.metadata.distributions(**({"path": path} if path else {})):
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name in names and name not in found:
            found[name] = dist.version
    return found


def trainer_versions(program: str) -> dict[str, str]:
    """The versions of SAME_AS_TRAINER installed with tpujob's trainer, for `program`'s
    environment.

    Read from the interpreter running this when it has the trainer's JAX, else from the
    repository's `.venv`."""
    found = installed_versions(SAME_AS_TRAINER, None)
    if "jax" not in found:
        site = glob.glob(str(REPO / ".venv" / "lib" / "python3*" / "site-packages"))
        if site:
            found = installed_versions(SAME_AS_TRAINER, site)
    missing = [n for n in ("jax", "jaxlib", "flax", "optax") if n not in found]
    if missing:
        raise EnvBuildError(
            f"the trainer's {', '.join(missing)} not found, neither in this Python "
            f"({sys.executable}) nor in {REPO / '.venv'}: install the trainer first "
            "(python3 -m venv .venv && .venv/bin/pip install -e '.[trainer]') or run this with "
            f"its Python, so {program} gets the same versions.")
    return found


def read_marker(directory: Path, name: str, pins: dict[str, str]) -> dict | None:
    """The marker of a finished build with these pins whose python is there, else None."""
    try:
        marker = json.loads((directory / name).read_text())
    except (OSError, ValueError):
        return None
    if marker.get("pins") != pins or not os.access(marker.get("python", ""), os.X_OK):
        return None
    return marker


def write_marker(directory: Path, name: str, marker: dict) -> None:
    tmp = directory / (name + ".tmp")
    tmp.write_text(json.dumps(marker, indent=1) + "\n")
    tmp.replace(directory / name)


def run(cmd: list[str], what: str, env: dict[str, str] | None = None) -> str:
    """Runs one build step; its stdout, or EnvBuildError with the end of its output."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise EnvBuildError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd[:6])} ...\n"
                            f"{tail}")
    return proc.stdout


def pip_install(python: str, pins: dict[str, str], what: str) -> None:
    """Exactly `pins`, and nothing they would pull in (`--no-deps`)."""
    run([python, "-m", "pip", "install", "--quiet", "--no-input", "--disable-pip-version-check",
         "--no-deps", *(f"{name}=={version}" for name, version in pins.items())], what)


def ensure(directory: Path, marker_name: str, pins: dict[str, str],
           build: Callable[[], dict]) -> dict:
    """The marker of the environment at `directory`, calling `build()` first if it is not
    there with these pins (under the lock; another process may have built it meanwhile)."""
    if marker := read_marker(directory, marker_name, pins):
        return marker
    with locked(directory.with_name(directory.name + ".lock")):
        if marker := read_marker(directory, marker_name, pins):
            return marker
        return build()


def main(program: str, description: str, ensure: Callable[[], dict], info_help: str,
         argv: list[str] | None = None) -> int:
    """The command line of an environment module: build it if needed, then print its python
    (or, with --info, its marker as JSON); exit 1 with the reason when it cannot be built."""
    import argparse

    ap = argparse.ArgumentParser(prog=program, description=description)
    ap.add_argument("--info", action="store_true", help=info_help)
    args = ap.parse_args(argv)
    try:
        marker = ensure()
    except EnvBuildError as err:
        print(f"{program}: {err}", file=sys.stderr)
        return 1
    print(json.dumps(marker, indent=1) if args.info else marker["python"])
    return 0
