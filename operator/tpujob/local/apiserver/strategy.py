"""What a write does to an object (pure): the metadata the server owns, which parts a write to
the main resource or to `/status` may change, when `generation` bumps, and the schema pipeline
(pruning, defaulting, validation) for custom resources."""

from __future__ import annotations

import copy
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any

from . import errors, schema
from .errors import ApiError, FieldError
from .resources import ResourceType, name_errors

_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"


@dataclass
class WriteResult:
    """The object to store, and the unknown fields dropped from the request (for warnings)."""

    obj: dict[str, Any]
    unknown_fields: list[str] = field(default_factory=list)


def _spec_part(rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    # The part of an object whose change bumps metadata.generation.
    excluded = {"metadata", "apiVersion", "kind"}
    if rtype.status_subresource or not rtype.is_custom:
        excluded.add("status")
    return {k: v for k, v in obj.items() if k not in excluded}


def generate_name(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_SUFFIX_CHARS) for _ in range(5))


def _check_identity(rtype: ResourceType, obj: dict[str, Any], namespace: str | None,
                    name: str | None) -> None:
    if not isinstance(obj, dict):
        raise errors.bad_request("the request body must be a JSON object")
    if obj.get("kind") not in (None, rtype.kind):
        raise errors.bad_request(
            f"the kind in the data ({obj.get('kind')}) does not match the expected kind "
            f"({rtype.kind}) for {rtype.plural}")
    if obj.get("apiVersion") not in (None, rtype.api_version):
        raise errors.bad_request(
            f"the API version in the data ({obj.get('apiVersion')}) does not match the expected "
            f"API version ({rtype.api_version})")
    meta = obj.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise errors.bad_request("metadata must be an object")
    meta = meta or {}
    _check_metadata_types(rtype, meta)
    if rtype.namespaced and meta.get("namespace") not in (None, "", namespace):
        raise errors.bad_request("the namespace of the provided object does not match the "
                                 "namespace sent on the request")
    if name is not None and meta.get("name") not in (None, "", name):
        raise errors.bad_request(f"the name of the object ({meta.get('name')}) does not match "
                                 f"the name on the URL ({name})")


# ObjectMeta fields and the JSON type kube-apiserver decodes each into; a value of another type
# fails decoding (400) before anything else looks at the object.
_META_TYPES: dict[str, tuple[type, str]] = {
    "name": (str, "string"), "generateName": (str, "string"), "namespace": (str, "string"),
    "uid": (str, "string"), "resourceVersion": (str, "string"),
    "creationTimestamp": (str, "string"), "deletionTimestamp": (str, "string"),
    "generation": (int, "integer"), "deletionGracePeriodSeconds": (int, "integer"),
    "labels": (dict, "object"), "annotations": (dict, "object"),
    "finalizers": (list, "array"), "ownerReferences": (list, "array"),
    "managedFields": (list, "array"),
}
_OBJECT_LISTS = ("ownerReferences", "managedFields")


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    return {str: "string", int: "number", float: "number", dict: "object", list: "array",
            type(None): "null"}.get(type(value), type(value).__name__)


def _check_metadata_types(rtype: ResourceType, meta: dict[str, Any]) -> None:
    for key, (expected, json_name) in _META_TYPES.items():
        value = meta.get(key)
        if value is None:
            continue
        wrong = not isinstance(value, expected) or (expected is int and isinstance(value, bool))
        if not wrong and key in _OBJECT_LISTS:
            wrong = not all(isinstance(item, dict) for item in value)
            json_name = "array of objects"
        if wrong:
            raise errors.bad_request(
                f"{rtype.kind} in version \"{rtype.version}\" cannot be handled as a "
                f"{rtype.kind}: metadata.{key}: expected {json_name}, got {_json_type(value)}")


# The top-level fields of each built-in kind (k8s.io/api v0.35 types); the decoder drops any
# other, and names it under fieldValidation Warn and Strict. Fields below these are not checked.
TOP_FIELDS: dict[tuple[str, str], frozenset[str]] = {
    ("", "Namespace"): frozenset({"spec", "status"}),
    ("", "Pod"): frozenset({"spec", "status"}),
    ("", "Event"): frozenset({
        "involvedObject", "reason", "message", "source", "firstTimestamp", "lastTimestamp",
        "count", "type", "eventTime", "series", "action", "related", "reportingComponent",
        "reportingInstance"}),
    ("", "ConfigMap"): frozenset({"data", "binaryData", "immutable"}),
    ("", "Secret"): frozenset({"data", "stringData", "type", "immutable"}),
    ("", "Service"): frozenset({"spec", "status"}),
    ("", "ServiceAccount"): frozenset({"secrets", "imagePullSecrets",
                                       "automountServiceAccountToken"}),
    ("batch", "Job"): frozenset({"spec", "status"}),
    ("events.k8s.io", "Event"): frozenset({
        "eventTime", "series", "reportingController", "reportingInstance", "action", "reason",
        "regarding", "related", "note", "type", "deprecatedSource", "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp", "deprecatedCount"}),
    ("coordination.k8s.io", "Lease"): frozenset({"spec"}),
}
# Maps and lists kube-apiserver leaves out when empty (`omitempty`), for every kind, and for the
# built-in kinds' own top-level maps.
_OMITTED_WHEN_EMPTY = ("labels", "annotations", "finalizers", "ownerReferences")
_BUILTIN_OMITTED_WHEN_EMPTY = ("data", "binaryData", "stringData")


def builtin_schema(rtype: ResourceType) -> dict[str, Any] | None:
    """A schema of a built-in kind's top-level fields alone (their contents are kept), for
    pruning unknown fields; None for a kind without a list."""
    fields = TOP_FIELDS.get((rtype.group, rtype.kind))
    if rtype.is_custom or fields is None:
        return None
    return {"type": "object", "properties": {
        f: {"x-kubernetes-preserve-unknown-fields": True} for f in fields}}


def omit_empty(rtype: ResourceType, obj: dict[str, Any]) -> None:
    """Leave out the empty maps and lists Go's encoder leaves out."""
    meta = obj.get("metadata") or {}
    for key in _OMITTED_WHEN_EMPTY:
        if meta.get(key) in ({}, []):
            del meta[key]
    if not rtype.is_custom:
        for key in _BUILTIN_OMITTED_WHEN_EMPTY:
            if obj.get(key) in ({}, []):
                del obj[key]


def _process_schema(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None,
                    name: str) -> list[str]:
    omit_empty(rtype, obj)
    if rtype.schema is None:
        top = builtin_schema(rtype)
        return schema.prune(obj, top) if top is not None else []
    unknown = schema.prune(obj, rtype.schema)
    schema.default(obj, rtype.schema)
    old_value = old if old is not None else schema._MISSING
    found = schema.validate({k: v for k, v in obj.items() if k != "metadata"}, rtype.schema,
                            old=old_value)
    # apiextensions-apiserver runs the CEL rules after the schema, and not at all when the
    # schema found a blocking error (hasBlockingErr: Required, NotSupported, TypeInvalid).
    by_schema = [e for e in found if not e.from_rule]
    if any(e.kind in ("Required", "NotSupported", "TypeInvalid") for e in by_schema):
        found = by_schema + [FieldError("Invalid", "<nil>", None, "some validation rules were "
                                        "not checked because the object was invalid; correct "
                                        "the existing errors to complete validation")] \
            if len(found) > len(by_schema) or _has_rules(rtype.schema) else by_schema
    else:
        found = by_schema + [e for e in found if e.from_rule]
    if found:
        raise errors.invalid(rtype.kind, rtype.group, name, found)
    return unknown


def _has_rules(node: Any) -> bool:
    if isinstance(node, dict):
        return "x-kubernetes-validations" in node or any(_has_rules(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_rules(v) for v in node)
    return False


def _check_metadata(rtype: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    meta = obj["metadata"]
    found = []
    if not meta.get("name"):
        found.append(FieldError("Required", "metadata.name", detail="name or generateName is "
                                "required"))
    else:
        found += [FieldError("Invalid", "metadata.name", meta["name"], msg)
                  for msg in name_errors(rtype, meta["name"])]
    for key in ("labels", "annotations"):
        value = meta.get(key)
        if value is not None and (not isinstance(value, dict) or
                                  not all(isinstance(v, str) for v in value.values())):
            found.append(FieldError("Invalid", f"metadata.{key}", value,
                                    "must be a map of string keys to string values"))
    for index, ref in enumerate(meta.get("ownerReferences") or []):
        for key in ("apiVersion", "kind", "name", "uid"):
            if not isinstance(ref.get(key), str) or not ref.get(key):
                found.append(FieldError("Invalid", f"metadata.ownerReferences[{index}].{key}",
                                        ref.get(key, ""), f"{key} must not be empty"))
        for key in ("controller", "blockOwnerDeletion"):
            if ref.get(key) is not None and not isinstance(ref.get(key), bool):
                found.append(FieldError("Invalid", f"metadata.ownerReferences[{index}].{key}",
                                        ref.get(key), "must be a boolean"))
    finalizers = meta.get("finalizers") or []
    if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
        found.append(FieldError("Invalid", "metadata.finalizers", finalizers,
                                "must be a list of strings"))
    elif old is not None and old["metadata"].get("deletionTimestamp"):
        before = old["metadata"].get("finalizers") or []
        added = [f for f in finalizers if f not in before]
        if added:  # Go's %#v of a []string
            found.append(FieldError("Forbidden", "metadata.finalizers",
                                    detail="no new finalizers can be added if the object is "
                                    "being deleted, found new finalizers []string{" +
                                    ", ".join(f'"{f}"' for f in added) + "}"))
    if found:
        raise errors.invalid(rtype.kind, rtype.group, meta.get("name") or "", found)


def prepare_create(rtype: ResourceType, body: Any, namespace: str | None, now: str,
                   resource_version: int) -> WriteResult:
    """The object a create stores: server-owned metadata set, schema applied, validated."""
    _check_identity(rtype, body, namespace, None)
    obj = copy.deepcopy(body)
    obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
    meta = obj.setdefault("metadata", {})
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = generate_name(meta["generateName"])
    if rtype.namespaced:
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
        meta.pop(key, None)
    if rtype.status_subresource:  # create cannot set status
        obj.pop("status", None)
        if rtype.kind == "Pod" and not rtype.group:
            obj["status"] = {"phase": "Pending"}
    unknown = _process_schema(rtype, obj, None, meta.get("name") or "")
    _check_metadata(rtype, obj, None)
    meta["uid"] = _uid()
    meta["creationTimestamp"] = now
    meta["resourceVersion"] = str(resource_version)
    if rtype.has_spec or rtype.is_custom:
        meta["generation"] = 1
    else:
        meta.pop("generation", None)
    return WriteResult(obj, unknown)


def _uid() -> str:
    return str(uuid.uuid4())


def prepare_update(rtype: ResourceType, body: Any, old: dict[str, Any], subresource: str | None,
                   resource_version: int, require_version: bool = True) -> WriteResult:
    """The object a PUT (or a patch, after patching) stores in place of `old`."""
    name, namespace = old["metadata"]["name"], old["metadata"].get("namespace")
    _check_identity(rtype, body, namespace, name)
    sent_version = (body.get("metadata") or {}).get("resourceVersion")
    if sent_version in (None, ""):
        if require_version and rtype.is_custom:
            raise errors.invalid(rtype.kind, rtype.group, name, [FieldError(
                "Invalid", "metadata.resourceVersion", 0, "must be specified for an update")])
    elif str(sent_version) != old["metadata"]["resourceVersion"]:
        raise errors.conflict(rtype.plural, rtype.group, name)
    if subresource == "status":
        obj = copy.deepcopy(old)
        if "status" in body:
            obj["status"] = copy.deepcopy(body["status"])
        else:
            obj.pop("status", None)
    else:
        obj = copy.deepcopy(body)
        obj.setdefault("metadata", {})
        if rtype.status_subresource:
            if "status" in old:
                obj["status"] = copy.deepcopy(old["status"])
            else:
                obj.pop("status", None)
    obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
    meta = obj["metadata"]
    for key in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                "deletionGracePeriodSeconds", "generation"):
        if key in old["metadata"]:
            meta[key] = old["metadata"][key]
        else:
            meta.pop(key, None)
    if "managedFields" not in meta and "managedFields" in old["metadata"]:
        meta["managedFields"] = old["metadata"]["managedFields"]
    unknown = _process_schema(rtype, obj, old, name)
    _check_metadata(rtype, obj, old)
    if "generation" in meta and _spec_part(rtype, obj) != _spec_part(rtype, old):
        meta["generation"] = int(meta["generation"]) + 1
    meta["resourceVersion"] = str(resource_version)
    return WriteResult(obj, unknown)


class StrictDecodingError(ApiError):
    """Unknown fields under fieldValidation=Strict (400); `unknown` names them."""

    def __init__(self, message: str, unknown: list[str]) -> None:
        super().__init__(400, "BadRequest", message)
        self.unknown = unknown


def strict_error(rtype: ResourceType, unknown: list[str]) -> ApiError:
    fields = ", ".join(f'unknown field "{f}"' for f in unknown)
    return StrictDecodingError(f"{rtype.kind} in version \"{rtype.version}\" cannot be handled "
                               f"as a {rtype.kind}: strict decoding error: {fields}", unknown)
