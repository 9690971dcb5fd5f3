"""Writes: create, update (PUT), the three patches and server-side apply, with dry runs and
field validation (`Strict` refuses before anything is stored; `Warn` answers with warnings)."""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import errors, patch, schema, strategic
from .codec import (
    BODY_TYPES,
    PATCH_TYPES,
    content_type_of,
    decode,
    dry_run_of,
    field_validation_of,
    is_flag,
    read_body,
    respond,
)
from .errors import ApiError, FieldError
from .reads import versioned
from .resources import ResourceType
from .store import now_rfc3339
from .strategy import (
    StrictDecodingError,
    builtin_schema,
    prepare_create,
    prepare_update,
    strict_error,
)

if TYPE_CHECKING:
    from .server import Target
    from .store import Store


class WriteHandlers:
    """The ApiHandler's write verbs."""

    store: Store


    async def _create(self, request: web.Request, target: Target) -> web.Response:
        body = decode(await read_body(request), content_type_of(request, BODY_TYPES))
        validation = field_validation_of(request)
        result = self._create_checked(target, body, validation, dry_run_of(request))
        return self._write_response(target.rtype, result, validation, 201)

    def _create_checked(self, target: Target, body: Any, validation: str, dry_run: bool):
        if validation == "Strict":
            # Strict must refuse before anything is stored.
            refuse_unknown_fields(target.rtype, body)
            probe = self._dry_run_create(target, copy.deepcopy(body))
            if probe.unknown_fields:
                raise strict_error(target.rtype, probe.unknown_fields)
        if dry_run:
            return self._dry_run_create(target, body)
        return self.store.create(target.rtype, target.namespace, body)

    def _dry_run_create(self, target: Target, body: Any):
        self.store.ensure_kind(target.rtype)
        result = prepare_create(target.rtype, body, target.namespace, now_rfc3339(),
                                self.store.rv)
        if self.store.find(target.rtype, target.namespace, result.obj["metadata"]["name"]):
            raise errors.already_exists(target.rtype.plural, target.rtype.group,
                                        result.obj["metadata"]["name"])
        return result

    def _write_response(self, rtype: ResourceType, result, validation: str,
                        code: int = 200) -> web.Response:
        headers = {}
        if result.unknown_fields:
            if validation == "Strict":
                raise strict_error(rtype, result.unknown_fields)
            if validation == "Warn":
                headers["Warning"] = ", ".join(
                    '299 - "unknown field \\"' + f + '\\""' for f in result.unknown_fields)
        return respond(versioned(rtype, result.obj), code, headers)

    async def _update(self, request: web.Request, target: Target) -> web.Response:
        body = decode(await read_body(request), content_type_of(request, BODY_TYPES))
        validation = field_validation_of(request)
        result = self._write(target, body, require_version=True, dry_run=dry_run_of(request),
                             validation=validation)
        return self._write_response(target.rtype, result, validation)

    def _write(self, target: Target, body: Any, require_version: bool, dry_run: bool,
               validation: str):
        if validation == "Strict":
            # Strict must refuse before anything is stored.
            refuse_unknown_fields(target.rtype, body)
            old = self.store.get(target.rtype, target.namespace, target.name)
            probe = prepare_update(target.rtype, copy.deepcopy(body), old, target.subresource,
                                   self.store.rv + 1, require_version)
            if probe.unknown_fields:
                raise strict_error(target.rtype, probe.unknown_fields)
        if dry_run:
            old = self.store.get(target.rtype, target.namespace, target.name)
            return prepare_update(target.rtype, body, old, target.subresource, self.store.rv,
                                  require_version)
        return self.store.update(target.rtype, target.namespace, target.name, body,
                                 target.subresource, require_version=require_version)

    async def _patch(self, request: web.Request, target: Target) -> web.Response:
        content_type = content_type_of(request, PATCH_TYPES)
        raw = await read_body(request)
        validation = field_validation_of(request)
        if content_type == "application/apply-patch+yaml":
            return self._apply(request, target, decode(raw, "application/yaml"), validation)
        rtype = target.rtype
        if content_type == "application/strategic-merge-patch+json" and rtype.is_custom:
            # Custom resources have no Go types to read patch strategies from.
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an "
                           "unknown format - accepted media types include: "
                           "application/json-patch+json, application/merge-patch+json, "
                           "application/apply-patch+yaml")
        # kube-apiserver reads the object before it decodes the patch: a patch of a missing
        # object is 404 even when the patch is malformed.
        old = self.store.get(rtype, target.namespace, target.name)
        body = decode(raw, "application/json")
        current = versioned(rtype, old)
        try:
            if content_type == "application/json-patch+json":
                patched = patch.apply_json_patch(current, body)
            elif not isinstance(body, dict):
                raise errors.bad_request("error decoding patch: json: cannot unmarshal "
                                         f"{_go_json_type(body)} into Go value of type "
                                         "map[string]interface {}")
            elif content_type == "application/strategic-merge-patch+json":
                patched = strategic.apply_strategic_merge_patch(
                    current, body, strategic.fields_of(rtype.group, rtype.kind))
            else:
                patched = patch.apply_merge_patch(current, body)
        except patch.PatchError as err:
            raise _patch_failure(err, content_type) from err
        if not isinstance(patched, dict):
            raise errors.bad_request("the patched object must be a JSON object")
        patched.setdefault("metadata", {}).setdefault("resourceVersion",
                                                      old["metadata"]["resourceVersion"])
        try:
            result = self._write(target, patched, require_version=False,
                                 dry_run=dry_run_of(request), validation=validation)
            return self._write_response(rtype, result, validation)
        except StrictDecodingError as err:
            raise strict_patch_error(patched, err.unknown) from err

    def _apply(self, request: web.Request, target: Target, applied: Any,
               validation: str) -> web.Response:
        manager = request.query.get("fieldManager")
        if not manager:   # kube-apiserver: PatchOptions validation, 422 naming the field
            raise ApiError(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: '
                           "fieldManager: Required value: is required for apply patch",
                           {"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [
                               {"reason": "FieldValueRequired", "field": "fieldManager",
                                "message": "Required value: is required for apply patch"}]})
        if not isinstance(applied, dict) or not applied.get("apiVersion") or \
                not applied.get("kind"):
            raise errors.bad_request("invalid object type: apply requires apiVersion and kind")
        applied_meta = applied.setdefault("metadata", {})
        if applied_meta.get("name") not in (None, target.name):
            raise errors.bad_request(f"the name of the object ({applied_meta.get('name')}) does "
                                     f"not match the name on the URL ({target.name})")
        applied_meta["name"] = target.name
        rtype = target.rtype
        memory_key = (rtype.key, target.namespace or "", target.name, manager,
                      target.subresource)
        existing = self.store.find(rtype, target.namespace, target.name)
        entry = {"manager": manager, "operation": "Apply", "apiVersion": rtype.api_version,
                 "time": now_rfc3339(), "fieldsType": "FieldsV1",
                 "fieldsV1": patch.fields_v1(applied)}
        if target.subresource:
            entry["subresource"] = target.subresource
        if existing is None:
            if target.subresource:
                raise errors.not_found(rtype.plural, rtype.group, target.name)
            body = copy.deepcopy(applied)
            body["metadata"]["managedFields"] = [entry]
            result = self._create_checked(target, body, validation, dry_run_of(request))
            code, conflicts = 201, []
        else:
            current = versioned(rtype, existing)
            others = {key[3]: config for key, config in self.store.applied.items()
                      if key[:3] == memory_key[:3] and key[4] == memory_key[4]
                      and key[3] != manager}
            conflicts = patch.apply_conflicts(current, applied, others)
            if conflicts and not is_flag(request.query.get("force")):
                raise ApiError(409, "Conflict", patch.conflict_message(conflicts), {"causes": [
                    {"reason": "FieldManagerConflict", "message": f'conflict with "{m}"',
                     "field": path} for m, path in conflicts]})
            merged = patch.apply_server_side(current, applied, self.store.applied.get(memory_key),
                                             list(others.values()))
            others = [m for m in existing["metadata"].get("managedFields") or []
                      if not (m.get("manager") == manager and m.get("operation") == "Apply"
                              and m.get("subresource") == entry.get("subresource"))]
            merged["metadata"]["managedFields"] = others + [entry]
            merged["metadata"].setdefault("resourceVersion",
                                          existing["metadata"]["resourceVersion"])
            if "resourceVersion" not in applied_meta:
                merged["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            result = self._write(target, merged, require_version=False,
                                 dry_run=dry_run_of(request), validation=validation)
            code = 200
        if not dry_run_of(request):
            self.store.applied[memory_key] = copy.deepcopy(applied)
            for other, path in conflicts:  # forced: the fields are this manager's now
                key = (*memory_key[:3], other, memory_key[4])
                self.store.applied[key] = patch.forget_fields(self.store.applied[key], [path])
        return self._write_response(rtype, result, validation, code)


def _go_json_type(value: Any) -> str:
    return {list: "array", str: "string", bool: "bool"}.get(type(value), "number") \
        if value is not None else "null"


def _patch_failure(err: patch.PatchError, content_type: str) -> ApiError:
    """A patch that could not be applied, as kube-apiserver answers it
    (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go)."""
    if content_type == "application/json-patch+json" and err.code == 422:
        # NewGenericServerResponse(422, ...): the generic words; the patch's error is not sent.
        return ApiError(422, "Invalid", "the server rejected our request due to an error in "
                        "our request", {})
    if err.code == 500:  # strategicpatch's own errors reach the client as they are
        return ApiError(500, "", str(err))
    return ApiError(err.code, "Invalid" if err.code == 422 else "BadRequest", str(err))


def refuse_unknown_fields(rtype: ResourceType, body: Any) -> None:
    """Strict field validation happens while the body is decoded, so kube-apiserver names an
    unknown field before it looks at any value: refuse with it before validating."""
    known = rtype.schema if rtype.schema is not None else builtin_schema(rtype)
    if isinstance(body, dict) and known is not None:
        unknown = schema.prune(copy.deepcopy(body), known)
        if unknown:
            raise strict_error(rtype, unknown)


def strict_patch_error(patched: dict[str, Any], unknown: list[str]) -> ApiError:
    """A patch whose result has unknown fields, under Strict: kube-apiserver decodes the
    patched object and refuses the patch (422, the field `patch`, the object as its value)."""
    fields = ", ".join(f'unknown field "{f}"' for f in unknown)
    return errors.invalid("", "", "", [FieldError(
        "Invalid", "patch", json.dumps(patched, sort_keys=True, separators=(",", ":")),
        f"strict decoding error: {fields}")])
