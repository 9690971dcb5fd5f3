"""Shared building blocks of the TpuTrainingJob API models: the base model (camelCase in YAML,
snake_case in Python, unknown keys refused), Kubernetes-shaped scalar types, and error messages
that name the offending field the way a user writes it (`spec.parallelism.ici.fsdp`)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    ValidationError,
    WithJsonSchema,
    model_serializer,
)
from pydantic.alias_generators import to_camel

from tpujob_trainer.config.keys import keys_taken, unknown_key_message


class ApiModel(BaseModel):
    """Base of every API model: frozen, strict about unknown keys, camelCase aliases."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True,
        use_enum_values=False)

    def to_dict(self) -> dict[str, Any]:
        """The object as it is written in YAML: camelCase keys, unset optional fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class SparseApiModel(ApiModel):
    """An ApiModel that leaves its unset optional fields out of every dump, not only `to_dict`:
    for Kubernetes structures the operator copies into the objects it creates (an
    EnvVarSource), so that they read, and hash, exactly as they were written."""

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> Any:
        return {k: v for k, v in handler(self).items() if v is not None}


def _to_utc_rfc3339(value: datetime) -> str:
    # metav1.Time is second-precision RFC 3339 in UTC; match it so status reads like Kubernetes'.
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


Timestamp = Annotated[
    datetime,
    PlainSerializer(_to_utc_rfc3339, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""A point in time, serialized as Kubernetes serializes `metav1.Time`."""


def _to_utc_rfc3339_micro(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _from_unix_seconds(value: Any) -> Any:
    # Statuses written before the field was a time held Unix seconds.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC)
    return value


MicroTimestamp = Annotated[
    datetime,
    BeforeValidator(_from_unix_seconds),
    PlainSerializer(_to_utc_rfc3339_micro, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""A point in time to the microsecond, serialized as Kubernetes serializes `metav1.MicroTime`
(`2026-11-26T12:10:20.864016Z`)."""

# The syntax of a Kubernetes resource.Quantity, as CRDs of core types state it, less the leading
# minus: every quantity the API takes is an amount, never negative.
QUANTITY_PATTERN = (r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")


def _check_quantity(value: int | str) -> int | str:
    if isinstance(value, str) and value.startswith("-"):
        raise ValueError(f"a quantity must not be negative, got {value!r}")
    if isinstance(value, str) and not re.fullmatch(QUANTITY_PATTERN, value):
        raise ValueError(
            f"{value!r} is not a Kubernetes quantity (examples: 500m, 2, 16Gi, 1.5e9)")
    if isinstance(value, int) and value < 0:
        raise ValueError(f"a quantity must not be negative, got {value}")
    return value


Quantity = Annotated[
    int | str,
    AfterValidator(_check_quantity),
    WithJsonSchema({
        "x-kubernetes-int-or-string": True,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
    }),
]
"""A Kubernetes resource quantity: an integer or a string such as `16Gi` or `500m`."""


def pattern_string(pattern: str, what: str, max_length: int | None = None) -> Any:
    """A string type that must match `pattern`, refused with `what` (a sentence saying what
    would be valid) rather than the bare regex; the CRD gets the same pattern."""

    def check(value: str) -> str:
        if not re.fullmatch(pattern, value) or (max_length and len(value) > max_length):
            raise ValueError(f"{value!r} is not valid: {what}")
        return value

    schema: dict[str, Any] = {"type": "string", "pattern": pattern}
    if max_length:
        schema["maxLength"] = max_length
    return Annotated[str, AfterValidator(check), WithJsonSchema(schema)]


def format_error_location(loc: tuple[int | str, ...], prefix: str = "") -> str:
    """`("parallelism", "ici", "fsdp")` -> `spec.parallelism.ici.fsdp`; list indexes as `[i]`."""
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def format_errors(error: ValidationError, prefix: str = "",
                  model: type[BaseModel] | None = None) -> list[str]:
    """One line per problem, each starting with the field path as written in YAML; an unknown
    field (of `model`, the type validated) with what it was probably meant to be."""
    lines = []
    for item in error.errors():
        # Pydantic puts the validated value's type tags (e.g. "function-after[...]") into the
        # location of annotated types; they mean nothing to a user writing YAML.
        loc = tuple(p for p in item["loc"] if not (isinstance(p, str) and "[" in p))
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden" and model is not None and loc:
            message = unknown_key_message(
                str(loc[-1]), keys_taken(model, loc[:-1], by_alias=True),
                format_error_location(loc[:-1], prefix), noun="field")
        where = format_error_location(loc, prefix) or "(top level)"
        lines.append(f"{where}: {message}")
    return lines
