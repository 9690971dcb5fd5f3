"""The local executor: plays the JobSet controller, the Job controller and the kubelets against
a Kubernetes API server, so that the JobSets tpujob creates run as processes on this machine.

    with Executor("http://127.0.0.1:PORT", workdir, namespace="default") as executor:
        ...  # create JobSets through the API; watch their Jobs, pods and status

One loop thread does all the work, level-triggered: it wakes on watch events (JobSets, Jobs,
pods), on process exits and at least every `resync_s`; lists what it manages; lets the kubelet
reap and start processes and write pod status; syncs every Job (pods, status); reconciles every
JobSet (Jobs, Service, status). Everything goes through the API server over HTTP, as real
controllers do, so the server's watches, garbage collection and finalizers play their part.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import requests

from . import keys
from .client import CONFIGMAPS, EVENTS, JOBS, JOBSETS, PODS, SECRETS, SERVICES, ApiError, KubeApi
from .job_controller import JobPlan, plan_job
from .jobset_children import default_jobset, is_dns_enabled, subdomain
from .jobset_controller import JobSetPlan, controlled_jobs, plan_jobset
from .kubelet import Kubelet
from .kubelet_endpoint import KubeletEndpoint
from .network import LocalNetwork
from .nodes import NodePools
from .objects import (
    Event,
    build_event,
    controller_uid,
    format_time,
    has_finalizer,
    is_deleting,
    is_pod_terminal,
    labels,
    meta,
    name,
    namespace,
    uid,
)
from .pod_status import PodRun
from .provisioner import Provisioner
from .settings import ExecutorSettings

log = logging.getLogger(__name__)

_WATCHED = ((JOBSETS, None), (JOBS, keys.JOBSET_NAME), (PODS, keys.CONTROLLER_UID_LABEL))
_WATCHED_AS_KUBELET = ((JOBSETS, None), (PODS, None))


class Executor:
    """Runs the JobSets of one namespace (or all) as local processes until `stop()`.

    `server` is the API server's URL or a kubeconfig file; `workdir` holds one directory per
    pod (volumes, logs, termination messages). Settings come from `settings` and/or keyword
    overrides of `ExecutorSettings` (e.g. `cpu_devices_per_process=1`).
    """

    def __init__(self, server: str | os.PathLike, workdir: str | os.PathLike,
                 namespace: str | None = None, settings: ExecutorSettings | None = None,
                 **overrides: Any) -> None:
        self.settings = dataclasses.replace(settings or ExecutorSettings(), **overrides)
        self.api = KubeApi(server, timeout=self.settings.request_timeout_s)
        self.workdir = Path(workdir).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.namespace = namespace
        self.network = LocalNetwork(block=self.settings.ip_block)
        self.kubelet = Kubelet(self.workdir, self.network, self.settings, self._lookup,
                               self._wake)
        self._wake_event = threading.Event()
        self._stopping = threading.Event()
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self._watchers: list[threading.Thread] = []
        self._services: set[tuple[str, str, str]] = set()
        self._excused: set[str] = set()  # pods stopped by a suspension (job controller memory)
        self.last_error: str | None = None
        self.pools: NodePools | None = None
        self.provisioner: Provisioner | None = None
        self.endpoint: KubeletEndpoint | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Start the loop and the watches; returns after the first pass (raises if the API
        server cannot be reached)."""
        if self._thread is not None:
            raise RuntimeError("executor already started")
        self.api.list(JOBSETS, self.namespace)  # fail fast on a wrong address or missing CRD
        self._stopping.clear()
        if not self.settings.controllers:
            port = 0
            if self.settings.kubelet_tls is not None:
                cert, key, ca = (Path(p) for p in self.settings.kubelet_tls)
                self.endpoint = KubeletEndpoint(self.kubelet, cert, key, ca)
                port = self.endpoint.start()
            self.pools = NodePools(self.api, "127.0.0.1", port).start()
            # Kueue's ProvisioningRequests, answered as GKE's provisioner would: the real
            # control plane serves the kind (and only it: the embedded server runs with
            # its own controllers).
            self.provisioner = Provisioner(self.api).start()
        for resource, selector in (_WATCHED if self.settings.controllers
                                   else _WATCHED_AS_KUBELET):
            thread = threading.Thread(target=self._watch, args=(resource, selector),
                                      name=f"executor-watch-{resource.plural}", daemon=True)
            thread.start()
            self._watchers.append(thread)
        self._thread = threading.Thread(target=self._loop, name="executor-loop", daemon=True)
        self._thread.start()
        self._synced.wait(timeout)

    def stop(self) -> None:
        """Stop the loop and every process it started (SIGTERM to each container's main
        process, then SIGKILL to everything after at most `stop_grace_s`). The API objects stay
        as they are, as when a node goes away."""
        self._stopping.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None
        self.kubelet.stop_all(self.settings.stop_grace_s)
        if self.pools is not None:
            self.pools.stop()
        if self.provisioner is not None:
            self.provisioner.stop()
        if self.endpoint is not None:
            self.endpoint.stop()
        self._watchers.clear()
        self.api.close()

    def __enter__(self) -> Executor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wake(self) -> None:
        self._wake_event.set()

    # -- inspection and actions --------------------------------------------------------------

    def processes(self) -> list[dict[str, Any]]:
        """The live processes: namespace, pod, uid, container, pid, ip."""
        return self.kubelet.processes()

    def log_path(self, namespace: str, pod: str, container: str | None = None,
                 previous: bool = False) -> Path | None:
        """The log file of a container (its latest start, or the one before with
        `previous`); None when it never started."""
        run = self.kubelet.find_run(namespace, pod)
        if run is None:
            return None
        c = _container(run, container)
        if previous:
            return c.dir / f"{c.restart_count - 1}.log" if c.restart_count else None
        return c.log_path

    def read_log(self, namespace: str, pod: str, container: str | None = None,
                 previous: bool = False, tail_lines: int | None = None) -> str:
        """A container's output (stdout and stderr), like `kubectl logs`."""
        path = self.log_path(namespace, pod, container, previous)
        if path is None or not path.exists():
            return ""
        text = path.read_text(errors="replace")
        if tail_lines is not None:
            text = "\n".join(text.splitlines()[-tail_lines:])
        return text

    def disrupt(self, namespace: str, pod: str, reason: str = "PreemptionByScheduler",
                message: str = "tpujob local executor: the pod was preempted") -> None:
        """Disrupt a pod as a preemption or eviction does: a DisruptionTarget condition, then
        deletion (its containers get SIGTERM and the grace period)."""
        obj = self.api.get(PODS, namespace, pod)
        if obj is None:
            raise LookupError(f"pod {namespace}/{pod} not found")
        conditions = [c for c in (obj.get("status") or {}).get("conditions") or []
                      if c.get("type") != keys.DISRUPTION_TARGET]
        conditions.append({"type": keys.DISRUPTION_TARGET, "status": "True", "reason": reason,
                           "message": message, "lastTransitionTime": format_time(time.time())})
        self.api.patch(PODS, namespace, pod, {"status": {"conditions": conditions}}, "status")
        self.api.delete(PODS, namespace, pod, uid=uid(obj))

    # -- watches -----------------------------------------------------------------------------

    def _watch(self, resource, selector: str | None) -> None:
        api = self.api.session_copy()
        version = ""
        while not self._stopping.is_set():
            try:
                if not version:
                    _, version = api.list(resource, self.namespace, selector)
                for event in api.watch(resource, self.namespace, version, selector,
                                       self.settings.watch_timeout_s):
                    if self._stopping.is_set():
                        break
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        version = ""  # expired: list again
                        break
                    version = meta(obj).get("resourceVersion", version)
                    if event.get("type") != "BOOKMARK":
                        self._wake()
            except (requests.RequestException, ApiError, ValueError) as err:
                version = ""
                log.debug("watch of %s interrupted: %s", resource.plural, err)
                self._stopping.wait(1.0)
        api.close()

    # -- the loop ----------------------------------------------------------------------------

    def _loop(self) -> None:
        delay = 0.0
        while not self._stopping.is_set():
            self._wake_event.wait(timeout=delay)
            self._wake_event.clear()
            if self._stopping.is_set():
                break
            time.sleep(self.settings.debounce_s)
            try:
                delay = min(self.sync_once(), self.settings.resync_s)
                self.last_error = None
            except (requests.RequestException, ApiError) as err:
                self.last_error = str(err)
                log.warning("local executor: %s", err)
                delay = self.settings.resync_s
            except Exception:  # a bug must not leave processes unsupervised: keep looping
                log.exception("local executor: sync failed")
                delay = self.settings.resync_s
            self._synced.set()

    def sync_once(self) -> float:
        """One pass over everything; returns how soon the next pass is due."""
        if not self.settings.controllers:
            return self._sync_nodes(time.time())
        now = time.time()
        jobsets, _ = self.api.list(JOBSETS, self.namespace)
        jobs, _ = self.api.list(JOBS, self.namespace, keys.JOBSET_NAME)
        pods, _ = self.api.list(PODS, self.namespace, keys.CONTROLLER_UID_LABEL)
        jobset_uids = {uid(js) for js in jobsets}
        self._publish_domains(jobsets)
        managed = [j for j in jobs if controller_uid(j) in jobset_uids and not is_deleting(j)]
        managed_uids = {uid(j) for j in managed}
        # A Job being deleted (a restart deletes Jobs in the foreground: pods first) no longer
        # tracks its pods: their finalizers go as for a Job already gone, as Kubernetes' Job
        # controller removes them for a deleted Job; else the two wait for each other.
        job_uids = {uid(j) for j in jobs if not is_deleting(j)}

        # Kubelet: reap, stop and start processes; report pod status.
        node_pods = [p for p in pods if controller_uid(p) in managed_uids
                     or uid(p) in self.kubelet.runs
                     or (is_deleting(p) and has_finalizer(p, keys.JOB_TRACKING_FINALIZER))]
        by_uid = {uid(p): p for p in pods}
        next_due = self._run_pods(node_pods, by_uid, now)
        pods = list(by_uid.values())

        # Job controller: each managed Job, then pods whose Job is gone or going.
        for job in managed:
            plan = plan_job(job, [p for p in pods if controller_uid(p) == uid(job)], now,
                            self.settings.job_backoff_s, frozenset(self._excused))
            if not self._apply_job_plan(job, plan):
                next_due = 0.05
            if plan.requeue_after is not None:
                next_due = min(next_due, plan.requeue_after)
        for pod in pods:
            if controller_uid(pod) not in job_uids and \
                    has_finalizer(pod, keys.JOB_TRACKING_FINALIZER) and \
                    (is_pod_terminal(pod) or uid(pod) not in self.kubelet.runs):
                self._release(pod)

        # JobSet controller.
        for js in jobsets:
            own_pods = [p for p in pods if namespace(p) == namespace(js) and
                        labels(p).get(keys.JOBSET_NAME) == name(js)]
            plan = plan_jobset(js, controlled_jobs(js, jobs), now, own_pods)
            if not self._apply_jobset_plan(js, plan):
                next_due = 0.05
        return next_due

    def _publish_domains(self, jobsets: list[dict[str, Any]]) -> None:
        """The pod DNS names of each JobSet's headless Service (its subdomain)."""
        for js in jobsets:
            if is_dns_enabled(default_jobset(js)):
                self.network.add_domain(namespace(js), subdomain(default_jobset(js)))

    def _run_pods(self, node_pods: list[dict[str, Any]], by_uid: dict[str, dict[str, Any]],
                  now: float) -> float:
        """The kubelet's part: reap, stop and start processes, then write each pod's status
        (`by_uid` gets what the server stored); returns how soon the next pass is due."""
        next_due = self.settings.resync_s
        for pod, status in self.kubelet.sync(node_pods, now):
            # Conditional on the version read: others add conditions too (DisruptionTarget).
            body = {"metadata": {"resourceVersion": meta(pod).get("resourceVersion")},
                    "status": status}
            try:
                by_uid[uid(pod)] = self.api.patch(PODS, namespace(pod), name(pod), body,
                                                  "status")
            except ApiError as err:
                if err.status == 409:
                    next_due = 0.05
                elif err.status != 404:
                    raise
                else:
                    by_uid.pop(uid(pod), None)
        return next_due

    def _sync_nodes(self, now: float) -> float:
        """One pass as the kubelets of the TPU node pools (the real control plane runs the
        controllers): make the pools pending pods need, run the pods bound to them, and end
        the graceful deletion of pods whose processes have stopped."""
        assert self.pools is not None
        self._publish_domains(self.api.list(JOBSETS, self.namespace)[0])
        pods, _ = self.api.list(PODS, self.namespace)
        self.pools.sync(pods)
        mine = self.pools.names()
        node_pods = [p for p in pods if (p.get("spec") or {}).get("nodeName") in mine
                     or uid(p) in self.kubelet.runs]
        by_uid = {uid(p): p for p in node_pods}
        next_due = self._run_pods(node_pods, by_uid, now)
        for pod in by_uid.values():
            # A real kubelet deletes a pod for good (grace 0) once its containers stopped
            # and its last status is written; the server waits for that.
            if is_deleting(pod) and uid(pod) not in self.kubelet.runs and \
                    meta(pod).get("deletionGracePeriodSeconds") != 0:
                try:
                    self.api.delete(PODS, namespace(pod), name(pod), uid=uid(pod),
                                    grace_period_s=0)
                except ApiError as err:
                    log.debug("pod %s not deleted: %s", name(pod), err)
        return next_due

    # -- applying plans ----------------------------------------------------------------------

    def _apply_job_plan(self, job: dict[str, Any], plan: JobPlan) -> bool:
        ns = namespace(job)
        if plan.status_changed:
            updated = {**copy.deepcopy(job), "status": plan.status}
            try:
                self.api.replace(JOBS, updated, "status")
            except ApiError as err:
                if err.status in (404, 409):
                    return False
                raise
        self._excused.update(plan.excuse_pods)
        for pod in plan.release_pods:  # counted in the status just written
            self._release(pod)
            self._excused.discard(uid(pod))
        for pod in plan.delete_pods:
            self.api.delete(PODS, ns, name(pod), uid=uid(pod))
        for pod in plan.create_pods:
            try:
                self.api.create(PODS, ns, pod)
            except ApiError as err:
                if err.status == 404:
                    return False  # the namespace is going away
                raise
        self._post_events(plan.events)
        return True

    def _release(self, pod: dict[str, Any]) -> None:
        finalizers = [f for f in meta(pod).get("finalizers") or []
                      if f != keys.JOB_TRACKING_FINALIZER]
        try:
            self.api.patch(PODS, namespace(pod), name(pod), {"metadata": {
                "finalizers": finalizers or None,
                "resourceVersion": meta(pod).get("resourceVersion")}})
        except ApiError as err:
            if err.status not in (404, 409):
                raise

    def _apply_jobset_plan(self, js: dict[str, Any], plan: JobSetPlan) -> bool:
        ns = namespace(js)
        for job in plan.delete_jobs:
            self.api.delete(JOBS, ns, name(job), propagation="Foreground", uid=uid(job))
        if plan.service is not None:
            key = (ns, name(plan.service), uid(js))
            if key not in self._services:
                try:
                    self.api.create(SERVICES, ns, plan.service)
                except ApiError as err:
                    if err.status != 409:
                        raise
                self._services.add(key)
        for job in plan.create_jobs:
            try:
                self.api.create(JOBS, ns, job)
            except ApiError as err:
                if err.status not in (404, 409):  # 409: the old Job is still going away
                    raise
        for job in plan.update_jobs:
            template = job["spec"].get("template") or {}
            patch = {"metadata": {"resourceVersion": meta(job).get("resourceVersion")},
                     "spec": {"suspend": job["spec"]["suspend"], "template": {
                         "metadata": template.get("metadata") or {},
                         "spec": {"nodeSelector": (template.get("spec") or {}).get(
                             "nodeSelector")}}}}
            try:
                self.api.patch(JOBS, ns, name(job), patch)
            except ApiError as err:
                if err.status not in (404, 409):
                    raise
        if plan.status_changed:
            try:
                self.api.replace(JOBSETS, {**copy.deepcopy(js), "status": plan.status},
                                 "status")
            except ApiError as err:
                if err.status in (404, 409):
                    return False
                raise
        self._post_events(plan.events)
        if plan.delete_jobset:
            self.api.delete(JOBSETS, ns, name(js), propagation="Foreground", uid=uid(js))
        return True

    def _post_events(self, events: list[Event]) -> None:
        if not self.settings.emit_events:
            return
        for event in events:
            try:
                self.api.create(EVENTS, namespace(event.obj), build_event(event, time.time()))
            except (ApiError, requests.RequestException) as err:
                log.debug("event not posted: %s", err)

    def _lookup(self, kind: str, ns: str, obj_name: str) -> dict[str, Any] | None:
        resource = {"ConfigMap": CONFIGMAPS, "Secret": SECRETS, "Job": JOBS}[kind]
        return self.api.get(resource, ns, obj_name)


def _container(run: PodRun, container: str | None):
    everything = run.containers + run.init_containers
    if container is None:
        return run.containers[0] if run.containers else everything[0]
    for c in everything:
        if c.name == container:
            return c
    raise LookupError(f"pod {'/'.join(run.key)} has no container {container!r}")
