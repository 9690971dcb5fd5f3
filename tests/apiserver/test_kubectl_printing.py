"""What the real kubectl prints from the server's Tables: `get -w` keeps every column after the
first list, and pods, jobs and events have the columns kube-apiserver gives them."""

from __future__ import annotations

import asyncio
import copy
import queue
import re
import shutil
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.apiserver import Kube, unique_name

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")]


def _stamp(seconds_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def kubectl(kube: Kube, tmp_path: Path):
    return _kubectl(kube, tmp_path)


def _kubectl(kube: Kube, tmp_path: Path):
    def command(*args: str) -> list[str]:
        return ["kubectl", f"--kubeconfig={kube.kubeconfig}", f"--cache-dir={tmp_path / 'c'}",
                f"--namespace={kube.namespace}", *args]

    def run(*args: str) -> str:
        result = subprocess.run(command(*args), capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout
    run.command = command
    return run


def _lines(proc: subprocess.Popen) -> queue.Queue:
    """The lines a process prints, as they come."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True
                     ).start()
    return lines


def _next(lines: queue.Queue, proc: subprocess.Popen, log: list[str] | None = None) -> str:
    """The next line `proc` prints; the test fails with its stderr (`log`, where a thread reads
    it) when none comes."""
    try:
        return lines.get(timeout=30)
    except queue.Empty:
        proc.kill()
        pytest.fail(f"no line from {' '.join(proc.args[-4:])} in 30 s (exit {proc.wait()}): "
                    f"{''.join(log) if log is not None else proc.stderr.read()}")


# In kubectl's request log (-v=6): the answer to its watch request. kube-apiserver starts the
# watch before it answers (as the embedded server does), so every change after that line is
# one of the watch's events.
_WATCH_ANSWERED = re.compile(r"\bGET \S*[?&]watch=true\S* 200 OK\b")


def _request_log(proc: subprocess.Popen) -> tuple[threading.Event, list[str]]:
    """kubectl's stderr, kept as it comes, and an event set once the server has answered its
    watch request."""
    answered, log = threading.Event(), []

    def read() -> None:
        for line in proc.stderr:
            log.append(line)
            if _WATCH_ANSWERED.search(line):
                answered.set()
    threading.Thread(target=read, daemon=True).start()
    return answered, log


def test_get_watch_prints_every_column(kube: Kube, widgets: str, kubectl) -> None:
    _watch_phases(kube, widgets, kubectl)


def test_get_watch_prints_changes_when_the_watch_opens_late(embedded_kube: Kube, tmp_path: Path,
                                                             monkeypatch) -> None:
    """kubectl's watch request held 3 s at the server, as a loaded machine may delay it: the
    rows of the status writes still come, because each write waits until the watch is open.
    (The embedded server only: the hold is put inside it.)"""
    from tests.apiserver.crds import GROUP, WIDGET_CRD
    from tpujob.local.apiserver import watch

    kube = embedded_kube
    kube.ensure_crd(copy.deepcopy(WIDGET_CRD))
    widgets = f"/apis/{GROUP}/v1/namespaces/{kube.namespace}/widgets"
    kubectl = _kubectl(kube, tmp_path)
    serve = watch.stream

    async def held(http_request, *args, **kwargs):
        if "kubectl" in http_request.headers.get("User-Agent", ""):
            await asyncio.sleep(3)
        return await serve(http_request, *args, **kwargs)
    monkeypatch.setattr(watch, "stream", held)
    _watch_phases(kube, widgets, kubectl)


def _watch_phases(kube: Kube, widgets: str, kubectl) -> None:
    """`kubectl get widgets NAME -w` prints a row with every column for each status write."""
    name = unique_name("ww")
    r = kube.request("POST", widgets, json={"apiVersion": "contract.tpujob.dev/v1",
                                            "kind": "Widget", "metadata": {"name": name},
                                            "spec": {"size": "large-4", "replicas": 2}})
    assert r.status_code == 201, r.text
    watch = subprocess.Popen(kubectl.command("get", "widgets", name, "-w", "-v=6"), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = _lines(watch)
    answered, log = _request_log(watch)
    try:
        assert _next(lines, watch, log).split() == ["NAME", "SIZE", "REPLICAS", "PHASE",
                                                    "READY", "AGE"]
        assert _next(lines, watch, log).split()[:3] == [name, "large-4", "2"]
        # kubectl prints what it got, and only then asks for the watch: from resourceVersion 0
        # (for one named object), whose first event is the object as it is when the watch
        # starts, and which kubectl does not print. A write made before that would be in that
        # first event only, never printed: the writes wait until the watch is open.
        if not answered.wait(30):
            watch.kill()
            pytest.fail(f"kubectl's watch request not answered in 30 s (exit {watch.wait()}): "
                        f"{''.join(log)}")
        for phase in ("Running", "Done"):
            r = kube.request("PATCH", f"{widgets}/{name}/status", json={"status": {
                "phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}},
                headers={"Content-Type": "application/merge-patch+json"})
            assert r.status_code == 200, r.text
            row = _next(lines, watch, log).split()
            assert row[:5] == [name, "large-4", "2", phase, "True"], row
    finally:
        watch.kill()
        watch.wait()


def test_pods_jobs_and_events_columns(kube: Kube, kubectl) -> None:
    ns = kube.namespace
    done, running = unique_name("done"), unique_name("run")
    container = {"name": "main", "image": "app"}
    for name in (done, running):
        r = kube.request("POST", f"/api/v1/namespaces/{ns}/pods", json={
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            # No scheduler of that name: a real control plane's scheduler leaves them alone
            # (and posts no FailedScheduling event among the test's own).
            "spec": {"containers": [container], "schedulerName": "tpujob.dev/none"}})
        assert r.status_code == 201, r.text
    statuses = {
        done: {"phase": "Succeeded", "containerStatuses": [{
            "name": "main", "ready": False, "restartCount": 0, "image": "app", "imageID": "",
            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]},
        running: {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                  "podIP": "127.0.0.9", "containerStatuses": [{
                      "name": "main", "ready": True, "restartCount": 2, "image": "app",
                      "imageID": "", "state": {"running": {"startedAt": _stamp(30)}},
                      "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                                   "finishedAt": _stamp(200)}}}]}}
    for name, status in statuses.items():
        r = kube.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status",
                         json={"status": status},
                         headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text
    pods = kubectl("get", "pods", done, running).splitlines()
    assert pods[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    rows = {line.split()[0]: line.split() for line in pods[1:]}
    assert rows[done][1:4] == ["0/1", "Completed", "0"]
    assert rows[running][1:4] == ["1/1", "Running", "2"]
    assert rows[running][4].startswith("(3m") and rows[running][5] == "ago)"  # 200 s ago
    wide = kubectl("get", "pods", running, "-o", "wide").splitlines()
    assert wide[0].split()[:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    assert "127.0.0.9" in wide[1].split()

    job = unique_name("job")
    r = kube.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", json={
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job},
        # managedBy: no Job controller acts on it (a real control plane runs one), and its
        # status is this test's to write. A valid one: kube-apiserver refuses a completionTime
        # without the Complete condition, and Complete without SuccessCriteriaMet.
        "spec": {"completions": 2, "managedBy": "tpujob.dev/printing-test",
                 "template": {"spec": {"containers": [container], "restartPolicy": "Never"}}}})
    assert r.status_code == 201, r.text
    done_at = "2026-01-01T00:01:05Z"
    r = kube.request("PATCH", f"/apis/batch/v1/namespaces/{ns}/jobs/{job}/status", json={
        "status": {"succeeded": 2, "startTime": "2026-01-01T00:00:00Z", "completionTime": done_at,
                   "conditions": [
                       {"type": t, "status": "True", "lastTransitionTime": done_at,
                        "lastProbeTime": done_at} for t in ("SuccessCriteriaMet", "Complete")]}},
        headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    jobs = kubectl("get", "jobs", job).splitlines()
    assert jobs[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert jobs[1].split()[:4] == [job, "Complete", "2/2", "65s"]

    # Three Events of one object in the same second, named as client-go's recorder names them
    # (the operator and the executor do too): listed in the order they happened.
    from tpujob.local.executor.objects import Event, build_event
    stamp = _stamp(0)
    reasons = ["Created", "Starting", "Running"]
    for reason in reasons:
        body = build_event(Event({"apiVersion": "v1", "kind": "Pod",
                                  "metadata": {"name": running, "namespace": ns, "uid": "u"}},
                                 "Normal", reason, f"phase {reason}", "test"), time.time())
        # The kubernetes Python client sends times as +00:00 (the operator's Events).
        body["firstTimestamp"] = body["lastTimestamp"] = \
            stamp if reason != "Running" else stamp.replace("Z", "+00:00")
        r = kube.request("POST", f"/api/v1/namespaces/{ns}/events", json=body)
        assert r.status_code == 201, r.text
    events = kubectl("get", "events", f"--field-selector=involvedObject.name={running}")
    lines = events.splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert [line.split()[2] for line in lines[1:]] == reasons
    assert all(line.split()[0].endswith("s") for line in lines[1:]), lines  # not <unknown>
    assert lines[1].split()[1:] == ["Normal", "Created", f"pod/{running}", "phase", "Created"]


def test_strict_validation_names_the_unknown_field_first(kube: Kube, widgets: str, kubectl,
                                                          tmp_path: Path) -> None:
    # Missing the required spec.size and with an unknown field: kube-apiserver's strict
    # decoding refuses the unknown field before the schema looks at any value.
    name = unique_name("strict")
    manifest = tmp_path / "widget.yaml"
    manifest.write_text(f"apiVersion: contract.tpujob.dev/v1\nkind: Widget\n"
                        f"metadata:\n  name: {name}\nspec:\n  replicas: -1\n  color: red\n")
    result = subprocess.run(kubectl.command("apply", "--validate=strict", "-f", str(manifest)),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f'Error from server (BadRequest): error when creating "{manifest}": Widget in version '
        '"v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.color"')
    warned = subprocess.run(kubectl.command("apply", "--validate=false", "-f", str(manifest)),
                            capture_output=True, text=True, timeout=60)
    assert warned.returncode == 1 and "spec.size: Required value" in warned.stderr


def _goodput(productive: float) -> dict:
    """status.goodput as the operator writes it: 100.123456 s of wall time, `productive` s of
    it productive."""
    from tpujob.api.status import Phase
    from tpujob.controller.goodput import account
    from tpujob.controller.trainer_reports import TimelineReading

    t0 = datetime(2026, 11, 26, 12, 0, 0, tzinfo=UTC)
    reading = TimelineReading.from_document({
        "attempt": "a", "step": 40, "steps": 40, "resumed_from_step": 0,
        "seconds": {"productive": productive, "program_startup": 12.3456789},
        "step_time_median_s": 0.123456789})
    g = account(None, now=t0, phase_before=Phase.STARTING, phase_after=Phase.STARTING)
    g = account(g, now=t0 + timedelta(seconds=100.123456), phase_before=Phase.RUNNING,
                phase_after=Phase.RUNNING, reading=reading)
    return g.to_dict()


def test_get_tpujobs_prints_readable_progress_and_the_reason(kube: Kube, kubectl) -> None:
    import yaml

    from tpujob.api.status import display_of
    root = Path(__file__).resolve().parents[2]
    kube.ensure_crd(yaml.safe_load((root / "manifests" / "crd.yaml").read_text()))
    path = f"/apis/tpujob.dev/v1alpha1/namespaces/{kube.namespace}/tputrainingjobs"
    five_minutes_ago = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    statuses = {
        unique_name("run"): {"phase": "Running", "restarts": 1, "progress": {
            "step": 40, "lastStepTime": five_minutes_ago, "loss": 1.7577435970306396, "tokensPerSecondPerDevice": 5425.809674792159,
            "tflopsPerDevice": 0.010008215474622838, "mfu": 2.2e-05,
            "display": display_of(1.7577435970306396, 5425.809674792159, 2.2e-05,
                                  0.010008215474622838).to_dict()},
            "goodput": _goodput(29.55)},
        # On a CPU (local mode) the trainer has no peak: no MFU, a dash in its cell.
        unique_name("cpu"): {"phase": "Running", "progress": {
            "step": 7, "loss": 2.5, "tokensPerSecondPerDevice": 100.0, "tflopsPerDevice": 0.02,
            "display": display_of(2.5, 100.0, None, 0.02).to_dict()},
            "goodput": _goodput(4.19)},
        unique_name("bad"): {"phase": "Invalid", "reason": "InvalidSlice", "failure": {
            "reason": "InvalidSlice", "message": "spec.slice: no such slice"}}}
    for name, status in statuses.items():
        r = kube.request("POST", path, json={
            "apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": name}, "spec": {"slice": "v6e-8", "image": "t:1",
                                                 "output": "gs://bucket/run"}})
        assert r.status_code == 201, r.text
        r = kube.request("PATCH", f"{path}/{name}/status", json={"status": status},
                         headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text
    lines = kubectl("get", "tpujobs", *statuses).splitlines()
    assert lines[0].split() == ["NAME", "SLICE", "HOSTS", "PHASE", "STEP", "LAST", "STEP",
                                "LOSS", "TOK/S/DEV", "MFU", "RESTARTS", "REASON", "GOODPUT",
                                "AGE"]
    running, cpu, bad = list(statuses)
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    # Empty cells print as nothing; the last step's time as its age (5m, or 5m1s a second on).
    assert re.fullmatch(r"5m(\d+s)?", rows[running][4]), rows[running]
    del rows[running][4]
    assert rows[running][1:9] == ["v6e-8", "Running", "40", "1.758", "5426", "0.0022%", "1",
                                   "29.5%"]
    assert rows[cpu][1:9] == ["v6e-8", "Running", "7", "2.5", "100", "-", "0", "4.2%"]
    assert rows[bad][1:5] == ["v6e-8", "Invalid", "0", "InvalidSlice"]
    wide = kubectl("get", "tpujobs", "-o", "wide", running).splitlines()
    assert wide[0].split()[-4:] == ["SLICES", "TFLOP/S/DEV", "SLOW", "HOST"]
    assert wide[1].split()[-2:] == ["1", "0.0100"]
    # describe: the goodput figures rounded, the instant accounted up to a time, no Unix seconds
    # in e-notation.
    described = kubectl("describe", "tpujob", running)
    assert "Accounted Until:  2026-11-26T12:01:40.123456Z" in described
    assert re.search(r"\n    Display: +29\.5%\n", described), described
    assert re.search(r"\n      Program Startup: +12\.346\n", described), described
    assert "e+0" not in described
    # Tools read full precision.
    got = kube.get(f"{path}/{running}").json()["status"]["progress"]
    assert got["loss"] == 1.7577435970306396 and got["mfu"] == 2.2e-05
