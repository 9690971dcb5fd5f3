"""Local mode's GCS emulator: buckets made on demand, objects kept in the work directory, and
downloads that carry the object's generation as GCS's do (tensorstore conditions its next write
of an object on it; without it, multi-checkpoint runs fail with "Malformed StorageGeneration");
and no emulator left running when its parent is killed."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import requests

from tests.e2e.conftest import is_alive
from tests.support.apiserver import wait_for
from tpujob.local.session.gcs import GcsEmulator, bucket_of

pytestmark = pytest.mark.e2e


def test_buckets_objects_and_generations_on_downloads(tmp_path):
    with GcsEmulator(tmp_path / "gcs") as gcs:
        gcs.ensure_bucket("runs")
        gcs.ensure_bucket("runs")  # again: nothing happens
        upload = requests.post(f"{gcs.url}/upload/storage/v1/b/runs/o",
                               params={"uploadType": "media", "name": "a/b.txt"}, data=b"hi")
        assert upload.status_code == 200, upload.text
        generation = upload.json()["generation"]
        for path in ("/download/storage/v1/b/runs/o/a%2Fb.txt", "/storage/v1/b/runs/o/a%2Fb.txt"):
            got = requests.get(gcs.url + path, params={"alt": "media"})
            assert got.content == b"hi"
            assert got.headers["x-goog-generation"] == generation
        assert requests.get(f"{gcs.url}/download/storage/v1/b/runs/o/none",
                            params={"alt": "media"}).status_code == 404
        assert gcs.env["STORAGE_EMULATOR_HOST"] == gcs.url
        proc = gcs.proc
    assert proc.poll() is not None  # stopped
    assert any(p.is_file() for p in (tmp_path / "gcs").rglob("*")), "objects are kept on disk"


@pytest.mark.parametrize("url,bucket", [("gs://b/x/y", "b"), ("gs://b", "b"), ("gs://", None),
                                        ("/tmp/out", None), ("s3://b/x", None)])
def test_the_bucket_of_an_output(url, bucket):
    assert bucket_of(url) == bucket


def test_the_emulator_does_not_outlive_a_killed_parent(tmp_path):
    code = ("import sys, time\n"
            "from tpujob.local.session.gcs import GcsEmulator\n"
            f"gcs = GcsEmulator({str(tmp_path / 'gcs')!r})\n"
            "gcs.start()\n"
            "print(gcs.proc.pid, flush=True)\n"
            "time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        emulator = int(parent.stdout.readline())
        assert is_alive(emulator)
        parent.send_signal(signal.SIGKILL)  # no chance to stop anything itself
        parent.wait(10)
        wait_for(lambda: not is_alive(emulator), timeout=10, message="the emulator to exit")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()
