"""The two API servers of the conformance suite, started once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conformance.planes import Plane, embedded_plane, real_plane


@pytest.fixture(scope="session")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with real_plane(tmp_path_factory.mktemp("conformance-real")) as plane:
        yield plane


@pytest.fixture(scope="session")
def embedded() -> Iterator[Plane]:
    with embedded_plane() as plane:
        yield plane
