"""What kube-apiserver does with a CRD's schema, as far as the API tests need it: the
structural-schema rules it checks when a CRD is created, defaulting, strict field validation,
list-map key uniqueness, CEL `x-kubernetes-validations` (with `oldSelf` on update), and
printer-column JSONPaths.

A test double, kept small on purpose: it lets the CRD tests fail the way a real cluster would
refuse the CRD or an object, without a cluster."""

from __future__ import annotations

import copy
from typing import Any

import celpy
import jsonschema

VALIDATIONS = "x-kubernetes-validations"
PRESERVE = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING = "x-kubernetes-int-or-string"
TYPES = {"object", "array", "string", "integer", "number", "boolean"}
# Keywords apiextensions.k8s.io/v1 accepts in a schema node.
ALLOWED_KEYS = {
    "description", "type", "format", "title", "default", "enum", "maximum", "minimum",
    "exclusiveMaximum", "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems",
    "minItems", "uniqueItems", "multipleOf", "maxProperties", "minProperties", "required",
    "items", "allOf", "oneOf", "anyOf", "not", "properties", "additionalProperties", "nullable",
    "example", "externalDocs", PRESERVE, INT_OR_STRING, "x-kubernetes-embedded-resource",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type", VALIDATIONS,
}


def structural_problems(node: Any, path: str = "") -> list[str]:
    """Why `node` is not a structural schema (empty when it is)."""
    if not isinstance(node, dict):
        return [f"{path or '<root>'}: a schema node must be a mapping"]
    where = path or "<root>"
    problems = [f"{where}: unknown keyword {k!r}" for k in node if k not in ALLOWED_KEYS]
    if "$ref" in node:
        problems.append(f"{where}: $ref is not allowed")
    if "default" in node and node["default"] is None:
        problems.append(f"{where}: a default of null is not allowed")
    for flag in ("exclusiveMinimum", "exclusiveMaximum"):
        if flag in node and not isinstance(node[flag], bool):
            problems.append(f"{where}: {flag} must be a boolean in OpenAPI v3.0")
    typed = node.get("type")
    if typed is None and not node.get(PRESERVE) and not node.get(INT_OR_STRING):
        problems.append(f"{where}: no type")
    if typed is not None and typed not in TYPES:
        problems.append(f"{where}: type {typed!r} is not a Kubernetes schema type")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{where}: properties and additionalProperties together")
    if typed == "array" and "items" not in node:
        problems.append(f"{where}: an array needs items")
    if node.get("additionalProperties") in (True, False):
        problems.append(f"{where}: additionalProperties must be a schema, not a boolean")
    for junctor in ("anyOf", "oneOf", "allOf", "not"):
        if junctor in node:
            problems += _junctor_problems(node, junctor, where)
    if "required" in node:
        missing = [r for r in node["required"] if r not in node.get("properties", {})]
        if missing:
            problems.append(f"{where}: required names unknown properties {missing}")
    if node.get("x-kubernetes-list-type") == "map":
        keys = node.get("x-kubernetes-list-map-keys") or []
        item = node.get("items", {})
        for key in keys:
            if key not in item.get("required", []) and "default" not in item.get(
                    "properties", {}).get(key, {}):
                problems.append(f"{where}: list-map key {key!r} must be required or defaulted")
    for name, child in node.get("properties", {}).items():
        problems += structural_problems(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        problems += structural_problems(node["additionalProperties"], f"{path}.*")
    if "items" in node:
        problems += structural_problems(node["items"], f"{path}[]")
    return problems


def _junctor_problems(node: dict[str, Any], junctor: str, where: str) -> list[str]:
    # Inside anyOf/oneOf/allOf/not only value validations may appear: no types, descriptions,
    # defaults or nested structure, except the int-or-string idiom.
    branches = node[junctor] if isinstance(node[junctor], list) else [node[junctor]]
    if node.get(INT_OR_STRING) and junctor == "anyOf":
        if branches != [{"type": "integer"}, {"type": "string"}]:
            return [f"{where}: int-or-string anyOf must be [integer, string]"]
        return []
    problems = []
    for branch in branches:
        for forbidden in ("type", "description", "default", "properties", "items",
                          "additionalProperties", PRESERVE):
            if forbidden in branch:
                problems.append(f"{where}: {junctor} branch sets {forbidden}")
    return problems


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """`value` with the schema's defaults filled in, as the apiserver defaults on write."""
    if not isinstance(value, dict) or schema.get("type") != "object":
        if isinstance(value, list) and "items" in schema:
            return [apply_defaults(schema["items"], v) for v in value]
        return value
    out = dict(value)
    for name, child in schema.get("properties", {}).items():
        if name not in out and "default" in child:
            out[name] = copy.deepcopy(child["default"])
        if name in out:
            out[name] = apply_defaults(child, out[name])
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        out = {k: apply_defaults(extra, v) for k, v in out.items()}
    return out


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy that refuses unknown fields, as `kubectl apply --validate=strict` does."""
    node = copy.deepcopy(schema)
    _make_strict(node)
    return node


def _make_strict(node: dict[str, Any]) -> None:
    if "properties" in node and not node.get(PRESERVE):
        node["additionalProperties"] = False
    if node.pop("nullable", False):
        node["type"] = [node["type"], "null"]
    # OpenAPI v3.0 bounds: a boolean flag beside minimum/maximum; JSON Schema 7: the bound.
    for flag, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if node.get(flag) is True:
            node[flag] = node.pop(bound)
    for child in node.get("properties", {}).values():
        _make_strict(child)
    if isinstance(node.get("additionalProperties"), dict):
        _make_strict(node["additionalProperties"])
    if isinstance(node.get("items"), dict):
        _make_strict(node["items"])


def schema_errors(schema: dict[str, Any], obj: Any) -> list[str]:
    """OpenAPI validation errors (strict about unknown fields), each with its field path."""
    validator = jsonschema.Draft7Validator(strict_schema(schema))
    return sorted(
        f"{'.'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in validator.iter_errors(obj))


_CEL = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}


def cel_program(rule: str) -> Any:
    """The compiled rule (compiling raises on a syntax error)."""
    if rule not in _PROGRAMS:
        _PROGRAMS[rule] = _CEL.program(_CEL.compile(rule))
    return _PROGRAMS[rule]


def eval_rule(rule: str, value: Any, old: Any = None) -> bool:
    """Evaluate one CEL rule with `self` (and `oldSelf` for transition rules)."""
    activation = {"self": celpy.json_to_cel(value)}
    if old is not None:
        activation["oldSelf"] = celpy.json_to_cel(old)
    result = cel_program(rule).evaluate(activation)
    if isinstance(result, Exception):
        raise result
    return bool(result)


def is_transition_rule(rule: str) -> bool:
    return "oldSelf" in rule


def cel_errors(schema: dict[str, Any], value: Any, old: Any = None, path: str = "") -> list[str]:
    """Messages of the CEL rules `value` breaks. Transition rules run only where an old value
    exists at the same place, as on an update."""
    errors = []
    for entry in schema.get(VALIDATIONS, []):
        rule = entry["rule"]
        if is_transition_rule(rule) and old is None:
            continue
        if not eval_rule(rule, value, old if is_transition_rule(rule) else None):
            errors.append(f"{path or '<root>'}: {entry['message']}")
    if isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name in value:
                old_child = old.get(name) if isinstance(old, dict) else None
                errors += cel_errors(child, value[name], old_child, f"{path}.{name}")
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                old_item = old.get(key) if isinstance(old, dict) else None
                errors += cel_errors(extra, item, old_item, f"{path}.{key}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            # Old list items correlate only by list-map key; no rule here needs that.
            errors += cel_errors(schema["items"], item, None, f"{path}[{i}]")
    return errors


def list_map_errors(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Duplicate keys in `x-kubernetes-list-type: map` lists, which the apiserver refuses."""
    errors = []
    if isinstance(value, list):
        if schema.get("x-kubernetes-list-type") == "map":
            keys = schema.get("x-kubernetes-list-map-keys", [])
            seen = [tuple(item.get(k) for k in keys) for item in value]
            if len(set(seen)) != len(seen):
                errors.append(f"{path}: Duplicate value for list-map keys {keys}")
        for i, item in enumerate(value):
            errors += list_map_errors(schema.get("items", {}), item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name in value:
                errors += list_map_errors(child, value[name], f"{path}.{name}")
    return errors


def all_rules(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, str]]]:
    """Every (path, rule entry) in the schema."""
    found = [(path, entry) for entry in schema.get(VALIDATIONS, [])]
    for name, child in schema.get("properties", {}).items():
        found += all_rules(child, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        found += all_rules(schema["additionalProperties"], f"{path}.*")
    if isinstance(schema.get("items"), dict):
        found += all_rules(schema["items"], f"{path}[]")
    return found


def validate_object(schema: dict[str, Any], obj: dict[str, Any],
                    old: dict[str, Any] | None = None) -> list[str]:
    """What a create (or, with `old`, an update) would be refused for: defaults first, then
    the OpenAPI schema, then CEL, as the apiserver orders them."""
    defaulted = apply_defaults(schema, obj)
    errors = schema_errors(schema, defaulted)
    if errors:
        return errors
    old_defaulted = apply_defaults(schema, old) if old is not None else None
    return list_map_errors(schema, defaulted) + cel_errors(schema, defaulted, old_defaulted)


def resolve_json_path(obj: Any, json_path: str) -> Any:
    """A printer column's simple JSONPath (`.status.progress.step`) on an object; None if absent."""
    node = obj
    for part in json_path.lstrip(".").split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def schema_at(schema: dict[str, Any], json_path: str) -> dict[str, Any] | None:
    """The schema node a simple JSONPath leads to, or None when the schema has no such field."""
    node = schema
    for part in json_path.lstrip(".").split("."):
        props = node.get("properties", {})
        if part not in props:
            return None
        node = props[part]
    return node
