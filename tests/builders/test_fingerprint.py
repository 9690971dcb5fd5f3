"""The spec fingerprint: which fields changed since the JobSet was built, ignoring the ones the
operator applies live."""

import pytest

from tpujob.api.resource import load_spec
from tpujob.builders.fingerprint import (
    _digest,
    build_fingerprint,
    changed_fields,
    encode_fingerprint,
)

pytestmark = pytest.mark.unit
BASE = {"slice": "v6e-16", "image": "trainer:1", "output": "gs://bucket/run"}


@pytest.mark.parametrize("change, fields", [
    ({}, ()),
    ({"image": "trainer:2"}, ("spec.image",)),
    ({"suspend": True}, ()),
    ({"stallTimeoutSeconds": 5, "firstStepTimeoutSeconds": 9}, ()),
    ({"restartPolicy": {"onStall": "Fail"}}, ()),
    ({"restartPolicy": {"maxRestarts": 9}}, ("spec.restartPolicy",)),
    ({"trainer": {"overrides": ["train.steps=5"]}, "env": [{"name": "A", "value": "1"}]},
     ("spec.env", "spec.trainer")),
    ({"image": "trainer:1"}, ()),  # the same value written again
])
def test_changed_fields(change, fields):
    annotation = encode_fingerprint(load_spec(BASE))
    assert changed_fields(load_spec(BASE | change), annotation) == fields


@pytest.mark.parametrize("annotation", [None, "", "not json", "[]"])
def test_unknown_fingerprint_means_the_whole_spec(annotation):
    assert changed_fields(load_spec(BASE), annotation) == ("spec",)


def test_env_value_from_is_hashed_as_written():
    # Sources and optional keys left unset are not hashed as nulls: the fingerprint of a
    # variable does not depend on how many optional keys the API knows.
    value_from = {"secretKeyRef": {"name": "s", "key": "k"}}
    spec = load_spec(BASE | {"env": [{"name": "A", "valueFrom": value_from}]})
    assert build_fingerprint(spec)["env"] == _digest(
        [{"name": "A", "value": None, "valueFrom": value_from}])


GPU = {"slice": "a3-megagpu-8g", "nodes": 2, "image": "trainer:1", "output": "gs://bucket/run",
       "trainer": {"launcher": "torchrun", "command": ["python3", "t.py"]}}


def test_fields_added_later_change_nothing_at_their_defaults():
    """A JobSet built before nodes, gpuNetworks and the launcher existed reads as unchanged."""
    before = build_fingerprint(load_spec(BASE))
    assert {"nodes", "gpuNetworks"}.isdisjoint(before)
    written = load_spec(BASE | {"trainer": {"launcher": "jax", "launcherArgs": []}})
    assert build_fingerprint(written) == before
    assert changed_fields(load_spec(GPU | {"nodes": 3}),
                          encode_fingerprint(load_spec(GPU))) == ("spec.nodes",)
    other = GPU | {"trainer": {**GPU["trainer"], "launcher": "accelerate"}}
    assert changed_fields(load_spec(other), encode_fingerprint(load_spec(GPU))) == (
        "spec.trainer",)
    args = GPU | {"trainer": {**GPU["trainer"], "launcherArgs": ["--max_restarts=1"]}}
    assert changed_fields(load_spec(args), encode_fingerprint(load_spec(GPU))) == (
        "spec.trainer",)
