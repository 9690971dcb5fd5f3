"""The test CRD of the contract suite (Widget) and a builder for its objects."""

from __future__ import annotations

from typing import Any

GROUP = "contract.tpujob.dev"

# A CRD exercising what the server must do with a schema: required fields, patterns, enums,
# minimums, defaults (also nested), a list-type set, preserved unknown fields, a CEL transition
# rule, a status subresource and printer columns.
WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget",
                  "listKind": "WidgetList", "shortNames": ["wdg"]},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "subresources": {"status": {}},
            "additionalPrinterColumns": [
                {"name": "Size", "type": "string", "jsonPath": ".spec.size"},
                {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Ready", "type": "string",
                 "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object",
                        "required": ["size"],
                        "properties": {
                            "size": {"type": "string",
                                     "pattern": "^(small|medium|large)-[0-9]+$",
                                     "x-kubernetes-validations": [
                                         {"rule": "self == oldSelf",
                                          "message": "size is immutable"}]},
                            "replicas": {"type": "integer", "minimum": 1, "default": 1},
                            "mode": {"type": "string", "enum": ["fast", "safe"],
                                     "default": "safe"},
                            "tags": {"type": "array", "items": {"type": "string"},
                                     "x-kubernetes-list-type": "set"},
                            "extra": {"type": "object",
                                      "x-kubernetes-preserve-unknown-fields": True},
                            "nested": {"type": "object", "default": {},
                                       "properties": {"level": {"type": "integer",
                                                                "default": 3}}},
                        },
                    },
                    "status": {
                        "type": "object",
                        "properties": {
                            "phase": {"type": "string"},
                            "observedGeneration": {"type": "integer"},
                            "conditions": {"type": "array", "items": {
                                "type": "object",
                                "properties": {"type": {"type": "string"},
                                               "status": {"type": "string"}}}},
                        },
                    },
                },
            }},
        }],
    },
}


def widget(name: str, size: str = "small-1", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": name},
            "spec": {"size": size, **spec}}
