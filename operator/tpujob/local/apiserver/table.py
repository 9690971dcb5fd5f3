"""Server-side printing (pure): `meta.k8s.io/v1` Table responses, with a CRD's
additionalPrinterColumns or the default Name/Age columns."""

from __future__ import annotations

import json
from typing import Any

from . import jsonpath
from .resources import ResourceType

_NAME = {"name": "Name", "type": "string", "format": "name", "priority": 0,
         "description": "Name must be unique within a namespace. Cannot be updated."}
_AGE = {"name": "Age", "type": "string", "format": "", "priority": 0,
        "description": "CreationTimestamp is a timestamp representing the server time when this "
                       "object was created."}


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
    if rtype.kind == "Pod":
        columns.append(({"name": "Status", "type": "string", "format": "", "priority": 0,
                         "description": "The phase of the pod"},
                        lambda obj: (obj.get("status") or {}).get("phase", "Pending")))
    columns.append((_AGE, lambda obj: obj["metadata"].get("creationTimestamp")))
    return columns


def _cell(obj: dict[str, Any], column: dict[str, Any]) -> Any:
    try:
        values = jsonpath.find(obj, column["jsonPath"])
    except ValueError:
        return None
    if not values:
        return None
    value = values[0]
    if column.get("type") in ("integer", "number") and isinstance(value, (int, float)):
        return value
    if column.get("type") == "boolean" and isinstance(value, bool):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return value if isinstance(value, str) else str(value)


def _row_object(obj: dict[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": obj["metadata"]}


def build_table(rtype: ResourceType, objects: list[dict[str, Any]], resource_version: str,
                include_object: str = "Metadata") -> dict[str, Any]:
    columns = [(_NAME, lambda obj: obj["metadata"]["name"])] + _columns(rtype)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [cell(obj) for _, cell in columns]}
        row_object = _row_object(obj, include_object)
        if row_object is not None:
            row["object"] = row_object
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": [definition for definition, _ in columns], "rows": rows}
