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
