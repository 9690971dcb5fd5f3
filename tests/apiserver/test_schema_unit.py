"""Structural schema processing (pure, table-driven): validation messages and field paths,
defaulting, pruning, and the CEL subset."""

from __future__ import annotations

import copy

import pytest

from tests.apiserver.crds import WIDGET_CRD
from tpujob.local.apiserver import cel, schema

pytestmark = pytest.mark.unit

WIDGET = WIDGET_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _errors(obj: dict, old: dict | None = None) -> list[tuple[str, str, str]]:
    found = schema.validate(obj, WIDGET, old=old if old is not None else schema._MISSING)
    return [(e.field, e.kind, e.body()) for e in found]


@pytest.mark.parametrize(("spec", "expected"), [
    ({"size": "small-1"}, []),
    ({}, [("spec.size", "Required", "Required value")]),
    ({"size": "huge"}, [("spec.size", "Invalid",
                         "Invalid value: \"huge\": spec.size in body should match "
                         "'^(small|medium|large)-[0-9]+$'")]),
    ({"size": 7}, [("spec.size", "TypeInvalid",   # kube-openapi's field.TypeInvalid
                    'Invalid value: "integer": spec.size in body must be of type string: '
                    '"integer"')]),
    ({"size": "small-1", "replicas": 0},
     [("spec.replicas", "Invalid",
       "Invalid value: 0: spec.replicas in body should be greater than or equal to 1")]),
    ({"size": "small-1", "mode": "slow"},
     [("spec.mode", "NotSupported",
       'Unsupported value: "slow": supported values: "fast", "safe"')]),
    ({"size": "small-1", "tags": ["a", "a"]},
     [("spec.tags[1]", "Duplicate", 'Duplicate value: "a"')]),
    ({"size": "small-1", "nested": {"level": "deep"}},
     [("spec.nested.level", "TypeInvalid",
       'Invalid value: "string": spec.nested.level in body must be of type integer: '
       '"string"')]),
])
def test_validation(spec: dict, expected: list) -> None:
    assert _errors({"spec": spec}) == expected


def test_transition_rule_uses_old_value_only_on_update() -> None:
    assert _errors({"spec": {"size": "small-2"}}) == []
    assert _errors({"spec": {"size": "small-2"}}, old={"spec": {"size": "small-1"}}) == [
        ("spec.size", "Invalid", 'Invalid value: "small-2": size is immutable')]
    assert _errors({"spec": {"size": "small-1"}}, old={"spec": {"size": "small-1"}}) == []


def test_defaults_fill_absent_fields_recursively() -> None:
    obj = {"spec": {"size": "small-1"}}
    schema.default(obj, WIDGET)
    assert obj["spec"] == {"size": "small-1", "replicas": 1, "mode": "safe",
                           "nested": {"level": 3}}


def test_defaults_never_override_given_values() -> None:
    obj = {"spec": {"size": "small-1", "replicas": 4, "nested": {"level": 9}}}
    schema.default(obj, WIDGET)
    assert obj["spec"]["replicas"] == 4 and obj["spec"]["nested"] == {"level": 9}


def test_pruning_drops_unknown_fields_but_keeps_preserved_ones() -> None:
    obj = {"apiVersion": "x/v1", "kind": "Widget",
           "metadata": {"name": "w", "bogus": 1},
           "spec": {"size": "small-1", "color": "red", "extra": {"any": {"thing": 1}}},
           "status": {"phase": "Ok", "junk": True}, "top": 1}
    pruned = schema.prune(obj, WIDGET)
    assert sorted(pruned) == ["metadata.bogus", "spec.color", "status.junk", "top"]
    assert obj == {"apiVersion": "x/v1", "kind": "Widget", "metadata": {"name": "w"},
                   "spec": {"size": "small-1", "extra": {"any": {"thing": 1}}},
                   "status": {"phase": "Ok"}}


@pytest.mark.parametrize(("rule", "bindings", "expected"), [
    ("self == oldSelf", {"self": 1, "oldSelf": 1}, True),
    ("self == oldSelf", {"self": {"a": [1]}, "oldSelf": {"a": [2]}}, False),
    ("self.size() <= 3", {"self": [1, 2]}, True),
    ("size(self) > 0 && self.startsWith('v6e')", {"self": "v6e-16"}, True),
    ("!has(self.x) || self.x > 0", {"self": {}}, True),
    ("!has(self.x) || self.x > 0", {"self": {"x": -1}}, False),
    ("self.all(t, t.n >= 1)", {"self": [{"n": 1}, {"n": 2}]}, True),
    ("self.exists(t, has(t.d))", {"self": [{"n": 1}]}, False),
    ("self.a in ['x', 'y']", {"self": {"a": "y"}}, True),
    ("self.n % 2 == 0 ? self.m == 'even' : self.m == 'odd'", {"self": {"n": 3, "m": "odd"}},
     True),
    ("self.matches('^[a-z]+$')", {"self": "abc"}, True),
])
def test_cel_subset(rule: str, bindings: dict, expected: bool) -> None:
    evaluate = cel.compile_rule(rule)
    assert evaluate is not None and evaluate(bindings) is expected


@pytest.mark.parametrize("rule", ["self.map(x, x).sort()", "quantity(self).isLessThan(1)",
                                  "lambda: 1"])
def test_cel_rules_outside_the_subset_are_not_evaluated(rule: str) -> None:
    assert cel.compile_rule(rule) is None


def test_jobset_schema_accepts_a_minimal_jobset_and_evaluates_its_rules() -> None:
    from tests.support.apiserver import jobset_crd
    version = jobset_crd()["spec"]["versions"][0]
    js_schema = version["schema"]["openAPIV3Schema"]
    spec = {"replicatedJobs": [{"name": "slice", "replicas": 1, "template": {"spec": {
        "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}}]}
    obj = {"spec": {**copy.deepcopy(spec), "successPolicy": {"operator": "All"}}}
    schema.default(obj, js_schema)
    assert schema.validate(obj, js_schema) == []
    changed = copy.deepcopy(obj)
    changed["spec"]["successPolicy"]["operator"] = "Any"
    found = schema.validate(changed, js_schema, old=obj)
    assert [(e.field, e.detail) for e in found] == [("spec.successPolicy", "Value is immutable")]
