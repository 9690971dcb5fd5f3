"""Value sets and functions the chart tests share: the three installs the chart must support
(default, one watched namespace, webhook on) and variants that switch every other option on."""

from __future__ import annotations

import base64
import json
from functools import cache

from charts.generate import Rendered, render_chart

CA_BUNDLE = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
                             ).decode()

VALUE_SETS: dict[str, dict] = {
    "default": {},
    "team-a": {"watchNamespaces": ["team-a"]},
    "webhook": {"webhook": {"enabled": True}},
    "webhook-secret": {"webhook": {"enabled": True, "certManager": {"enabled": False},
                                   "existingSecret": "tpujob-webhook-cert",
                                   "caBundle": CA_BUNDLE}},
    "everything": {
        "image": {"repository": "europe-docker.pkg.dev/acme/tpujob/operator",
                  "digest": "sha256:" + "ab" * 32, "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "registry"}],
        "watchNamespaces": ["team-a", "team-b"],
        "logFormat": "text",
        "gcp": {"project": "acme-ml", "region": "us-central1",
                "serviceAccount": "tpujob-operator@acme-ml.iam.gserviceaccount.com"},
        "workloadPolicies": {"enabled": True},
        "httpPort": 9090,
        "metrics": {"service": {"port": 9090, "annotations": {"a": "b"}},
                    "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
        "webhook": {"enabled": True, "port": 10443, "failurePolicy": "Ignore",
                    "timeoutSeconds": 5, "certDir": "/var/run/tpujob/certs",
                    "certManager": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}}},
        "podAnnotations": {"x": "y"}, "podLabels": {"team": "ml"},
        "priorityClassName": "system-cluster-critical",
        "nodeSelector": {"cloud.google.com/gke-nodepool": "system"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system",
                         "effect": "NoSchedule"}],
        "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
        "extraArgs": ["--some-future-flag"],
    },
}


@cache
def _render(values_json: str, namespace: str) -> Rendered:
    return render_chart(json.loads(values_json), namespace=namespace)


def render(values: dict | None = None, namespace: str = "tpujob-system") -> Rendered:
    """The chart rendered offline with `values` (cached; treat the result as read-only)."""
    return _render(json.dumps(values or {}, sort_keys=True), namespace)


def operator_container(rendered: Rendered) -> dict:
    containers = rendered.one("Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["operator"]
    return containers[0]
