"""Which parts of a job's spec its JobSet was built from: a short hash per spec field, kept as an
annotation on the JobSet, so the operator can tell (and name) the fields changed since, without
comparing objects the cluster has defaulted."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tpujob.api.spec import TpuTrainingJobSpec

FINGERPRINT_ANNOTATION = "tpujob.dev/spec-fingerprint"
# Fields the operator applies itself, at any time: not part of what the JobSet was built from.
LIVE_FIELDS = {"suspend", "stallTimeoutSeconds", "firstStepTimeoutSeconds"}
# The Kueue priority is a JobSet label the operator patches (Kueue moves the Workload in its
# queue and keeps its place in line), not a reason to build the JobSet again.
LIVE_SUBFIELDS = {"restartPolicy": {"onStall"},
                  "scheduling": {"priority", "unscheduledWarningSeconds"}}
# Fields added after jobs were running, left out while they hold their default: a JobSet built
# before they existed was built from that default, and must not read as changed.
ADDED_FIELDS: dict[str, object] = {"nodes": None, "gpuNetworks": None}
ADDED_SUBFIELDS: dict[str, dict[str, object]] = {"trainer": {"launcher": "jax",
                                                             "launcherArgs": [], "zero": None},
                                                 "restartPolicy": {"retryableExitCodes": None}}


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def build_fingerprint(spec: TpuTrainingJobSpec) -> dict[str, str]:
    """spec field (camelCase, as written in YAML) -> hash of its value, defaults included."""
    doc = spec.model_dump(by_alias=True, mode="json")
    out = {}
    for key, value in sorted(doc.items()):
        if key in LIVE_FIELDS or (key in ADDED_FIELDS and value == ADDED_FIELDS[key]):
            continue
        if isinstance(value, dict) and key in LIVE_SUBFIELDS:
            value = {k: v for k, v in value.items() if k not in LIVE_SUBFIELDS[key]}
        if isinstance(value, dict) and key in ADDED_SUBFIELDS:
            added = ADDED_SUBFIELDS[key]
            value = {k: v for k, v in value.items() if k not in added or v != added[k]}
        out[key] = _digest(value)
    return out


def encode_fingerprint(spec: TpuTrainingJobSpec) -> str:
    return json.dumps(build_fingerprint(spec), sort_keys=True, separators=(",", ":"))


def changed_fields(spec: TpuTrainingJobSpec, annotation: str | None) -> tuple[str, ...]:
    """`spec.<field>` names whose value differs from what the JobSet was built from; every field
    when the annotation is missing or unreadable (a JobSet made by an older operator)."""
    now = build_fingerprint(spec)
    try:
        then = json.loads(annotation or "")
    except ValueError:
        then = {}
    if not isinstance(then, dict) or not then:
        return ("spec",)
    keys = sorted(set(now) | set(then))
    return tuple(f"spec.{k}" for k in keys if now.get(k) != then.get(k))
