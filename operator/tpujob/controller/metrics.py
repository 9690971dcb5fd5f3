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
        r.register(_PhaseCollector(phases))
