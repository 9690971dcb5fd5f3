"""The TPU compiler's answers kept on disk: what `tpujob_trainer.aot.compile_step` read from a
step it compiled for a TPU topology (HBM per device, FLOPs, bytes, the cost model's time) or the
compiler's refusal of it, so that the same step compiled again for the same slice is a file read
instead of a minute or more of CPU.

Where: the folder `$TPUJOB_TPU_COMPILE_CACHE_DIR` names; unset or empty, nothing is kept.
`tpujob plan --compile` sets it to `tpu-compile/` in tpujob's cache (`~/.cache/tpujob`) unless it
is set already.

The key is a SHA-256 over everything the compiler's answer depends on: the lowered program's
text (StableHLO with its shardings: the model, the batch, the mesh, remat and dtypes are all in
it), the slice and the number of slices, the device kind, the versions of jax, jaxlib and libtpu,
the environment variables that change what XLA compiles (`XLA_FLAGS`, `LIBTPU_INIT_ARGS`) and
JAX's compile-effort settings. A changed program, compiler or flag is a miss and compiles; an
entry is never served for another program. The executable itself is not kept: one compiled
without a TPU cannot be loaded back without one (see `tpujob_trainer.aot`), and its figures are
all that is asked of it.

An entry that cannot be read (damaged, another format) is a miss, logged; a failed write is
logged and the answer still returned: the cache never fails a compile.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ENV = "TPUJOB_TPU_COMPILE_CACHE_DIR"
FORMAT = 1
# What else changes the compiler's program: its flags, and JAX's effort settings (at
# JAX_OPTIMIZATION_LEVEL=O0 a step holds more than twice the temporaries).
COMPILER_ENV = ("XLA_FLAGS", "LIBTPU_INIT_ARGS")
JAX_SETTINGS = ("jax_exec_time_optimization_effort", "jax_memory_fitting_effort",
                "jax_optimization_level")
PACKAGES = ("jax", "jaxlib", "libtpu")


def directory(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The cache's folder, or None where no cache is asked for."""
    value = environ.get(ENV, "").strip()
    return Path(value) if value else None


def key(program: str, *, slice_name: str, slices: int, device_kind: str,
        versions: Mapping[str, str], compiler_env: Mapping[str, str],
        settings: Mapping[str, Any]) -> str:
    """The entry's name for a compile of `program` (pure)."""
    h = hashlib.sha256()
    head = {"format": FORMAT, "slice": slice_name, "slices": slices, "device_kind": device_kind,
            "versions": dict(sorted(versions.items())),
            "compiler_env": dict(sorted(compiler_env.items())),
            "settings": {k: str(v) for k, v in sorted(settings.items())}}
    h.update(json.dumps(head).encode())  # every map in it sorted above
    h.update(b"\0")
    h.update(program.encode())
    return h.hexdigest()


def current_key(program: str, *, slice_name: str, slices: int, device_kind: str,
                config: Any) -> str:
    """`key` with this process's versions and compiler flags, and the settings of JAX's
    `config` (`jax.config`, passed in: this module never imports JAX)."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return key(program, slice_name=slice_name, slices=slices, device_kind=device_kind,
               versions=versions,
               compiler_env={k: os.environ[k] for k in COMPILER_ENV if k in os.environ},
               settings={k: getattr(config, k) for k in JAX_SETTINGS})


def _path(folder: Path, name: str) -> Path:
    return folder / f"{name}.json"


def read(folder: Path, name: str) -> dict | None:
    """The entry `name`: {"result": {...}} or {"refused": "<the compiler's message>"}; None where
    there is none or it cannot be read."""
    path = _path(folder, name)
    try:
        entry = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.warning("TPU compile cache: entry %s not read (%s); compiling", path, e)
        return None
    if (not isinstance(entry, dict) or entry.get("format") != FORMAT
            or not (isinstance(entry.get("result"), dict) or isinstance(entry.get("refused"), str))):
        log.warning("TPU compile cache: entry %s is not one this version writes; compiling", path)
        return None
    return entry


def write(folder: Path, name: str, *, result: dict | None = None,
          refused: str | None = None) -> None:
    """Keep the compiler's answer (`result` or `refused`), whole or not at all."""
    assert (result is None) != (refused is None)
    entry: dict[str, Any] = {"format": FORMAT}
    entry.update({"result": result} if result is not None else {"refused": refused})
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(entry, f)
            os.replace(tmp, _path(folder, name))
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        log.warning("TPU compile cache: entry not written to %s (%s)", folder, e)
