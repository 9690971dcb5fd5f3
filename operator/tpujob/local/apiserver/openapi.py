"""OpenAPI documents (/openapi/v3 and /openapi/v2): the paths and schemas clients such as
kubectl read to learn that the server validates fields itself (`fieldValidation`) and how to
patch a kind. Built-in kinds get an open schema; custom resources get their CRD's schema."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from .resources import Registry, ResourceType

_PATCH_TYPES = ["application/json-patch+json", "application/merge-patch+json",
                "application/apply-patch+yaml"]
_PARAM_FIELD_VALIDATION = {"name": "fieldValidation", "in": "query", "schema": {"type": "string"},
                           "uniqueItems": True,
                           "description": "Ignore, Warn (default) or Strict: how the server "
                                          "treats unknown fields in the request."}
_PARAM_FIELD_MANAGER = {"name": "fieldManager", "in": "query", "schema": {"type": "string"},
                        "uniqueItems": True}
_PARAM_DRY_RUN = {"name": "dryRun", "in": "query", "schema": {"type": "string"},
                  "uniqueItems": True}
_PARAM_FORCE = {"name": "force", "in": "query", "schema": {"type": "boolean"},
                "uniqueItems": True}


def gv_path(rtype: ResourceType) -> str:
    """`api/v1` or `apis/<group>/<version>`, without the leading slash."""
    return rtype.base_path.lstrip("/")


def schema_name(rtype: ResourceType) -> str:
    if not rtype.group:
        return f"io.k8s.api.core.{rtype.version}.{rtype.kind}"
    if rtype.group.endswith(".k8s.io"):
        return f"io.k8s.api.{rtype.group.split('.')[0]}.{rtype.version}.{rtype.kind}"
    if "." not in rtype.group:
        return f"io.k8s.api.{rtype.group}.{rtype.version}.{rtype.kind}"
    return ".".join(reversed(rtype.group.split("."))) + f".{rtype.version}.{rtype.kind}"


def _gvk(rtype: ResourceType) -> dict[str, str]:
    return {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}


def _kind_schema(rtype: ResourceType) -> dict[str, Any]:
    if rtype.schema is None:
        body: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    else:
        body = copy.deepcopy(rtype.schema)
        props = body.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props["metadata"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    body["x-kubernetes-group-version-kind"] = [_gvk(rtype)]
    return body


def _operation(rtype: ResourceType, action: str, ref: str, params: list[dict],
               request: list[str] | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": f"{action}{rtype.kind}",
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {
            "application/json": {"schema": {"$ref": ref}}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rtype),
    }
    if request:
        op["requestBody"] = {"content": {t: {"schema": {"$ref": ref}} for t in request}}
    return op


def _paths(rtype: ResourceType) -> dict[str, Any]:
    ref = f"#/components/schemas/{schema_name(rtype)}"
    base = gv_path(rtype)
    collection = f"/{base}/namespaces/{{namespace}}/{rtype.plural}" if rtype.namespaced \
        else f"/{base}/{rtype.plural}"
    writes = [_PARAM_DRY_RUN, _PARAM_FIELD_MANAGER, _PARAM_FIELD_VALIDATION]
    item = {
        "get": _operation(rtype, "get", ref, []),
        "put": _operation(rtype, "put", ref, writes, ["application/json", "application/yaml"]),
        "patch": _operation(rtype, "patch", ref, writes + [_PARAM_FORCE], _PATCH_TYPES),
        "delete": _operation(rtype, "delete", ref, [_PARAM_DRY_RUN]),
        "parameters": [{"name": "name", "in": "path", "required": True,
                        "schema": {"type": "string"}}],
    }
    paths = {
        collection: {
            "get": _operation(rtype, "list", ref, []),
            "post": _operation(rtype, "post", ref, writes,
                               ["application/json", "application/yaml"]),
        },
        f"{collection}/{{name}}": item,
    }
    if rtype.status_subresource:
        paths[f"{collection}/{{name}}/status"] = {
            key: value for key, value in item.items() if key in ("get", "put", "patch",
                                                                 "parameters")}
    return paths


def group_version_document(registry: Registry, group: str, version: str) -> dict[str, Any]:
    types = registry.in_group_version(group, version)
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for rtype in types:
        paths.update(_paths(rtype))
        schemas[schema_name(rtype)] = _kind_schema(rtype)
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"},
            "paths": paths, "components": {"schemas": schemas}}


def root_document(registry: Registry) -> dict[str, Any]:
    paths = {}
    for group, versions in sorted(registry.group_versions().items()):
        for version in versions:
            rtype = registry.in_group_version(group, version)[0]
            digest = hashlib.sha256(json.dumps(group_version_document(registry, group, version),
                                               sort_keys=True).encode()).hexdigest()[:32].upper()
            paths[gv_path(rtype)] = {"serverRelativeURL":
                                     f"/openapi/v3/{gv_path(rtype)}?hash={digest}"}
    return {"paths": paths}


def swagger_document(registry: Registry) -> dict[str, Any]:
    """A JSON OpenAPI v2 document with a definition per kind (for JSON-reading clients)."""
    definitions = {}
    for rtype in registry.types.values():
        definitions[schema_name(rtype)] = _kind_schema(rtype)
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.32.0"},
            "paths": {}, "definitions": definitions}
