"""What a container sees, resolved the way a kubelet resolves it, then moved onto this machine:
environment variables (values with `$(VAR)` references, the downward API, Secret and ConfigMap
keys, envFrom), and the container paths of its volumes, termination message and working
directory mapped to host paths in its command, args and env values.

Pure: objects and lookups in, strings out. A missing Secret, ConfigMap or key raises
`ContainerConfigError` with the kubelet's wording (the pod then waits in
CreateContainerConfigError and is retried).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any

from .objects import annotations, labels, meta

Lookup = Callable[[str, str, str], dict[str, Any] | None]  # (kind, namespace, name) -> object

_FIELD_KEY = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


class ContainerConfigError(Exception):
    """The container cannot be configured (yet): a missing Secret, ConfigMap or key."""


def expand_references(value: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: a defined variable is replaced, an undefined reference is
    left as is, and `$$` escapes a `$`."""
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))
    return _VAR_REF.sub(replace, value)


def field_value(pod: dict[str, Any], path: str) -> str:
    """A downward API `fieldRef` of the pod (missing labels and annotations are empty)."""
    m = _FIELD_KEY.match(path)
    if m:
        source = labels(pod) if m.group(1) == "labels" else annotations(pod)
        return source.get(m.group(2), "")
    status, spec = pod.get("status") or {}, pod.get("spec") or {}
    simple = {
        "metadata.name": meta(pod).get("name", ""),
        "metadata.namespace": meta(pod).get("namespace", ""),
        "metadata.uid": meta(pod).get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.hostIP": status.get("hostIP", ""),
        "status.podIP": status.get("podIP", ""),
        "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs") or []),
        "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs") or []),
    }
    if path in simple:
        return simple[path]
    if path == "metadata.labels":
        return "\n".join(f'{k}="{v}"' for k, v in sorted(labels(pod).items()))
    if path == "metadata.annotations":
        return "\n".join(f'{k}="{v}"' for k, v in sorted(annotations(pod).items()))
    raise ContainerConfigError(f"unsupported fieldPath {path!r}")


def _data(kind: str, obj: dict[str, Any]) -> dict[str, str]:
    if kind == "Secret":
        decoded = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
        return {**decoded, **(obj.get("stringData") or {})}
    binary = {k: base64.b64decode(v).decode(errors="replace")
              for k, v in (obj.get("binaryData") or {}).items()}
    return {**binary, **(obj.get("data") or {})}


def _key_ref(kind: str, ref: dict[str, Any], ns: str, lookup: Lookup) -> str | None:
    obj = lookup(kind, ns, ref.get("name", ""))
    optional = bool(ref.get("optional"))
    word = "secret" if kind == "Secret" else "configmap"
    if obj is None:
        if optional:
            return None
        raise ContainerConfigError(f'{word} "{ref.get("name", "")}" not found')
    data = _data(kind, obj)
    if ref["key"] not in data:
        if optional:
            return None
        raise ContainerConfigError(f"couldn't find key {ref['key']} in {kind} "
                                   f"{ns}/{ref.get('name', '')}")
    return data[ref["key"]]


def _resource_value(container: dict[str, Any], ref: dict[str, Any]) -> str:
    source, _, resource = ref.get("resource", "").partition(".")
    amounts = (container.get("resources") or {}).get(source) or {}
    return str(amounts.get(resource, "0"))


def resolve_env(pod: dict[str, Any], container: dict[str, Any], lookup: Lookup,
                base: dict[str, str] | None = None) -> dict[str, str]:
    """The container's environment: `base` (the runtime's), then envFrom, then env, in order,
    each value expanded against the variables before it."""
    ns = meta(pod).get("namespace", "")
    env = dict(base or {})
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = source.get(key)
            if ref is None:
                continue
            obj = lookup(kind, ns, ref.get("name", ""))
            if obj is None:
                if ref.get("optional"):
                    continue
                word = "secret" if kind == "Secret" else "configmap"
                raise ContainerConfigError(f'{word} "{ref.get("name", "")}" not found')
            for k, v in _data(kind, obj).items():
                env[prefix + k] = v
    for var in container.get("env") or []:
        value_from = var.get("valueFrom")
        if value_from is None:
            env[var["name"]] = expand_references(str(var.get("value", "")), env)
        elif "fieldRef" in value_from:
            env[var["name"]] = field_value(pod, value_from["fieldRef"]["fieldPath"])
        elif "secretKeyRef" in value_from:
            found = _key_ref("Secret", value_from["secretKeyRef"], ns, lookup)
            if found is not None:
                env[var["name"]] = found
        elif "configMapKeyRef" in value_from:
            found = _key_ref("ConfigMap", value_from["configMapKeyRef"], ns, lookup)
            if found is not None:
                env[var["name"]] = found
        elif "resourceFieldRef" in value_from:
            env[var["name"]] = _resource_value(container, value_from["resourceFieldRef"])
    return env


class PathMap:
    """Container paths (mount points, the termination message path) and the host paths that
    stand for them; `apply` rewrites every mention of a container path in a string."""

    def __init__(self, mapping: dict[str, str]) -> None:
        self.mapping = {k.rstrip("/") or "/": v for k, v in mapping.items()}
        ordered = sorted((k for k in self.mapping if k != "/"), key=len, reverse=True)
        self._pattern = re.compile(
            r"(?<![\w.\-/])(" + "|".join(re.escape(k) for k in ordered) + r")(?=/|$|[^\w.\-])"
        ) if ordered else None

    def apply(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: self.mapping[m.group(1)], text)

    def host_path(self, container_path: str) -> str | None:
        """The host path for an absolute container path under a mapped directory, or None."""
        mapped = self.apply(container_path)
        return mapped if mapped != container_path else None


def expand_command(container: dict[str, Any], env: dict[str, str]) -> list[str]:
    """command + args with `$(VAR)` references expanded (the kubelet does this, not a shell)."""
    return [expand_references(str(a), env)
            for a in (container.get("command") or []) + (container.get("args") or [])]
