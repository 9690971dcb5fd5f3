"""The kinds the server serves: built-in types and types defined by CRDs (pure descriptions)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    """One served resource (group/version/plural) and how its objects behave."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    status_subresource: bool = False
    has_spec: bool = True  # whether objects carry metadata.generation
    schema: dict[str, Any] | None = None  # openAPIV3Schema of a custom resource
    printer_columns: tuple[dict[str, Any], ...] = ()
    field_selectors: frozenset[str] = frozenset({"metadata.name", "metadata.namespace"})
    crd_name: str | None = None  # the CRD that defines it; None for built-ins
    list_kind_name: str | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def list_kind(self) -> str:
        return self.list_kind_name or f"{self.kind}List"

    @property
    def key(self) -> tuple[str, str]:
        """Storage key: all versions of one group/plural share their objects."""
        return (self.group, self.plural)

    @property
    def is_custom(self) -> bool:
        return self.crd_name is not None

    @property
    def base_path(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


def _builtin(group: str, version: str, kind: str, plural: str, namespaced: bool = True,
             **extra: Any) -> ResourceType:
    return ResourceType(group=group, version=version, kind=kind, plural=plural,
                        singular=kind.lower(), namespaced=namespaced, **extra)


_META = frozenset({"metadata.name", "metadata.namespace"})

BUILTINS: tuple[ResourceType, ...] = (
    _builtin("", "v1", "Namespace", "namespaces", namespaced=False, short_names=("ns",),
             status_subresource=True, has_spec=False,
             field_selectors=frozenset({"metadata.name", "status.phase"})),
    _builtin("", "v1", "Pod", "pods", short_names=("po",), categories=("all",),
             status_subresource=True, has_spec=False,
             field_selectors=_META | {"spec.nodeName", "spec.restartPolicy",
                                      "spec.schedulerName", "spec.serviceAccountName",
                                      "status.phase", "status.podIP", "status.nominatedNodeName"}),
    _builtin("", "v1", "Event", "events", short_names=("ev",), has_spec=False,
             field_selectors=_META | {"involvedObject.kind", "involvedObject.namespace",
                                      "involvedObject.name", "involvedObject.uid",
                                      "involvedObject.apiVersion",
                                      "involvedObject.resourceVersion",
                                      "involvedObject.fieldPath", "reason", "reportingComponent",
                                      "source", "type"}),
    _builtin("", "v1", "ConfigMap", "configmaps", short_names=("cm",), has_spec=False),
    _builtin("", "v1", "Secret", "secrets", has_spec=False,
             field_selectors=_META | {"type"}),
    _builtin("", "v1", "Service", "services", short_names=("svc",), categories=("all",),
             status_subresource=True, has_spec=False),
    _builtin("", "v1", "ServiceAccount", "serviceaccounts", short_names=("sa",),
             has_spec=False),
    _builtin("batch", "v1", "Job", "jobs", categories=("all",), status_subresource=True,
             has_spec=False, field_selectors=_META | {"status.successful"}),
    _builtin("events.k8s.io", "v1", "Event", "events", short_names=("ev",), has_spec=False,
             field_selectors=_META | {"regarding.kind", "regarding.namespace", "regarding.name",
                                      "regarding.uid", "reason", "type"}),
    _builtin("coordination.k8s.io", "v1", "Lease", "leases", has_spec=False),
    _builtin("apiextensions.k8s.io", "v1", "CustomResourceDefinition",
             "customresourcedefinitions", namespaced=False, short_names=("crd", "crds"),
             categories=("api-extensions",), status_subresource=True),
)

CRD_TYPE = BUILTINS[-1]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def name_errors(rtype: ResourceType, name: str) -> list[str]:
    """Why `name` is not a valid object name for this kind (empty when it is)."""
    # The words of k8s.io/apimachinery/pkg/util/validation (IsDNS1123Label, IsDNS1123Subdomain).
    found = []
    if rtype.plural in ("namespaces", "services"):
        if len(name) > 63:
            found.append("must be no more than 63 characters")
        if not _DNS_LABEL.match(name):
            found.append("a lowercase RFC 1123 label must consist of lower case alphanumeric "
                         "characters or '-', and must start and end with an alphanumeric "
                         "character (e.g. 'my-name',  or '123-abc', regex used for validation "
                         "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
        return found
    if len(name) > 253:
        found.append("must be no more than 253 characters")
    if not _DNS_SUBDOMAIN.match(name):
        found.append("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                     "characters, '-' or '.', and must start and end with an alphanumeric "
                     "character (e.g. 'example.com', regex used for validation is "
                     "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
    return found


def _version_key(version: str) -> tuple:
    # Kubernetes version priority: GA > beta > alpha, higher numbers first, others last.
    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not match:
        return (3, 0, 0, version)
    stability = {None: 0, "beta": 1, "alpha": 2}[match[2]]
    return (stability, -int(match[1]), -int(match[3] or 0), version)


def sort_versions(versions: list[str]) -> list[str]:
    return sorted(versions, key=_version_key)


def types_from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """The served versions of a CRD as resource types."""
    spec = crd["spec"]
    names = spec["names"]
    types = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        columns = tuple(version.get("additionalPrinterColumns") or ())
        types.append(ResourceType(
            group=spec["group"], version=version["name"], kind=names["kind"],
            plural=names["plural"], singular=names.get("singular") or names["kind"].lower(),
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            status_subresource="status" in (version.get("subresources") or {}),
            schema=(version.get("schema") or {}).get("openAPIV3Schema"),
            printer_columns=columns, crd_name=crd["metadata"]["name"],
            list_kind_name=names.get("listKind"), field_selectors=_META | frozenset(
                s["jsonPath"].lstrip(".") for s in version.get("selectableFields") or ())))
    return types


def crd_errors(crd: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, message) pairs for a CRD the server cannot serve."""
    errors = []
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    for key in ("group",):
        if not spec.get(key):
            errors.append((f"spec.{key}", "Required value"))
    for key in ("plural", "kind"):
        if not names.get(key):
            errors.append((f"spec.names.{key}", "Required value"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        errors.append(("spec.scope", 'Unsupported value: supported values: "Cluster", '
                                     '"Namespaced"'))
    versions = spec.get("versions") or []
    if not versions:
        errors.append(("spec.versions", "Invalid value: must have exactly one version marked "
                                        "as storage version"))
    elif sum(1 for v in versions if v.get("storage")) != 1:
        errors.append(("spec.versions", "Invalid value: must have exactly one version marked "
                                        "as storage version"))
    expected = f"{names.get('plural')}.{spec.get('group')}"
    if (crd.get("metadata") or {}).get("name") != expected:
        errors.append(("metadata.name", f'Invalid value: must be spec.names.plural+"."+'
                                        f'spec.group ("{expected}")'))
    return errors


@dataclass
class Registry:
    """The served resource types, looked up by path segments or by kind."""

    types: dict[tuple[str, str, str], ResourceType] = field(default_factory=dict)

    def add(self, rtype: ResourceType) -> None:
        self.types[(rtype.group, rtype.version, rtype.plural)] = rtype

    def remove_crd(self, crd_name: str) -> None:
        for key, rtype in list(self.types.items()):
            if rtype.crd_name == crd_name:
                del self.types[key]

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self.types.get((group, version, plural))

    def versions_of(self, group: str, plural: str) -> list[ResourceType]:
        return [t for t in self.types.values() if t.group == group and t.plural == plural]

    def group_versions(self) -> dict[str, list[str]]:
        groups: dict[str, set[str]] = {}
        for rtype in self.types.values():
            groups.setdefault(rtype.group, set()).add(rtype.version)
        return {g: sort_versions(list(v)) for g, v in groups.items()}

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return sorted((t for t in self.types.values() if t.group == group and
                       t.version == version), key=lambda t: t.plural)
