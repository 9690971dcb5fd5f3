"""The JSONPath subset printer columns use: `.a.b`, `.a[0]`, `.a[*].b`, `.a[?(@.k=="v")].b`."""

from __future__ import annotations

import re
from typing import Any

_TOKEN = re.compile(r"""\.(?P<field>[A-Za-z0-9_\-$/]+)|\[(?P<index>-?\d+|\*)\]"""
                    r"""|\[\?\(@\.(?P<fkey>[A-Za-z0-9_.\-]+)\s*(?P<fop>==|!=)\s*"""
                    r"""(?P<fval>"[^"]*"|'[^']*'|[^)\s]+)\)\]""")


def parse(path: str) -> list[tuple[str, Any]]:
    """Steps of a path; raise ValueError when the path is outside the supported subset."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    steps, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match:
            raise ValueError(f"unsupported JSONPath {path!r} at {text[pos:]!r}")
        if match["field"] is not None:
            steps.append(("field", match["field"]))
        elif match["index"] is not None:
            steps.append(("index", match["index"]))
        else:
            value = match["fval"].strip("\"'")
            steps.append(("filter", (match["fkey"], match["fop"], value)))
        pos = match.end()
    return steps


def _get(node: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def find(obj: Any, path: str) -> list[Any]:
    """All values the path selects in `obj` (an empty list when nothing matches)."""
    nodes = [obj]
    for kind, arg in parse(path):
        selected = []
        for node in nodes:
            if kind == "field" and isinstance(node, dict) and arg in node:
                selected.append(node[arg])
            elif kind == "index" and isinstance(node, list):
                if arg == "*":
                    selected.extend(node)
                elif -len(node) <= int(arg) < len(node):
                    selected.append(node[int(arg)])
            elif kind == "filter" and isinstance(node, list):
                key, op, value = arg
                for item in node:
                    actual = _get(item, key)
                    text = str(actual).lower() if isinstance(actual, bool) else str(actual)
                    if actual is not None and (text == value) == (op == "=="):
                        selected.append(item)
        nodes = selected
    return nodes
