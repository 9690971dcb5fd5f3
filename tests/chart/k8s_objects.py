"""Validation of rendered objects against their Kubernetes schemas, offline.

Core kinds use the OpenAPI-derived JSON schemas that ship in kubernetes-validate (strict: an
unknown field is an error). cert-manager and prometheus-operator publish their schemas only as
CRDs, which are not available offline; their objects are checked against the subset of those
APIs written out below (the fields the chart sets, with their types and enums), strict too."""

from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest schema
# kubernetes-validate ships: every object must be valid on both.
KUBE_VERSIONS = ("1.30.0", "1.37.0")

_STR = {"type": "string"}
_STR_MAP = {"type": "object", "additionalProperties": _STR}
_METADATA = {
    "type": "object", "required": ["name"],
    "properties": {"name": _STR, "namespace": _STR, "labels": _STR_MAP, "annotations": _STR_MAP},
    "additionalProperties": False,
}
# prometheus-operator's Duration.
_DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?"
                                          r"(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
_LABEL_SELECTOR = {
    "type": "object", "additionalProperties": False,
    "properties": {"matchLabels": _STR_MAP, "matchExpressions": {"type": "array"}},
}


def _kind(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {"apiVersion": {"const": api_version}, "kind": {"const": kind},
                       "metadata": _METADATA, "spec": spec},
    }


THIRD_PARTY: dict[tuple[str, str], dict[str, Any]] = {
    ("cert-manager.io/v1", "Issuer"): _kind("cert-manager.io/v1", "Issuer", {
        "type": "object", "minProperties": 1, "maxProperties": 1,
        "properties": {
            "selfSigned": {"type": "object", "additionalProperties": False,
                           "properties": {"crlDistributionPoints": {"type": "array"}}},
            "ca": {"type": "object", "required": ["secretName"], "additionalProperties": False,
                   "properties": {"secretName": _STR,
                                  "crlDistributionPoints": {"type": "array"},
                                  "ocspServers": {"type": "array"}}},
            "acme": {"type": "object"}, "vault": {"type": "object"},
            "venafi": {"type": "object"},
        },
        "additionalProperties": False,
    }),
    ("cert-manager.io/v1", "Certificate"): _kind("cert-manager.io/v1", "Certificate", {
        "type": "object", "required": ["issuerRef", "secretName"], "additionalProperties": False,
        "properties": {
            "secretName": _STR,
            "dnsNames": {"type": "array", "items": _STR},
            "commonName": _STR, "isCA": {"type": "boolean"},
            "duration": {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"},
            "renewBefore": _STR,
            "usages": {"type": "array", "items": _STR},
            "privateKey": {
                "type": "object", "additionalProperties": False,
                "properties": {
                    "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                    "size": {"type": "integer"},
                    "encoding": {"enum": ["PKCS1", "PKCS8"]},
                    "rotationPolicy": {"enum": ["Never", "Always"]},
                },
            },
            "issuerRef": {
                "type": "object", "required": ["name"], "additionalProperties": False,
                "properties": {"name": _STR, "kind": _STR, "group": _STR},
            },
        },
    }),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _kind(
        "monitoring.coreos.com/v1", "ServiceMonitor", {
            "type": "object", "required": ["selector"], "additionalProperties": False,
            "properties": {
                "selector": _LABEL_SELECTOR,
                "namespaceSelector": {
                    "type": "object", "additionalProperties": False,
                    "properties": {"any": {"type": "boolean"},
                                   "matchNames": {"type": "array", "items": _STR}},
                },
                "jobLabel": _STR,
                "endpoints": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False,
                    "properties": {
                        "port": _STR, "targetPort": {"type": ["string", "integer"]},
                        "path": _STR, "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                        "interval": _DURATION, "scrapeTimeout": _DURATION,
                        "honorLabels": {"type": "boolean"},
                    },
                }},
            },
        }),
}


def validation_errors(obj: dict[str, Any]) -> list[str]:
    """Why `obj` is not a valid object of its kind, on every version in KUBE_VERSIONS
    (empty when it is)."""
    key = (obj.get("apiVersion", ""), obj.get("kind", ""))
    name = f"{key[1]}/{obj.get('metadata', {}).get('name')}"
    if key in THIRD_PARTY:
        validator = jsonschema.Draft202012Validator(THIRD_PARTY[key])
        return [f"{name}: {'.'.join(map(str, e.absolute_path))}: {e.message}"
                for e in validator.iter_errors(obj)]
    errors = []
    for version in KUBE_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            errors.append(f"{name} (Kubernetes {version}): "
                          f"{'.'.join(map(str, err.path))}: {err.message}")
        except kubernetes_validate.SchemaNotFoundError as err:
            errors.append(f"{name}: {err.message}")
    return errors
