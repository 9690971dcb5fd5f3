"""PyTorch's environment, for running torchrun jobs in local mode (GPU jobs' pods as CPU
processes over gloo), built once and cached.

    python tools/torch_env.py            # builds it the first time, then prints its python
    python tools/torch_env.py --info     # also its Python version and the pins (JSON)

    from tools.torch_env import ensure, torch_bin

What it builds: a virtual environment from Python 3.12 (found as for MaxText's environment:
pyenv's newest 3.12, else `python3.12` on PATH; the pins are its wheels), under the cache of
`tools/cached_env.py` (`~/.cache/tpujob/`, or `$TPUJOB_CACHE_DIR`, or `$XDG_CACHE_HOME/tpujob`),
never inside the repository. In it: `torch` from PyPI with exactly the packages pip resolves
for it (pinned here, installed with `--no-deps`). PyPI's Linux torch is the CUDA build: it
imports only with NVIDIA's CUDA libraries beside it (the `nvidia-*` and `cuda-*` packages),
and runs on the CPU without a GPU, which is what local mode does (gloo for collectives).
About 4 GB and two to five minutes on a cold machine; nothing once built.

Idempotent and fast once built: a marker file records the pins; a later call that finds them
returns at once. Two processes building at once are serialized by a file lock.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

try:
    from tools.maxtext_env import find_python312

    from tools import cached_env
except ImportError:  # run as `python tools/torch_env.py`: tools/ itself is on the path
    import cached_env
    from maxtext_env import find_python312

TORCH_VERSION = "2.15.0"
# `pip install --dry-run --report` of torch==2.15.0 (the newest on PyPI when pinned).
PINS = {
    "torch": TORCH_VERSION, "numpy": "2.5.5", "filelock": "4.3.1", "fsspec": "2026.9.0",
    "jinja2": "3.1.6", "markupsafe": "3.0.4", "mpmath": "1.3.0", "networkx": "3.7",
    "setuptools": "84.2.1", "sympy": "1.14.0", "typing-extensions": "4.16.0",
    "triton": "3.9.0", "cuda-bindings": "13.5.0", "cuda-pathfinder": "1.9.1",
    "cuda-toolkit": "13.2.2", "nvidia-cublas": "13.4.1.3", "nvidia-cuda-cccl": "13.3.5.0.6",
    "nvidia-cuda-cupti": "13.2.86", "nvidia-cuda-nvrtc": "13.2.86",
    "nvidia-cuda-runtime": "13.2.86", "nvidia-cudnn-cu13": "9.26.0.51",
    "nvidia-cufft": "12.2.0.57", "nvidia-cufile": "1.17.1.22", "nvidia-cusolver": "12.2.0.11",
    "nvidia-cusparse": "12.7.10.12", "nvidia-cusparselt-cu13": "0.8.1",
    "nvidia-nccl-cu13": "2.30.7", "nvidia-nvjitlink": "13.5.37", "nvidia-nvshmem-cu13": "3.7.2",
    "nvidia-nvtx": "13.2.86",
}
MARKER = "tpujob-torch-env.json"


def env_dir(pins: dict[str, str]) -> Path:
    return cached_env.cache_root() / f"torch-{pins['torch']}-py312-{cached_env.pins_digest(pins)}"


def _build(directory: Path, pins: dict[str, str], log) -> dict:
    if directory.exists():
        log(f"removing an unfinished PyTorch environment at {directory}")
        shutil.rmtree(directory)
    python312 = find_python312()
    log(f"building PyTorch {pins['torch']}'s environment at {directory} from {python312} "
        "(once; a few minutes, about 4 GB)")
    cached_env.run([python312, "-m", "venv", str(directory)], "creating the environment")
    python = str(directory / "bin" / "python")
    cached_env.pip_install(python, pins, "installing torch and its pinned dependencies")
    probe = ("import json, sys, torch, torch.distributed as d; "
             "print(json.dumps({'version': list(sys.version_info[:3]), "
             "'torch': torch.__version__, 'gloo': d.is_gloo_available()}))")
    found = json.loads(cached_env.run([python, "-c", probe], "importing torch").strip()
                       .splitlines()[-1])
    if not found["gloo"]:
        raise cached_env.EnvBuildError("torch was built without gloo: no CPU collectives")
    marker = {"python": python, "bin": str(directory / "bin"),
              "python_version": ".".join(map(str, found["version"])),
              "torch_version": found["torch"], "pins": pins}
    cached_env.write_marker(directory, MARKER, marker)
    log(f"PyTorch environment ready: {python}")
    return marker


def ensure(log=None) -> dict:
    """Builds the environment if it is not there yet; its marker (python, bin, pins)."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    directory = env_dir(PINS)
    return cached_env.ensure(directory, MARKER, PINS, lambda: _build(directory, PINS, log))


def torch_bin() -> str:
    """The environment's bin folder (torchrun, python), built first if needed."""
    return ensure()["bin"]


def main(argv: list[str] | None = None) -> int:
    return cached_env.main("torch_env", __doc__.split("\n\n")[0], ensure,
                           "print the Python and pins as JSON", argv)


if __name__ == "__main__":
    sys.exit(main())
