"""The operator's own Prometheus metrics (served on /metrics): reconciles, errors, latency, API
calls that failed, progress reads and jobs by phase."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tpujob.api.status import Phase


class _PhaseCollector(Collector):
    def __init__(self, phases: Callable[[], Iterable[str]]):
        self._phases = phases

    def collect(self):
        family = GaugeMetricFamily("tpujob_operator_jobs", "TpuTrainingJobs by phase.",
                                   labels=["phase"])
        tally = Tally(self._phases())
        for phase in Phase:
            family.add_metric([phase.value], tally.get(phase.value, 0))
        yield family


class OperatorMetrics:
    """One registry per operator instance (several can run in one process, as in tests)."""

    def __init__(self, phases: Callable[[], Iterable[str]] = lambda: ()):
        self.registry = CollectorRegistry()
        r = self.registry
        self.reconciles = Counter("tpujob_operator_reconciles", "Reconciles, by result.",
                                  ["result"], registry=r)
        self.reconcile_seconds = Histogram(
            "tpujob_operator_reconcile_duration_seconds", "Time to reconcile one job.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=r)
        self.api_errors = Counter("tpujob_operator_api_errors", "Kubernetes API calls that "
                                  "failed, by kind (unavailable or refused).", ["kind"],
                                  registry=r)
        self.progress_reads = Counter("tpujob_operator_progress_reads", "Reads of trainer "
                                      "progress, by result.", ["result"], registry=r)
        self.queue_depth = Gauge("tpujob_operator_queue_depth", "Jobs waiting to be reconciled.",
                                 registry=r)
        self.events = Counter("tpujob_operator_events", "Events emitted, by reason.",
                              ["reason"], registry=r)
        self.events_dropped = Counter("tpujob_operator_events_dropped", "Events dropped "
                                      "because too many were waiting to be sent.", registry=r)
        self.relist_changes = Counter("tpujob_operator_relist_changes", "Changes a periodic "
                                      "relist found that no watch had reported.", registry=r)
        self.goodput_percent = Gauge("tpujob_operator_job_goodput_percent", "Goodput of a job "
                                     "(status.goodput.percent).", ["namespace", "name"],
                                     registry=r)
        self.goodput_seconds = Gauge("tpujob_operator_job_goodput_seconds", "A job's seconds "
                                     "by kind: productive, wall, queued, recovery and each "
                                     "badput category.", ["namespace", "name", "kind"],
                                     registry=r)
        self.lost_steps = Gauge("tpujob_operator_job_lost_steps", "Steps a job's restarts "
                                "threw away.", ["namespace", "name"], registry=r)
        r.register(_PhaseCollector(phases))

    def record_goodput(self, namespace: str, name: str, goodput) -> None:
        """Export a job's status.goodput (a tpujob.api.status.Goodput)."""
        if goodput is None:
            return
        if goodput.percent is not None:
            self.goodput_percent.labels(namespace, name).set(goodput.percent)
        self.lost_steps.labels(namespace, name).set(goodput.lost_steps)
        kinds = {"productive": goodput.productive_seconds, "wall": goodput.wall_seconds,
                 "queued": goodput.queued_seconds, "recovery": goodput.recovery_seconds,
                 **goodput.badput.to_dict()}
        for kind, value in kinds.items():
            if value is not None:
                self.goodput_seconds.labels(namespace, name, kind).set(value)

    def forget_job(self, namespace: str, name: str) -> None:
        """Drop a deleted job's series."""
        for gauge in (self.goodput_percent, self.lost_steps):
            try:
                gauge.remove(namespace, name)
            except KeyError:
                pass
        for labels in list(self.goodput_seconds._metrics):  # noqa: SLF001 (no public listing)
            if labels[:2] == (namespace, name):
                self.goodput_seconds.remove(*labels)
