"""Structural-schema processing of custom resources (pure): pruning of unknown fields,
defaulting, and validation (OpenAPI v3 keywords, list types, CEL rules), as kube-apiserver
applies a CRD's `openAPIV3Schema`."""

from __future__ import annotations

import copy
import re
from typing import Any

from . import cel
from .errors import OMITTED, FieldError

_MISSING = object()

# Fields of ObjectMeta; anything else under a root or embedded `metadata` is dropped on decode.
OBJECT_META_FIELDS = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "ownerReferences", "finalizers", "managedFields"})


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _is_object_schema(schema: dict) -> bool:
    return schema.get("type") == "object" or "properties" in schema


def prune(value: Any, schema: dict, path: str = "", root: bool = True) -> list[str]:
    """Remove fields the schema does not know, in place; return the pruned field paths."""
    pruned: list[str] = []
    if isinstance(value, dict):
        if root or schema.get("x-kubernetes-embedded-resource"):
            _prune_meta(value, path, pruned)
        if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema \
                and "additionalProperties" not in schema:
            return pruned
        props = schema.get("properties")
        additional = schema.get("additionalProperties")
        for key in list(value):
            if (root or schema.get("x-kubernetes-embedded-resource")) and key in (
                    "apiVersion", "kind", "metadata"):
                continue
            if props is not None and key in props:
                pruned += prune(value[key], props[key], _join(path, key), root=False)
            elif isinstance(additional, dict):
                pruned += prune(value[key], additional, _join(path, key), root=False)
            elif additional is True or schema.get("x-kubernetes-preserve-unknown-fields"):
                continue
            else:
                del value[key]
                pruned.append(_join(path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            pruned += prune(item, schema["items"], f"{path}[{index}]", root=False)
    return pruned


def _prune_meta(value: dict, path: str, pruned: list[str]) -> None:
    meta = value.get("metadata")
    if isinstance(meta, dict):
        for key in list(meta):
            if key not in OBJECT_META_FIELDS:
                del meta[key]
                pruned.append(_join(_join(path, "metadata"), key))


def default(value: Any, schema: dict) -> Any:
    """Fill in `default`s of absent properties (recursively, also inside defaults), in place."""
    if isinstance(value, dict):
        for key, prop in (schema.get("properties") or {}).items():
            if (key not in value or (value[key] is None and not prop.get("nullable"))) \
                    and "default" in prop:
                value[key] = copy.deepcopy(prop["default"])
            if key in value:
                default(value[key], prop)
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            known = schema.get("properties") or {}
            for key in value:
                if key not in known:
                    default(value[key], additional)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            default(item, schema["items"])
    return value


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _has_type(value: Any, expected: str) -> bool:
    actual = _type_name(value)
    if expected == "number":
        return actual in ("integer", "number")
    if expected == "integer" and isinstance(value, float):
        return value.is_integer()
    return actual == expected


def validate(value: Any, schema: dict, path: str = "", old: Any = _MISSING,
             root: bool = True) -> list[FieldError]:
    """All violations of `schema` by `value`; `old` (the stored value) feeds CEL `oldSelf`."""
    errors: list[FieldError] = []
    if value is None:
        if not schema.get("nullable") and path:
            errors.append(FieldError("Invalid", path, None,
                                     f"{path} in body must be of type {schema.get('type')}: "
                                     '"null"') if schema.get("type") else FieldError(
                "Required", path))
        return errors
    if schema.get("x-kubernetes-int-or-string"):
        if not (_has_type(value, "integer") or isinstance(value, str)):
            errors.append(FieldError("TypeInvalid", path, value,
                                     f"{path} in body must be of type integer or string: "
                                     f'"{_type_name(value)}"'))
            return errors
    elif (expected := schema.get("type")) and not _has_type(value, expected):
        errors.append(FieldError("TypeInvalid", path, _type_name(value),
                                 f'{path} in body must be of type {expected}: '
                                 f'"{_type_name(value)}"'))
        return errors
    errors += _check_value(value, schema, path)
    for keyword in ("allOf", "anyOf", "oneOf"):
        branches = schema.get(keyword) or []
        results = [validate(value, branch, path, root=False) for branch in branches]
        passing = sum(1 for r in results if not r)
        if keyword == "allOf":
            errors += [e for r in results for e in r]
        elif branches and keyword == "anyOf" and passing == 0:
            errors += results[0]
        elif branches and keyword == "oneOf" and passing != 1:
            errors.append(FieldError("Invalid", path, value,
                                     f"{path} in body must validate one and only one schema "
                                     "(oneOf)"))
    if isinstance(schema.get("not"), dict) and not validate(value, schema["not"], path,
                                                           root=False):
        errors.append(FieldError("Invalid", path, value,
                                 f"{path} in body must not validate the schema (not)"))
    if isinstance(value, dict):
        errors += _validate_object(value, schema, path, old, root)
    elif isinstance(value, list):
        errors += _validate_array(value, schema, path, old)
    errors += _validate_rules(value, schema, path, old)
    return errors


def _check_value(value: Any, schema: dict, path: str) -> list[FieldError]:
    errors = []
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in schema["enum"])
        errors.append(FieldError("NotSupported", path, value, f"supported values: {supported}"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None and (value < low or (schema.get("exclusiveMinimum") and value == low)):
            relation = "greater than" if schema.get("exclusiveMinimum") else \
                "greater than or equal to"
            errors.append(FieldError("Invalid", path, value,
                                     f"{path} in body should be {relation} {low}"))
        if high is not None and (value > high or (schema.get("exclusiveMaximum") and
                                                  value == high)):
            relation = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
            errors.append(FieldError("Invalid", path, value,
                                     f"{path} in body should be {relation} {high}"))
        step = schema.get("multipleOf")
        if step and value % step:
            errors.append(FieldError("Invalid", path, value,
                                     f"{path} in body should be a multiple of {step}"))
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(FieldError("TooLong", path, value,
                                     f"may not be more than {schema['maxLength']} bytes"))
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(FieldError("Invalid", path, value,
                                     f"{path} in body should be at least {schema['minLength']} "
                                     "chars long"))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(FieldError("Invalid", path, value,
                                     f"{path} in body should match '{schema['pattern']}'"))
    return errors


def _validate_object(value: dict, schema: dict, path: str, old: Any,
                     root: bool) -> list[FieldError]:
    errors = []
    props = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    for key in schema.get("required") or []:
        if key not in value:
            errors.append(FieldError("Required", _join(path, key)))
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        errors.append(FieldError("TooMany", path, len(value),
                                 f"must have at most {schema['maxProperties']} items"))
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        errors.append(FieldError("Invalid", path, len(value),
                                 f"{path} in body should have at least "
                                 f"{schema['minProperties']} properties"))
    for key, child in value.items():
        if (root or schema.get("x-kubernetes-embedded-resource")) and key == "metadata":
            continue
        sub = props.get(key, additional if isinstance(additional, dict) else None)
        if sub is not None:
            old_child = old.get(key, _MISSING) if isinstance(old, dict) else _MISSING
            errors += validate(child, sub, _join(path, key), old_child, root=False)
    return errors


def _validate_array(value: list, schema: dict, path: str, old: Any) -> list[FieldError]:
    errors = []
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(FieldError("TooMany", path, len(value),
                                 f"must have at most {schema['maxItems']} items"))
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(FieldError("Invalid", path, len(value),
                                 f"{path} in body should have at least {schema['minItems']} "
                                 "items"))
    list_type = schema.get("x-kubernetes-list-type")
    keys = schema.get("x-kubernetes-list-map-keys") or []
    seen: list[Any] = []
    for index, item in enumerate(value):
        marker = tuple(item.get(k) for k in keys) if list_type == "map" and \
            isinstance(item, dict) else item
        if (list_type in ("set", "map") or schema.get("uniqueItems")) and marker in seen:
            errors.append(FieldError("Duplicate", f"{path}[{index}]", item))
        seen.append(marker)
        if isinstance(schema.get("items"), dict):
            old_item = _MISSING
            if list_type == "map" and isinstance(old, list) and isinstance(item, dict):
                old_item = next((o for o in old if isinstance(o, dict) and
                                 tuple(o.get(k) for k in keys) == marker), _MISSING)
            errors += validate(item, schema["items"], f"{path}[{index}]", old_item, root=False)
    return errors


def _validate_rules(value: Any, schema: dict, path: str, old: Any) -> list[FieldError]:
    errors = []
    for rule in schema.get("x-kubernetes-validations") or []:
        text = rule.get("rule", "")
        is_transition = "oldSelf" in text
        if is_transition and old is _MISSING and not rule.get("optionalOldSelf"):
            continue
        evaluate = cel.compile_rule(text)
        if evaluate is None:
            continue
        bindings = {"self": value}
        if is_transition:
            bindings["oldSelf"] = None if old is _MISSING else old
        field = path
        if rule.get("fieldPath"):
            field = path + rule["fieldPath"] if rule["fieldPath"].startswith(("[", ".")) \
                else _join(path, rule["fieldPath"])
        kind = (rule.get("reason") or "FieldValueInvalid").removeprefix("FieldValue")
        # kube-apiserver shows a scalar's value, and leaves an object's or a list's out.
        shown = OMITTED if isinstance(value, (dict, list)) else value
        try:
            ok = evaluate(bindings)
        except cel.CelError as err:
            errors.append(FieldError(kind, field, shown, str(err), from_rule=True))
            continue
        if ok is not True:
            message = rule.get("message") or f"failed rule: {text}"
            errors.append(FieldError(kind, field, shown, message, from_rule=True))
    return errors
