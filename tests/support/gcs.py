"""A GCS emulator for tests: `gcs_emulator` starts `gcp-storage-emulator` once per session.

Load it with `pytest_plugins = ["tests.support.gcs"]`. The fixture sets the variables that send
gcsfs, tensorstore (Orbax) and google-cloud-storage to the emulator in `os.environ`, so they
apply to this process and to every subprocess a test starts, and restores them afterwards.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tpujob_trainer.gcs_env import build_gcs_emulator_env, set_gcs_emulator_env

DEFAULT_BUCKET = "tpujob-test"


@dataclass(frozen=True)
class GcsEmulator:
    url: str      # http://127.0.0.1:PORT
    bucket: str

    @property
    def env(self) -> dict[str, str]:
        """The variables a subprocess needs to reach this emulator."""
        return build_gcs_emulator_env(self.url)

    def gs(self, *parts: str) -> str:
        """`gs://<bucket>/<parts...>`."""
        return "/".join([f"gs://{self.bucket}", *(p.strip("/") for p in parts if p)])

    def fresh_prefix(self, name: str = "t") -> str:
        """A `gs://` prefix no other test uses."""
        return self.gs(f"{name}-{uuid.uuid4().hex[:10]}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _emulator_command() -> list[str]:
    """Local mode's launcher of gcp-storage-emulator: its downloads carry object generations,
    which Orbax's tensorstore writes need after a few saves."""
    from tpujob.local.session.gcs import GcsEmulatorError, find_emulator
    try:
        return find_emulator()
    except GcsEmulatorError as err:
        pytest.skip(str(err))


@contextlib.contextmanager
def run_gcs_emulator(bucket: str = DEFAULT_BUCKET, *, timeout_s: float = 30.0) -> Iterator[GcsEmulator]:
    """Run the emulator on a free 127.0.0.1 port with `bucket` created; stop it on exit."""
    port = _free_port()
    # The emulator prints a traceback for every dropped connection: into a file, never into a
    # pipe nobody reads (a full pipe blocks the emulator and every client with it).
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [*_emulator_command(), "start", "--host", "127.0.0.1", "--port", str(port),
         "--default-bucket", bucket, "--in-memory", "--quiet"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"gcp-storage-emulator exited ({proc.returncode}): "
                                   f"{log.read().decode(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/storage/v1/b/{bucket}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"gcp-storage-emulator did not serve {url} within {timeout_s}s")
            time.sleep(0.1)
        yield GcsEmulator(url=url, bucket=bucket)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@contextlib.contextmanager
def gcs_emulator_in_env() -> Iterator[GcsEmulator]:
    """A running emulator with a bucket, and this process's env (inherited by subprocesses)
    pointing every GCS client at it until the block ends; then the env is restored."""
    with run_gcs_emulator() as emulator:
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


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[GcsEmulator]:
    """One emulator for the whole session (see gcs_emulator_in_env)."""
    with gcs_emulator_in_env() as emulator:
        yield emulator


def _clear_gcsfs_instances() -> None:
    """gcsfs caches clients per arguments; a cached one may point at another endpoint."""
    with contextlib.suppress(ImportError):
        import gcsfs
        gcsfs.GCSFileSystem.clear_instance_cache()
