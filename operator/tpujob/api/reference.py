"""The field reference of docs/api.md, generated from the CRD schema so that the docs list
exactly the fields, types and defaults the cluster enforces. Only the region between the two
markers is generated; the prose around it is written by hand."""

from __future__ import annotations

import json
from typing import Any

BEGIN = "<!-- BEGIN GENERATED FIELD REFERENCE: python -m tpujob.api.crd -->"
END = "<!-- END GENERATED FIELD REFERENCE -->"


def _type_label(node: dict[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "quantity"
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return "object (free-form)"
    kind = node.get("type", "")
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    if kind == "array":
        return f"list of {_type_label(node['items'])}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {_type_label(node['additionalProperties'])}"
    if node.get("format") == "date-time":
        return "timestamp"
    return kind


def _cell(text: str) -> str:
    # Markdown would take `<generation>` for an HTML tag and `|` for a column break.
    return (text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\n", " "))


def build_field_rows(node: dict[str, Any], path: str) -> list[tuple[str, str, str, str]]:
    """(field, type, default, description) for every field under `node`, depth first."""
    rows = []
    required = set(node.get("required", []))
    for name, child in node.get("properties", {}).items():
        field = f"{path}.{name}"
        default = "required" if name in required else (
            f"`{json.dumps(child['default'])}`" if "default" in child else "")
        rows.append((field, _type_label(child), default, child.get("description", "")))
        rows += build_field_rows(child, field)
        items = child.get("items")
        if isinstance(items, dict) and items.get("properties"):
            rows += build_field_rows(items, f"{field}[]")
    return rows


def build_reference(root_schema: dict[str, Any]) -> str:
    """Markdown tables of the spec and status fields."""
    parts = []
    for section in ("spec", "status"):
        parts.append(f"### {section}\n")
        parts.append("| Field | Type | Default | Description |")
        parts.append("|---|---|---|---|")
        for field, kind, default, text in build_field_rows(
                root_schema["properties"][section], section):
            parts.append(f"| `{field}` | {kind} | {default} | {_cell(text)} |")
        parts.append("")
    return "\n".join(parts)


def replace_region(document: str, generated: str) -> str:
    """`document` with the text between the markers replaced by `generated`."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the document lacks the markers {BEGIN!r} ... {END!r}")
    return document[:start + len(BEGIN)] + "\n\n" + generated + "\n" + document[end:]
