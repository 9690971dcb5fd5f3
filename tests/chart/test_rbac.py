"""The chart's RBAC is exactly what the operator's code says it calls
(operator/tpujob/controller/permissions.py): NAMESPACED rules in a ClusterRole or in a Role per
watched namespace, CLUSTER_ONLY rules only cluster-wide, one PolicyRule per rule, nothing more,
nothing less, no wildcard."""

from __future__ import annotations

import pytest
import yaml
from charts.generate import INSTALL

from tests.chart.support import VALUE_SETS, render
from tpujob.controller.permissions import CLUSTER_ONLY, NAMESPACED, Rule

pytestmark = pytest.mark.unit

RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def _expected(rules: tuple[Rule, ...]) -> list[dict]:
    return [{"apiGroups": [r.group], "resources": [r.resource], "verbs": list(r.verbs)}
            for r in rules]


def _sorted(rules: list[dict]) -> list[dict]:
    return sorted(rules, key=lambda r: (r["apiGroups"], r["resources"]))


def _no_wildcards(node) -> list[str]:
    if isinstance(node, dict):
        return [w for v in node.values() for w in _no_wildcards(v)]
    if isinstance(node, list):
        return [w for v in node for w in _no_wildcards(v)]
    return [node] if isinstance(node, str) and "*" in node else []


def test_cluster_wide_by_default():
    rendered = render()
    assert not rendered.of_kind("Role") and not rendered.of_kind("RoleBinding")
    role = rendered.one("ClusterRole")
    assert _sorted(role["rules"]) == _sorted(_expected(NAMESPACED + CLUSTER_ONLY))
    binding = rendered.one("ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tpujob",
                                    "namespace": "tpujob-system"}]


@pytest.mark.parametrize("namespaces", [["team-a"], ["team-a", "team-b", "research"]])
def test_a_role_per_watched_namespace(namespaces):
    rendered = render({"watchNamespaces": namespaces})
    assert not rendered.of_kind("ClusterRole") and not rendered.of_kind("ClusterRoleBinding")
    roles = {r["metadata"]["namespace"]: r for r in rendered.of_kind("Role")}
    bindings = {b["metadata"]["namespace"]: b for b in rendered.of_kind("RoleBinding")}
    assert sorted(roles) == sorted(bindings) == sorted(namespaces)
    for namespace in namespaces:
        assert _sorted(roles[namespace]["rules"]) == _sorted(_expected(NAMESPACED))
        assert bindings[namespace]["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
            "name": roles[namespace]["metadata"]["name"]}
        # The ServiceAccount lives in the release namespace, not the watched one.
        assert bindings[namespace]["subjects"] == [
            {"kind": "ServiceAccount", "name": "tpujob", "namespace": "tpujob-system"}]


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_nothing_but_the_operators_rules(name):
    rendered = render(VALUE_SETS[name])
    rbac = [o for o in rendered.objects if o["kind"] in RBAC_KINDS]
    assert rbac and _no_wildcards(rbac) == []
    allowed = _expected(NAMESPACED + CLUSTER_ONLY)
    for role in (o for o in rbac if o["kind"] in ("ClusterRole", "Role")):
        assert set(role) == {"apiVersion", "kind", "metadata", "rules"}  # no aggregationRule
        assert all(rule in allowed for rule in role["rules"]), role["rules"]
        assert len(role["rules"]) == len({str(r) for r in role["rules"]})
    # No other object grants anything (no extra bindings to other roles).
    refs = {(b["roleRef"]["kind"], b["roleRef"]["name"]) for b in rbac
            if b["kind"].endswith("Binding")}
    assert refs <= {(r["kind"], r["metadata"]["name"]) for r in rbac
                    if not r["kind"].endswith("Binding")}


def test_plain_install_has_the_same_rules():
    docs = [d for d in yaml.safe_load_all(INSTALL.read_text()) if d]
    roles = [d for d in docs if d["kind"] in ("ClusterRole", "Role")]
    assert len(roles) == 1 and roles[0]["kind"] == "ClusterRole"
    assert _sorted(roles[0]["rules"]) == _sorted(_expected(NAMESPACED + CLUSTER_ONLY))
