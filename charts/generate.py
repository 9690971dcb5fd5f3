"""The files derived from the Helm chart, and the offline renderer the chart tests share.

`python -m charts.generate` (from the repository root, after `python -m tpujob.api.crd`):
  - copies manifests/crd.yaml into charts/tpujob/crds/, so `helm install` creates the CRD;
  - writes the chart's RBAC rules (templates/_rules.tpl) from the API calls the operator makes,
    operator/tpujob/controller/permissions.py;
  - renders the chart with its default values into manifests/install/tpujob.yaml, the same
    install as plain YAML for `kubectl apply` (plus the Namespace Helm would be told to create).
`--check` writes nothing and exits 1 when either file is out of date.

Rendering goes through Helm's own Go engine (helm-python-sdk), offline: no cluster, no network.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "tpujob"
CRD_SOURCE = ROOT / "manifests" / "crd.yaml"
CHART_CRD = CHART / "crds" / "tputrainingjobs.tpujob.dev.yaml"
CHART_RULES = CHART / "templates" / "_rules.tpl"
INSTALL = ROOT / "manifests" / "install" / "tpujob.yaml"

RELEASE = "tpujob"
NAMESPACE = "tpujob-system"
COMMAND = "python -m charts.generate"

# The order Helm installs kinds in (its InstallOrder, the kinds this chart uses), CRDs first as
# Helm installs crds/ before templates. Kinds not listed go last.
KIND_ORDER = (
    "Namespace", "CustomResourceDefinition", "ServiceAccount", "Secret", "ConfigMap",
    "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service", "Deployment",
    "Issuer", "Certificate", "ValidatingWebhookConfiguration", "ServiceMonitor",
)


@dataclass(frozen=True)
class Rendered:
    """One offline `helm install --dry-run`: the template objects, the CRDs and NOTES.txt."""

    objects: list[dict[str, Any]]
    crds: list[dict[str, Any]]
    notes: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.of_kind(kind)
        assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
        return found[0]


def _install_rank(obj: dict[str, Any]) -> tuple[int, str, str]:
    kind = obj["kind"]
    rank = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
    meta = obj.get("metadata", {})
    return rank, meta.get("namespace", ""), meta.get("name", "")


def _policy_rules(rules: tuple[Any, ...]) -> str:
    lines = []
    for rule in rules:
        lines += [f"# {rule.why}",
                  f"- apiGroups: {json.dumps([rule.group])}",
                  f"  resources: {json.dumps([rule.resource])}",
                  f"  verbs: {json.dumps(list(rule.verbs))}"]
    return "\n".join(lines)


def build_rules_tpl() -> str:
    """templates/_rules.tpl: the operator's RBAC rules as two named templates, one PolicyRule
    per rule of permissions.py (NAMESPACED always; CLUSTER_ONLY only cluster-wide)."""
    from tpujob.controller.permissions import CLUSTER_ONLY, NAMESPACED

    return (
        "{{/*\nGenerated from operator/tpujob/controller/permissions.py by "
        f"`{COMMAND}`.\nDo not edit: change permissions.py and run the command again.\n"
        "*/}}\n"
        "\n{{/* Calls inside the watched namespaces: a Role per namespace, or the ClusterRole. */}}"
        "\n{{- define \"tpujob.namespacedRules\" -}}\n"
        f"{_policy_rules(NAMESPACED)}\n"
        "{{- end }}\n"
        "\n{{/* Calls only a cluster-wide operator makes. */}}"
        "\n{{- define \"tpujob.clusterOnlyRules\" -}}\n"
        f"{_policy_rules(CLUSTER_ONLY)}\n"
        "{{- end }}\n")


def render_chart(values: dict[str, Any] | None = None, *, release: str = RELEASE,
                 namespace: str = NAMESPACE, chart: Path = CHART) -> Rendered:
    """Render the chart as `helm install RELEASE -n NAMESPACE` would, values schema included.
    Raises helm_python's HelmValuesError for values the schema refuses and HelmRenderError for
    a template that fails (a `required` or `fail` in the chart)."""
    import helm_python as helm

    with helm.Chart.load(chart) as loaded:
        manifests = loaded.render(values or {}, name=release, namespace=namespace,
                                  is_install=True)
        crds = [yaml.safe_load(c["data"]) for c in loaded.crds]
    objects: list[dict[str, Any]] = []
    notes = ""
    for path in sorted(manifests):
        if path.endswith("NOTES.txt"):
            notes = manifests[path]
            continue
        objects += [d for d in yaml.safe_load_all(manifests[path]) if d]
    return Rendered(sorted(objects, key=_install_rank), crds, notes)


def build_install_yaml() -> str:
    """The text of manifests/install/tpujob.yaml: the default install as plain YAML."""
    rendered = render_chart()
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": NAMESPACE, "labels": {"app.kubernetes.io/name": "tpujob"}}}
    docs = sorted([namespace, *rendered.crds, *rendered.objects], key=_install_rank)
    header = (f"# Generated from charts/tpujob (default values, release {RELEASE!r}, namespace "
              f"{NAMESPACE!r})\n# by `{COMMAND}`. Do not edit: change the chart and run the "
              "command again.\n# Install: kubectl apply --server-side -f "
              "manifests/install/tpujob.yaml\n")
    return header + yaml.safe_dump_all(docs, sort_keys=False, width=100)


def _is_stale(path: Path, text: str) -> bool:
    return not path.exists() or path.read_text() != text


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=COMMAND, description="Bring the chart's CRD and RBAC rules up to date and render "
                                  "manifests/install.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a file is out of date")
    args = parser.parse_args(argv)
    # The chart's own inputs first: the install YAML is rendered from the chart.
    sources = [(CHART_CRD, CRD_SOURCE.read_text()), (CHART_RULES, build_rules_tpl())]
    if args.check:
        stale = [path for path, text in sources if _is_stale(path, text)]
        # A stale chart makes the install stale too, and regenerating fixes both.
        if not stale and _is_stale(INSTALL, build_install_yaml()):
            stale.append(INSTALL)
        for path in stale:
            print(f"{_shown(path)} is out of date: run `{COMMAND}`", file=sys.stderr)
        return 1 if stale else 0
    for path, text in sources:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    INSTALL.parent.mkdir(parents=True, exist_ok=True)
    INSTALL.write_text(build_install_yaml())
    for path in (CHART_CRD, CHART_RULES, INSTALL):
        print(f"wrote {_shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
