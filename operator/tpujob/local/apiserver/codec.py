"""What requests carry and answers are made of: body decoding (JSON and YAML, with the limits
kube-apiserver and Go's decoder keep), the query options every verb shares (`dryRun`,
`fieldValidation`), content negotiation, and the JSON answer itself."""

from __future__ import annotations

import json
import math
from typing import Any

import yaml
from aiohttp import web

from . import errors
from .errors import ApiError

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_BODY_BYTES = 3 * 1024 * 1024  # kube-apiserver's limit on a request body
MAX_DEPTH = 200  # levels of nesting in a body (deep enough for any real object)
MAX_NODES = 1_000_000  # values in a decoded body, YAML aliases expanded
BODY_TYPES = ("application/json", "application/yaml")
PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json",
               "application/strategic-merge-patch+json", "application/apply-patch+yaml")


def respond(document: Any, status: int = 200, headers: dict[str, str] | None = None
          ) -> web.Response:
    return web.Response(body=json.dumps(document, separators=(",", ":")).encode(),
                        status=status, content_type="application/json", headers=headers)


def is_flag(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true")


_OPTIONS = {"POST": "CreateOptions", "PUT": "UpdateOptions", "PATCH": "PatchOptions",
            "DELETE": "DeleteOptions"}


def dry_run_of(request: web.Request) -> bool:
    values = request.query.getall("dryRun", [])
    if any(value != "All" for value in values):
        raise errors.unsupported_option(_OPTIONS.get(request.method, "CreateOptions"), "dryRun",
                                        json.dumps(values), '"All"')
    return bool(values)


def field_validation_of(request: web.Request) -> str:
    value = request.query.get("fieldValidation", "Warn") or "Warn"
    if value not in ("Ignore", "Warn", "Strict"):
        raise errors.unsupported_option(_OPTIONS.get(request.method, "CreateOptions"),
                                        "fieldValidation", json.dumps(value),
                                        '"", "Ignore", "Strict", "Warn"')
    return value


def check_accept(request: web.Request) -> None:
    accept = request.headers.get("Accept", "")
    if not accept:
        return
    options = [o.split(";")[0].strip() for o in accept.split(",")]
    if not any(o in ("application/json", "*/*", "application/*", "application/yaml")
               for o in options):
        raise ApiError(406, "NotAcceptable",
                       "only the following media types are accepted: application/json, "
                       "application/yaml")


def content_type_of(request: web.Request, accepted: tuple[str, ...]) -> str:
    content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if not content_type and accepted == BODY_TYPES:
        content_type = "application/json"  # as kube-apiserver: the first supported type
    if content_type not in accepted:
        raise errors.unsupported_media_type(content_type, list(accepted))
    return content_type


async def read_body(request: web.Request) -> bytes:
    if (request.content_length or 0) > 4 * MAX_BODY_BYTES:
        raise errors.too_large(MAX_BODY_BYTES)
    data = await request.read()
    if len(data) > MAX_BODY_BYTES:
        raise errors.too_large(MAX_BODY_BYTES)
    return data


def decode(raw: bytes, content_type: str) -> Any:
    try:
        if content_type.endswith("yaml"):
            text = raw.decode()
            _check_yaml_depth(text, content_type)
            value = yaml.load(text, Loader=_YAML_LOADER)
        else:
            value = json.loads(raw.decode())
    except (ValueError, yaml.YAMLError, UnicodeDecodeError, RecursionError) as err:
        raise errors.bad_request(f"couldn't decode the request body ({content_type}): "
                                 f"{err}") from err
    _check_size(value, content_type)
    return value


def _check_yaml_depth(text: str, content_type: str) -> None:
    # libyaml builds nodes recursively in C and crashes the process on deep nesting; its event
    # parser does not, so measure the depth with it first.
    depth = 0
    for event in yaml.parse(text, Loader=_YAML_LOADER):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise errors.bad_request(f"couldn't decode the request body ({content_type}): "
                                         f"nested more than {MAX_DEPTH} levels deep")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _check_size(value: Any, content_type: str) -> None:
    """Refuse what Go's decoder refuses, NaN and infinite numbers, and bodies the server could
    not walk: nested deeper than MAX_DEPTH (every step of the server walks objects
    recursively) or, through YAML aliases, expanding to more than MAX_NODES values."""
    stack, nodes = [(value, 1)], 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if depth > MAX_DEPTH:
            raise errors.bad_request(f"couldn't decode the request body ({content_type}): "
                                     f"nested more than {MAX_DEPTH} levels deep")
        if nodes > MAX_NODES:
            raise errors.too_large(MAX_BODY_BYTES)
        if isinstance(node, float) and not math.isfinite(node):
            raise errors.bad_request(f"couldn't decode the request body ({content_type}): "
                                     f"{node} is not a valid JSON number")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


