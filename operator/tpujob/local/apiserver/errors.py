"""Kubernetes `Status` errors and field errors, shaped exactly as kube-apiserver shapes them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


class ApiError(Exception):
    """An error the server answers with a `Status` body and an HTTP code."""

    def __init__(self, code: int, reason: str, message: str,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        }
        if not self.reason:  # an internal error kube-apiserver gives no reason
            del body["reason"]
        if self.details is not None:  # Go's omitempty: empty name and group are left out
            body["details"] = {k: v for k, v in self.details.items() if v != ""}
        return body


def _qualified(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{_qualified(plural, group)} "{name}" not found',
                    {"name": name, "group": group, "kind": plural})


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{_qualified(plural, group)} "{name}" already exists',
                    {"name": name, "group": group, "kind": plural})


def conflict(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409, "Conflict",
        f'Operation cannot be fulfilled on {_qualified(plural, group)} "{name}": the object has '
        "been modified; please apply your changes to the latest version and try again",
        {"name": name, "group": group, "kind": plural})


def unsupported_option(options_kind: str, field: str, shown: str, supported: str) -> ApiError:
    """A query option kube-apiserver does not support: 422 on the options kind (CreateOptions,
    UpdateOptions, PatchOptions, DeleteOptions), as its options validation answers."""
    body = f"Unsupported value: {shown}: supported values: {supported}"
    return ApiError(422, "Invalid", f'{options_kind}.meta.k8s.io "" is invalid: {field}: {body}',
                    {"group": "meta.k8s.io", "kind": options_kind, "causes": [
                        {"reason": "FieldValueNotSupported", "message": body, "field": field}]})


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def resource_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource",
                    {})


def method_not_allowed(method: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed",
                    f"the server does not allow this method on the requested resource ({method})",
                    {})


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    return ApiError(
        415, "UnsupportedMediaType",
        f'the body of the request was in an unknown format ("{content_type}") - accepted media '
        f"types include: {', '.join(accepted)}")


def too_large(limit: int) -> ApiError:
    return ApiError(413, "RequestEntityTooLarge",
                    f"Request entity too large: limit is {limit}")


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


OMITTED = object()  # a FieldError value kube-apiserver leaves out of the message


@dataclass(frozen=True)
class FieldError:
    """One invalid field; `kind` is the suffix of the Status cause reason (FieldValue<kind>)."""

    kind: str  # Invalid | Required | NotSupported | Forbidden | Duplicate | TooLong | TooMany
    field: str
    value: Any = None
    detail: str = ""
    from_rule: bool = False  # found by a CEL rule (x-kubernetes-validations)

    def body(self) -> str:
        if self.kind == "Required":
            return "Required value" + (f": {self.detail}" if self.detail else "")
        if self.kind == "Forbidden":
            return "Forbidden" + (f": {self.detail}" if self.detail else "")
        if self.kind == "NotSupported":
            return f"Unsupported value: {format_value(self.value)}: {self.detail}"
        if self.kind == "Duplicate":
            return f"Duplicate value: {format_value(self.value)}"
        if self.kind == "TooLong":
            return f"Too long: {self.detail}"
        if self.kind == "TooMany":
            return f"Too many: {format_value(self.value)}: {self.detail}"
        if self.value is OMITTED:  # field.OmitValueType: the value is not shown
            return f"Invalid value: {self.detail}"
        return f"Invalid value: {format_value(self.value)}: {self.detail}"

    def cause(self) -> dict[str, str]:
        return {"reason": f"FieldValue{self.kind}", "message": self.body(), "field": self.field}

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


def format_value(value: Any) -> str:
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, list):
        return '"array"'
    return json.dumps(value)


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    qualified = f"{kind}.{group}" if group else kind
    joined = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {joined}',
                    {"name": name, "group": group, "kind": kind,
                     "causes": [e.cause() for e in errors]})
