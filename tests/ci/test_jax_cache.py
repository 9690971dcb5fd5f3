"""The test suite's JAX compilation cache, kept across runs outside the repository
(tests/conftest.py), stays bounded: the oldest entries go once it passes its size."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.jax_cache import prune
from tpujob.local.cache import cache_root

pytestmark = pytest.mark.unit


def _entries(folder: Path, sizes: list[int]) -> list[Path]:
    """Files of `sizes` bytes, written one second apart in that order (oldest first)."""
    paths = []
    for i, size in enumerate(sizes):
        path = folder / f"jit_f{i}-cache"
        path.write_bytes(b"x" * size)
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
        paths.append(path)
    return paths


@pytest.mark.parametrize(("sizes", "max_bytes", "removed"), [
    ([100, 100, 100], 300, []),            # at the limit: nothing goes
    ([100, 100, 100, 100], 300, [0, 1]),   # past it: the oldest, down to 3/4 of the limit
    ([500, 10, 10], 400, [0]),             # one large old entry is enough
    ([10, 10, 500], 400, [0, 1, 2]),       # the newest goes too when the old ones are not enough
    ([], 0, []),
])
def test_the_oldest_entries_go_once_the_cache_passes_its_size(tmp_path, sizes, max_bytes, removed):
    paths = _entries(tmp_path, sizes)
    gone = prune(tmp_path, max_bytes)
    assert gone == [paths[i] for i in removed]
    assert [p.exists() for p in paths] == [i not in removed for i in range(len(paths))]


def test_entries_in_subfolders_count_and_folders_stay(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    old, new = _entries(sub, [300]), _entries(tmp_path, [300])
    os.utime(new[0], (2_000_000, 2_000_000))
    assert prune(tmp_path, 400) == old
    assert sub.is_dir() and new[0].exists()


def test_the_run_uses_the_kept_cache_unless_told_otherwise():
    # Set by tests/conftest.py before any test imports JAX; CI leaves the variable unset.
    where = Path(os.environ["JAX_COMPILATION_CACHE_DIR"])
    if os.environ.get("CI") == "true":
        assert where == cache_root() / "tests-jax-cache"
    assert where.is_dir()
