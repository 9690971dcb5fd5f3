"""Trainer tests. `gcs` is a GCS emulator of the module's own (runs that save several
checkpoints to `gs://` must not share a bucket's listings with other modules)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.gcs import GcsEmulator, gcs_emulator_in_env


@pytest.fixture(scope="module")
def gcs() -> Iterator[GcsEmulator]:
    with gcs_emulator_in_env() as emulator:
        yield emulator
