"""Label and field selector parsing and matching (pure, table-driven)."""

from __future__ import annotations

import pytest

from tpujob.local.apiserver.selectors import (
    matches_fields,
    matches_labels,
    parse_field_selector,
    parse_label_selector,
)

pytestmark = pytest.mark.unit

LABELS = {"app": "web", "tier": "front", "tpujob.dev/slice": "v6e-16"}


@pytest.mark.parametrize(("selector", "expected"), [
    ("", True),
    ("app=web", True),
    ("app==web", True),
    ("app=db", False),
    ("app!=db", True),
    ("app!=web", False),
    ("missing!=x", True),
    ("app in (web, db)", True),
    ("app in (db)", False),
    ("app notin (db,cache)", True),
    ("app notin (web)", False),
    ("missing notin (web)", True),
    ("tier", True),
    ("missing", False),
    ("!missing", True),
    ("!tier", False),
    ("app=web,tier=front", True),
    ("app=web,tier=back", False),
    ("tpujob.dev/slice=v6e-16", True),
    ("app in (web),!missing,tier", True),
])
def test_label_selector_matching(selector: str, expected: bool) -> None:
    assert matches_labels(parse_label_selector(selector), LABELS) is expected


@pytest.mark.parametrize("selector", ["app in web", "a b", "=x", "app=(x)", "Bad Key=x",
                                      "app=" + "x" * 64])
def test_label_selector_syntax_errors(selector: str) -> None:
    with pytest.raises(ValueError):
        parse_label_selector(selector)


OBJ = {"metadata": {"name": "a", "namespace": "ns"}, "status": {"phase": "Running"}}
FIELDS = frozenset({"metadata.name", "metadata.namespace", "status.phase"})


@pytest.mark.parametrize(("selector", "expected"), [
    ("metadata.name=a", True),
    ("metadata.name==a", True),
    ("metadata.name=b", False),
    ("metadata.name!=b", True),
    ("metadata.namespace=ns,status.phase=Running", True),
    ("metadata.namespace=ns,status.phase!=Running", False),
])
def test_field_selector_matching(selector: str, expected: bool) -> None:
    assert matches_fields(parse_field_selector(selector, FIELDS), OBJ) is expected


@pytest.mark.parametrize("selector", ["spec.other=x", "metadata.name"])
def test_field_selector_errors(selector: str) -> None:
    with pytest.raises(ValueError):
        parse_field_selector(selector, FIELDS)


# Label keys and values as apimachinery validates them in a selector: a key is a qualified name
# (an optional DNS-subdomain prefix of at most 253 characters and a slash, then a name of at
# most 63 characters), a value at most 63 characters, possibly empty.
@pytest.mark.parametrize(("selector", "valid"), [
    ("n" * 63 + "=x", True),
    ("n" * 64 + "=x", False),
    ("a" * 70 + ".example.com/name=x", True),          # a long prefix is not the name
    ("a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 61 + "/x=y", True),  # 253
    ("a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 62 + "/x=y", False),  # 254
    ("example..com/x=y", False),                      # an empty DNS label
    ("Example.com/x=y", False),                       # a DNS name is lower case
    ("/x=y", False),                                  # a slash needs a prefix
    ("a/b/c=y", False),
    ("app=" + "v" * 63, True),
    ("app=", True),                                   # the empty value
    ("app in (" + "v" * 63 + ")", True),
    ("app in (" + "v" * 64 + ")", False),
])
def test_label_key_and_value_limits(selector: str, valid: bool) -> None:
    if valid:
        assert parse_label_selector(selector)
    else:
        with pytest.raises(ValueError, match="invalid label"):
            parse_label_selector(selector)


@pytest.mark.parametrize(("selector", "labels", "expected"), [
    ("app=", {"app": ""}, True),          # an empty value is a value
    ("app=", {}, False),
    ("app in (), tier", {"app": "", "tier": "x"}, True),   # "()" is the set {""}, as upstream
    ("app in (web, db),tier=front", LABELS, True),          # a set, then another term
    ("app in (web,db),tier=back", LABELS, False),
    ("app notin (db,cache),!missing", LABELS, True),
])
def test_label_selector_sets_and_empty_values(selector: str, labels: dict, expected: bool) -> None:
    assert matches_labels(parse_label_selector(selector), labels) is expected


def test_no_selector_selects_everything() -> None:
    assert parse_label_selector(None) == [] and parse_field_selector(None, FIELDS) == []
    assert matches_labels([], None) and matches_fields([], OBJ)


def test_field_selector_on_a_boolean_and_a_missing_field() -> None:
    node = {"metadata": {"name": "n"}, "spec": {"unschedulable": True}}
    fields = frozenset({"metadata.name", "spec.unschedulable", "spec.nodeName"})
    assert matches_fields(parse_field_selector("spec.unschedulable=true", fields), node)
    assert not matches_fields(parse_field_selector("spec.unschedulable=false", fields), node)
    # A field the object lacks reads as the empty string (spec.nodeName= : unscheduled pods).
    assert matches_fields(parse_field_selector("spec.nodeName=", fields), node)


def test_a_parsed_requirement_cannot_be_changed_in_place() -> None:
    """A watch keeps its parsed selector for every event it filters."""
    from dataclasses import FrozenInstanceError

    (req,) = parse_label_selector("app=web")
    with pytest.raises(FrozenInstanceError):
        req.values = ("db",)  # type: ignore[misc]
