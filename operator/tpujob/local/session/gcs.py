"""A local stand-in for Google Cloud Storage: `gcp-storage-emulator` as a child process on a
127.0.0.1 port, storing objects in a directory (so a kept work directory keeps the bucket), with
the buckets a job's `gs://` output names created on demand.

Trainer processes reach it through the variables of `tpujob_trainer.gcs_env` (gcsfs,
tensorstore and google-cloud-storage all honour them).

The emulator runs as `python -m tpujob.local.session.gcs start ...`: its own command line, with
four fixes. First, it answers a media download without the `x-goog-generation` header real GCS sends;
tensorstore (which Orbax writes arrays with) conditions its next write of an object on the
generation it read, and without one fails with "Malformed StorageGeneration". An OCDBT checkpoint
re-reads its manifest once it drops out of tensorstore's cache, so runs saving several
checkpoints to `gs://` would fail against the plain emulator.

Second, it keeps each object in a file named as the object, so a folder marker (an object whose
name ends in `/`, as the Cloud Console's "create folder" and TensorFlow's file layer make)
became a file where the folder of the objects under it must go, and every later write under it
failed (FileExistsError, the connection dropped). A marker's content is kept inside its folder
instead (`FOLDER_MARKER_FILE`), so the marker and the objects under it both exist, as on GCS; an
empty media upload (a marker's) is taken as an empty object, where the emulator failed on it.

Third, it gave every new bucket GCS's default soft delete (7 days): every deleted object was kept,
content and all, in an index it rewrites whole on every write, so a job that saves checkpoints and
deletes old ones made each later request slower (two processes saving every step: a commit took
0.5 s at the first save and 3 s at the 60th, flat at 0.5 s without). New buckets have soft delete
off (`softDeletePolicy.retentionDurationSeconds` 0, as `gcloud storage buckets create
--soft-delete-duration=0` makes them); a bucket patched with a policy keeps it.

Fourth, it never answered `Expect: 100-continue`, which curl (under tensorstore) sends before a
large upload body, so each such upload waited out curl's one-second timeout: a checkpoint save's
background write of the quickstart model took ~3.2 s, and 0.2-0.3 s answered (py-spy and Orbax's
own timings, 2 processes, the final save's wait 3.4 s -> 0.5 s)."""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

from tpujob_trainer.gcs_env import build_gcs_emulator_env

INSTALL_HINT = "pip install 'tpujob[dev]' (it brings gcp-storage-emulator)"
PARENT_ENV = "TPUJOB_GCS_EMULATOR_PARENT"   # the pid the emulator must not outlive
PR_SET_PDEATHSIG = 1
# Where the content of a folder marker `dir/` is kept: `<bucket>/dir/` + this.
FOLDER_MARKER_FILE = ".folder-marker-object"


class GcsEmulatorError(RuntimeError):
    """The emulator is missing, did not start, or refused a request."""


def find_emulator() -> list[str]:
    """The command that starts the emulator (with its fixes, see the module doc)."""
    if importlib.util.find_spec("gcp_storage_emulator") is None:
        raise GcsEmulatorError(f"gcp-storage-emulator is not installed: {INSTALL_HINT}")
    return [sys.executable, "-m", __name__]


def _serve_generations_on_downloads() -> None:
    """Make the emulator's media downloads carry the object's generation, as GCS's do."""
    from gcp_storage_emulator.handlers import objects

    plain = objects.download

    def download(request, response, storage, *args, **kwargs):
        try:
            obj = storage.get_file_obj(request.params["bucket_name"],
                                       request.params["object_id"])
        except Exception:  # a missing object: the emulator answers 404 itself
            obj = None
        if obj is not None:
            response["x-goog-generation"] = str(obj["generation"])
            response["x-goog-metageneration"] = str(obj.get("metageneration", "1"))
        return plain(request, response, storage, *args, **kwargs)

    objects.download = download  # the server's routes look handlers up in this module


def _keep_folder_markers_inside_their_folders() -> None:
    """Store a folder marker's content inside its folder, not as a file in the folder's place;
    take a media upload without a body as an empty object."""
    from gcp_storage_emulator import server
    from gcp_storage_emulator.handlers import objects

    class FolderMarkerStorage(server.Storage):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._move_markers_kept_in_place_of_their_folder()

        def _object_path(self, bucket_name, file_name):
            path = super()._object_path(bucket_name, file_name)
            return path + FOLDER_MARKER_FILE if path.endswith("/") else path

        def _move_markers_kept_in_place_of_their_folder(self):
            # Objects an emulator without this fix stored (a kept work directory).
            for bucket, names in self.objects.items():
                for name in names:
                    old = super()._object_path(bucket, name)
                    if old.endswith("/") and name.rstrip("/") not in names \
                            and self._store.exists_file(old):
                        content = self._store.read_bytes(old)
                        self._store.remove_file(old)
                        self._store.write_bytes(self._object_path(bucket, name), content)

    plain_media_upload = objects._media_upload

    def media_upload(request, response, storage):
        if request.data is None:  # no body: read as None, and len(None) failed
            request._data = b""
        return plain_media_upload(request, response, storage)

    server.Storage = FolderMarkerStorage   # the server makes its storage from this name
    objects._media_upload = media_upload   # `insert` looks it up in this module


def _delete_for_good() -> None:
    """New buckets have soft delete off (`softDeletePolicy.retentionDurationSeconds` 0) unless
    their creation asks otherwise: the emulator kept every deleted object, content included, and
    rewrote its whole index on every write, so each checkpoint saved (and an old one deleted)
    made every later request slower."""
    from gcp_storage_emulator.handlers import buckets

    plain = buckets._make_bucket_resource

    def make_bucket_resource(*args, **kwargs):
        bucket = plain(*args, **kwargs)
        bucket["softDeletePolicy"] = {**bucket.get("softDeletePolicy", {}),
                                      "retentionDurationSeconds": "0"}
        return bucket

    buckets._make_bucket_resource = make_bucket_resource  # the create handlers look it up here


def _answer_expect_100_continue() -> None:
    """Answer `Expect: 100-continue` at once, as GCS does. curl (under tensorstore, which Orbax
    writes arrays with) asks it before a large upload body and waits for the interim answer; the
    emulator speaks HTTP/1.0, whose handler never gives it, so curl waited its full second
    before each such upload: three a checkpoint save of the quickstart model, ~3 s of every
    save's background write, all of the wait for the last save at a job's end."""
    from gcp_storage_emulator import server

    plain = server.RequestHandler.parse_request

    def parse_request(self) -> bool:
        if not plain(self):
            return False
        asks = self.headers.get("Expect", "").lower() == "100-continue"
        if asks and self.request_version >= "HTTP/1.1" and self.protocol_version < "HTTP/1.1":
            return self.handle_expect_100()  # the base handler answers only an HTTP/1.1 server
        return True

    server.RequestHandler.parse_request = parse_request


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GcsEmulator:
    """`start()` runs the emulator (objects under `data_dir`); `stop()` ends it."""

    def __init__(self, data_dir: str | os.PathLike, port: int = 0,
                 start_timeout_s: float = 30.0) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self._log_path = self.data_dir.parent / "gcs-emulator.log"
        self._buckets: set[str] = set()
        self._http = requests.Session()
        self._lock = threading.Lock()   # buckets are created from more than one thread

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """What a process needs in its environment to use this emulator for `gs://`."""
        return build_gcs_emulator_env(self.url)

    def start(self) -> str:
        command = find_emulator()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or _free_port()
        log = open(self._log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [*command, "--data-dir", str(self.data_dir), "start", "--host", "127.0.0.1",
                 "--port", str(self.port), "--quiet"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, PARENT_ENV: str(os.getpid())})
        finally:
            log.close()
        deadline = time.monotonic() + self.start_timeout_s
        while not self._healthy():
            if self.proc.poll() is not None:
                tail = self._log_path.read_text(errors="replace")[-1500:]
                self.proc = None
                raise GcsEmulatorError(f"gcp-storage-emulator exited at start: {tail}")
            if time.monotonic() > deadline:
                self.stop()
                raise GcsEmulatorError(f"gcp-storage-emulator did not answer on {self.url} "
                                       f"within {self.start_timeout_s:.0f} s")
            time.sleep(0.1)
        return self.url

    def _healthy(self) -> bool:
        try:
            return self._http.get(f"{self.url}/storage/v1/b", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def ensure_bucket(self, name: str) -> None:
        """Create bucket `name` unless it exists."""
        with self._lock:
            if name in self._buckets:
                return
            r = self._http.post(f"{self.url}/storage/v1/b", params={"project": "local"},
                                json={"name": name}, timeout=10)
            if r.status_code not in (200, 409):
                raise GcsEmulatorError(f"cannot create bucket {name}: {r.status_code} "
                                       f"{r.text[:300]}")
            self._buckets.add(name)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._http.close()
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> GcsEmulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def bucket_of(url: str) -> str | None:
    """The bucket of a `gs://bucket/...` URL; None for anything else."""
    if not url.startswith("gs://"):
        return None
    return url[len("gs://"):].split("/", 1)[0] or None


def _exit_with_parent() -> None:
    """Linux: this process gets SIGTERM when the thread that started it ends, even when its
    process is SIGKILLed, so a killed `tpujob local run` leaves no emulator behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    parent = os.environ.get(PARENT_ENV)
    if parent and os.getppid() != int(parent):  # it died before prctl
        sys.exit(0)


if __name__ == "__main__":
    _exit_with_parent()
    _serve_generations_on_downloads()
    _keep_folder_markers_inside_their_folders()
    _delete_for_good()
    _answer_expect_100_continue()
    from gcp_storage_emulator.__main__ import main

    sys.exit(main(sys.argv[1:]))
