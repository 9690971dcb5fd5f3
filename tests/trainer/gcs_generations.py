"""`gcp-storage-emulator` with the object generation on downloads, as real GCS sends it.

The emulator (2026.7.19) answers a media download without the `x-goog-generation` header.
Tensorstore, which Orbax writes arrays with, takes the generation of what it reads from that
header and conditions its next write of the object on it; without it the write fails with
"Malformed StorageGeneration". An OCDBT checkpoint re-reads its own `manifest.ocdbt` whenever the
manifest drops out of tensorstore's cache (in practice from about the third save in one process),
so multi-save runs on `gs://` fail against the plain emulator though they work on GCS.

It also writes its stderr to a file (`$TMPDIR/gcs-emulator-<pid>.log`) instead of the pipe
`run_gcs_emulator` gives it and reads only if it fails to start: the emulator's server prints a
traceback for every request a client drops (`socketserver.handle_error`), and once 64 KiB of those
fill the unread pipe, its single serving thread blocks in that write and every GCS client waits
forever (gcsfs reads have no timeout).

Run as `python tests/trainer/gcs_generations.py start ...` (the emulator's own arguments), or
use `run_fixed_gcs_emulator()`: `tests.support.gcs.run_gcs_emulator` started through this file.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock


def _patch_downloads() -> None:
    from gcp_storage_emulator.handlers import objects

    plain = objects.download

    def download(request, response, storage, *args, **kwargs):
        with contextlib.suppress(Exception):  # a missing object: the emulator answers 404
            obj = storage.get_file_obj(request.params["bucket_name"], request.params["object_id"])
            response["x-goog-generation"] = str(obj["generation"])
            response["x-goog-metageneration"] = str(obj.get("metageneration", "1"))
        return plain(request, response, storage, *args, **kwargs)

    objects.download = download  # the server's routes are built from this module at import


@contextlib.contextmanager
def run_fixed_gcs_emulator(**kwargs) -> Iterator:
    """`run_gcs_emulator(**kwargs)`, serving generations on downloads."""
    from tests.support import gcs

    with mock.patch.object(gcs, "_emulator_command",
                           lambda: [sys.executable, str(Path(__file__).resolve())]):
        with gcs.run_gcs_emulator(**kwargs) as emulator:
            yield emulator


def _stderr_to_file() -> None:
    log = os.path.join(tempfile.gettempdir(), f"gcs-emulator-{os.getpid()}.log")
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.close(fd)


if __name__ == "__main__":
    _stderr_to_file()
    _patch_downloads()
    from gcp_storage_emulator.__main__ import main

    sys.exit(main(sys.argv[1:]))
