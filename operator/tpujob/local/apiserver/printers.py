"""Server-side columns of the built-in kinds kubectl shows most, as kube-apiserver prints them
(pkg/printers/internalversion/printers.go): pods (READY, STATUS, RESTARTS), jobs (STATUS,
COMPLETIONS, DURATION), events (LAST SEEN, TYPE, REASON, OBJECT, MESSAGE). Pure: objects in,
cells out."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

Column = tuple[dict[str, Any], Callable[[dict[str, Any]], Any]]


def _col(name: str, description: str, priority: int = 0, fmt: str = "") -> dict[str, Any]:
    return {"name": name, "type": "string", "format": fmt, "description": description,
            "priority": priority}


def _parse(stamp: Any) -> datetime | None:
    """An RFC 3339 time (`Z` or an offset, fractions allowed: clients send all of them)."""
    try:
        when = datetime.fromisoformat(str(stamp))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _since(stamp: Any, now: datetime, human: Callable[[float], str]) -> str:
    when = _parse(stamp) if stamp else None
    return "<unknown>" if when is None else human((now - when).total_seconds())


# -- pods -------------------------------------------------------------------------------------

def pod_status(pod: dict[str, Any]) -> str:
    """The STATUS of `kubectl get pods` (printPod): the pod's reason or phase, refined by init
    containers, then containers, then deletion."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    init_specs = (pod.get("spec") or {}).get("initContainers") or []
    initializing = False
    for i, c in enumerate(status.get("initContainerStatuses") or []):
        state = c.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated is not None and terminated.get("exitCode") == 0:
            continue
        if terminated is not None:
            reason = f"Init:{terminated.get('reason')}" if terminated.get("reason") else (
                f"Init:Signal:{terminated['signal']}" if terminated.get("signal") else
                f"Init:ExitCode:{terminated.get('exitCode')}")
        elif waiting is not None and waiting.get("reason") and \
                waiting.get("reason") != "PodInitializing":
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break
    if not initializing:
        has_running = False
        for c in reversed(status.get("containerStatuses") or []):
            state = c.get("state") or {}
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting is not None and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated is not None and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated is not None:
                reason = f"Signal:{terminated['signal']}" if terminated.get("signal") else \
                    f"ExitCode:{terminated.get('exitCode')}"
            elif "running" in state and c.get("ready"):
                has_running = True
        if reason == "Completed" and has_running:
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in status.get("conditions") or [])
            reason = "Running" if ready else "NotReady"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason


def _pod_ready(pod: dict[str, Any]) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    ready = sum(1 for c in statuses if c.get("ready"))
    return f"{ready}/{total}"


def _pod_restarts(pod: dict[str, Any], now: datetime, human) -> str:
    restarts, last = 0, None
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        restarts += int(c.get("restartCount") or 0)
        finished = _parse(((c.get("lastState") or {}).get("terminated") or {}).get("finishedAt"))
        if finished is not None and (last is None or finished > last):
            last = finished
    if restarts and last is not None:
        return f"{restarts} ({human((now - last).total_seconds())} ago)"
    return str(restarts)


def pod_columns(age: Column, human) -> list[Column]:
    def now() -> datetime:
        return datetime.now(UTC)
    status = lambda pod: pod.get("status") or {}  # noqa: E731
    return [
        (_col("Ready", "The aggregate readiness state of this pod for accepting traffic."),
         _pod_ready),
        (_col("Status", "The aggregate status of the containers in this pod."), pod_status),
        (_col("Restarts", "The number of times the containers in this pod have been restarted "
              "and when the last container in this pod has restarted."),
         lambda pod: _pod_restarts(pod, now(), human)),
        age,
        (_col("IP", "podIP address allocated to the pod. Routable at least within the "
              "cluster. Empty if not yet allocated.", 1),
         lambda pod: status(pod).get("podIP") or "<none>"),
        (_col("Node", "NodeName indicates in which node this pod is scheduled. If empty, this "
              "pod is a candidate for scheduling by the scheduler defined in schedulerName. "
              "Once this field is set, the kubelet for this node becomes responsible for the "
              "lifecycle of this pod. This field should not be used to express a desire for the "
              "pod to be scheduled on a specific node. "
              "https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename",
              1),
         lambda pod: (pod.get("spec") or {}).get("nodeName") or "<none>"),
        (_col("Nominated Node", "nominatedNodeName is set only when this pod preempts other "
              "pods on the node, but it cannot be scheduled right away as preemption victims "
              "receive their graceful termination periods. This field does not guarantee that "
              "the pod will be scheduled on this node. Scheduler may decide to place the pod "
              "elsewhere if other nodes become available sooner. Scheduler may also decide to "
              "give the resources on this node to a higher priority pod that is created after "
              "preemption. As a result, this field may be different than PodSpec.nodeName when "
              "the pod is scheduled.", 1),
         lambda pod: status(pod).get("nominatedNodeName") or "<none>"),
        (_col("Readiness Gates", "If specified, all readiness gates will be evaluated for pod "
              "readiness. A pod is ready when all its containers are ready AND all conditions "
              'specified in the readiness gates have status equal to \"True\" More info: '
              "https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates", 1),
         lambda pod: "<none>"),
    ]


# -- configmaps -------------------------------------------------------------------------------

CONFIGMAP_DATA: Column = (
    _col("Data", "Data contains the configuration data. Each key must consist of alphanumeric "
         "characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the "
         "BinaryData field. The keys stored in Data must not overlap with the keys in the "
         "BinaryData field, this is enforced during validation process."),
    lambda cm: len(cm.get("data") or {}) + len(cm.get("binaryData") or {}))


# -- jobs -------------------------------------------------------------------------------------

def _has(job: dict[str, Any], ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def job_status(job: dict[str, Any]) -> str:
    if _has(job, "Complete"):
        return "Complete"
    if _has(job, "Failed"):
        return "Failed"
    if (job.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    for ctype in ("Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if _has(job, ctype):
            return ctype
    return "Running"


def job_completions(job: dict[str, Any]) -> str:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        return f"{succeeded}/{spec['completions']}"
    parallelism = int(spec.get("parallelism") or 0)
    return f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"


def job_columns(age: Column, human) -> list[Column]:
    def duration(job: dict[str, Any]) -> str:
        status = job.get("status") or {}
        start = _parse(status.get("startTime")) if status.get("startTime") else None
        if start is None:
            return ""
        end = _parse(status.get("completionTime")) if status.get("completionTime") else None
        return human(((end or datetime.now(UTC)) - start).total_seconds())

    def template(job: dict[str, Any]) -> list[dict[str, Any]]:
        return ((((job.get("spec") or {}).get("template") or {}).get("spec") or {})
                .get("containers") or [])
    return [
        (_col("Status", "Status of the job."), job_status),
        (_col("Completions", "The number of pods which reached phase Succeeded."),
         job_completions),
        (_col("Duration", "Time required to complete the job."), duration),
        age,
        (_col("Containers", "Names of each container in the template.", 1),
         lambda job: ",".join(c.get("name", "") for c in template(job))),
        (_col("Images", "Images referenced by each container in the template.", 1),
         lambda job: ",".join(c.get("image", "") for c in template(job))),
        (_col("Selector", "A label query over pods that should match the pod count.", 1),
         lambda job: ",".join(f"{k}={v}" for k, v in sorted(
             (((job.get("spec") or {}).get("selector") or {}).get("matchLabels") or {})
             .items())) or "<none>"),
    ]


# -- events -----------------------------------------------------------------------------------

def event_last_seen(event: dict[str, Any], now: datetime, human) -> str:
    last = event.get("lastTimestamp") or event.get("eventTime") or \
        (event.get("series") or {}).get("lastObservedTime")
    count = int(event.get("count") or 0)
    seen = _since(last, now, human)
    if count > 1:
        first = _since(event.get("firstTimestamp") or event.get("eventTime"), now, human)
        return f"{seen} (x{count} over {first})"
    return seen


def event_columns(human) -> list[Column]:
    def involved(event: dict[str, Any]) -> dict[str, Any]:
        return event.get("involvedObject") or {}

    def source(event: dict[str, Any]) -> str:
        component = event.get("reportingComponent") or \
            (event.get("source") or {}).get("component") or ""
        host = (event.get("source") or {}).get("host")
        return f"{component}, {host}" if host else component
    return [
        (_col("Last Seen", "Deprecated field assuring backward compatibility with core.v1 "
              "Event type"), lambda e: event_last_seen(e, datetime.now(UTC), human)),
        (_col("Type", "type is the type of this event (Normal, Warning), new types could be "
              "added in the future."), lambda e: e.get("type") or ""),
        (_col("Reason", "reason is why the action was taken."), lambda e: e.get("reason") or ""),
        (_col("Object", "regarding contains the object this Event is about."),
         lambda e: f"{str(involved(e).get('kind', '')).lower()}/{involved(e).get('name', '')}"),
        (_col("Subobject", "The field of the object this Event is about.", 1),
         lambda e: involved(e).get("fieldPath") or ""),
        (_col("Source", "reportingController is the name of the controller that emitted this "
              "Event.", 1), source),
        (_col("Message", "note is a human-readable description of the status of this "
              "operation."), lambda e: (e.get("message") or "").strip()),
        (_col("First Seen", "Deprecated field assuring backward compatibility with core.v1 "
              "Event type", 1),
         lambda e: _since(e.get("firstTimestamp") or e.get("eventTime"), datetime.now(UTC),
                          human)),
        (_col("Count", "Deprecated field assuring backward compatibility with core.v1 Event "
              "type", 1), lambda e: str(e.get("count") or 1)),
        (_col("Name", "Name must be unique within a namespace.", 1, "name"),
         lambda e: e["metadata"]["name"]),
    ]
