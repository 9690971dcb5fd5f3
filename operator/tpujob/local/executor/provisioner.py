"""A stand-in for GKE's provisioner of queued (flex-start) capacity, for local mode's real control
plane: it answers the ProvisioningRequests (autoscaling.x-k8s.io/v1) that Kueue's provisioning
admission check makes, as GKE's cluster autoscaler does for the `queued-provisioning.gke.io`
class: it accepts a request, then provisions it, fails it, or lets its booking expire.

GKE's own provisioner cannot run here. What it writes is what Kueue v0.17 reads
(`pkg/controller/admissionchecks/provisioning/controller.go`): the `Accepted`, `Provisioned`,
`Failed` and `BookingExpired` conditions, and `status.provisioningClassDetails.ResizeRequestName`,
the value xpk's ProvisioningRequestConfig copies into the pods' node selector
`autoscaling.gke.io/provisioning-request` (the node pools local mode makes take that label from
the pods, as GKE's provisioned nodes carry it).

What happens to a request is a script a test (or a person) writes: a ConfigMap named
`tpujob-local-provisioning` in the job's namespace, whose key is the job's name and whose value
lists the outcome of each attempt in order, e.g. `Failed,Provisioned` (the last repeats):
`Provisioned` (the default, with no script), `Failed`, `BookingExpired` (provisioned, then not
used in time), `Pending` (accepted and waiting for capacity: it stays so). The script is read
when a request appears or changes. Kueue names each attempt's request
`<workload>-<check>-<attempt>`.

`decide` is pure; `Provisioner` watches the requests and applies its answers.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import Any

from .client import ApiError, KubeApi, Resource

log = logging.getLogger(__name__)

PROVISIONING_REQUESTS = Resource("autoscaling.x-k8s.io", "v1", "provisioningrequests")
WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads")
CONFIGMAPS = Resource("", "v1", "configmaps")
SCRIPT = "tpujob-local-provisioning"
OUTCOMES = ("Provisioned", "Failed", "BookingExpired", "Pending")
TERMINAL = ("Provisioned", "Failed", "BookingExpired", "CapacityRevoked")


def attempt_of(name: str) -> int:
    """The attempt number Kueue put at the end of a request's name (1 when there is none)."""
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 1


def outcome_for(script: str | None, attempt: int) -> str:
    """The outcome the script gives this attempt: its n-th entry, the last one repeating."""
    steps = [s.strip() for s in (script or "").split(",") if s.strip()]
    if not steps:
        return "Provisioned"
    outcome = steps[min(attempt, len(steps)) - 1]
    if outcome not in OUTCOMES:
        raise ValueError(f"{SCRIPT}: outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
    return outcome


def _condition(type_: str, status: bool, reason: str, message: str, now: str,
               generation: int) -> dict[str, Any]:
    return {"type": type_, "status": "True" if status else "False", "reason": reason,
            "message": message, "lastTransitionTime": now, "observedGeneration": generation}


def decide(request: dict[str, Any], outcome: str, now: datetime) -> dict[str, Any] | None:
    """The status to write for a request given its outcome; None when there is nothing to do
    (it already has a final condition, or it waits and says so already)."""
    status = request.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    if any(conditions.get(t, {}).get("status") == "True" for t in TERMINAL):
        return None
    name = request["metadata"]["name"]
    generation = int(request["metadata"].get("generation", 1))
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    accepted = _condition("Accepted", True, "Accepted", "accepted by local mode's stand-in "
                          "provisioner", stamp, generation)
    if outcome == "Pending":
        if conditions.get("Accepted", {}).get("status") == "True":
            return None
        return {"conditions": [accepted, _condition(
            "Provisioned", False, "Waiting", "waiting for capacity (local mode's provisioning "
            "script says Pending)", stamp, generation)]}
    if outcome == "Failed":
        return {"conditions": [accepted, _condition(
            "Failed", True, "ProvisioningFailed", f"no capacity for {name}: local mode's "
            f"provisioning script fails attempt {attempt_of(name)}", stamp, generation)]}
    provisioned = _condition("Provisioned", True, "Provisioned", f"capacity for {name} is "
                             "booked", stamp, generation)
    details = {"ResizeRequestName": name}
    if outcome == "BookingExpired":
        return {"conditions": [accepted, provisioned, _condition(
            "BookingExpired", True, "BookingExpired", f"the booking of {name} expired before "
            "its pods used it", stamp, generation)], "provisioningClassDetails": details}
    return {"conditions": [accepted, provisioned], "provisioningClassDetails": details}


class Provisioner:
    """Watches ProvisioningRequests in every namespace and answers each per the script."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api.session_copy()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Provisioner:
        self._thread = threading.Thread(target=self._run, name="local-provisioner", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        self.api.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                items, version = self.api.list(PROVISIONING_REQUESTS)
                for item in items:
                    self._answer(item)
                for event in self.api.watch(PROVISIONING_REQUESTS, None, version, timeout_s=5):
                    if self._stop.is_set():
                        return
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._answer(event["object"])
            except (ApiError, OSError, ValueError) as err:
                if self._stop.wait(0.5):
                    return
                log.debug("provisioning requests: %s; looking again", err)

    def _job_of(self, request: dict[str, Any]) -> str | None:
        """The job (JobSet) a request is for: request -> its Workload -> the Workload's
        JobSet, by their controller owner references."""
        meta = request["metadata"]
        workload = next((r["name"] for r in meta.get("ownerReferences") or []
                         if r.get("kind") == "Workload"), None)
        if workload is None:
            return None
        found = self.api.get(WORKLOADS, meta["namespace"], workload)
        return next((r["name"] for r in ((found or {}).get("metadata") or {}).get(
            "ownerReferences") or [] if r.get("kind") == "JobSet"), None)

    def _answer(self, request: dict[str, Any]) -> None:
        meta = request["metadata"]
        job = self._job_of(request)
        script = None
        if job is not None:
            config = self.api.get(CONFIGMAPS, meta["namespace"], SCRIPT)
            script = ((config or {}).get("data") or {}).get(job)
        try:
            outcome = outcome_for(script, attempt_of(meta["name"]))
        except ValueError as err:
            log.warning("%s/%s: %s; provisioning it", meta["namespace"], meta["name"], err)
            outcome = "Provisioned"
        status = decide(request, outcome, datetime.now(UTC))
        if status is None:
            return
        log.info("provisioning request %s/%s: %s", meta["namespace"], meta["name"], outcome)
        try:
            self.api.patch(PROVISIONING_REQUESTS, meta["namespace"], meta["name"],
                           {"status": status}, "status")
        except ApiError as err:
            if err.status != 404:
                raise


__all__ = ["PROVISIONING_REQUESTS", "Provisioner", "SCRIPT", "attempt_of", "decide",
           "outcome_for"]
