"""The differential conformance suite: every case of cases.py is sent to the embedded API server
and to kube-apiserver v1.35.4, and their answers must be the same (harness.py says what is left
out of the comparison, and why). Where they still differ, KNOWN says so, precisely: the case
asserts exactly those differences, so a difference that goes away or changes fails the test
too. docs/local-apiserver.md lists each with the reason it is kept.

    .venv/bin/python tools/conformance_report.py     # the differences, printed, never failing
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conformance.cases import CASES
from tests.conformance.harness import diff_exchanges, run_case

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Like:
    """A value matching a regular expression (for texts that quote generated values)."""

    pattern: str

    def matches(self, value: Any) -> bool:
        return isinstance(value, str) and re.fullmatch(self.pattern, value, re.S) is not None


PATCHED = r'"\{\\"apiVersion\\":.*\}": strict decoding error: unknown field "spec.shape"'
STRICT_PATCH = ' "" is invalid: patch: Invalid value: ' + PATCHED
FINALIZER_ADDED = {"reason": "FieldValueForbidden", "field": "metadata.finalizers",
                   "message": "Forbidden: no new finalizers can be added if the object is being "
                              'deleted, found new finalizers []string{"x.io/c"}'}

# case id -> {path: (kube-apiserver's value, the embedded server's)}: the differences kept.
KNOWN: dict[str, dict[str, tuple[Any, Any]]] = {
    # The words of a malformed label selector: kube-apiserver's come from its lexer
    # (k8s.io/apimachinery/pkg/labels/selector.go); the code (400) and reason are the same.
    "list-labels": {"[6].body.message": (
        "unable to parse requirement: found '', expected: ',' or ')'",
        "unable to parse requirement: 'tier in (a'")},
    # The patched object quoted in the refusal holds what each server keeps: kube-apiserver's
    # managedFields (an Update entry per write) and each server's uid and resourceVersion.
    "field-validation-custom": {
        "[3].body.details.causes[0].message": (Like("Invalid value: " + PATCHED),
                                               Like("Invalid value: " + PATCHED)),
        "[3].body.message": (Like(STRICT_PATCH), Like(STRICT_PATCH))},
    # kube-apiserver lists the finalizer error twice (ValidateObjectMetaUpdate runs in both
    # the generic update and the ConfigMap strategy); its message says it once.
    "delete-finalizers": {"[5].body.details.causes": ([FINALIZER_ADDED, FINALIZER_ADDED],
                                                      [FINALIZER_ADDED])},
}


def _same(expected: Any, value: Any) -> bool:
    return expected.matches(value) if isinstance(expected, Like) else expected == value


def _shown(value: Any) -> str:
    return value.pattern if isinstance(value, Like) else json.dumps(value)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case, real, embedded) -> None:
    """`case.about`: the same requests to both servers, the same answers."""
    found = {path: (a, b) for path, a, b in
             diff_exchanges(run_case(real, case.steps), run_case(embedded, case.steps))}
    known = KNOWN.get(case.id, {})
    unexpected = [f"{path}\n  kube-apiserver: {_shown(a)}\n  embedded:       {_shown(b)}"
                  for path, (a, b) in found.items()
                  if path not in known or not (_same(known[path][0], a)
                                               and _same(known[path][1], b))]
    gone = [path for path in known if path not in found]
    assert not unexpected and not gone, (
        f"{case.id} ({case.about}):\n" + "\n".join(unexpected) +
        (f"\nknown differences no longer seen: {gone}" if gone else ""))


def test_every_known_difference_names_a_case() -> None:
    assert set(KNOWN) <= {c.id for c in CASES}
    assert len({c.id for c in CASES}) == len(CASES)
    assert all(known for known in KNOWN.values())
