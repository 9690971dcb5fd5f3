"""`tpujob local up` in a subprocess: it prints how to use it and writes a kubeconfig; a job
applied with kubectl (or over HTTP where kubectl is not installed) runs, writes to its `gs://`
output and succeeds; SIGINT while another job runs stops everything and leaves no process
behind (on both control planes)."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import threading

import psutil
import pytest
import requests
import yaml

from tests.e2e.conftest import command_line, stand_in, stop_tree
from tests.support.apiserver import wait_for
from tests.support.ci_skips import in_ci

pytestmark = pytest.mark.e2e
# The tests that take `control_plane` run on both (the real plane costs about 8 s to start).
CONTROL_PLANES = ("embedded", "real")

# Each host writes an object to the job's bucket, then works for a moment.
WRITE_AND_WAIT = ("import os, time, gcsfs\n"
                  "fs = gcsfs.GCSFileSystem()\n"
                  "fs.pipe('tpujob-up/up-job/host-' + os.environ['TPUJOB_HOST_INDEX'], b'done')\n"
                  "time.sleep(3)\n")


def job(name: str, code: str) -> dict:
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": name},
            "spec": {**stand_in(code), "output": f"gs://tpujob-up/{name}"}}


class Kubectl:
    """kubectl against the kubeconfig, or the same requests over HTTP without it."""

    def __init__(self, kubeconfig, server: str):
        self.kubeconfig, self.server = kubeconfig, server
        self.binary = shutil.which("kubectl")
        if self.binary is None and in_ci():
            pytest.fail("kubectl is not on PATH: CI runs this test with the real kubectl "
                        "(.ci/run installs it)")

    def apply(self, path) -> None:
        if self.binary:
            done = subprocess.run([self.binary, "--kubeconfig", str(self.kubeconfig), "apply",
                                   "-f", str(path)], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            assert re.fullmatch(r"tputrainingjob.tpujob.dev/\S+ created\n", done.stdout)
            return
        r = requests.post(f"{self.server}/apis/tpujob.dev/v1alpha1/namespaces/default/"
                          "tputrainingjobs", json=yaml.safe_load(path.read_text()), timeout=30)
        assert r.status_code == 201, r.text

    def phase(self, name: str) -> str:
        if self.binary:
            done = subprocess.run([self.binary, "--kubeconfig", str(self.kubeconfig), "get",
                                   "tpujob", name, "-o", "jsonpath={.status.phase}"],
                                  capture_output=True, text=True, timeout=60)
            return done.stdout.strip()
        r = requests.get(f"{self.server}/apis/tpujob.dev/v1alpha1/namespaces/default/"
                         f"tputrainingjobs/{name}", timeout=30)
        return ((r.json().get("status") or {}).get("phase")) or ""


def test_up_serves_kubectl_until_sigint(tmp_path, control_plane):
    kubeconfig = tmp_path / "kube" / "config"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The real kube-apiserver picks its own port, serves HTTPS and wants a client certificate
    # (in the kubeconfig): kubectl talks to it.
    where = ["--port", str(port)] if control_plane == "embedded" else []
    proc = subprocess.Popen([sys.executable, "-m", "tpujob.cli.main", "local", "up", *where,
                             "--kubeconfig", str(kubeconfig), "--workdir", str(tmp_path / "w"),
                             "--control-plane", control_plane],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("Ctrl-C stops everything" in line for line in out), timeout=60,
                 interval=0.1, message=f"tpujob local up to be ready: {out}")
        text = "".join(out)
        assert f"export KUBECONFIG={kubeconfig}" in text
        assert "kubectl apply -f manifests/examples/quickstart.yaml" in text
        assert "kubectl get tpujobs -w" in text
        server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        if control_plane == "embedded":
            assert server == f"http://127.0.0.1:{port}"
        else:
            assert re.fullmatch(r"https://127\.0\.0\.1:\d+", server), server
        gcs = re.search(r"GCS emulator\s+(http://\S+)", text)[1]
        kubectl = Kubectl(kubeconfig, server)
        if control_plane == "real" and kubectl.binary is None:
            pytest.fail("the real control plane is reached with kubectl, which is not on PATH")

        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(job("up-job", WRITE_AND_WAIT)))
        kubectl.apply(path)
        seen = set()
        wait_for(lambda: seen.add(kubectl.phase("up-job")) or "Running" in seen, timeout=60,
                 interval=0.2, message="the job to run")
        wait_for(lambda: kubectl.phase("up-job") in ("Succeeded", "Failed"), timeout=60,
                 interval=0.3, message="the job to end")
        assert kubectl.phase("up-job") == "Succeeded"
        listing = requests.get(f"{gcs}/storage/v1/b/tpujob-up/o", timeout=10).json()
        assert sorted(o["name"] for o in listing["items"]) == ["up-job/host-0", "up-job/host-1"]

        # A second job still running when Ctrl-C comes.
        path.write_text(yaml.safe_dump(job("sleeper", "import time; time.sleep(300)")))
        kubectl.apply(path)
        parent = psutil.Process(proc.pid)

        def running():
            kids = parent.children(recursive=True)
            sleepers = [k for k in kids if "time.sleep(300)" in command_line(k)]
            return kids if len(sleepers) == 2 and kubectl.phase("sleeper") == "Running" else None
        kids = wait_for(running, timeout=60, interval=0.2, message="the second job to run")
        assert any("tpujob.local.session.gcs" in command_line(k) for k in kids)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        stop_tree(proc)
    reader.join(5)
    assert "stopping: trainer processes, operator, GCS emulator, API server" in "".join(out)
    assert not [k.pid for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
    # The work directory was given, so it stays: the hosts' logs are there.
    assert len(list((tmp_path / "w" / "pods" / "default").glob("up-job-slice-0-*"))) == 2


def test_a_port_in_use_is_reported_and_nothing_stays_up(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "tpujob.cli.main", "local", "up", "--port",
                               str(port), "--kubeconfig", str(tmp_path / "kubeconfig")],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"cannot start local mode: [Errno 98] error while attempting to bind on address " \
           f"('127.0.0.1', {port})" in done.stdout
    assert not (tmp_path / "kubeconfig").exists()


def test_a_port_with_the_real_control_plane_is_refused_before_anything_starts(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "tpujob.cli.main", "local", "up", "--port",
                             "6443", "--control-plane", "real", "--kubeconfig",
                             str(tmp_path / "kubeconfig")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        stop_tree(proc)  # had it started the control plane, nothing of it stays
    assert proc.returncode == 1, stdout + stderr
    assert "--port is the embedded API server's; the real kube-apiserver listens on a free " \
           "port of its own" in stderr
    assert not (tmp_path / "kubeconfig").exists()
