"""The running operator: kopf watches TpuTrainingJobs and the JobSets they own and keeps the
latest of each in memory; every change puts the job on a work queue; workers reconcile it (in a
thread, as the Kubernetes client is synchronous). kopf's own per-object state is not used: no
annotations, no finalizers (deleting a job never waits for the operator; its children go by
owner references), no timers (they would add finalizers)."""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import time
from collections.abc import Hashable
from typing import Any

import kopf
from kubernetes import client

from tpujob.api.resource import GROUP, PLURAL, VERSION
from tpujob.builders import names
from tpujob.controller import admission
from tpujob.controller.events import EventRecorder
from tpujob.controller.health import HealthServer
from tpujob.controller.kube import (
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    KUEUE_GROUP,
    KUEUE_VERSION,
    WORKLOADS,
    ApiRefused,
    ApiUnavailable,
    KubeApi,
)
from tpujob.controller.metrics import OperatorMetrics
from tpujob.controller.reconcile import Reconciler
from tpujob.controller.settings import OperatorSettings
from tpujob.controller.workqueue import WorkQueue

log = logging.getLogger("tpujob.operator")
WEBHOOK_ID = "validate-tputrainingjob"
KOPF_IDLE_TIMEOUT_S = 0.5
Key = tuple[str, str]


def _rv(obj: dict[str, Any] | None) -> int | None:
    try:
        return int((obj or {}).get("metadata", {}).get("resourceVersion"))
    except (TypeError, ValueError):
        return None


def _missed_deletion(cached: dict[str, Any], listed: dict[str, Any] | None, list_rv: str
                     ) -> bool:
    """Whether a cached object is gone from the server although no watch said so: it is not in
    a list taken after the version the cache holds (or another object took its name)."""
    if listed is not None and listed["metadata"].get("uid") == cached["metadata"].get("uid"):
        return False
    try:
        return _rv(cached) is not None and _rv(cached) <= int(list_rv)
    except (TypeError, ValueError):
        return False  # a list version that cannot be compared: drop nothing


def _is_news(cached: dict[str, Any] | None, obj: dict[str, Any]) -> bool:
    """Whether `obj` (from a watch event or a list) tells the operator something its cache does
    not hold: another object under the name, or a newer version of the cached one. The version
    the cache already has (the watch event of the operator's own write, whose reply went into
    the cache) or an older one is not; versions that cannot be compared always are."""
    if cached is None or cached["metadata"].get("uid") != obj["metadata"].get("uid"):
        return True
    old, new = _rv(cached), _rv(obj)
    return old is None or new is None or new > old


def _keep_newer(cache: dict[Key, dict[str, Any]], key: Key, obj: dict[str, Any]) -> None:
    """Store obj unless the cache already holds it or a newer version of it (a watch event can
    arrive after the operator's own write returned the newer one)."""
    if _is_news(cache.get(key), obj):
        cache[key] = obj


def _job_view(obj: dict[str, Any]) -> dict[str, Any]:
    """The job as the reconciler reads it: all of it but metadata.managedFields (which a real
    API server adds to every object and nothing here reads)."""
    meta = obj.get("metadata") or {}
    if "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def _jobset_view(obj: dict[str, Any]) -> dict[str, Any]:
    """The parts of a JobSet that observing it reads (identity, owner, labels, annotations,
    suspend, replica counts, status). Its pod templates, most of its size, are not kept: a
    cache of a thousand JobSets stays small and costs nothing to store."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    kept_spec: dict[str, Any] = {"replicatedJobs": [
        {k: r[k] for k in ("name", "replicas") if k in r} for r in spec.get("replicatedJobs") or []]}
    if "suspend" in spec:
        kept_spec["suspend"] = spec["suspend"]
    return {"metadata": {k: v for k, v in meta.items() if k != "managedFields"},
            "spec": kept_spec, "status": obj.get("status") or {}}


class _NoDiffBase(kopf.DiffBaseStorage):
    """kopf works out what changed in every event (two deep copies of the whole object) for
    change handlers (on.create, on.update, on.field). The operator has none, only on.event, so
    it skips that work: the essence is never built, fetched or stored."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return None

    def fetch(self, *, body: Any) -> Any:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


def connection_info(config: client.Configuration) -> kopf.ConnectionInfo:
    """kopf's credentials from the same client configuration the operator's calls use."""
    if config.refresh_api_key_hook is not None:
        config.refresh_api_key_hook(config)
    auth = config.api_key.get("authorization") or config.api_key.get("BearerToken") or ""
    scheme, _, token = auth.partition(" ") if " " in auth else ("Bearer", "", auth)
    return kopf.ConnectionInfo(
        server=config.host, ca_path=config.ssl_ca_cert, insecure=not config.verify_ssl,
        scheme=scheme if token else None, token=token or None,
        certificate_path=config.cert_file, private_key_path=config.key_file,
        username=config.username or None, password=config.password or None)


class Operator:
    """One operator instance: its caches, work queue, reconciler, metrics and kopf registry."""

    def __init__(self, settings: OperatorSettings, api_config: client.Configuration, *,
                 ensure_policy=None, read_progress=None):
        self.settings = settings
        self.api_config = api_config
        self.jobs: dict[Key, dict[str, Any]] = {}
        self.jobsets: dict[Key, dict[str, Any]] = {}
        self.metrics = OperatorMetrics(phases=self._phases)
        self.kube = KubeApi(client.ApiClient(api_config))
        self.events = EventRecorder(self.kube.create_event, self.metrics)
        self.reconciler = Reconciler(self.kube, settings, self.metrics,
                                     ensure_policy=ensure_policy, read_progress=read_progress,
                                     record_event=self.events.record)
        self.queue: WorkQueue | None = None
        self._relister: asyncio.Task | None = None
        self.health: HealthServer | None = None
        self.ready = False
        self._failures: dict[Key, int] = {}
        self._cert_stamp = self._webhook_cert_stamp()

    # -- the webhook's certificate --------------------------------------------------------
    def _webhook_cert_files(self) -> list[str]:
        s = self.settings
        if not s.webhook or s.webhook_insecure:
            return []
        cert_dir = s.webhook_cert_dir.rstrip("/")
        return [f"{cert_dir}/tls.crt", f"{cert_dir}/tls.key"]

    def _webhook_cert_stamp(self) -> tuple:
        stamp = []
        for path in self._webhook_cert_files():
            try:
                st = os.stat(path)
                stamp.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                stamp.append(None)
        return tuple(stamp)

    def webhook_cert_changed(self) -> bool:
        """Whether the webhook's certificate or key changed on disk since start (a renewed
        Secret): the server keeps the one it loaded, so /healthz fails and the pod restarts."""
        return self._webhook_cert_stamp() != self._cert_stamp

    def _phases(self) -> list[str]:
        return [(j.get("status") or {}).get("phase", "Pending") for j in list(self.jobs.values())]

    # -- work --------------------------------------------------------------------------------
    async def _work(self, key: Hashable) -> float | None:
        job = self.jobs.get(key)
        if job is None:
            return None
        started = time.perf_counter()
        try:
            outcome = await asyncio.to_thread(self.reconciler.reconcile, job,
                                              self.jobsets.get(key))
        except ApiUnavailable as err:
            return self._retry(key, "unavailable", err, err.retry_after)
        except ApiRefused as err:
            await asyncio.to_thread(self.reconciler.report_refused, job, err)
            return self._retry(key, "refused", err, None)
        finally:
            self.metrics.reconcile_seconds.observe(time.perf_counter() - started)
            if self.queue is not None:
                self.metrics.queue_depth.set(len(self.queue))
        self._failures.pop(key, None)
        self.metrics.reconciles.labels("ok").inc()
        # The job may have been deleted (and even created again) while the reconcile ran: what
        # it wrote belongs in the caches only while the same job is still there.
        current = self.jobs.get(key)
        if current is None or current["metadata"].get("uid") != job["metadata"].get("uid"):
            return None if current is None else 0.0
        if outcome.gone:
            self.on_job_event({"type": "DELETED", "object": current})
            return None
        if outcome.job is not None:
            _keep_newer(self.jobs, key, _job_view(outcome.job))
        if outcome.jobset is not None:
            _keep_newer(self.jobsets, key, _jobset_view(outcome.jobset))
        return outcome.requeue_after

    def _retry(self, key: Key, kind: str, err: Exception, retry_after: float | None) -> float:
        self.metrics.reconciles.labels("error").inc()
        self.metrics.api_errors.labels(kind).inc()
        n = self._failures[key] = self._failures.get(key, 0) + 1
        delays = self.settings.retry_delays_s
        delay = max(retry_after or 0.0, delays[min(n - 1, len(delays) - 1)])
        log.warning("%s/%s: %s; trying again in %.0f s", key[0], key[1], err, delay)
        return delay

    # -- watch events ------------------------------------------------------------------------
    def on_job_event(self, event: dict[str, Any]) -> bool:
        """Take a job's watch event into the cache and queue the job; False when the event
        held nothing new (e.g. the operator's own status write coming back)."""
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if event.get("type") == "DELETED":
            self.jobs.pop(key, None)
            self._failures.pop(key, None)
            self.reconciler.forget(meta.get("uid"))
            self.metrics.forget_job(*key)
            if self.queue is not None:
                self.queue.forget(key)
            return True
        if not _is_news(self.jobs.get(key), obj):
            return False
        # Kept as kopf handed it (less managedFields): each event is parsed afresh and nothing
        # changes it afterwards.
        self.jobs[key] = _job_view(obj)
        if self.queue is not None:
            self.queue.add(key)
        return True

    def on_jobset_event(self, event: dict[str, Any]) -> bool:
        """The same for a JobSet of the operator's (found by its job label)."""
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(names.LABEL_JOB)
        if not owner:
            return False
        key = (meta.get("namespace", ""), owner)
        if event.get("type") == "DELETED":
            if (self.jobsets.get(key) or {}).get("metadata", {}).get("uid") == meta.get("uid"):
                self.jobsets.pop(key, None)
        elif not _is_news(self.jobsets.get(key), obj):
            return False  # the JobSet the operator created (or changed) coming back as it was
        else:
            self.jobsets[key] = _jobset_view(obj)
        if self.queue is not None and key in self.jobs:
            self.queue.add(key)
        return True

    def on_workload_event(self, event: dict[str, Any]) -> bool:
        """A Kueue Workload changed: look again at the job whose JobSet it belongs to (its
        owner, named as the job), so that status.queue follows Kueue at once."""
        meta = (event.get("object") or {}).get("metadata") or {}
        owner = next((r.get("name") for r in meta.get("ownerReferences") or []
                      if r.get("kind") == "JobSet" and r.get("controller")), None)
        key = (meta.get("namespace", ""), owner or "")
        if owner is None or key not in self.jobs:
            return False
        if self.queue is not None:
            self.queue.add(key)
        return True

    # -- relisting ---------------------------------------------------------------------------
    async def _relist_forever(self) -> None:
        interval = self.settings.relist_interval_s
        while True:
            await asyncio.sleep(interval)
            try:
                await self.relist()
            except (ApiUnavailable, ApiRefused) as err:
                self.metrics.api_errors.labels(
                    "unavailable" if isinstance(err, ApiUnavailable) else "refused").inc()
                log.warning("relisting jobs failed: %s; trying again in %.0f s", err, interval)

    async def relist(self) -> int:
        """List jobs and JobSets again and bring the caches in line; returns how many changes
        no watch had reported."""
        selector = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY}"
        found = 0
        for ns in self.settings.namespaces or (None,):
            jobs, jobs_rv = await asyncio.to_thread(self.kube.list_jobs, ns)
            jobsets, jobsets_rv = await asyncio.to_thread(self.kube.list_jobsets, ns, selector)
            found += self.apply_listing(ns, jobs, jobs_rv, jobsets, jobsets_rv)
        if found:
            self.metrics.relist_changes.inc(found)
            log.info("relisting found %d change(s) no watch had reported", found)
        return found

    def apply_listing(self, namespace: str | None, jobs: list[dict[str, Any]], jobs_rv: str,
                      jobsets: list[dict[str, Any]], jobsets_rv: str) -> int:
        """Feed a listing to the caches as the watch events it implies: deletions for cached
        objects the listing no longer has, changes for listed ones the caches do not have yet."""
        changes = 0

        def in_scope(key: Key) -> bool:
            return namespace is None or key[0] == namespace

        listed_jobs = {(j["metadata"].get("namespace", ""), j["metadata"].get("name", "")): j
                       for j in jobs}
        for key, cached in list(self.jobs.items()):
            if in_scope(key) and _missed_deletion(cached, listed_jobs.get(key), jobs_rv):
                self.on_job_event({"type": "DELETED", "object": cached})
                changes += 1
        for job in jobs:
            changes += self.on_job_event({"type": "MODIFIED", "object": job})
        listed_sets = {}
        for js in jobsets:
            owner = (js["metadata"].get("labels") or {}).get(names.LABEL_JOB)
            if owner:
                listed_sets[(js["metadata"].get("namespace", ""), owner)] = js
        for key, cached in list(self.jobsets.items()):
            if in_scope(key) and _missed_deletion(cached, listed_sets.get(key), jobsets_rv):
                self.on_jobset_event({"type": "DELETED", "object": cached})
                changes += 1
        for js in listed_sets.values():
            changes += self.on_jobset_event({"type": "MODIFIED", "object": js})
        return changes

    # -- kopf --------------------------------------------------------------------------------
    def kopf_settings(self) -> kopf.OperatorSettings:
        ks = kopf.OperatorSettings()
        s = self.settings
        ks.watching.server_timeout = s.watch_server_timeout_s
        ks.watching.client_timeout = s.watch_client_timeout_s
        ks.watching.connect_timeout = s.watch_connect_timeout_s
        ks.posting.enabled = False          # the operator writes its own Events
        ks.persistence.diffbase_storage = _NoDiffBase()
        # kopf's worker for an object keeps the object's last event (a whole JobSet, pod
        # templates and all) until no event has come for this long; 5 s by default, which in a
        # burst of jobs holds every one of them at once. The handlers keep what they need.
        ks.queueing.idle_timeout = KOPF_IDLE_TIMEOUT_S
        ks.scanning.disabled = not s.clusterwide   # listing CRDs needs cluster-wide rights
        if s.webhook:
            cert_dir = s.webhook_cert_dir.rstrip("/")
            insecure = s.webhook_insecure
            ks.admission.server = kopf.WebhookServer(
                addr=s.webhook_host, port=s.webhook_port, insecure=insecure,
                certfile=None if insecure else f"{cert_dir}/tls.crt",
                pkeyfile=None if insecure else f"{cert_dir}/tls.key")
            ks.admission.managed = None     # the Helm chart owns the webhook configuration
        return ks

    def registry(self) -> kopf.OperatorRegistry:
        registry = kopf.OperatorRegistry()
        op = self

        @kopf.on.login(registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return connection_info(op.api_config)

        @kopf.on.startup(registry=registry)
        async def startup(**_: Any) -> None:
            op.events.start()
            op.queue = WorkQueue(op._work, workers=op.settings.workers)
            op.queue.start()
            for key in list(op.jobs):
                op.queue.add(key)
            if op.settings.relist_interval_s > 0:
                op._relister = asyncio.create_task(op._relist_forever(), name="tpujob-relist")
            if op.settings.http_port is not None:
                op.health = HealthServer(op, op.settings.http_host, op.settings.http_port)
                await op.health.start()
            op.ready = True
            log.info("tpujob operator started (%s)", "all namespaces" if op.settings.clusterwide
                     else "namespaces " + ", ".join(op.settings.namespaces))

        @kopf.on.cleanup(registry=registry)
        async def cleanup(**_: Any) -> None:
            op.ready = False
            if op._relister is not None:
                op._relister.cancel()
            if op.queue is not None:
                await op.queue.stop()
            await asyncio.to_thread(op.events.stop)
            if op.health is not None:
                await op.health.stop()

        # Coroutines, so that they run on the loop that owns the work queue (kopf runs plain
        # functions in a thread pool: a thread hop per event, and the queue is not thread-safe).
        @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
        async def job_event(event: dict[str, Any], **_: Any) -> None:
            op.on_job_event(event)

        @kopf.on.event(JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL, registry=registry,
                       labels={names.LABEL_MANAGED_BY: names.MANAGED_BY})
        async def jobset_event(event: dict[str, Any], **_: Any) -> None:
            op.on_jobset_event(event)

        # Kueue's Workloads, where Kueue is installed (kopf serves only the kinds the cluster
        # has): a queued job's status.queue follows them without waiting for a resync.
        @kopf.on.event(KUEUE_GROUP, KUEUE_VERSION, WORKLOADS, registry=registry)
        async def workload_event(event: dict[str, Any], **_: Any) -> None:
            op.on_workload_event(event)

        if self.settings.webhook:
            @kopf.on.validate(GROUP, VERSION, PLURAL, id=WEBHOOK_ID, registry=registry,
                              operations=["CREATE", "UPDATE"])
            def validate(body: Any, old: Any, **_: Any) -> None:
                refusal = admission.review(copy.deepcopy(dict(body)),
                                           copy.deepcopy(dict(old)) if old else None)
                if refusal:
                    raise kopf.AdmissionError(refusal, code=422)

        return registry

    async def run(self, *, stop_flag=None, ready_flag=None) -> None:
        await kopf.operator(
            registry=self.registry(), settings=self.kopf_settings(), standalone=True,
            clusterwide=self.settings.clusterwide, namespaces=list(self.settings.namespaces),
            stop_flag=stop_flag, ready_flag=ready_flag)
