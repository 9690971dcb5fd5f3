"""Where tpujob keeps what it builds once and reuses (the real control plane's programs, the
environments of other people's trainers): `$TPUJOB_CACHE_DIR`, else `$XDG_CACHE_HOME/tpujob`,
else `~/.cache/tpujob`, never inside the repository; and the file lock that keeps two
processes from building the same thing at once."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


def cache_root() -> Path:
    if os.environ.get("TPUJOB_CACHE_DIR"):
        return Path(os.environ["TPUJOB_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tpujob"


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file `path` (made if missing) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
