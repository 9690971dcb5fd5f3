"""Local mode's GCS emulator: buckets made on demand, objects kept in the work directory, and
downloads that carry the object's generation as GCS's do (tensorstore conditions its next write
of an object on it; without it, multi-checkpoint runs fail with "Malformed StorageGeneration");
deleted objects gone for good (soft delete off); and no emulator left running when its parent is
killed."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest
import requests

from tests.e2e.conftest import is_alive
from tests.support.apiserver import wait_for
from tests.support.gcs import run_gcs_emulator
from tpujob.local.session.gcs import FOLDER_MARKER_FILE, GcsEmulator, bucket_of

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


def _upload(gcs: GcsEmulator, bucket: str, name: str, data: bytes) -> requests.Response:
    return requests.post(f"{gcs.url}/upload/storage/v1/b/{bucket}/o", timeout=10,
                         params={"uploadType": "media", "name": name}, data=data)


def _listing(gcs: GcsEmulator, bucket: str, **params: str) -> tuple[list[str], list[str]]:
    got = requests.get(f"{gcs.url}/storage/v1/b/{bucket}/o", params=params, timeout=10).json()
    return [o["name"] for o in got.get("items", [])], got.get("prefixes", [])


def _gcsfs(gcs: GcsEmulator, monkeypatch):
    import gcsfs
    for key, value in gcs.env.items():
        monkeypatch.setenv(key, value)
    return gcsfs.GCSFileSystem(skip_instance_cache=True)


def test_a_folder_marker_and_the_objects_under_it_live_side_by_side(tmp_path, monkeypatch):
    # `q/` as the Cloud Console's "create folder" and TensorFlow's file layer make it (an
    # empty object), then objects under it: on GCS both exist; the plain emulator stored `q/`
    # as a file named q, and every later write under q/ failed (FileExistsError).
    with GcsEmulator(tmp_path / "gcs") as gcs:
        gcs.ensure_bucket("b")
        assert _upload(gcs, "b", "q/", b"").status_code == 200
        assert _upload(gcs, "b", "q/x.txt", b"hi").status_code == 200
        assert _upload(gcs, "b", "q/r/", b"marker").status_code == 200  # one inside
        assert _upload(gcs, "b", "q/r/y.txt", b"yo").status_code == 200
        for name, content in (("q/", b""), ("q/x.txt", b"hi"), ("q/r/", b"marker"),
                              ("q/r/y.txt", b"yo")):
            got = requests.get(f"{gcs.url}/download/storage/v1/b/b/o/"
                               f"{requests.utils.quote(name, safe='')}",
                               params={"alt": "media"}, timeout=10)
            assert (got.status_code, got.content) == (200, content), name
        assert _listing(gcs, "b", prefix="q/", delimiter="/") == (["q/", "q/x.txt"], ["q/r/"])
        assert _listing(gcs, "b", delimiter="/") == ([], ["q/"])
        assert _listing(gcs, "b") == (["q/", "q/r/", "q/r/y.txt", "q/x.txt"], [])
        # gcsfs, as a trainer writes gs://: through the marker, and the marker itself.
        fs = _gcsfs(gcs, monkeypatch)
        fs.pipe("b/q/z.txt", b"zz")
        assert fs.cat("b/q/z.txt") == b"zz" and fs.cat("b/q/") == b""
        assert fs.isdir("b/q") and fs.exists("b/q/x.txt")
        # The marker goes, the objects under it stay; a marker again, over them.
        assert requests.delete(f"{gcs.url}/storage/v1/b/b/o/q%2F", timeout=10).ok
        assert _listing(gcs, "b", prefix="q/", delimiter="/") == (["q/x.txt", "q/z.txt"],
                                                                  ["q/r/"])
        assert _upload(gcs, "b", "q/", b"again").status_code == 200
        assert fs.cat("b/q/") == b"again" and fs.cat("b/q/x.txt") == b"hi"
    # A restart over the same directory keeps both (a kept work directory).
    with GcsEmulator(tmp_path / "gcs") as gcs:
        fs = _gcsfs(gcs, monkeypatch)
        assert fs.cat("b/q/") == b"again" and fs.cat("b/q/r/y.txt") == b"yo"


def test_a_folder_marker_an_older_emulator_kept_in_its_folders_place_is_moved(tmp_path,
                                                                              monkeypatch):
    with GcsEmulator(tmp_path / "gcs") as gcs:
        gcs.ensure_bucket("b")
        assert _upload(gcs, "b", "q/", b"old").status_code == 200
    # As an emulator without the fix left it (a kept work directory): the marker's content in
    # a file where the folder q must go.
    bucket = tmp_path / "gcs" / ".cloudstorage" / "b"
    (bucket / "q" / FOLDER_MARKER_FILE).rename(tmp_path / "marker")
    (bucket / "q").rmdir()
    (tmp_path / "marker").rename(bucket / "q")
    with GcsEmulator(tmp_path / "gcs") as gcs:
        assert _upload(gcs, "b", "q/x.txt", b"hi").status_code == 200
        fs = _gcsfs(gcs, monkeypatch)
        assert fs.cat("b/q/") == b"old" and fs.cat("b/q/x.txt") == b"hi"


def _soft_deleted(gcs_url: str, bucket: str) -> list[str]:
    got = requests.get(f"{gcs_url}/storage/v1/b/{bucket}/o", params={"softDeleted": "true"},
                       timeout=10)
    assert got.status_code == 200, got.text
    return [item["name"] for item in got.json().get("items", [])]


def test_deleted_objects_are_gone_for_good(tmp_path):
    # The plain emulator gave every bucket GCS's default 7-day soft delete: every deleted object
    # kept, content and all, in an index it rewrote whole on every write, so each checkpoint
    # saved and deleted made every later request slower (a commit 0.5 s at the first save, 3 s
    # at the 60th). Local mode's buckets and the tests' default bucket delete for good.
    with GcsEmulator(tmp_path / "gcs") as gcs:
        gcs.ensure_bucket("runs")
        assert _upload(gcs, "runs", "ckpt/1/x", b"x" * 1000).status_code == 200
        assert requests.delete(f"{gcs.url}/storage/v1/b/runs/o/ckpt%2F1%2Fx", timeout=10).ok
        assert _soft_deleted(gcs.url, "runs") == []
        bucket = requests.get(f"{gcs.url}/storage/v1/b/runs", timeout=10).json()
        assert bucket["softDeletePolicy"]["retentionDurationSeconds"] == "0"
        assert not [p for p in (tmp_path / "gcs").rglob("*")
                    if p.is_file() and p.stat().st_size >= 1000], "the content is kept on disk"
    with run_gcs_emulator("tests") as emulator:
        upload = requests.post(f"{emulator.url}/upload/storage/v1/b/tests/o",
                               params={"uploadType": "media", "name": "y"}, data=b"y",
                               timeout=10)
        assert upload.status_code == 200, upload.text
        assert requests.delete(f"{emulator.url}/storage/v1/b/tests/o/y", timeout=10).ok
        assert _soft_deleted(emulator.url, "tests") == []


def test_an_upload_that_expects_100_continue_is_answered_before_its_body(tmp_path):
    # curl (under tensorstore) asks before a large body and, unanswered, waits a whole second
    # before sending it: ~3 s of every checkpoint save's background write against the emulator.
    body = b"x" * 2048
    with GcsEmulator(tmp_path / "gcs") as gcs:
        gcs.ensure_bucket("runs")
        host, port = gcs.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(
                b"POST /upload/storage/v1/b/runs/o?uploadType=media&name=big HTTP/1.1\r\n"
                + f"Host: {host}:{port}\r\nContent-Length: {len(body)}\r\n".encode()
                + b"Expect: 100-continue\r\n\r\n")
            # The interim answer comes before any of the body is sent (a server that waits
            # for the body never answers: the read times out and the test fails).
            interim = conn.recv(1024)
            assert interim.split(b"\r\n")[0].split(b" ")[1] == b"100", interim
            conn.sendall(body)
            final = b""
            while b"\r\n\r\n" not in final:
                final += conn.recv(4096)
            assert final.split(b"\r\n")[0].split(b" ")[1] == b"200", final
        got = requests.get(f"{gcs.url}/download/storage/v1/b/runs/o/big", params={"alt": "media"})
        assert got.content == body
