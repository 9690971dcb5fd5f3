"""Strategic merge patch (pure), as kube-apiserver applies it to the built-in kinds this server
serves: each list merges or is replaced as its Go field declares (`patchStrategy`,
`patchMergeKey` in k8s.io/api), and the directives `$patch` (replace, delete), `$retainKeys`,
`$deleteFromPrimitiveList/<list>` and `$setElementOrder/<list>` are carried out; the merged
list's order follows k8s.io/apimachinery/pkg/util/strategicpatch/patch.go (normalizeElementOrder:
`$setElementOrder`, then the patch's order, then the live object's)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .patch import PatchError

RETAIN_KEYS = "$retainKeys"
DELETE_FROM = "$deleteFromPrimitiveList/"
SET_ORDER = "$setElementOrder/"


@dataclass(frozen=True)
class Field:
    """A field's declared patch strategy: `merge` (a list merged: by `key` for objects, as a
    set for scalars), `retain_keys` (`$retainKeys` honoured, as for a pod's volumes), and the
    declarations of the fields inside it (or inside its items)."""

    merge: bool = False
    key: str = ""
    fields: Mapping[str, Field] = field(default_factory=dict)


def _merge(key: str = "", fields: Mapping[str, Field] | None = None) -> Field:
    return Field(merge=True, key=key, fields=fields or {})


# k8s.io/api v0.35: the fields with a patchStrategy of the kinds served here. A field not listed
# is a map merged key by key, or a list replaced whole.
OBJECT_META = {"metadata": Field(fields={"finalizers": _merge(),
                                         "ownerReferences": _merge("uid")})}
CONTAINER = {"ports": _merge("containerPort"), "env": _merge("name"),
             "volumeMounts": _merge("mountPath"), "volumeDevices": _merge("devicePath")}
POD_SPEC = {"volumes": _merge("name"), "containers": _merge("name", CONTAINER),
            "initContainers": _merge("name", CONTAINER),
            "ephemeralContainers": _merge("name", CONTAINER),
            "imagePullSecrets": _merge("name"), "hostAliases": _merge("ip"),
            "topologySpreadConstraints": _merge("topologyKey"),
            "resourceClaims": _merge("name"), "schedulingGates": _merge("name")}
POD_STATUS = {"conditions": _merge("type"), "podIPs": _merge("ip"), "hostIPs": _merge("ip"),
              "resourceClaimStatuses": _merge("name")}
CONDITIONS = {"conditions": _merge("type")}
KINDS: dict[tuple[str, str], Mapping[str, Field]] = {
    ("", "Pod"): {**OBJECT_META, "spec": Field(fields=POD_SPEC),
                  "status": Field(fields=POD_STATUS)},
    ("batch", "Job"): {**OBJECT_META, "spec": Field(fields={"template": Field(fields={
        **OBJECT_META, "spec": Field(fields=POD_SPEC)})}),
        "status": Field(fields=CONDITIONS)},
    ("", "Service"): {**OBJECT_META, "spec": Field(fields={"ports": _merge("port")}),
                      "status": Field(fields=CONDITIONS)},
    ("", "ServiceAccount"): {**OBJECT_META, "secrets": _merge("name")},
    ("", "Namespace"): {**OBJECT_META, "status": Field(fields=CONDITIONS)},
}


def fields_of(group: str, kind: str) -> Mapping[str, Field]:
    """The declared strategies of a built-in kind (metadata's alone for the others)."""
    return KINDS.get((group, kind), OBJECT_META)


def apply_strategic_merge_patch(target: Any, patch: Any,
                                fields: Mapping[str, Field] = OBJECT_META) -> Any:
    """`patch` applied to a copy of `target` (k8s.io/apimachinery strategicpatch, as the server
    applies a client's patch); a malformed directive raises PatchError."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    return _merge_map(copy.deepcopy(target) if isinstance(target, dict) else {},
                      copy.deepcopy(patch), fields)


def _merge_map(original: dict, patch: dict, fields: Mapping[str, Field]) -> dict:
    if "$patch" in patch:
        directive = patch["$patch"]
        if directive == "replace":
            return _strip({k: v for k, v in patch.items() if k != "$patch"})
        if directive == "delete":
            return {}
        # mergepatch.ErrBadPatchType: not an API error, so kube-apiserver answers 500.
        raise PatchError(f"unknown patch type: {directive} in map: {_go(patch)}", code=500)
    if RETAIN_KEYS in patch:
        retained = patch.pop(RETAIN_KEYS)
        if not isinstance(retained, list) or \
                any(not k.startswith("$") and k not in retained for k in patch):
            raise PatchError("invalid patch format of retainKeys", code=400)
        for key in [k for k in original if k not in retained]:
            del original[key]
    for order_key in [k for k in patch if k.startswith(SET_ORDER)]:
        name = order_key[len(SET_ORDER):]
        order = patch.pop(order_key)
        meta = fields.get(name, Field())
        live = original.get(name) if isinstance(original.get(name), list) else []
        if name in patch and isinstance(patch[name], list):
            merged = _merge_list(live, patch.pop(name), meta, order_by=order)
        else:
            merged = _ordered(live, [], order, live, meta.key)
        original[name] = merged
    for key, value in patch.items():
        deleting = key.startswith(DELETE_FROM)
        name = key[len(DELETE_FROM):] if deleting else key
        meta = fields.get(name, Field())
        if value is None:
            original.pop(name, None)
            continue
        if name not in original:
            if not deleting:
                original[name] = _strip(value)
            continue
        live = original[name]
        if deleting:
            if isinstance(live, list) and isinstance(value, list):
                original[name] = [x for x in live if x not in value] if meta.merge else value
            continue
        if isinstance(live, dict) and isinstance(value, dict):
            original[name] = _merge_map(live, value, meta.fields)
        elif isinstance(live, list) and isinstance(value, list):
            original[name] = _merge_list(live, value, meta) if meta.merge else _strip(value)
        else:
            original[name] = _strip(value)
    return original


def _merge_list(live: list, patch: list, meta: Field, order_by: list | None = None) -> list:
    """A list whose field merges: scalars as a set, objects by their merge key; then ordered
    as strategicpatch orders it."""
    if not any(isinstance(x, dict) for x in live + patch):
        merged = _dedupe(live + patch)
        return _ordered(merged, patch, order_by if order_by is not None else patch, live, "")
    key = meta.key
    if not key:
        raise PatchError("cannot merge lists without merge key", code=400)
    plain = []
    for item in patch:
        directive = item.get("$patch") if isinstance(item, dict) else None
        if directive is None:
            plain.append(item)
        elif directive == "delete":
            if key not in item:
                raise PatchError(f"map: {_go(item)} does not contain declared merge key: "
                                 f"{key}", code=400)
            live = [x for x in live if not (isinstance(x, dict) and x.get(key) == item[key])]
        elif directive == "replace":
            return [_strip(x) for x in patch if not (isinstance(x, dict) and "$patch" in x)]
        else:
            raise PatchError(f"unknown patch type: {directive} in map: {_go(item)}", code=500)
    merged = list(live)
    for item in plain:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {_go(item)} does not contain declared merge key: {key}",
                             code=400)
        at = next((i for i, x in enumerate(merged)
                   if isinstance(x, dict) and x.get(key) == item[key]), None)
        if at is None:
            merged.append(_merge_map({}, item, meta.fields))
        else:
            merged[at] = _merge_map(merged[at], item, meta.fields)
    return _ordered(merged, plain, order_by if order_by is not None else plain, live, key)


def _ordered(merged: list, patch: list, patch_order: list, live: list, key: str) -> list:
    """normalizeElementOrder: the items the patch (or `$setElementOrder`) names, in its order,
    interleaved with the live-only items in their live order (mergeSortedSlice)."""
    def ident(x: Any) -> Any:
        return _hashable(x.get(key) if key and isinstance(x, dict) else x)

    named = [ident(x) for x in patch_order]
    from_patch = sorted((x for x in merged if ident(x) in named),
                        key=lambda x: named.index(ident(x)))
    server_only = [x for x in merged if ident(x) not in named]
    live_ids = [ident(x) for x in live]
    out, i, j = [], 0, 0
    while i < len(server_only) or j < len(from_patch):
        if i >= len(server_only):
            out.append(from_patch[j])
            j += 1
        elif j >= len(from_patch):
            out.append(server_only[i])
            i += 1
        else:
            left, right = ident(server_only[i]), ident(from_patch[j])
            if left in live_ids and right in live_ids and \
                    live_ids.index(left) < live_ids.index(right):
                out.append(server_only[i])
                i += 1
            else:
                out.append(from_patch[j])
                j += 1
    return out


def _strip(value: Any) -> Any:
    """A patch value taken as it is, less the directives inside it."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items()
                if not (k == "$patch" or k == RETAIN_KEYS or k.startswith(SET_ORDER)
                        or k.startswith(DELETE_FROM))}
    if isinstance(value, list):
        return [_strip(v) for v in value
                if not (isinstance(v, dict) and v.get("$patch") == "delete")]
    return value


def _dedupe(items: list) -> list:
    seen, out = set(), []
    for x in items:
        if _hashable(x) not in seen:
            seen.add(_hashable(x))
            out.append(x)
    return out


def _hashable(value: Any) -> Any:
    return repr(value) if isinstance(value, (dict, list)) else value


def _go(value: Any) -> str:
    """A value as Go's %v prints it (maps with sorted keys), for error messages."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
