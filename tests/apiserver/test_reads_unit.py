"""The read helpers the write and delete handlers share: the object as its version serves it,
and one predicate from a request's selectors and the name in its path (a named watch, a
DELETE of a collection), table-driven."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from tpujob.local.apiserver import errors
from tpujob.local.apiserver.reads import request_matcher, versioned
from tpujob.local.apiserver.resources import BUILTINS
from tpujob.local.apiserver.server import Target

pytestmark = pytest.mark.unit

CONFIGMAPS = next(r for r in BUILTINS if r.plural == "configmaps")


def _cm(name: str, **labels: str) -> dict:
    return {"kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns",
                                              "labels": labels}}


OBJECTS = [_cm("a", app="x"), _cm("b", app="x"), _cm("c", app="y")]


@pytest.mark.parametrize("query, name, matched", [
    ("", None, ["a", "b", "c"]),
    ("?labelSelector=app%3Dx", None, ["a", "b"]),
    ("?fieldSelector=metadata.name%3Dc", None, ["c"]),
    ("", "b", ["b"]),                                   # the name in the path filters too
    ("?labelSelector=app%3Dy", "b", []),
    ("?labelSelector=app%3Dx&fieldSelector=metadata.name!%3Da", None, ["b"]),
])
def test_a_request_matches_by_its_selectors_and_its_name(query, name, matched):
    target = Target(CONFIGMAPS, "ns", name, None, watch=True)
    matches = request_matcher(make_mocked_request("GET", f"/api/v1/namespaces/ns/configmaps"
                                                         f"{query}"), target)
    assert [o["metadata"]["name"] for o in OBJECTS if matches(o)] == matched


def test_a_selector_that_does_not_parse_is_a_bad_request():
    target = Target(CONFIGMAPS, "ns", None, None, watch=False)
    with pytest.raises(errors.ApiError) as err:
        request_matcher(make_mocked_request("GET", "/x?labelSelector=a%3D%3D%3Db"), target)
    assert err.value.code == 400


def test_an_object_is_served_as_its_kinds_version():
    obj = _cm("a")
    assert versioned(CONFIGMAPS, obj) == {**obj, "apiVersion": "v1"}
    assert "apiVersion" not in obj  # the stored object is left as it is
