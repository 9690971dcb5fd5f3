"""The trainer config: YAML + overrides, errors naming the dotted field, no JAX on import."""

from __future__ import annotations

import subprocess
import sys

import pydantic
import pytest

from tests.trainer.helpers import TINY_YAML, clean_env
from tpujob_trainer.config import ConfigError, TrainerConfig

pytestmark = pytest.mark.unit


def test_tiny_yaml_loads_and_overrides_apply():
    cfg = TrainerConfig.load(TINY_YAML, ["train.steps=7", "mesh.ici={fsdp: -1}", "output=gs://b/run"])
    assert cfg.train.steps == 7
    assert cfg.mesh.ici == {"fsdp": -1}
    assert cfg.output == "gs://b/run"
    assert cfg.model.d_model == 64


def test_required_names_exist():
    cfg = TrainerConfig.from_dict({}, ["train.steps=3", "checkpoint.every=2", "output=/x"])
    assert (cfg.train.steps, cfg.checkpoint.every, cfg.output) == (3, 2, "/x")


def test_round_trips_through_yaml(tmp_path):
    cfg = TrainerConfig.load(TINY_YAML, ["optimizer.kind=muon", "mesh.dcn={data: 2}"])
    path = tmp_path / "c.yaml"
    path.write_text(cfg.to_yaml())
    assert TrainerConfig.load(path) == cfg


def test_every_problem_is_listed_with_its_dotted_field():
    with pytest.raises(ConfigError) as err:
        TrainerConfig.from_dict(
            {"train": {"stepz": 3, "global_batch": 0}, "model": {"n_heads": 3}},
            ["optimizer.lr=fast", "mesh.ici={foo: 2}"])
    msg = str(err.value)
    assert "train.stepz: unknown key" in msg
    assert "train.global_batch" in msg
    assert "optimizer.lr" in msg and "'fast'" in msg
    assert "mesh.ici" in msg and "foo" in msg
    assert "model.n_kv_heads" in msg
    assert len(err.value.problems) == 5


def test_unknown_section_and_bad_override_syntax():
    with pytest.raises(ConfigError, match="trainz: unknown key"):
        TrainerConfig.from_dict({"trainz": {}})
    with pytest.raises(ConfigError, match="not of the form"):
        TrainerConfig.from_dict({}, ["train.steps"])
    with pytest.raises(ConfigError, match="train.steps is not a section"):
        TrainerConfig.from_dict({}, ["train.steps=3", "train.steps.x=1"])


def test_cross_field_rules():
    with pytest.raises(ConfigError, match="train.grad_accum"):
        TrainerConfig.from_dict({"train": {"global_batch": 8, "grad_accum": 3}})
    with pytest.raises(ConfigError, match="at most one axis of mesh.ici may be -1"):
        TrainerConfig.from_dict({"mesh": {"ici": {"data": -1, "fsdp": -1}}})
    with pytest.raises(ConfigError, match="model.moe: moe.experts_per_token"):
        TrainerConfig.from_dict({"model": {"moe": {"num_experts": 2, "experts_per_token": 3}}})


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        TrainerConfig.load(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        TrainerConfig.load(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n")
    with pytest.raises(ConfigError, match="mapping of sections"):
        TrainerConfig.load(listy)


def test_config_is_frozen():
    cfg = TrainerConfig()
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        cfg.train.steps = 5  # type: ignore[misc]


def test_wandb_has_no_key_field():
    with pytest.raises(ConfigError, match="metrics.wandb.api_key: unknown key"):
        TrainerConfig.from_dict({"metrics": {"wandb": {"project": "p", "api_key": "secret"}}})


def test_importing_the_config_never_imports_jax():
    code = ("import sys, tpujob_trainer.config, tpujob_trainer.env, tpujob_trainer.exits; "
            "bad = [m for m in ('jax', 'flax', 'optax', 'orbax') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, env=clean_env())
