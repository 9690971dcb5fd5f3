"""Patch semantics (pure): JSON merge patch, JSON patch, server-side apply (strategic merge
patch: strategic.py)."""

from __future__ import annotations

import copy
from typing import Any


class PatchError(Exception):
    """A patch that cannot be applied; `code` is the HTTP status kube-apiserver answers with."""

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.code = code


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}: must start with '/'")
    return [_unescape(t) for t in path[1:].split("/")]


def _index(container: list, token: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f"invalid array index {token!r}")
    index = int(token)
    if index > len(container) or (index == len(container) and not allow_end):
        raise PatchError(f"array index {index} out of bounds")
    return index


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, allow_end=False)]
        else:
            raise PatchError(f"doc is missing path: {path!r}")
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, allow_end=False)]
    raise PatchError(f"doc is missing path: {path!r}")


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, allow_end=False))
    raise PatchError(f"unable to remove nonexistent key: {last}: missing value")


def _add(doc: Any, path: str, value: Any, replace: bool = False) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError(f"doc is missing key: {path!r}: missing value")
        parent[last] = value
    elif isinstance(parent, list):
        if replace:
            parent[_index(parent, last, allow_end=False)] = value
        else:
            parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise PatchError(f"doc is missing path: {path!r}")
    return doc


def _json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values (RFC 6902 `test`): numbers by value, but `true` is not `1`."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def apply_json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902 on a copy of `doc`; a failing `test` or a missing path raises PatchError (422)."""
    if not isinstance(operations, list):
        raise PatchError("json patch must be a list of operations", code=400)
    doc = copy.deepcopy(doc)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid json patch operation: {op!r}", code=400)
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"missing value for {kind} operation on {path!r}", code=400)
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            doc = _add(doc, path, copy.deepcopy(op["value"]), replace=True)
        elif kind == "move":
            value = _remove(doc, op.get("from", ""))
            doc = _add(doc, path, value)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op.get("from", ""))))
        elif kind == "test":
            if not _json_equal(_get(doc, path), op["value"]):
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"unexpected json patch operation {kind!r}", code=400)
    return doc


def _leaf_paths(value: Any, prefix: tuple = ()) -> set[tuple]:
    if isinstance(value, dict) and value:
        paths: set[tuple] = set()
        for key, child in value.items():
            paths |= _leaf_paths(child, prefix + (key,))
        return paths
    return {prefix}


def _delete_path(obj: dict, path: tuple) -> None:
    node = obj
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            return
    if isinstance(node, dict):
        node.pop(path[-1], None)


def _deep_merge(target: Any, applied: Any) -> Any:
    if not (isinstance(target, dict) and isinstance(applied, dict)):
        return copy.deepcopy(applied)
    result = copy.deepcopy(target)
    for key, value in applied.items():
        result[key] = _deep_merge(result.get(key), value)
    return result


_FINALIZERS = ("metadata", "finalizers")
_IDENTITY = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}


def apply_server_side(current: dict, applied: dict, previous: dict | None,
                      others: list[dict] = ()) -> dict:
    """Server-side apply for one field manager: merge the applied configuration into the live
    object and drop the fields this manager applied before but no longer applies. Lists are
    atomic but for `metadata.finalizers`, a set (`+listType=set`): each finalizer is owned on
    its own, and one this manager stops applying stays while another manager (`others`: their
    applied configurations) applies it."""
    result = _deep_merge(current, applied)
    if previous:
        for path in _leaf_paths(previous) - _leaf_paths(applied):
            if path and path[0] != "metadata" or path[:2] in (("metadata", "labels"),
                                                             ("metadata", "annotations")):
                if not any(path[:i] in _leaf_paths(applied) for i in range(1, len(path))):
                    _delete_path(result, path)
    mine = _value_at(applied, _FINALIZERS)
    before = _value_at(previous or {}, _FINALIZERS)
    if isinstance(mine, list) or isinstance(before, list):
        mine, before = mine or [], before or []
        theirs = {f for other in others for f in _value_at(other, _FINALIZERS) or []}
        kept = [f for f in _value_at(current, _FINALIZERS) or []
                if f in mine or f not in before or f in theirs]
        result.setdefault("metadata", {})["finalizers"] = kept + [f for f in mine
                                                                  if f not in kept]
    return result


def apply_conflicts(current: dict, applied: dict, others: dict[str, dict]
                    ) -> list[tuple[str, str]]:
    """(manager, field path) of each field another apply manager applied (`others`: manager ->
    its applied configuration) that `applied` sets to a value the object does not have:
    kube-apiserver refuses those with 409 unless the apply is forced."""
    mine = {p for p in _leaf_paths(applied) if p not in _IDENTITY and p != _FINALIZERS}
    found = []
    for manager in sorted(others):
        for path in sorted(mine & _leaf_paths(others[manager])):
            if _value_at(applied, path) != _value_at(current, path):
                found.append((manager, "." + ".".join(path)))
    return found


def conflict_message(conflicts: list[tuple[str, str]]) -> str:
    """fieldmanager's getConflictMessage."""
    if len(conflicts) == 1:
        manager, path = conflicts[0]
        return f'Apply failed with 1 conflict: conflict with "{manager}": {path}'
    lines = []
    for manager in sorted({m for m, _ in conflicts}):
        lines.append(f'conflicts with "{manager}":')
        lines += [f"- {p}" for m, p in conflicts if m == manager]
    return f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)


def forget_fields(applied: dict, paths: list[str]) -> dict:
    """`applied` without the fields at `paths` (".a.b"): what a manager still owns once a
    forced apply took those from it."""
    result = copy.deepcopy(applied)
    for path in paths:
        _delete_path(result, tuple(path[1:].split(".")))
    return result


def _value_at(value: Any, path: tuple) -> Any:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def fields_v1(value: Any) -> dict:
    """The `fieldsV1` set of a managedFields entry for an applied configuration."""
    if not isinstance(value, dict):
        return {}
    return {f"f:{key}": fields_v1(child) for key, child in value.items()
            if key not in ("apiVersion", "kind")}
