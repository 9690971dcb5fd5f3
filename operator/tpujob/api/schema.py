"""Turns a pydantic model's JSON Schema into a Kubernetes structural OpenAPI v3 schema.

Kubernetes accepts a narrower language than JSON Schema: no `$ref`, no `anyOf` that carries
types (except int-or-string), every node typed, `properties` and `additionalProperties` never
together, no `propertyNames`, no nulls in defaults. This module inlines references, drops the
`null` branch of optional fields (an absent field is how Kubernetes says "unset"), maps free-form
dicts to `x-kubernetes-preserve-unknown-fields`, turns key enums into CEL rules, and refuses any
keyword it does not know, so a model change can never slip an invalid construct into the CRD.
`build_open_schema` is the variant for a config validated in full elsewhere: known keys
checked, unknown keys kept, no defaults."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema

VALIDATIONS = "x-kubernetes-validations"
PRESERVE = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING = "x-kubernetes-int-or-string"
_NULLABLE = "x-tpujob-nullable"  # internal marker: the field's JSON Schema allowed null

# Keywords that mean the same in JSON Schema and in Kubernetes' OpenAPI v3 subset.
_PASSTHROUGH = {
    "type", "description", "required", "enum", "minimum", "maximum", "minLength", "maxLength",
    "pattern", "minItems", "maxItems", "minProperties", "maxProperties", "format",
}
_FORMATS = {"date-time", "int32", "int64", "float", "double"}
# Key order in the output, so the generated YAML reads top-down like a hand-written schema.
_ORDER = ["description", "type", "nullable", "format", "enum", "default", "minimum",
          "exclusiveMinimum", "maximum", "exclusiveMaximum", "minLength", "maxLength", "pattern",
          "minItems", "maxItems", "minProperties", "maxProperties", "required", "properties",
          "additionalProperties", "items"]


class SchemaError(ValueError):
    """The model uses a construct Kubernetes structural schemas cannot express."""


def cel_rule(rule: str, message: str, field_path: str | None = None) -> dict[str, str]:
    """One `x-kubernetes-validations` entry."""
    entry = {"rule": rule, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    return entry


def cel_extra(*rules: dict[str, str]) -> dict[str, Any]:
    """`json_schema_extra` carrying CEL rules for a field or a model."""
    return {VALIDATIONS: list(rules)}


class _WithFactoryDefaults(GenerateJsonSchema):
    # Pydantic leaves `default_factory` values out of JSON Schema; the CRD needs them so that the
    # apiserver fills in, e.g., an omitted restartPolicy exactly as the models would.
    def get_default_value(self, schema: Any) -> Any:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            return factory()
        return super().get_default_value(schema)


def build_structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The Kubernetes structural schema of `model`, camelCase names, with its defaults."""
    raw = model.model_json_schema(
        by_alias=True, mode="validation", schema_generator=_WithFactoryDefaults)
    defs = raw.pop("$defs", {})
    return _convert(raw, defs, model.__name__, open_=False)


def build_open_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A schema that checks the fields `model` knows (types, bounds, enums; `null` where the
    model takes None) but keeps unknown ones and sets no defaults: for a config another
    component validates in full, so that a typo reaches it instead of being pruned."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return _convert(raw, defs, model.__name__, open_=True)


def _resolve(node: dict[str, Any], defs: dict[str, Any], path: str) -> dict[str, Any]:
    """Inline `$ref` and collapse `anyOf: [X, null]` until neither is left at this node."""
    while True:
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            merged = dict(target)
            for key, value in node.items():
                if key == "$ref":
                    continue
                merged[key] = merged.get(key, []) + value if key == VALIDATIONS else value
            node = merged
            continue
        variants = node.get("anyOf")
        if variants and {"type": "null"} in variants:
            rest = [v for v in variants if v != {"type": "null"}]
            if len(rest) != 1:
                raise SchemaError(f"{path}: a union of several types cannot be structural")
            outer = {k: v for k, v in node.items() if k != "anyOf"}
            if outer.get("default", 0) is None:
                del outer["default"]
            inner = _resolve(rest[0], defs, path)
            node = {**inner, **outer, _NULLABLE: True}
            if VALIDATIONS in inner and VALIDATIONS in outer:
                node[VALIDATIONS] = inner[VALIDATIONS] + outer[VALIDATIONS]
            continue
        return node


def _convert(node: dict[str, Any], defs: dict[str, Any], path: str,
             open_: bool) -> dict[str, Any]:
    node = _resolve(node, defs, path)
    out: dict[str, Any] = {}
    rules: list[dict[str, str]] = list(node.get(VALIDATIONS, []))
    for key, value in node.items():
        if key in ("title", VALIDATIONS):
            continue
        if key == _NULLABLE:
            if open_:
                out["nullable"] = True
        elif key == "properties":
            out["properties"] = {name: _convert(child, defs, f"{path}.{name}", open_)
                                 for name, child in value.items()}
            if open_:
                out[PRESERVE] = True
        elif key == "items":
            out["items"] = _convert(value, defs, f"{path}[]", open_)
        elif key == "additionalProperties":
            if value is True:
                out[PRESERVE] = True
            elif isinstance(value, dict):
                out["additionalProperties"] = _convert(value, defs, f"{path}.*", open_)
            # `false` (pydantic's extra="forbid") is dropped: Kubernetes prunes or, under strict
            # field validation, refuses unknown fields on its own.
        elif key == "propertyNames":
            keys = _resolve(value, defs, path).get("enum")
            if not keys:
                raise SchemaError(f"{path}: only an enum of key names can be expressed")
            listed = ", ".join(f"'{k}'" for k in keys)
            rules.append(cel_rule(f"self.all(k, k in [{listed}])",
                                  f"keys must be one of: {', '.join(keys)}"))
        elif key == "anyOf":
            if not node.get(INT_OR_STRING):
                raise SchemaError(f"{path}: anyOf is only allowed for int-or-string")
            out["anyOf"] = value
        elif key == "default":
            if open_:
                continue
            # Object defaults become {}: the apiserver then fills nested fields from their own
            # defaults, and pydantic's dump of a default object may hold nulls Kubernetes refuses.
            out["default"] = {} if isinstance(value, dict) else value
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            # JSON Schema 2020-12 gives the bound itself; OpenAPI v3.0 a flag on minimum/maximum.
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "format":
            if value in _FORMATS:
                out["format"] = value
        elif key in _PASSTHROUGH or key.startswith("x-kubernetes-"):
            out[key] = value
        else:
            raise SchemaError(f"{path}: JSON Schema keyword {key!r} has no Kubernetes form")
    if "properties" in out and "additionalProperties" in out:
        raise SchemaError(f"{path}: properties and additionalProperties cannot be combined")
    if rules:
        out[VALIDATIONS] = rules
    if "type" not in out and not (out.get(PRESERVE) or out.get(INT_OR_STRING)):
        raise SchemaError(f"{path}: every node needs a type")
    return {key: out[key] for key in sorted(out, key=_rank)}


def _rank(key: str) -> int:
    return _ORDER.index(key) if key in _ORDER else len(_ORDER)
