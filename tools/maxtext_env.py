"""MaxText's environment for running it beside tpujob's trainer, built once and cached.

    python tools/maxtext_env.py            # builds it the first time, then prints its python
    python tools/maxtext_env.py --info     # also the entry point, base.yml and the pins (JSON)

    from tools.maxtext_env import maxtext_python, base_yml, train_argv, run_env

What it builds: a virtual environment from Python 3.12 (MaxText requires >=3.12; found under
~/.pyenv/versions/3.12*, else `python3.12` on PATH) in `~/.cache/tpujob/` (or
`$TPUJOB_CACHE_DIR`, or `$XDG_CACHE_HOME/tpujob`), never inside the repository. In it:
the `maxtext` package from PyPI, installed with `--no-deps`, and only the packages its
pre-training entry point imports on CPU (found by running it), each pinned here: no
TensorFlow, no Google Cloud clients (`DECOUPLE_GCLOUD=TRUE` makes MaxText stub those). JAX and
the libraries that decide its numerics (jax, jaxlib, flax, optax, orbax-checkpoint, numpy,
ml-dtypes, scipy, opt-einsum, tensorstore) take the versions installed with tpujob's trainer,
read from the interpreter running this (or the repository's `.venv`), so both sides compile
with the same XLA.

MaxText version: 0.2.4. MaxText 0.2.5 (the newest on PyPI) imports
`jax.experimental.xla_metadata.must_fuse_call`, which JAX 0.10.2 (the trainer's) does not have,
so 0.2.5 cannot run on the trainer's JAX; 0.2.4 is the newest that does.

Entry point: `python -m maxtext.trainers.pre_train.train <base.yml> key=value ...`, with
`base.yml` at `maxtext/configs/base.yml` inside the installed package (`base_yml()` gives the
path). On CPU: `hardware=cpu skip_jax_distributed_system=true enable_goodput_recording=false
dataset_type=synthetic enable_checkpointing=false`, with `DECOUPLE_GCLOUD=TRUE` in the
environment (`run_env()`).

Idempotent and fast once built: a marker file in the environment records the resolved pins,
and a later call that finds the same pins returns at once, starting no process. Two processes
building at once are serialized by a file lock beside the environment; a build that was cut
off (no marker) is removed and done again.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
from pathlib import Path

try:
    from tools import cached_env
except ImportError:  # run as `python tools/maxtext_env.py`: tools/ itself is on the path
    import cached_env

MAXTEXT_VERSION = "0.2.4"
TRAIN_MODULE = "maxtext.trainers.pre_train.train"

# What MaxText's pre-training entry point imports on CPU with DECOUPLE_GCLOUD=TRUE, and what
# those import in turn, found by running it (importing `maxtext.trainers.pre_train.train` and a
# few synthetic-data steps) until nothing was missing. No TensorFlow, no Google Cloud clients.
PINS = {
    "absl-py": "2.5.1", "aiofiles": "25.1.0", "annotated-doc": "0.0.7",
    "annotated-types": "0.8.0", "anyio": "4.16.0", "aqtp": "0.9.0", "array-record": "0.8.6",
    "certifi": "2026.10.18", "click": "8.5.1", "cloudpickle": "3.1.2", "drjax": "0.2.1",
    "einshape": "1.0", "etils": "1.15.0", "fastapi": "0.165.0", "filelock": "4.2.12",
    "fire": "0.7.1", "fsspec": "2026.9.0", "grain": "0.2.18", "h11": "0.16.0",
    "hf-xet": "1.8.0", "httpcore2": "2.16.2", "httpx2": "2.16.2", "huggingface-hub": "2.4.0",
    "humanize": "4.17.0", "idna": "3.20", "immutabledict": "4.3.1", "jaxtyping": "0.3.11",
    "jinja2": "3.1.6", "markdown-it-py": "4.3.0", "markupsafe": "3.0.4", "mdurl": "0.1.2",
    "ml-collections": "1.1.0", "mpmath": "1.4.1", "msgpack": "1.2.4", "omegaconf": "2.4.0",
    "opentelemetry-api": "1.45.2", "packaging": "26.3", "pathwaysutils": "0.1.13",
    "pillow": "13.0.0", "portpicker": "1.6.0", "prometheus-client": "0.26.0",
    "protobuf": "7.36.2", "psutil": "7.2.2", "pydantic": "2.14.3", "pydantic-core": "2.50.4",
    "pygments": "2.21.0", "pyyaml": "6.0.3", "qwix": "0.1.8", "regex": "2026.11.15",
    "requests": "2.34.2", "rich": "15.0.0", "safetensors": "0.8.0", "sentencepiece": "0.2.3",
    "shellingham": "1.5.4", "simplejson": "4.3.0", "six": "1.17.0", "starlette": "1.10.0",
    "sympy": "1.14.0", "termcolor": "3.3.0", "tiktoken": "0.14.0", "tokamax": "0.0.17",
    "tokenizers": "0.23.3", "tqdm": "4.70.1", "transformers": "5.23.0",
    "treescope": "0.1.10", "truststore": "0.10.5", "typer": "0.29.2",
    "typing-extensions": "4.16.0", "typing-inspection": "0.4.5", "urllib3": "2.8.0",
    "uvicorn": "0.54.0", "uvloop": "0.23.0", "wadler-lindig": "0.1.8", "xprof": "2.24.2",
    "zipp": "4.1.2",
}

MARKER = "tpujob-maxtext-env.json"


class MaxTextEnvError(cached_env.EnvBuildError):
    """The environment cannot be built here; the message says what is missing."""


# -- what to build -----------------------------------------------------------------------------

def _version_key(path: str) -> tuple:
    name = Path(path).name
    return tuple(int(p) if p.isdigit() else -1 for p in name.replace("-", ".").split("."))


def find_python312() -> str:
    """Python 3.12: pyenv's (the newest 3.12.x) first, then `python3.12` on PATH."""
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.join(os.path.expanduser("~"), ".pyenv")
    candidates = [os.path.join(d, "bin", "python3.12") for d in sorted(
        glob.glob(os.path.join(pyenv_root, "versions", "3.12*")), key=_version_key, reverse=True)]
    if on_path := shutil.which("python3.12"):
        candidates.append(on_path)
    for exe in candidates:
        if os.access(exe, os.X_OK):
            return exe
    raise MaxTextEnvError(
        f"MaxText {MAXTEXT_VERSION} needs Python 3.12 (its package requires >=3.12) and none was "
        f"found: no {pyenv_root}/versions/3.12*/bin/python3.12 and no python3.12 on PATH. "
        "Install one (for example `pyenv install 3.12`) and run this again.")


def resolved_pins(versions: dict[str, str] | None = None) -> dict[str, str]:
    """Every package of the environment with its version, `maxtext` included."""
    versions = cached_env.trainer_versions("MaxText") if versions is None else versions
    return dict(sorted({**PINS, **versions, "maxtext": MAXTEXT_VERSION}.items()))


def env_dir(pins: dict[str, str]) -> Path:
    digest = cached_env.pins_digest(pins)
    return cached_env.cache_root() / f"maxtext-{pins['maxtext']}-py312-{digest}"


# -- building ----------------------------------------------------------------------------------

def run_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment variables for running MaxText on CPU without Google Cloud."""
    env = dict(os.environ if base is None else base)
    env["DECOUPLE_GCLOUD"] = "TRUE"
    env.pop("PYTHONPATH", None)
    return env


def _build(directory: Path, pins: dict[str, str], log) -> dict:
    python312 = find_python312()
    if directory.exists():
        log(f"removing an unfinished MaxText environment at {directory}")
        shutil.rmtree(directory)
    log(f"building MaxText {pins['maxtext']}'s environment at {directory} from {python312} "
        "(once; a few minutes)")
    cached_env.run([python312, "-m", "venv", str(directory)],
                   "creating the virtual environment")
    python = str(directory / "bin" / "python")
    cached_env.pip_install(python, pins, "installing MaxText and its pinned dependencies")
    probe = (f"import importlib.util, json, os, sys; import {TRAIN_MODULE}; "
             "spec = importlib.util.find_spec('maxtext'); "
             "print(json.dumps({'base_yml': os.path.join(os.path.dirname(spec.origin), "
             "'configs', 'base.yml'), 'version': list(sys.version_info[:3])}))")
    out = cached_env.run([python, "-c", probe], f"importing {TRAIN_MODULE}", env=run_env())
    found = json.loads(out.strip().splitlines()[-1])
    if not Path(found["base_yml"]).is_file():
        raise MaxTextEnvError(f"MaxText installed but {found['base_yml']} is not there")
    marker = {"python": python, "python_version": ".".join(map(str, found["version"])),
              "base_yml": found["base_yml"], "train_module": TRAIN_MODULE, "pins": pins}
    cached_env.write_marker(directory, MARKER, marker)
    log(f"MaxText environment ready: {python}")
    return marker


def ensure(log=None) -> dict:
    """Builds the environment if it is not there yet; its marker (python, base_yml, pins)."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    pins = resolved_pins()
    directory = env_dir(pins)
    return cached_env.ensure(directory, MARKER, pins, lambda: _build(directory, pins, log))


def maxtext_python() -> str:
    """The path of the environment's python (built first if needed)."""
    return ensure()["python"]


def base_yml() -> str:
    """The path of MaxText's `configs/base.yml` inside the installed package."""
    return ensure()["base_yml"]


def train_argv(**overrides) -> list[str]:
    """`python -m maxtext.trainers.pre_train.train base.yml key=value ...` for this environment."""
    marker = ensure()
    return [marker["python"], "-m", marker["train_module"], marker["base_yml"],
            *(f"{key}={value}" for key, value in overrides.items())]


def main(argv: list[str] | None = None) -> int:
    return cached_env.main("maxtext_env", __doc__.split("\n\n")[0], ensure,
                           "print the entry point, base.yml, Python and pins as JSON", argv)


if __name__ == "__main__":
    sys.exit(main())
