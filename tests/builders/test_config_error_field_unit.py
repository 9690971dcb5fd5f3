"""A trainer config error names where it comes from: the override that breaks the config, or
the config itself."""

from __future__ import annotations

import pytest

from tpujob.validation import validate_job

pytestmark = pytest.mark.unit

TINY = {"model": {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4,
                  "n_kv_heads": 2, "head_dim": 16, "mlp_dim": 128},
        "train": {"steps": 10, "global_batch": 16, "seq_len": 64}}


def _job(config: dict, overrides: list[str]) -> dict:
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"slice": "v6e-8", "image": "t:1", "output": "gs://bucket/run",
                     "trainer": {"config": config, "overrides": overrides}}}


@pytest.mark.parametrize("config, overrides, field", [
    (TINY, ["train.steps=20", "train.steps=-3"], "spec.trainer.overrides[1]"),
    (TINY, ["train.stepz=20"], "spec.trainer.overrides[0]"),
    ({**TINY, "train": {**TINY["train"], "steps": -1}}, ["train.seq_len=64"],
     "spec.trainer.config"),
    ({**TINY, "train": {**TINY["train"], "steps": -1}}, [], "spec.trainer.config"),
])
def test_config_errors_name_their_source(config, overrides, field):
    verdict = validate_job(_job(config, overrides))
    assert verdict.reason == "ConfigError"
    assert verdict.field == field and verdict.message.startswith(f"{field}: ")


def test_an_unknown_moe_routing_names_the_field_and_the_valid_ones():
    verdict = validate_job(_job(TINY, ["model.moe.routing=dropfree"]))
    assert verdict.reason == "ConfigError" and verdict.field == "spec.trainer.overrides[0]"
    assert "model.moe.routing" in verdict.message
    assert "'capacity'" in verdict.message and "'dropless'" in verdict.message
    assert validate_job(_job(TINY, ["model.moe.routing=dropless"])).reason != "ConfigError"
