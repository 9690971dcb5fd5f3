"""The operator's Kubernetes calls, in one place: each is one request with a timeout, and every
failure is sorted into "retry later" (API down, throttled, conflict) or "cannot be done". The
calls made here are exactly the rules in `permissions.py`."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from tpujob.api.resource import API_VERSION, GROUP, PLURAL, VERSION
from tpujob.builders import names

log = logging.getLogger("tpujob.operator")
JOBSET_GROUP, JOBSET_VERSION = names.JOBSET_API_VERSION.split("/")
JOBSET_PLURAL = "jobsets"
KUEUE_GROUP, KUEUE_VERSION, WORKLOADS = "kueue.x-k8s.io", "v1beta2", "workloads"
WORKLOAD_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"   # on each Workload: its JobSet's uid
REQUEST_TIMEOUT = (5, 30)  # connect, read (seconds)
FIELD_MANAGER = "tpujob-operator"
RETRY_STATUSES = {409, 429, 500, 502, 503, 504}


class ApiUnavailable(Exception):
    """A call failed in a way that may pass (server error, throttling, timeout, conflict)."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class ApiRefused(Exception):
    """A call the API server refused for good (forbidden, invalid object)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _message(err: ApiException) -> str:
    try:
        return json.loads(err.body or "{}").get("message") or err.reason or str(err.status)
    except (ValueError, AttributeError):
        return err.reason or str(err.status)


def _translate(err: Exception, what: str) -> Exception:
    if isinstance(err, ApiException):
        if err.status in RETRY_STATUSES or err.status == 0:
            retry_after = None
            try:
                retry_after = float((err.headers or {}).get("Retry-After"))
            except (TypeError, ValueError):
                pass
            return ApiUnavailable(f"{what}: {err.status} {_message(err)}", retry_after)
        return ApiRefused(err.status, f"{what}: {err.status} {_message(err)}")
    return ApiUnavailable(f"{what}: {type(err).__name__}: {err}")


@dataclass
class KubeApi:
    """Typed wrappers over the official client for the calls the operator makes."""

    api: client.ApiClient

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def _call(self, what: str, fn, *args, **kwargs) -> Any:
        try:
            return fn(*args, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        except (ApiException, HTTPError, OSError) as err:
            raise _translate(err, what) from err

    def _send(self, what: str, fn, *args, **kwargs) -> None:
        """A call whose reply is not needed: the body is read and dropped, not turned into the
        client's model objects (which cost more than the request)."""
        reply = self._call(what, fn, *args, _preload_content=False, **kwargs)
        reply.drain_conn()
        reply.release_conn()

    def _get_or_none(self, what: str, fn, *args) -> Any:
        try:
            return self._call(what, fn, *args)
        except ApiRefused as err:
            if err.status == 404:
                return None
            raise

    # -- listing (the periodic relist) --------------------------------------------------
    def list_jobs(self, namespace: str | None) -> tuple[list[dict[str, Any]], str]:
        """Every TpuTrainingJob of the namespace (None: of every namespace), and the list's
        resourceVersion."""
        return self._list("TpuTrainingJobs", GROUP, VERSION, PLURAL, namespace)

    def list_jobsets(self, namespace: str | None, selector: str
                     ) -> tuple[list[dict[str, Any]], str]:
        """The JobSets matching `selector` (None namespace: in every namespace), and the list's
        resourceVersion."""
        return self._list("JobSets", JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL, namespace,
                          label_selector=selector)

    def _list(self, what: str, group: str, version: str, plural: str, namespace: str | None,
              **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
        if namespace is None:
            found = self._call(f"list {what}", self.custom.list_cluster_custom_object, group,
                               version, plural, **kwargs)
        else:
            found = self._call(f"list {what} in {namespace}",
                               self.custom.list_namespaced_custom_object, group, version,
                               namespace, plural, **kwargs)
        return found.get("items") or [], (found.get("metadata") or {}).get("resourceVersion", "")

    # -- JobSets -------------------------------------------------------------------------
    def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_or_none(f"get JobSet {namespace}/{name}",
                                 self.custom.get_namespaced_custom_object, JOBSET_GROUP,
                                 JOBSET_VERSION, namespace, JOBSET_PLURAL, name)

    def create_jobset(self, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Create it: (the JobSet, True). If it already exists (an earlier pass whose reply or
        status write was lost), (the existing one, False): the caller checks it is the job's."""
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        try:
            return self._call(f"create JobSet {ns}/{name}",
                              self.custom.create_namespaced_custom_object, JOBSET_GROUP,
                              JOBSET_VERSION, ns, JOBSET_PLURAL, body,
                              field_manager=FIELD_MANAGER), True
        except ApiUnavailable:
            existing = self.get_jobset(ns, name)
            if existing is None:
                raise
            return existing, False

    def set_jobset_suspend(self, namespace: str, name: str, suspend: bool) -> dict[str, Any]:
        return self._call(f"{'suspend' if suspend else 'resume'} JobSet {namespace}/{name}",
                          self.custom.patch_namespaced_custom_object, JOBSET_GROUP,
                          JOBSET_VERSION, namespace, JOBSET_PLURAL, name,
                          {"spec": {"suspend": suspend}}, field_manager=FIELD_MANAGER)

    def set_jobset_label(self, namespace: str, name: str, key: str, value: str
                         ) -> dict[str, Any]:
        return self._call(f"label JobSet {namespace}/{name} {key}={value}",
                          self.custom.patch_namespaced_custom_object, JOBSET_GROUP,
                          JOBSET_VERSION, namespace, JOBSET_PLURAL, name,
                          {"metadata": {"labels": {key: value}}}, field_manager=FIELD_MANAGER)

    # -- Kueue ---------------------------------------------------------------------------
    def find_workload(self, namespace: str, jobset_uid: str) -> dict[str, Any] | None:
        """The Kueue Workload of a JobSet (Kueue labels it with the JobSet's uid); None when
        there is none yet, or Kueue is not installed."""
        selector = f"{WORKLOAD_JOB_UID_LABEL}={jobset_uid}"
        try:
            items, _ = self._list(f"Workloads of JobSet {jobset_uid}", KUEUE_GROUP,
                                  KUEUE_VERSION, WORKLOADS, namespace, label_selector=selector)
        except ApiRefused as err:
            if err.status == 404:   # Kueue's kinds are not served
                return None
            raise
        items.sort(key=lambda w: (w.get("metadata") or {}).get("creationTimestamp") or "")
        return items[-1] if items else None

    def delete_jobset(self, namespace: str, name: str, uid: str | None) -> None:
        """Delete it and, first, its Jobs and pods (foreground), only if it is still `uid`."""
        body = client.V1DeleteOptions(propagation_policy="Foreground",
                                      preconditions=client.V1Preconditions(uid=uid) if uid
                                      else None)
        try:
            self._call(f"delete JobSet {namespace}/{name}",
                       self.custom.delete_namespaced_custom_object, JOBSET_GROUP,
                       JOBSET_VERSION, namespace, JOBSET_PLURAL, name, body=body)
        except ApiRefused as err:
            if err.status != 404:
                raise

    # -- Jobs and pods of a JobSet ---------------------------------------------------------
    def restart_jobs(self, namespace: str, jobset: str) -> int:
        """Delete every Job of the JobSet (foreground: pods first); the JobSet controller
        creates them again, so every host starts over from the newest checkpoint."""
        selector = f"jobset.sigs.k8s.io/jobset-name={jobset}"
        jobs = self._call(f"list Jobs of {namespace}/{jobset}",
                          self.batch.list_namespaced_job, namespace, label_selector=selector)
        for job in jobs.items:
            try:
                self._call(f"delete Job {namespace}/{job.metadata.name}",
                           self.batch.delete_namespaced_job, job.metadata.name, namespace,
                           propagation_policy="Foreground")
            except ApiRefused as err:
                if err.status != 404:
                    raise
        return len(jobs.items)

    def list_pods(self, namespace: str, jobset: str) -> list[dict[str, Any]]:
        selector = f"jobset.sigs.k8s.io/jobset-name={jobset}"
        pods = self._call(f"list pods of {namespace}/{jobset}", self.core.list_namespaced_pod,
                          namespace, label_selector=selector)
        return [self.api.sanitize_for_serialization(p) for p in pods.items]

    def read_pod_log(self, namespace: str, pod: str, container: str, tail_lines: int,
                     since_seconds: int) -> str | None:
        """The end of a container's log (pods/log), or None when it cannot be read (no pod, a
        container not started, a kubelet that does not answer): a missing log is never an
        error of the job, the next look tries again."""
        try:
            return self._call(
                f"read the log of {namespace}/{pod}/{container}",
                self.core.read_namespaced_pod_log, pod, namespace, container=container,
                tail_lines=tail_lines, since_seconds=since_seconds)
        except (ApiRefused, ApiUnavailable) as err:
            log.debug("no log of %s/%s/%s: %s", namespace, pod, container, err)
            return None

    # -- ConfigMap -------------------------------------------------------------------------
    def apply_config_map(self, body: dict[str, Any]) -> None:
        """Create the trainer's ConfigMap, or bring its data up to date."""
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        try:
            self._send(f"create ConfigMap {ns}/{name}", self.core.create_namespaced_config_map,
                       ns, body, field_manager=FIELD_MANAGER)
            return
        except ApiUnavailable:
            existing = self._get_or_none(f"get ConfigMap {ns}/{name}",
                                         self.core.read_namespaced_config_map, name, ns)
            if existing is None:
                raise
        if self.api.sanitize_for_serialization(existing).get("data") != body.get("data"):
            self._call(f"patch ConfigMap {ns}/{name}", self.core.patch_namespaced_config_map,
                       name, ns, {"data": body.get("data")}, field_manager=FIELD_MANAGER)

    # -- the job's own status and Events -----------------------------------------------------
    def job_exists(self, namespace: str, name: str, uid: str | None) -> bool:
        """Whether the job (this very one, by uid) is still there, read from the server rather
        than from the watch (a list of one name: the operator's rules grant list, not get)."""
        found = self._call(f"list TpuTrainingJob {namespace}/{name}",
                           self.custom.list_namespaced_custom_object, GROUP, VERSION,
                           namespace, PLURAL, field_selector=f"metadata.name={name}")
        return any(item.get("metadata", {}).get("uid") == uid
                   for item in found.get("items") or [])

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        return self._call(f"patch status of {namespace}/{name}",
                          self.custom.patch_namespaced_custom_object_status, GROUP,
                          VERSION, namespace, PLURAL, name,
                          {"status": status}, field_manager=FIELD_MANAGER)

    def create_event(self, job: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """A core/v1 Event about the job (best effort: a lost Event must not stop a reconcile).
        The body is a plain dict: the client's model objects cost more than the request."""
        meta = job["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            # Named as client-go's recorder names Events (<object>.<UnixNano in hex>): a list,
            # sorted by name, gives one object's Events in the order they happened.
            "metadata": {"name": f"{meta['name']}.{time.time_ns():x}",
                         "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": job.get("apiVersion", API_VERSION), "kind": "TpuTrainingJob",
                "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion")},
            "type": type_, "reason": reason, "message": message[:1024],
            "source": {"component": FIELD_MANAGER},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": FIELD_MANAGER, "reportingInstance": FIELD_MANAGER}
        try:
            self._send(f"create Event for {meta['namespace']}/{meta['name']}",
                       self.core.create_namespaced_event, meta["namespace"], body)
        except (ApiUnavailable, ApiRefused) as err:
            log.warning("could not record Event %s for %s/%s: %s", reason, meta["namespace"],
                        meta["name"], err)
