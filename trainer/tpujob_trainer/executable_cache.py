"""The compiled training step saved whole, beside JAX's compilation cache, so that a restart of
the same job on the same devices loads it and skips tracing and lowering as well as the XLA
compile (JAX's own cache skips only the compile: it looks a program up after lowering it).

An entry is keyed by everything the compiled step depends on: the whole trainer config, a digest
of the trainer's and the planner's source files, the versions of JAX, jaxlib and the libraries
the step is built from (Flax, Optax: an image with a newer one compiles again), the devices (id,
kind, process) and this process's index, the XLA flags in the environment, and on CPU the CPU's
feature flags (an entry compiled on one CPU kind is not loaded on another). Anything else
misses and compiles as before. Each process keeps its own entry, except where the job's
processes share one machine (JAX on CPU), where process 0's serves them all (`step_share.py`:
the program and the devices it names are the job's). An entry that cannot be read or loaded is
compiled again with a warning.
Only a step that XLA compiled is saved, never one JAX's cache served (`load_or_compile`).

An entry is a pickle (the serialized executable and its argument trees) read from the job's own
output: whoever can write the output can run code in the job, as with the compilation cache and
the checkpoints there.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import fsspec
import jax

from tpujob_trainer.cpu import this_cpu_flags

log = logging.getLogger(__name__)

_PACKAGES = ("tpujob_trainer", "tpujob_plan")
_ENV = ("XLA_FLAGS", "LIBTPU_INIT_ARGS")
_source_digest: str | None = None


def source_digest() -> str:
    """sha256 over the trainer's and the planner's .py files (path and bytes), computed once."""
    global _source_digest
    if _source_digest is None:
        h = hashlib.sha256()
        for package in _PACKAGES:
            root = Path(__import__(package).__file__).parent
            for path in sorted(root.rglob("*.py")):
                h.update(str(path.relative_to(root.parent)).encode())
                h.update(path.read_bytes())
        _source_digest = h.hexdigest()
    return _source_digest


def step_key(config: dict[str, Any], *, source: str, versions: dict[str, str],
             devices: list[dict[str, Any]], process_index: int, env: dict[str, str],
             cpu_flags: Iterable[str] = (), program: str = "step") -> str:
    """The entry's name: a digest of everything the compiled program depends on (pure).
    `cpu_flags`: the CPU's features where the step runs on it (XLA:CPU compiles for them, and
    the model's matmuls take their form from them: `cpu.py`). `program`: which of the run's
    programs ("step", or "init": the initial state)."""
    doc = {"config": config, "source": source, "versions": versions, "devices": devices,
           "process_index": process_index, "env": env, "cpu": sorted(cpu_flags),
           "program": program}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:32]


def current_key(config: dict[str, Any], program: str = "step") -> str:
    """step_key of `program` for this process, its devices and its environment."""
    import flax
    import jaxlib
    import optax
    devices = [{"id": d.id, "platform": d.platform, "kind": d.device_kind,
                "process": d.process_index} for d in jax.devices()]
    on_cpu = any(d["platform"] == "cpu" for d in devices)
    return step_key(config, source=source_digest(),
                    versions={"jax": jax.__version__, "jaxlib": jaxlib.__version__,
                              "flax": flax.__version__, "optax": optax.__version__},
                    devices=devices, process_index=jax.process_index(),
                    env={k: os.environ.get(k, "") for k in _ENV},
                    cpu_flags=this_cpu_flags() if on_cpu else (), program=program)


class ExecutableCache:
    """Entries under `<directory>/executables/<key>.pkl` (a path or gs://)."""

    def __init__(self, directory: str):
        self.directory = f"{directory.rstrip('/')}/executables"
        self.fs, self.root = fsspec.core.url_to_fs(self.directory)

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}.pkl"

    def exists(self, key: str) -> bool:
        """Whether an entry is saved under `key` (it may still fail to load)."""
        try:
            return self.fs.exists(self._path(key))
        except Exception:  # storage trouble reads as absent
            return False

    def load(self, key: str, what: str = "step") -> Any | None:
        """The program (`what`) saved under `key`, or None: absent, or damaged or incompatible (then
        removed, with a warning, so that it is compiled and saved again)."""
        from jax.experimental import serialize_executable
        path = self._path(key)
        try:
            if self.fs.exists(path):
                payload, in_tree, out_tree = pickle.loads(self.fs.cat_file(path))
                return serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
        except Exception as e:  # a damaged or incompatible entry: compile as if it were absent
            log.warning("compiled %s %s could not be loaded (%s: %s); removing it and "
                        "compiling", what, path, type(e).__name__, str(e)[:300])
            try:
                self.fs.rm(path)
            except Exception:  # another process removed it first, or storage trouble
                pass
        return None

    def load_or_compile(self, key: str, compile_fn: Callable[[], Any],
                        cache_hits: Callable[[], int], what: str = "step") -> tuple[Any, str]:
        """(compiled program, "loaded" | "compiled"): the saved executable, else compile_fn()'s,
        which is then saved if XLA really compiled it (a failure to save is logged, never
        raised).

        `cache_hits()` counts JAX's persistent-cache hits: an executable that JAX loaded from
        its own cache is not saved again, because on XLA:CPU serializing such an executable
        gives one that loads but fails at its first run (`NOT_FOUND: Function <fusion> not
        found`), seen with jax 0.10.2."""
        from jax.experimental import serialize_executable
        loaded = self.load(key, what)
        if loaded is not None:
            return loaded, "loaded"
        path = self._path(key)
        hits = cache_hits()
        compiled = compile_fn()
        if cache_hits() != hits:
            log.warning("the compiled %s came from JAX's compilation cache, so it is not "
                        "saved whole (only an executable XLA compiled is)", what)
            return compiled, "compiled"
        t0 = time.perf_counter()
        try:
            blob = pickle.dumps(serialize_executable.serialize(compiled))
            self.fs.makedirs(self.root, exist_ok=True)
            if "://" in self.directory and not self.directory.startswith("file://"):
                self.fs.pipe_file(path, blob)  # one object write: whole or absent
            else:
                tmp = f"{path}.tmp-{os.getpid()}"
                with open(tmp, "wb") as f:
                    f.write(blob)
                os.replace(tmp, path)
            log.info("compiled %s saved to %s (%d bytes, %.2fs)", what, path, len(blob),
                     time.perf_counter() - t0)
        except Exception as e:
            log.warning("compiled %s could not be saved to %s (%s: %s)", what, path,
                        type(e).__name__, str(e)[:300])
        return compiled, "compiled"
