"""Reading a YAML file of Kubernetes objects and creating them through the API, as
`kubectl apply -f FILE` does on a fresh cluster: every kind the server serves (found through
discovery), the default namespace where a namespaced object names none, missing namespaces
created first, unknown fields refused (strict field validation)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tpujob.local.executor.client import ApiError, KubeApi, Resource

DEFAULT_NAMESPACE = "default"
NAMESPACES = Resource("", "v1", "namespaces")


class ManifestError(ValueError):
    """A file that holds no usable Kubernetes objects."""


class ApplyError(RuntimeError):
    """The API server refused a document; the message names it and quotes the server."""

    def __init__(self, document: dict[str, Any], err: ApiError) -> None:
        self.document = document
        self.status = err.status
        self.server_message = err.message
        super().__init__(f"{describe(document)} refused by the API server ({err.status} "
                         f"{err.reason}): {err.message}")


def describe(doc: dict[str, Any]) -> str:
    """`Kind namespace/name`, as error messages name an object."""
    meta = doc.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{doc.get('kind', '?')} {where}{meta.get('name', '?')}"


def load_documents(path: str | Path) -> list[dict[str, Any]]:
    """The objects in a YAML file (several documents, and `kind: List`, allowed)."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ManifestError(f"cannot read {path}: {err.strerror or err}") from None
    try:
        raw = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise ManifestError(f"{path} is not valid YAML: {err}") from None
    documents: list[dict[str, Any]] = []
    for i, doc in enumerate(raw, 1):
        if isinstance(doc, dict) and doc.get("kind") == "List":
            raw_items = doc.get("items") or []
        else:
            raw_items = [doc]
        for item in raw_items:
            if not isinstance(item, dict) or not item.get("kind") or not item.get("apiVersion"):
                raise ManifestError(f"{path}: document {i} is not a Kubernetes object "
                                    "(it needs apiVersion and kind)")
            if not (item.get("metadata") or {}).get("name"):
                raise ManifestError(f"{path}: document {i} ({item['kind']}) has no "
                                    "metadata.name")
            documents.append(item)
    if not documents:
        raise ManifestError(f"{path} holds no Kubernetes objects")
    return documents


@dataclass(frozen=True)
class Kind:
    resource: Resource
    namespaced: bool


def discover(api: KubeApi, api_version: str, kind: str) -> Kind | None:
    """The resource serving `kind` in `api_version`, from the server's discovery."""
    group, _, version = api_version.rpartition("/")
    path = f"/apis/{group}/{version}" if group else f"/api/{version}"
    try:
        listing = api.request("GET", path)
    except ApiError:
        return None
    for r in listing.get("resources") or []:
        if r.get("kind") == kind and "/" not in r.get("name", ""):
            return Kind(Resource(group, version, r["name"]), bool(r.get("namespaced")))
    return None


def apply_documents(api: KubeApi, documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Create every document, in order; returns the stored objects."""
    created = []
    known_namespaces: set[str] = set()
    for doc in documents:
        kind = discover(api, doc["apiVersion"], doc["kind"])
        if kind is None:
            raise ApplyError(doc, ApiError(404, "NotFound", f"the server does not serve kind "
                                                            f"{doc['kind']} in {doc['apiVersion']}"))
        body = {**doc, "metadata": dict(doc.get("metadata") or {})}
        namespace = None
        if kind.namespaced:
            namespace = body["metadata"].setdefault("namespace", DEFAULT_NAMESPACE)
            if namespace not in known_namespaces:
                _ensure_namespace(api, namespace)
                known_namespaces.add(namespace)
        else:
            body["metadata"].pop("namespace", None)
        try:
            # Strict, as `kubectl apply` asks by default: an unknown field is refused, where
            # the server's default would prune it with only a warning.
            created.append(api.request("POST", kind.resource.path(namespace), body,
                                       fieldValidation="Strict"))
        except ApiError as err:
            raise ApplyError(body, err) from None
    return created


def _ensure_namespace(api: KubeApi, namespace: str) -> None:
    if api.get(NAMESPACES, None, namespace) is not None:
        return
    try:
        api.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": namespace}})
    except ApiError as err:
        if err.status != 409:
            raise
