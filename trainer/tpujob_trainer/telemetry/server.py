"""The HTTP endpoint every trainer process serves: `/metrics` (Prometheus text), `/progress` (one
JSON document: step, total, loss, speed, phase, last checkpoint; the operator reads process
0's) and `/stacks` (this process's Python stacks, `telemetry/stacks.py`: what the operator
asks every process of a hung job for).

The `/progress` field names are a contract with the operator (`contract.py`, docs/trainer.md):
every field in PROGRESS_FIELDS is always present, null until known.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tpujob_trainer.contract import FINAL_PROGRESS_FIELDS, PHASES, PROGRESS_FIELDS

GAUGES = {
    "step": ("tpujob_train_step", "Optimizer steps completed."),
    "total_steps": ("tpujob_train_total_steps", "Steps the run trains to."),
    "loss": ("tpujob_train_loss", "Training loss of the last reported step."),
    "grad_norm": ("tpujob_train_grad_norm", "Global gradient norm of the last reported step."),
    "lr": ("tpujob_train_learning_rate", "Learning rate of the last reported step."),
    "step_time_s": ("tpujob_train_step_time_seconds", "Seconds per step."),
    "tokens_per_s_per_device": ("tpujob_train_tokens_per_second_per_device", "Tokens per second per device."),
    "tflops_per_device": ("tpujob_train_tflops_per_device", "Model TFLOP/s per device (MaxText count)."),
    "mfu": ("tpujob_train_mfu", "Model FLOPs utilization (0..1)."),
    "last_checkpoint_step": ("tpujob_train_last_checkpoint_step", "Step of the newest checkpoint complete on storage."),
    "rss_bytes": ("tpujob_train_process_rss_bytes", "Resident memory of process 0."),
    "device_peak_bytes": ("tpujob_train_device_peak_bytes", "Peak device memory in use (max over local devices)."),
}


class Progress:
    """Thread-safe latest figures; `update(**fields)` from the loop, read by the HTTP server."""

    def __init__(self, **initial: Any):
        self._lock = threading.Lock()
        self._providers: dict[str, Callable[[], dict[str, Any]]] = {}
        self._timeline_collector = False
        self._doc: dict[str, Any] = {**dict.fromkeys(PROGRESS_FIELDS), "phase": "starting",
                                     "step": 0, "started_at": time.time(), **initial}
        self.registry = CollectorRegistry()
        self._gauges = {k: Gauge(name, doc, registry=self.registry) for k, (name, doc) in GAUGES.items()}
        self.update(**initial)

    def update(self, **fields: Any) -> None:
        if "phase" in fields and fields["phase"] not in PHASES:
            # The operator reads every other word as "training": a new phase is added to the
            # contract first.
            raise ValueError(f"phase {fields['phase']!r} is not one of {', '.join(PHASES)}")
        with self._lock:
            self._doc.update(fields)
            self._doc["updated_at"] = time.time()
            for k, v in fields.items():
                if k in self._gauges and isinstance(v, (int, float)) and not isinstance(v, bool):
                    self._gauges[k].set(v)

    def attach(self, key: str, provider: Callable[[], dict[str, Any]]) -> None:
        """Serve `provider()` as `key` of the document, read when asked (the goodput timeline);
        its `seconds` also become `tpujob_train_goodput_seconds{category}`."""
        with self._lock:
            self._providers[key] = provider
        if not self._timeline_collector:
            self.registry.register(_SecondsCollector(lambda: self._providers.get("goodput")))
            self._timeline_collector = True

    def document(self) -> dict[str, Any]:
        with self._lock:
            doc = dict(self._doc)
            providers = dict(self._providers)
        doc.update({k: p() for k, p in providers.items()})
        return doc

    def final(self) -> dict[str, Any]:
        """The figures process 0 leaves in its termination message as it exits
        (FINAL_PROGRESS_FIELDS): the last steps may come after the operator's last read of
        `/progress`, and a finished job's status shows where it ended, not where it was read."""
        with self._lock:
            return {k: self._doc.get(k) for k in FINAL_PROGRESS_FIELDS}


class _SecondsCollector(Collector):
    """The goodput timeline's seconds by category, read at scrape time."""

    def __init__(self, provider: Callable[[], Callable[[], dict[str, Any]] | None]):
        self._provider = provider

    def collect(self):
        provider = self._provider()
        doc = provider() if provider is not None else {}
        seconds = GaugeMetricFamily(
            "tpujob_train_goodput_seconds", "Seconds of this process start by category "
            "(productive, tpu_initialization, training_prep, checkpoint_restore, "
            "program_startup, data_loading, checkpoint_save).", labels=["category"])
        for category, value in (doc.get("seconds") or {}).items():
            seconds.add_metric([category], value)
        yield seconds
        started = doc.get("started_at")
        if started is not None:
            yield GaugeMetricFamily("tpujob_train_process_start_time_seconds",
                                    "When this trainer process started (Unix time).",
                                    value=started)


class _Server4(ThreadingHTTPServer):
    daemon_threads = True


class _Server6(_Server4):
    address_family = socket.AF_INET6


class ProgressServer:
    """Serves `progress` on `host:port`; host None = all (IPv4) interfaces, port 0 = any free."""

    def __init__(self, progress: Progress, port: int, host: str | None = None,
                 stacks: Callable[[str | None], dict[str, Any]] | None = None):
        progress_ref = progress

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                path = self.path.split("?")[0]
                if path == "/metrics":
                    body, ctype = generate_latest(progress_ref.registry), CONTENT_TYPE_LATEST
                elif path in ("/progress", "/"):
                    body = json.dumps(progress_ref.document(), default=str).encode()
                    ctype = "application/json"
                elif path == "/healthz":
                    body, ctype = b"ok", "text/plain"
                elif path == "/stacks" and stacks is not None:
                    query = parse_qs(urlsplit(self.path).query)
                    try:
                        answer = stacks((query.get("label") or [None])[0])
                    except ValueError as e:
                        self.send_error(400, str(e))
                        return
                    body, ctype = json.dumps(answer).encode(), "application/json"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # keep stdout for JSON lines
                pass

        host = host or "0.0.0.0"
        self._httpd = (_Server6 if ":" in host else _Server4)((host, port), Handler)
        self.host = host
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="tpujob-metrics",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
