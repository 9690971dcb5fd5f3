"""A job's spec is validated once per generation, not on every reconcile pass."""

import pytest

from tpujob.controller.reconcile import Reconciler
from tpujob.controller.settings import OperatorSettings

pytestmark = pytest.mark.unit


def _job(generation: int, slice_name: str = "v6e-16") -> dict:
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": generation},
            "spec": {"slice": slice_name, "image": "trainer:1", "output": "gs://bucket/run",
                     "trainer": {"config": {"train": {"global_batch": 16}}}}}


def test_the_verdict_is_kept_per_generation_and_dropped_on_delete():
    r = Reconciler(kube=None, settings=OperatorSettings())
    first = r._validate(_job(1))
    assert first.valid and r._validate(_job(1)) is first
    changed = r._validate(_job(2, "v6e-12"))
    assert not changed.valid and r._validate(_job(2, "v6e-12")) is changed
    r.forget("u")
    assert r._validate(_job(2, "v6e-12")) is not changed
