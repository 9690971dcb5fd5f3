"""Trainer tests. `gcs` is a GCS emulator that serves object generations on downloads (see
tests/trainer/gcs_generations.py): runs that save more than two checkpoints to `gs://` need it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from tests.trainer.gcs_generations import run_fixed_gcs_emulator
from tpujob_trainer.gcs_env import set_gcs_emulator_env


def _clear_gcsfs_instances() -> None:
    with contextlib.suppress(ImportError):
        import gcsfs
        gcsfs.GCSFileSystem.clear_instance_cache()


@pytest.fixture(scope="module")
def gcs() -> Iterator:
    """A running emulator with a bucket; this process's env (inherited by the trainer
    subprocesses) points every GCS client at it for the module's tests, then is restored."""
    with run_fixed_gcs_emulator() as emulator:
        saved = {k: os.environ.get(k) for k in emulator.env}
        set_gcs_emulator_env(emulator.url)
        _clear_gcsfs_instances()
        try:
            yield emulator
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            _clear_gcsfs_instances()
