"""`tpujob local run FILE` as a person runs it, in a subprocess: its exit status and what it
prints for jobs that succeed, fail and are refused (a success and a failure on the real control
plane too), SIGTERM in the middle of a run stopping every process it started, and the README's
first command (the quickstart example) succeeding."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml

from tests.e2e.conftest import ROOT, command_line, stand_in, stop_tree
from tests.e2e.test_failures import OUT_OF_MEMORY, SLEEP
from tests.support.apiserver import wait_for

pytestmark = pytest.mark.e2e
# The tests that take `control_plane` run on both; the real plane costs about 8 s to start, so
# one case does.
CONTROL_PLANES = ("embedded", "real")

TPUJOB = [sys.executable, "-m", "tpujob.cli.main"]


def job_file(path: Path, *jobs: tuple[str, dict]) -> Path:
    path.write_text(yaml.safe_dump_all([
        {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
         "metadata": {"name": name}, "spec": spec} for name, spec in jobs]))
    return path


def local_run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`tpujob local run ARGS` to the end (stopped with SIGTERM first if it overruns)."""
    proc = subprocess.Popen([*TPUJOB, "local", "run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        stop_tree(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_one_job_succeeds_and_one_runs_out_of_memory(tmp_path, control_plane):
    file = job_file(tmp_path / "jobs.yaml",
                    ("fine", stand_in("print('hello from a host')")),
                    ("oom", stand_in(OUT_OF_MEMORY, restartPolicy={"maxRestarts": 2})))
    run = local_run(str(file), "--timeout", "90", "--workdir", str(tmp_path / "work"),
                    "--control-plane", control_plane)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Applied TpuTrainingJob fine, TpuTrainingJob oom" in run.stdout
    assert "fine succeeded: done" in run.stdout
    # A program without the trainer's timeline: what the operator saw, and that it is partial.
    assert "fine goodput not measured (no trainer timeline; wall " in run.stdout
    # The failure's reason, the trainer's message, and the failed container's last lines.
    assert "oom failed: OutOfMemory: pod oom-slice-0-" in run.stderr
    assert "exited 4: OutOfMemory: RESOURCE_EXHAUSTED" in run.stderr
    assert "--- last lines of oom-slice-0-" in run.stderr
    lines = run.stdout.splitlines()
    assert any(line.startswith("oom  Failed") and "OutOfMemory" in line for line in lines)
    assert any(line.startswith("fine  Succeeded") for line in lines)
    # The work directory was asked for, so it stays: logs, the operator's log, the bucket.
    work = tmp_path / "work"
    logs = list(work.glob("pods/default/fine-slice-0-0-*/containers/trainer/0.log"))
    assert len(logs) == 1 and "hello from a host" in logs[0].read_text()
    assert (work / "operator.log").read_text().strip()
    assert (work / "kubeconfig").exists() and (work / "gcs").is_dir()


def test_an_invalid_job_is_refused_with_the_field_and_exits_1(tmp_path):
    file = job_file(tmp_path / "bad.yaml",
                    ("bad", stand_in(SLEEP, parallelism={"ici": {"tensor": 3}})))
    run = local_run(str(file), "--timeout", "60")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "bad invalid: InvalidMesh: spec.parallelism.ici: axes multiply to 3" in run.stderr
    assert "Warning Invalid" in run.stdout
    assert "work directory kept" not in run.stderr


def test_a_job_the_api_server_refuses_exits_1_with_its_message(tmp_path):
    spec = stand_in(SLEEP)
    spec["trainer"] = {"config": {"train": {"steps": -5}}}
    run = local_run(str(job_file(tmp_path / "neg.yaml", ("neg", spec))), "--timeout", "60")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "TpuTrainingJob default/neg refused by the API server (422" in run.stderr
    assert "spec.trainer.config.train.steps" in run.stderr


def test_a_file_that_is_no_job_exits_2(tmp_path):
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    run = local_run(str(tmp_path / "cm.yaml"))
    assert run.returncode == 2 and "holds no TpuTrainingJob" in run.stderr
    run = local_run(str(tmp_path / "missing.yaml"))
    assert run.returncode == 2 and "cannot read" in run.stderr


def test_sigterm_mid_run_stops_everything(tmp_path):
    file = job_file(tmp_path / "sleep.yaml", ("sleeper", stand_in(SLEEP)))
    proc = subprocess.Popen([*TPUJOB, "local", "run", str(file), "--keep"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        # Every piece up: the emulator and both hosts' processes are children of the command.
        parent = psutil.Process(proc.pid)

        def descendants():
            kids = parent.children(recursive=True)
            trainers = [k for k in kids if "time.sleep" in command_line(k)]
            return kids if len(trainers) == 2 and any(line.startswith("sleeper  Running")
                                                      for line in out) else None
        kids = wait_for(descendants, timeout=90, interval=0.2, message="both hosts running")
        assert any("tpujob.local.session.gcs" in command_line(k) for k in kids)
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        assert time.monotonic() - started < 30
    finally:
        stop_tree(proc)
    reader.join(5)
    stderr = proc.stderr.read()
    assert "SIGTERM received" in stderr and "stopping" in stderr
    assert not [k.pid for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
    kept = stderr.split("work directory kept: ", 1)[1].split()[0]
    assert Path(kept).is_dir()
    shutil.rmtree(kept)


@pytest.mark.slow
def test_the_readme_first_command_runs_the_quickstart_to_success(tmp_path):
    example = ROOT / "manifests" / "examples" / "quickstart.yaml"
    run = local_run(str(example), "--timeout", "300", "--workdir", str(tmp_path / "w"),
                    timeout=360)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    steps = yaml.safe_load(example.read_text())["spec"]["trainer"]["config"]["train"]["steps"]
    assert f"quickstart succeeded: {steps} steps, final loss" in run.stdout
    assert "output gs://tpujob-quickstart/runs/quickstart" in run.stdout
    assert re.search(r"quickstart goodput \d+\.\d% \([\d.]+ s productive of [\d.]+ s\); "
                     r"lost steps 0", run.stdout), run.stdout[-2000:]
    final = [line for line in run.stdout.splitlines() if line.startswith("quickstart  Succeeded")]
    assert final and f"{steps}/{steps}" in final[-1] and f"ckpt {steps}" in final[-1]
    # The checkpoints went to the emulated bucket, which lives in the work directory.
    saved = {p.name for p in (tmp_path / "w" / "gcs").rglob("checkpoints/*") if p.name.isdigit()}
    assert str(steps) in saved, saved
