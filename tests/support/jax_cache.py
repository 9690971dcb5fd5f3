"""The test suite's JAX compilation cache, kept across runs (tests/conftest.py): bounded by
removing its oldest entries."""

from __future__ import annotations

from pathlib import Path


def prune(folder: Path, max_bytes: int) -> list[Path]:
    """Once the files under `folder` pass `max_bytes` together, remove the least recently
    written until they hold at most three quarters of it (so that not every run prunes); the
    files removed. An entry another run removes first is skipped."""
    files = []
    for path in folder.rglob("*"):
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        if path.is_file():
            files.append((st.st_mtime, st.st_size, path))
    total = sum(size for _, size, _ in files)
    if total <= max_bytes:
        return []
    removed = []
    for _, size, path in sorted(files, key=lambda f: (f[0], str(f[2]))):
        if total <= max_bytes * 3 // 4:
            break
        path.unlink(missing_ok=True)
        total -= size
        removed.append(path)
    return removed
