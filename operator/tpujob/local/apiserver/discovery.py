"""Discovery documents (/api, /apis, /apis/<group>, resource lists) built from the registry."""

from __future__ import annotations

import hashlib
from typing import Any

from .resources import ALL_VERBS, Registry, ResourceType


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def api_versions(server_address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
        {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def _group_entry(group: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(registry: Registry) -> dict[str, Any]:
    groups = [_group_entry(g, v) for g, v in sorted(registry.group_versions().items()) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str) -> dict[str, Any] | None:
    versions = registry.group_versions().get(group)
    if not group or not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(group, versions)}


def _resource_entry(rtype: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": rtype.plural, "singularName": rtype.singular, "namespaced": rtype.namespaced,
        "kind": rtype.kind, "verbs": list(ALL_VERBS),
        "storageVersionHash": _hash(f"{rtype.group}/{rtype.version}/{rtype.kind}"),
    }
    if rtype.short_names:
        entry["shortNames"] = list(rtype.short_names)
    if rtype.categories:
        entry["categories"] = list(rtype.categories)
    return entry


def api_resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    resources = []
    for rtype in types:
        resources.append(_resource_entry(rtype))
        if rtype.status_subresource:
            resources.append({"name": f"{rtype.plural}/status", "singularName": "",
                              "namespaced": rtype.namespaced, "kind": rtype.kind,
                              "verbs": ["get", "patch", "update"]})
        if rtype.plural == "pods" and not rtype.group:
            resources.append({"name": "pods/log", "singularName": "", "namespaced": True,
                              "kind": "Pod", "verbs": ["get"]})
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": resources}
