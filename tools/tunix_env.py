"""Tunix's environment for running it beside tpujob's trainer, built once and cached.

    python tools/tunix_env.py            # builds it the first time, then prints its python
    python tools/tunix_env.py --info     # also its Python version and the pins (JSON)

    from tools.tunix_env import ensure, tunix_python, run_env

What it builds: a virtual environment from the Python running this (Tunix requires >=3.11)
under the cache of `tools/cached_env.py` (`~/.cache/tpujob/`, or `$TPUJOB_CACHE_DIR`, or
`$XDG_CACHE_HOME/tpujob`), never inside the repository, and not MaxText's: Tunix requires
`safetensors<0.8`, MaxText's environment has 0.8.0. In it: `google-tunix` from PyPI, installed
with `--no-deps`, and only the packages that its GRPO path imports on CPU (RLCluster,
GRPOLearner, the plain JAX sampler, the Qwen3 model, orbax checkpoints, grain), found by
running it, each pinned here: no TensorFlow, no PyTorch, no vLLM, no cloud clients. JAX and the
libraries that decide its numerics (`cached_env.SAME_AS_TRAINER`: jax, jaxlib, flax, optax,
orbax-checkpoint, numpy, ml-dtypes, scipy, opt-einsum, tensorstore) take the versions installed
with tpujob's trainer, so Tunix runs on the trainer's JAX.

Tunix version: 0.1.7 (the newest on PyPI when pinned), which runs on the trainer's jax 0.10.2,
flax 0.12.8, optax 0.2.8 and orbax-checkpoint 0.12.8.

Idempotent and fast once built: a marker file in the environment records the resolved pins,
and a later call that finds the same pins returns at once, starting no process. Two processes
building at once are serialized by a file lock beside the environment; a build that was cut
off (no marker) is removed and done again. Building takes about a minute and 900 MB.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

try:
    from tools import cached_env
except ImportError:  # run as `python tools/tunix_env.py`: tools/ itself is on the path
    import cached_env

TUNIX_VERSION = "0.1.7"
MIN_PYTHON = (3, 11)  # google-tunix 0.1.7: Requires-Python >=3.11

# What Tunix's GRPO path imports on CPU (tunix.rl.rl_cluster, tunix.rl.grpo.grpo_learner,
# tunix.models.qwen3, tunix.models.dummy_model_creator, with a few GRPO steps), and what those
# import in turn, found by running it until nothing was missing.
PINS = {
    "absl-py": "2.5.1", "aiofiles": "25.1.0", "array-record": "0.8.6", "cloudpickle": "3.1.3",
    "clu": "0.0.12", "einops": "0.8.2", "etils": "1.15.0", "fsspec": "2026.9.0",
    "google-metrax": "0.2.4", "grain": "0.2.18", "huggingface-hub": "2.4.0",
    "humanize": "4.17.0", "jaxtyping": "0.3.11", "markdown-it-py": "4.3.0", "mdurl": "0.1.2",
    "msgpack": "1.2.4", "pandas": "3.1.1", "perfetto": "0.59.1", "pillow": "13.0.0",
    "portpicker": "1.6.0", "prometheus-client": "0.26.0", "protobuf": "7.36.2",
    "psutil": "7.2.2", "pygments": "2.21.0", "python-dateutil": "4.0.0", "pytz": "2026.6",
    "pyyaml": "6.0.4", "qwix": "0.1.8", "rich": "15.0.0", "safetensors": "0.7.0",
    "sentencepiece": "0.2.3", "simplejson": "4.3.0", "tenacity": "9.2.1",
    "tensorboardx": "2.6.5", "tqdm": "4.70.1", "treescope": "0.1.10",
    "typing-extensions": "4.16.0", "tzdata": "2026.6", "uvloop": "0.23.0",
    "wadler-lindig": "0.1.8", "wrapt": "2.5.2", "zipp": "4.1.2",
}

# Imported once the packages are in, so a build that lacks something fails here, naming it.
PROBE_MODULES = ("tunix.rl.rl_cluster", "tunix.rl.grpo.grpo_learner",
                 "tunix.rl.rollout.base_rollout", "tunix.models.qwen3.model",
                 "tunix.models.dummy_model_creator", "tunix.sft.hooks", "orbax.checkpoint",
                 "grain.python")

MARKER = "tpujob-tunix-env.json"


class TunixEnvError(cached_env.EnvBuildError):
    """Tunix's environment cannot be built here; the message says what is missing."""


# -- what to build -----------------------------------------------------------------------------

def check_python(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> None:
    if tuple(version[:2]) < MIN_PYTHON:
        raise TunixEnvError(
            f"Tunix {TUNIX_VERSION} needs Python {'.'.join(map(str, MIN_PYTHON))} or newer and "
            f"this is {'.'.join(map(str, version))} ({sys.executable}): run this with a newer "
            "Python.")


def resolved_pins(versions: dict[str, str] | None = None) -> dict[str, str]:
    """Every package of the environment with its version, `google-tunix` included."""
    versions = cached_env.trainer_versions("Tunix") if versions is None else versions
    return dict(sorted({**PINS, **versions, "google-tunix": TUNIX_VERSION}.items()))


def env_dir(pins: dict[str, str], version: tuple[int, ...] = tuple(sys.version_info[:2])) -> Path:
    tag = f"py{version[0]}{version[1]}"
    digest = cached_env.pins_digest(pins)
    return cached_env.cache_root() / f"tunix-{pins['google-tunix']}-{tag}-{digest}"


def run_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment variables for running a Tunix program: nothing of this repository's Python
    path leaks in, and Hugging Face is never asked for anything."""
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONPATH", None)
    env["HF_HUB_OFFLINE"] = "1"
    return env


# -- building ----------------------------------------------------------------------------------

def _build(directory: Path, pins: dict[str, str], log) -> dict:
    check_python()
    if directory.exists():
        log(f"removing an unfinished Tunix environment at {directory}")
        shutil.rmtree(directory)
    log(f"building Tunix {pins['google-tunix']}'s environment at {directory} from "
        f"{sys.executable} (once; about a minute)")
    cached_env.run([sys.executable, "-m", "venv", str(directory)],
                   "creating the virtual environment")
    python = str(directory / "bin" / "python")
    cached_env.pip_install(python, pins, "installing Tunix and its pinned dependencies")
    probe = (f"import json, sys; import {', '.join(PROBE_MODULES)}; "
             "print(json.dumps({'version': list(sys.version_info[:3])}))")
    out = cached_env.run([python, "-c", probe], "importing Tunix's GRPO modules",
              env={**run_env(), "JAX_PLATFORMS": "cpu"})
    found = json.loads(out.strip().splitlines()[-1])
    marker = {"python": python, "python_version": ".".join(map(str, found["version"])),
              "tunix_version": pins["google-tunix"], "pins": pins}
    cached_env.write_marker(directory, MARKER, marker)
    log(f"Tunix environment ready: {python}")
    return marker


def ensure(log=None) -> dict:
    """Builds the environment if it is not there yet; its marker (python, pins)."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    pins = resolved_pins()
    directory = env_dir(pins)
    return cached_env.ensure(directory, MARKER, pins, lambda: _build(directory, pins, log))


def tunix_python() -> str:
    """The path of the environment's python (built first if needed)."""
    return ensure()["python"]


def main(argv: list[str] | None = None) -> int:
    return cached_env.main("tunix_env", __doc__.split("\n\n")[0], ensure,
                           "print the Python and pins as JSON", argv)


if __name__ == "__main__":
    sys.exit(main())
