"""Server-side printing (pure): `meta.k8s.io/v1` Table responses, with a CRD's
additionalPrinterColumns or the default Name/Age columns."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from . import jsonpath, printers
from .resources import ResourceType

# The descriptions are ObjectMeta's field docs, as kube-apiserver's printers take them
# (metav1.ObjectMeta{}.SwaggerDoc()).
_NAME = {"name": "Name", "type": "string", "format": "name", "priority": 0,
         "description": "Name must be unique within a namespace. Is required when creating "
         "resources, although some resources may allow a client to request the generation of "
         "an appropriate name automatically. Name is primarily intended for creation "
         "idempotence and configuration definition. Cannot be updated. More info: "
         "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"}
# A CRD's default Age column (apiextensions-apiserver's tableconvertor) is a date; the built-in
# printers' is a string (pkg/printers/internalversion/printers.go).
_AGE = {"name": "Age", "type": "date", "format": "", "priority": 0,
        "description": "CreationTimestamp is a timestamp representing the server time when this "
                       "object was created."}
_BUILTIN_AGE = {**_AGE, "type": "string", "description": (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
    "#metadata")}


def wants_table(accept: str) -> bool:
    """Whether the Accept header asks for a Table (`application/json;as=Table;g=meta.k8s.io`)."""
    for option in accept.split(","):
        params = {p.split("=", 1)[0].strip(): p.split("=", 1)[1].strip()
                  for p in option.split(";")[1:] if "=" in p}
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            return True
    return False


def _columns(rtype: ResourceType) -> list[tuple[dict[str, Any], Any]]:
    """(definition, cell function) for each column."""
    if rtype.printer_columns:
        columns = []
        for col in rtype.printer_columns:
            definition = {"name": col["name"], "type": col.get("type", "string"),
                          "format": col.get("format", ""),
                          "description": col.get("description", ""),
                          "priority": col.get("priority", 0)}
            columns.append((definition, lambda obj, c=col: _cell(obj, c)))
        return columns
    columns = []
    if rtype.kind == "Namespace":
        columns.append(({"name": "Status", "type": "string", "format": "", "priority": 0,
                         "description": "The status of the namespace"},
                        lambda obj: (obj.get("status") or {}).get("phase")))
    age_column = (_AGE if rtype.is_custom else _BUILTIN_AGE,
                  lambda obj: age(obj["metadata"].get("creationTimestamp")))
    if not rtype.group and rtype.kind == "ConfigMap":
        columns.append(printers.CONFIGMAP_DATA)
    if not rtype.group and rtype.kind == "Pod":
        return printers.pod_columns(age_column, human_duration)
    if rtype.group == "batch" and rtype.kind == "Job":
        return printers.job_columns(age_column, human_duration)
    columns.append(age_column)
    return columns


def _all_columns(rtype: ResourceType) -> list[tuple[dict[str, Any], Any]]:
    if not rtype.group and rtype.kind == "Event":  # NAME is a wide column, last
        return printers.event_columns(human_duration)
    return [(_NAME, lambda obj: obj["metadata"]["name"])] + _columns(rtype)


def human_duration(seconds: float) -> str:
    """A duration as kubectl shows ages: `45s`, `3m12s`, `5h20m`, `3d4h`, `2y15d`."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return f"{minutes}m" if whole % 60 == 0 else f"{minutes}m{whole % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def age(timestamp: Any, now: datetime | None = None) -> str | None:
    """The age of an RFC 3339 timestamp, `<invalid>` when it does not parse."""
    if timestamp is None:
        return None
    try:
        when = datetime.strptime(str(timestamp), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "<invalid>"
    return human_duration(((now or datetime.now(UTC)) - when).total_seconds())


def _cell(obj: dict[str, Any], column: dict[str, Any]) -> Any:
    # Cell values follow kube-apiserver's CRD table convertor: strings printed, numbers and
    # booleans typed, dates as ages, anything of the wrong type empty.
    try:
        values = jsonpath.find(obj, column["jsonPath"])
    except ValueError:
        return None
    if not values or values[0] is None:
        return None
    value, kind = values[0], column.get("type", "string")
    if kind == "string":
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (dict, list)):
            return json.dumps(value, separators=(",", ":"))
        return str(value)
    if kind == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        return age(value)
    return None


def _row_object(obj: dict[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": obj["metadata"]}


def build_table(rtype: ResourceType, objects: list[dict[str, Any]], resource_version: str,
                include_object: str = "Metadata", headers: bool = True) -> dict[str, Any]:
    """A Table of `objects`; without `headers` the column definitions are left out (as in the
    events of a watch after the first)."""
    columns = _all_columns(rtype)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [cell(obj) for _, cell in columns]}
        row["object"] = _row_object(obj, include_object)  # null for includeObject=None
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": [definition for definition, _ in columns] if headers else [],
            "rows": rows}
