"""Reconciling one TpuTrainingJob: observe, decide, act, write the status once. Level-based and
idempotent, so it can run again at any point (after an operator restart, a lost watch, a failed
call) without creating anything twice: every child has a fixed name, and a child that already
exists is adopted only when it is the job's own."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from tpujob.api.scheduling import DEFAULT_UNSCHEDULED_WARNING_SECONDS
from tpujob.api.status import FailureReason, Phase, TpuTrainingJobStatus
from tpujob.api.trainer_spec import ProgressSource, ProgressSpec
from tpujob.builders import names
from tpujob.builders.fingerprint import FINGERPRINT_ANNOTATION, changed_fields
from tpujob.builders.jobset import build_children
from tpujob.controller.decide import decide
from tpujob.controller.decision import Action, Decision, Observation
from tpujob.controller.events import PostEvent
from tpujob.controller.host_reports import read_host_reports
from tpujob.controller.host_watch import HostsView, HostWatch
from tpujob.controller.kube import ApiRefused, ApiUnavailable, KubeApi
from tpujob.controller.kueue_workload import QueueState, WorkloadReading, read_workload
from tpujob.controller.log_source import (
    ReadLog,
    find_process_zero_container,
    read_log_progress,
)
from tpujob.controller.metrics import OperatorMetrics
from tpujob.controller.observe import (
    JobSetState,
    Unscheduled,
    explain_failure,
    find_process_zero,
    read_container_exits,
    read_unscheduled,
    trainer_containers,
    trainer_endpoints,
)
from tpujob.controller.progress import fetch_progress, fetch_stacks
from tpujob.controller.recovery import AttemptStart, after_a_stall, read_attempt_start
from tpujob.controller.settings import OperatorSettings
from tpujob.controller.trainer_reports import (
    ProgressReading,
    read_final_progress,
    read_final_timelines,
)
from tpujob.validation import Verdict, validate_job

log = logging.getLogger("tpujob.operator")
PolicyEnsurer = Callable[[str, str], None]   # (policy name, accelerator topology)
# Phases a job reaches only once its children were created: a JobSet missing then has gone.
HAD_CHILDREN = {Phase.QUEUED, Phase.STARTING, Phase.RUNNING, Phase.RESTARTING, Phase.SUSPENDED}
HOST_REPORT_TAIL_LINES = 5000   # per container and read: a report every 10 s, the step lines
LOG_READERS = 16                # host report reads of one job at once


@dataclass(frozen=True)
class Outcome:
    phase: Phase
    requeue_after: float | None
    job: dict[str, Any] | None = None      # the job as the status patch left it
    jobset: dict[str, Any] | None = None   # the JobSet as created
    gone: bool = False                     # the server no longer has the job


def _status_patch(prev: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386) from prev to new: changed keys, null for the ones that
    went away, at every depth (a merge patch merges objects, so a key left out of a nested
    object would keep its old value on the server; lists are replaced whole)."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = prev.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            inner = _status_patch(before, value)
            if inner:
                patch[key] = inner
        elif before != value:
            patch[key] = value
    patch.update({k: None for k in prev if k not in new})
    return patch


def _previous_status(job: dict[str, Any]) -> TpuTrainingJobStatus:
    try:
        return TpuTrainingJobStatus.model_validate(job.get("status") or {})
    except ValidationError:
        return TpuTrainingJobStatus()  # written by something else: start from scratch


class Reconciler:
    def __init__(self, kube: KubeApi, settings: OperatorSettings,
                 metrics: OperatorMetrics | None = None, *,
                 ensure_policy: PolicyEnsurer | None = None,
                 read_progress: Callable[[str, int], ProgressReading | None] | None = None,
                 read_log: ReadLog | None = None,
                 read_stacks: Callable[[str, int, str], tuple[dict | None, str | None]]
                 | None = None,
                 record_event: PostEvent | None = None,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)):
        self.kube = kube
        self.settings = settings
        self.metrics = metrics or OperatorMetrics()
        self.ensure_policy = ensure_policy
        self.read_progress = read_progress or (
            lambda ip, port: fetch_progress(ip, port, settings.progress_timeout_s))
        self.read_log = read_log or (lambda *args: self.kube.read_pod_log(*args))
        self.read_stacks = read_stacks or (
            lambda ip, port, label: fetch_stacks(ip, port, label, settings.stacks_timeout_s))
        self.clock = clock
        # Posts an Event: at once by default; the operator hands them to its EventRecorder.
        self.record_event = record_event or (
            lambda job, type_, reason, message: self.kube.create_event(job, type_, reason,
                                                                       message))
        self._ensured_policies: set[str] = set()
        # uid -> (generation, verdict): a spec is validated once, not on every progress look.
        self._verdicts: dict[str, tuple[int, Verdict]] = {}
        self._refusals: set[tuple[str, int, str]] = set()   # (job uid, status, message)
        # job uid -> ((namespace, JobSet uid, restarts), where process 0 is: (IP, port) or
        # (pod, container)): the current attempt's only, and dropped with the job (`forget`).
        self._process_zero: dict[str, tuple[tuple[str, str, int], tuple]] = {}
        # job uid -> the host reports of its current attempt (dropped with the job: `forget`).
        self._host_watch: dict[str, HostWatch] = {}
        # The pods listed in the pass under way (one list serves every look of one pass).
        self._pass_pods: dict[tuple[str, str], list[dict[str, Any]]] = {}

    # -- observing ---------------------------------------------------------------------------
    def _blocked_by_policy(self, verdict: Verdict) -> tuple[FailureReason, str] | None:
        plan = verdict.plan
        if self.ensure_policy is None or plan is None or not plan.workload_policy:
            return None
        if plan.workload_policy in self._ensured_policies:
            return None
        try:
            self.ensure_policy(plan.workload_policy, plan.slice_type.topology)
        except Exception as err:  # the Compute client's errors carry a reason and a message
            message = getattr(err, "message", None) or str(err)
            return FailureReason.WORKLOAD_POLICY, f"workload policy {plan.workload_policy}: " \
                                                  f"{message}"
        self._ensured_policies.add(plan.workload_policy)
        return None

    def _process_zero_at(self, ns: str, name: str, js: JobSetState,
                         find: Callable[[list[dict[str, Any]]], tuple | None]) -> tuple | None:
        """Where process 0 is, as `find` reads it from the job's pods: listed once per JobSet
        attempt, not on every look (`_forget_process_zero` asks for a new look). One entry per
        job (its JobSet's owner), for its current attempt."""
        job, attempt = js.owner_uid or "", (ns, js.uid or "", js.restarts)
        kept = self._process_zero.get(job)
        if kept is not None and kept[0] == attempt:
            return kept[1]
        self._process_zero.pop(job, None)  # an earlier attempt's: not kept while looking
        found = find(self._list_pods(ns, name))
        if found is not None:
            self._process_zero[job] = (attempt, found)
        return found

    def _forget_process_zero(self, js: JobSetState) -> None:
        self._process_zero.pop(js.owner_uid or "", None)

    def _progress(self, ns: str, name: str, js: JobSetState,
                  source: ProgressSpec | None) -> tuple[ProgressReading | None, str | None]:
        """One look at process 0's progress, from its endpoint or its log: (reading, problem)."""
        from_log = source is not None and source.source == ProgressSource.LOG
        where = self._process_zero_at(
            ns, name, js, find_process_zero_container if from_log else find_process_zero)
        if where is None:
            return None, None
        if from_log:
            found = read_log_progress(self.read_log, ns, where, source)
            reading, problem, lost = found.progress, found.problem, found.missing
        else:
            reading = self.read_progress(*where)
            problem, lost = None, reading is None
        self.metrics.progress_reads.labels("ok" if reading else "none").inc()
        if lost:
            self._forget_process_zero(js)  # look the pod up again next time
        return reading, problem

    def _final_progress(self, ns: str, pods: list[dict[str, Any]], source: ProgressSpec
                        ) -> tuple[ProgressReading | None, str | None]:
        """Where a finished or failed run ended: process 0's termination message (the built-in
        trainer leaves its last figures there), or, for progress read from a log, that log once
        more."""
        if source.source == ProgressSource.LOG:
            where = find_process_zero_container(pods, phases=("Succeeded", "Failed"))
            if where is None:
                return None, None
            found = read_log_progress(self.read_log, ns, where, source)
            return found.progress, found.problem
        return read_final_progress(pods), None

    def _hosts(self, ns: str, name: str, js: JobSetState, stall_restarts: int
               ) -> HostsView | None:
        """The hosts of the running attempt (a JobSet restart or a stall restart starts a new
        one): every trainer container's log read for its host reports at most every
        `host_report_interval_s` (only what came since the last read), the view of them all
        kept in between."""
        interval = self.settings.host_report_interval_s
        if interval <= 0:
            return None
        job, now = js.owner_uid or "", self.clock()
        attempt = (ns, js.uid or "", js.restarts, stall_restarts)
        watch = self._host_watch.get(job)
        if watch is None or watch.attempt != attempt:
            watch = self._host_watch[job] = HostWatch(attempt)
        elif watch.read_at is not None and (now - watch.read_at).total_seconds() < interval:
            return watch.view()
        since = watch.since_seconds(now)
        containers = list(trainer_containers(self._list_pods(ns, name), js.restarts))
        if not containers:
            texts: list[str] = []
        else:
            # One read per container, at once: a slice of 64 hosts is 64 reads a pass.
            with ThreadPoolExecutor(max_workers=min(LOG_READERS, len(containers))) as pool:
                texts = list(pool.map(lambda pc: self.read_log(
                    ns, pc[0], pc[1], HOST_REPORT_TAIL_LINES, since) or "", containers))
        watch.merge(read_host_reports("\n".join(texts)), now)
        return watch.view()

    def _list_pods(self, ns: str, name: str) -> list[dict[str, Any]]:
        key = (ns, name)
        if key not in self._pass_pods:
            self._pass_pods[key] = self.kube.list_pods(ns, name)
        return self._pass_pods[key]

    def _validate(self, job: dict[str, Any]) -> Verdict:
        meta = job.get("metadata") or {}
        uid, generation = meta.get("uid"), meta.get("generation")
        if not uid or generation is None:
            return validate_job(job)
        kept = self._verdicts.get(uid)
        if kept is not None and kept[0] == int(generation):
            return kept[1]
        verdict = validate_job(job)
        self._verdicts[uid] = (int(generation), verdict)
        return verdict

    def forget(self, uid: str | None) -> None:
        """Drop what is kept about a deleted job."""
        self._verdicts.pop(uid or "", None)
        self._process_zero.pop(uid or "", None)
        self._host_watch.pop(uid or "", None)
        self._refusals = {k for k in self._refusals if k[0] != (uid or "")}

    def report_refused(self, job: dict[str, Any], err: ApiRefused) -> None:
        """A call the API server refused for good (403 by RBAC, 422 by validation or an
        admission webhook) stops the reconcile where it was, and the operator tries again
        later. Say so on the job, once per distinct refusal, as a Warning Event: without it a
        person sees a job with no status and the reason only in the operator's log."""
        key = (job["metadata"].get("uid") or "", err.status, str(err))
        if key in self._refusals:
            return
        self._refusals.add(key)
        hint = (" (the operator's ServiceAccount lacks this permission: the ClusterRole of "
                "the tpujob chart grants it; was the chart's RBAC changed?)"
                if err.status == 403 else "")
        reason = "Forbidden" if err.status == 403 else "Refused"
        message = f"the API server refused a call ({err.status}): {err}{hint}; retrying"
        try:
            self.record_event(job, "Warning", reason, message[:1024])
        except (ApiRefused, ApiUnavailable) as event_err:
            log.warning("event for a refused call not posted: %s", event_err)

    def observe(self, job: dict[str, Any], jobset: dict[str, Any] | None,
                prev: TpuTrainingJobStatus) -> Observation:
        try:
            return self._observe(job, jobset, prev)
        finally:
            self._pass_pods.pop((job["metadata"]["namespace"], job["metadata"]["name"]), None)

    def _observe(self, job: dict[str, Any], jobset: dict[str, Any] | None,
                 prev: TpuTrainingJobStatus) -> Observation:
        meta = job["metadata"]
        ns, name = meta["namespace"], meta["name"]
        verdict = self._validate(job)
        js = JobSetState.from_object(jobset)
        blocked = None
        if js.exists and js.owner_uid != meta.get("uid"):
            blocked = (FailureReason.CONFLICT,
                       f"a JobSet named {name} already exists in namespace {ns} and does not "
                       "belong to this job; delete it, or give the job another name")
            js = JobSetState.missing()
        elif verdict.valid and not js.exists:
            blocked = self._blocked_by_policy(verdict)
        spec_matches, changed = True, ()
        if js.exists and verdict.valid:
            annotation = ((jobset or {}).get("metadata", {}).get("annotations") or {}).get(
                FINGERPRINT_ANNOTATION)
            changed = changed_fields(verdict.job.spec, annotation)
            spec_matches = not changed
        failure, finals, pods = None, (), None
        progress, problem = None, None
        if js.exists and (js.failed or js.completed or js.restarts > prev.jobset_restarts):
            # The pods of the attempt that ended: why, and the timelines they left on exit.
            pods = self._list_pods(ns, name)
            if js.failed or js.restarts > prev.jobset_restarts:
                failure = explain_failure(read_container_exits(pods))
            finals = read_final_timelines(pods)
            if (js.completed or js.failed) and verdict.valid:
                # Where the run ended: its last steps may have come after the last look at
                # process 0's progress.
                progress, problem = self._final_progress(ns, pods,
                                                         verdict.job.spec.trainer.progress)
        workload, unscheduled = self._queue_and_placement(ns, name, js, prev, verdict, pods)
        attempt_start = self._attempt_start(ns, name, js, prev)
        if js.all_ready and after_a_stall(prev.recoveries) and (
                attempt_start is None or attempt_start.running_at is None):
            # After the operator's own restart the JobSet still counts the old attempt's pods
            # (being torn down, their processes may step on): not every host of the new
            # attempt runs yet.
            js = dataclasses.replace(js, ready_jobs=0)
        hosts = None
        if js.exists and js.all_ready and not js.suspended and not js.failed \
                and not js.completed:
            source = verdict.job.spec.trainer.progress if verdict.valid else None
            progress, problem = self._progress(ns, name, js, source)
            hosts = self._hosts(ns, name, js, prev.stall_restarts)
        return Observation(now=self.clock(), generation=int(meta.get("generation", 0)),
                           verdict=verdict, jobset=js, spec_matches=spec_matches,
                           changed_fields=changed, failure=failure, progress=progress,
                           blocked=blocked, progress_problem=problem, finals=finals,
                           workload=workload, unscheduled=unscheduled, hosts=hosts,
                           attempt_start=attempt_start)

    def _attempt_start(self, ns: str, name: str, js: JobSetState, prev: TpuTrainingJobStatus
                       ) -> AttemptStart | None:
        """How far a restart's new attempt is (its pods made since the failure), read until
        the recovery's first step; None otherwise, or while it has no pod yet."""
        newest = prev.recoveries[-1] if prev.recoveries else None
        if newest is None or newest.total_seconds is not None or not js.exists \
                or js.failed or js.completed or js.suspended:
            return None
        return read_attempt_start(self._list_pods(ns, name), after=newest.failed_at,
                                  hosts=prev.slice.hosts if prev.slice else 1)

    def _queue_and_placement(self, ns: str, name: str, js: JobSetState,
                             prev: TpuTrainingJobStatus, verdict: Verdict,
                             pods: list[dict[str, Any]] | None
                             ) -> tuple[WorkloadReading | None, Unscheduled | None]:
        """The JobSet's Kueue Workload, read while the job waits for Kueue or has not run yet
        (a running job's eviction suspends its JobSet first); and its pods the scheduler has
        not placed, read while not every host runs and the JobSet is old enough for them to
        be flagged (spec.scheduling.unscheduledWarningSeconds); `pods` when this pass listed
        them already."""
        if not js.exists or js.failed or js.completed:
            return None, None
        workload = None
        admitted = prev.queue is not None and prev.queue.state == QueueState.ADMITTED
        if js.queue_name and js.uid and (js.suspended or not js.all_ready or not admitted):
            found = self.kube.find_workload(ns, js.uid)
            workload = read_workload(found) if found is not None else None
        unscheduled = None
        bound = (verdict.job.spec.scheduling.unscheduled_warning_s if verdict.valid
                 else DEFAULT_UNSCHEDULED_WARNING_SECONDS)
        old_enough = js.created is None or \
            (self.clock() - js.created).total_seconds() >= bound
        if not js.suspended and not js.all_ready and bound > 0 and old_enough:
            unscheduled = read_unscheduled(pods if pods is not None
                                           else self._list_pods(ns, name))
        return workload, unscheduled

    # -- acting ----------------------------------------------------------------------------
    def _create_children(self, job: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
        meta = job["metadata"]
        made: dict[str, Any] = {}
        for child in build_children(job, verdict.job.spec, verdict.plan):
            if child["kind"] == "ConfigMap":
                self.kube.apply_config_map(child)
                continue
            made, fresh = self.kube.create_jobset(child)
            owner = JobSetState.from_object(made).owner_uid
            if owner != meta.get("uid"):
                raise ApiUnavailable(f"JobSet {meta['namespace']}/{meta['name']} exists and "
                                     "belongs to something else")
            if not fresh:  # made by an earlier pass whose status write was lost
                made = dict(made, _adopted=True)
        return made

    def act(self, job: dict[str, Any], obs: Observation, decision: Decision
            ) -> dict[str, Any] | None:
        """Carry out the decision's actions; returns the JobSet when one was created."""
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        created = None
        for action in decision.actions:
            log.info("%s/%s: %s", ns, name, action.value)
            if action == Action.CREATE_CHILDREN:
                created = self._create_children(job, obs.verdict)
            elif action in (Action.SUSPEND, Action.STOP):
                self.kube.set_jobset_suspend(ns, name, True)
            elif action == Action.RESUME:
                self.kube.set_jobset_suspend(ns, name, False)
            elif action == Action.RESTART:
                self.kube.restart_jobs(ns, name)
            elif action == Action.RECREATE:
                self.kube.delete_jobset(ns, name, obs.jobset.uid)
            elif action == Action.COLLECT_STACKS:
                self._collect_stacks(job, obs)
            elif action == Action.SET_PRIORITY:
                self.kube.set_jobset_label(ns, name, names.KUEUE_PRIORITY_LABEL,
                                           obs.verdict.job.spec.scheduling.priority)
        return created

    def _collect_stacks(self, job: dict[str, Any], obs: Observation) -> None:
        """Every trainer process's stacks, asked for at once before a stalled job restarts or
        stops; each process saves its own under the job's output (`stacks/<label>/`). One
        Warning Event says which answered and where they are, and which did not."""
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        label = f"hang-{obs.now:%Y%m%dT%H%M%SZ}"
        endpoints = list(trainer_endpoints(self.kube.list_pods(ns, name), obs.jobset.restarts))
        if not endpoints:
            return
        with ThreadPoolExecutor(max_workers=min(16, len(endpoints))) as pool:
            answers = list(pool.map(lambda e: self.read_stacks(e[1], e[2], label), endpoints))
        saved, silent = [], []
        for (host, _, _), (doc, why) in zip(endpoints, answers, strict=True):
            if doc is None:
                silent.append(f"{host}: {why}")
            else:
                saved.append(f"{host} ({doc.get('saved') or 'in its log only'})")
        message = (f"stacks of {len(saved)} of {len(endpoints)} processes, label {label}"
                   + (f": {'; '.join(saved)}" if saved else "")
                   + (f". No stacks from {'; '.join(silent)} (a stopped process, or one "
                      "holding the GIL, cannot answer)" if silent else ""))
        log.warning("%s/%s: %s", ns, name, message)
        self.metrics.events.labels("HangStacks").inc()
        self.record_event(job, "Warning", "HangStacks", message[:1024])

    # -- the whole pass --------------------------------------------------------------------
    def reconcile(self, job: dict[str, Any], jobset: dict[str, Any] | None) -> Outcome:
        """One pass over one job; raises ApiUnavailable / ApiRefused when a call fails (the
        caller retries later; nothing is half-written: the status is written last)."""
        meta = job["metadata"]
        ns, name = meta["namespace"], meta["name"]
        prev = _previous_status(job)
        if meta.get("deletionTimestamp") or prev.phase in (Phase.SUCCEEDED, Phase.FAILED):
            if prev.phase == Phase.FAILED and prev.failure is not None and prev.reason is None \
                    and not meta.get("deletionTimestamp"):
                # Failed under an operator that wrote no status.reason (the REASON column):
                # written once, so the column still says why.
                patched = self.kube.patch_status(ns, name, {"reason": prev.failure.reason.value})
                return Outcome(prev.phase, None, job=patched)
            return Outcome(prev.phase, None)
        obs = self.observe(job, jobset, prev)
        decision = decide(prev, obs)
        if Action.CREATE_CHILDREN in decision.actions and prev.phase in HAD_CHILDREN and \
                not self.kube.job_exists(ns, name, meta.get("uid")):
            # Its JobSet went because the job itself was deleted (garbage collection), and the
            # job's own DELETED event has not come in yet (or never will: a watch that had to
            # list again after a gap reports no deletions): creating children now would leave
            # them without an owner.
            log.info("%s/%s: deleted; its children are not created again", ns, name)
            return Outcome(prev.phase, None, gone=True)
        created = self.act(job, obs, decision)
        before = (job.get("status") or {})
        after = decision.status.to_dict()
        patch = _status_patch(before, after)
        patched = self.kube.patch_status(ns, name, patch) if patch else None
        self.metrics.record_goodput(ns, name, decision.status.goodput)
        events = decision.events
        if created is not None and created.pop("_adopted", False):
            events = [e for e in events if e.reason != "Created"]
        for event in events:
            self.metrics.events.labels(event.reason).inc()
            self.record_event(job, event.type, event.reason, event.message)
        return Outcome(decision.status.phase, self._next_look(decision.status.phase, obs),
                       job=patched, jobset=created)

    def _next_look(self, phase: Phase, obs: Observation) -> float | None:
        if phase.is_terminal:
            return None
        if obs.blocked is not None:
            return self.settings.retry_delays_s[-2]
        if phase in (Phase.RUNNING, Phase.STARTING, Phase.RESTARTING):
            return self.settings.progress_interval_s
        return self.settings.resync_interval_s


__all__ = ["ApiRefused", "ApiUnavailable", "Outcome", "Reconciler"]
