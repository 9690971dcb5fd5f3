"""Small pure functions over Kubernetes objects as dicts: times, owners, conditions, finalizers."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .keys import PodPhase


def format_time(ts: float) -> str:
    """RFC 3339 with second precision, as the API server writes times."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def labels(obj: dict[str, Any]) -> dict[str, str]:
    return meta(obj).get("labels") or {}


def annotations(obj: dict[str, Any]) -> dict[str, str]:
    return meta(obj).get("annotations") or {}


def uid(obj: dict[str, Any]) -> str:
    return meta(obj).get("uid", "")


def name(obj: dict[str, Any]) -> str:
    return meta(obj).get("name", "")


def namespace(obj: dict[str, Any]) -> str:
    return meta(obj).get("namespace", "")


def is_deleting(obj: dict[str, Any]) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def controller_uid(obj: dict[str, Any]) -> str | None:
    """The uid of the object's controlling owner, if any."""
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def build_controller_ref(owner: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": name(owner),
            "uid": uid(owner), "controller": True, "blockOwnerDeletion": True}


def has_finalizer(obj: dict[str, Any], finalizer: str) -> bool:
    return finalizer in (meta(obj).get("finalizers") or [])


def find_condition(obj_or_status: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    status = obj_or_status.get("status", obj_or_status) or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def is_condition_true(obj: dict[str, Any], ctype: str) -> bool:
    cond = find_condition(obj, ctype)
    return cond is not None and cond.get("status") == "True"


def pod_phase(pod: dict[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase") or PodPhase.PENDING


def is_pod_terminal(pod: dict[str, Any]) -> bool:
    return pod_phase(pod) in (PodPhase.SUCCEEDED, PodPhase.FAILED)


def is_pod_ready(pod: dict[str, Any]) -> bool:
    return is_condition_true(pod, "Ready")


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post about `obj`."""

    obj: dict[str, Any]
    type: str  # Normal | Warning
    reason: str
    message: str
    component: str


def build_event(event: Event, now: float) -> dict[str, Any]:
    obj = event.obj
    stamp = format_time(now)
    return {
        "apiVersion": "v1", "kind": "Event",
        # client-go's recorder names Events <object>.<UnixNano in hex>: listed by name, one
        # object's Events come in the order they happened.
        "metadata": {"name": f"{name(obj)}.{time.time_ns():x}", "namespace": namespace(obj)},
        "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                           "name": name(obj), "namespace": namespace(obj), "uid": uid(obj),
                           "resourceVersion": meta(obj).get("resourceVersion")},
        "type": event.type, "reason": event.reason, "message": event.message[:1024],
        "source": {"component": event.component}, "reportingComponent": event.component,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }
