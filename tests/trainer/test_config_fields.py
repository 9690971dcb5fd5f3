"""The trainer config field by field: what a job that leaves a field out trains with, the range
each field accepts (at its boundaries, with the refusal naming the field and what is valid), the
cross-field rules, how `a.b=c` overrides parse, and the ConfigError text a user reads."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from tpujob_plan.model_shape import ModelShape
from tpujob_trainer.config import ConfigError, TrainerConfig
from tpujob_trainer.config.compile_cache import CompileCacheConfig

pytestmark = pytest.mark.unit

DEFAULTS = {
    "model": {
        "vocab_size": 512, "d_model": 256, "n_layers": 4, "n_heads": 4, "n_kv_heads": 4,
        "head_dim": 64, "mlp_dim": 1024, "tie_embeddings": False, "rope_theta": 10000.0,
        "norm_eps": 1e-6,
        "moe": {"num_experts": 0, "experts_per_token": 2, "num_shared_experts": 0,
                "mlp_dim": None, "every": 1, "first_dense_layers": 0, "capacity_factor": 1.25,
                "routing": "capacity", "load_balance_weight": 0.01},
        "remat": "auto", "scan_layers": True, "attention": "auto", "vocab_chunks": "auto", "mlp_chunks": "auto", "dtype": "bfloat16", "param_dtype": "float32"},
    "train": {"steps": 100, "global_batch": 8, "seq_len": 256, "grad_accum": 1, "seed": 0},
    "optimizer": {
        "kind": "adamw", "lr": 3e-4, "warmup_steps": 10, "schedule": "cosine",
        "min_lr_ratio": 0.1, "b1": 0.9, "b2": 0.95, "eps": 1e-8, "weight_decay": 0.1,
        "decay_norms_and_embeddings": False, "clip_norm": 1.0, "muon_lr": 0.02,
        "muon_momentum": 0.95, "muon_weight_decay": 0.0},
    "mesh": {"ici": {"fsdp": -1}, "dcn": {}, "optimizer_sharding": "auto"},
    "data": {"kind": "synthetic", "path": None, "text_field": "text", "tokenizer": "byte",
             "eos_token": None, "token_dtype": "uint16", "shuffle": True, "seed": None,
             "on_exhausted": "repeat", "synthetic_pattern": "random"},
    "checkpoint": {"enabled": True, "every": 100, "keep": 3, "async_save": True,
                   "save_timeout_s": 1200, "resume": True, "init_params_from": None,
                   "init_params_step": None,
                   "local": {"directory": None, "every": 10, "keep": 2}},
    "metrics": {"log_every": 1, "memory_every": 100, "port": 9431, "measure_peak": True,
                "wandb": {"project": None, "entity": None, "run_name": None, "mode": "online",
                          "tags": []}},
    "compile_cache": {"enabled": True, "directory": None, "executables": True,
                      "min_compile_time_s": 0.0},
    "output": "out",
}


def _get(cfg: TrainerConfig, dotted: str):
    value = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _problems(d: dict | None = None, overrides: list[str] = ()) -> list[str]:
    with pytest.raises(ConfigError) as err:
        TrainerConfig.from_dict(d or {}, list(overrides))
    return err.value.problems


def test_a_config_that_says_nothing_trains_with_the_documented_defaults():
    assert TrainerConfig().model_dump(mode="json") == DEFAULTS
    assert TrainerConfig.from_dict(None) == TrainerConfig.from_dict({}) == TrainerConfig()


GE1 = "Input should be greater than or equal to 1"
GE0 = "Input should be greater than or equal to 0"
GT0 = "Input should be greater than 0"
LT1 = "Input should be less than 1"
NONEMPTY = "String should have at least 1 character"


# (field, other overrides the values need, accepted values, refused value, what is valid)
BOUNDS = [
    ("train.steps", [], [1], 0, GE1),
    ("train.global_batch", ["train.grad_accum=1"], [1], 0, GE1),
    ("train.seq_len", [], [1], 0, GE1),
    ("train.grad_accum", [], [1, 8], 0, GE1),
    ("model.vocab_size", [], [1], 0, GE1),
    ("model.d_model", [], [1], 0, GE1),
    ("model.n_layers", [], [1], 0, GE1),
    ("model.n_heads", ["model.n_kv_heads=1"], [1], 0, GE1),
    ("model.n_kv_heads", [], [1], 0, GE1),
    ("model.head_dim", [], [1], 0, GE1),
    ("model.mlp_dim", [], [1], 0, GE1),
    ("model.rope_theta", [], [1e-9], 0, GT0),
    ("model.norm_eps", [], [1e-12], 0, GT0),
    ("model.moe.num_experts", [], [0], -1, GE0),
    ("model.moe.experts_per_token", [], [1], 0, GE1),
    ("model.moe.num_shared_experts", [], [0], -1, GE0),
    ("model.moe.mlp_dim", [], [1], 0, GE1),
    ("model.moe.every", [], [1], 0, GE1),
    ("model.moe.first_dense_layers", [], [0], -1, GE0),
    ("model.moe.capacity_factor", [], [1e-9], 0, GT0),
    ("model.moe.load_balance_weight", [], [0.0], -0.01, GE0),
    ("optimizer.lr", [], [1e-12], 0, GT0),
    ("optimizer.warmup_steps", [], [0], -1, GE0),
    ("optimizer.min_lr_ratio", [], [0.0, 1.0], -0.1, GE0),
    ("optimizer.min_lr_ratio", [], [1.0], 1.1, "Input should be less than or equal to 1"),
    ("optimizer.b1", [], [0.0], -0.1, GE0),
    ("optimizer.b1", ["optimizer.b2=0.999"], [0.99], 1.0, LT1),
    ("optimizer.b2", [], [0.0], -0.1, GE0),
    ("optimizer.b2", [], [0.999], 1.0, LT1),
    ("optimizer.eps", [], [1e-30], 0, GT0),
    ("optimizer.weight_decay", [], [0.0], -0.1, GE0),
    ("optimizer.clip_norm", [], [1e-9, None], 0, GT0),
    ("optimizer.muon_lr", [], [1e-9], 0, GT0),
    ("optimizer.muon_momentum", [], [0.0], -0.1, GE0),
    ("optimizer.muon_momentum", [], [0.99], 1.0, LT1),
    ("optimizer.muon_weight_decay", [], [0.0], -0.1, GE0),
    ("checkpoint.every", [], [1], 0, GE1),
    ("checkpoint.keep", [], [1], 0, GE1),
    ("checkpoint.save_timeout_s", [], [1], 0, GE1),
    ("checkpoint.init_params_step", [], [0], -1, GE0),
    ("checkpoint.local.every", [], [1], 0, GE1),
    ("checkpoint.local.keep", [], [1], 0, GE1),
    ("metrics.log_every", [], [1], 0, GE1),
    ("metrics.memory_every", [], [1], 0, GE1),
    ("metrics.port", [], [0, 65535, None], -1, GE0),
    ("metrics.port", [], [65535], 65536, "Input should be less than or equal to 65535"),
    ("compile_cache.min_compile_time_s", [], [0.0], -0.5, GE0),
    ("compile_cache.directory", [], ["c", None], "", NONEMPTY),
    ("data.text_field", [], ["t"], "", NONEMPTY),
    ("output", [], ["o"], "", NONEMPTY),
]


@pytest.mark.parametrize(("field", "context", "accepted", "refused", "valid"), BOUNDS,
                         ids=[f"{b[0]}={b[3]!r}" for b in BOUNDS])
def test_each_field_accepts_its_range_and_a_refusal_names_the_field(
        field, context, accepted, refused, valid):
    for value in accepted:
        shown = "null" if value is None else repr(value) if isinstance(value, str) else value
        cfg = TrainerConfig.from_dict({}, [*context, f"{field}={shown}"])
        assert _get(cfg, field) == value
    shown = repr(refused) if isinstance(refused, str) else refused
    assert _problems({}, [*context, f"{field}={shown}"]) == [
        f"{field}: {valid} (got {refused!r})"]


# (config, the one problem or None when accepted): each rule at its boundary, both sides.
CROSS_FIELD = [
    ({"train": {"global_batch": 8, "grad_accum": 8}}, None),
    ({"train": {"global_batch": 6, "grad_accum": 4}},
     "train: train.grad_accum (4) must divide train.global_batch (6)"),
    ({"model": {"n_heads": 8, "n_kv_heads": 2}}, None),
    ({"model": {"n_heads": 4, "n_kv_heads": 8}},
     "model: model.n_kv_heads (8) must divide model.n_heads (4)"),
    ({"model": {"n_layers": 4, "moe": {"first_dense_layers": 4}}}, None),
    ({"model": {"n_layers": 4, "moe": {"first_dense_layers": 5}}},
     "model: model.moe.first_dense_layers (5) must be <= model.n_layers (4)"),
    ({"model": {"vocab_size": 512, "vocab_chunks": 1}}, None),
    ({"model": {"vocab_size": 512, "vocab_chunks": 512}}, None),
    ({"model": {"vocab_size": 512, "vocab_chunks": 0}},
     "model: model.vocab_chunks (0) must be auto or a count from 1 to model.vocab_size (512)"),
    ({"model": {"vocab_size": 512, "vocab_chunks": 513}},
     "model: model.vocab_chunks (513) must be auto or a count from 1 to model.vocab_size (512)"),
    ({"model": {"mlp_chunks": 1}}, None),
    ({"model": {"attention": "cudnn", "head_dim": 128}}, None),
    ({"model": {"attention": "cudnn", "dtype": "float32"}},
     "model: model.attention cudnn cannot run this model: it takes bfloat16 or float16 "
     "activations, not float32; use auto or xla"),
    ({"model": {"attention": "cudnn", "head_dim": 136}},
     "model: model.attention cudnn cannot run this model: it takes a model.head_dim of at most "
     "128, a multiple of 8, not 136; use auto or xla"),
    ({"model": {"attention": "cudnn", "head_dim": 60}},
     "model: model.attention cudnn cannot run this model: it takes a model.head_dim of at most "
     "128, a multiple of 8, not 60; use auto or xla"),
    ({"model": {"mlp_chunks": 64}}, None),   # no chunk narrower than a lane: fewer are taken
    ({"model": {"mlp_chunks": 0}}, "model: model.mlp_chunks (0) must be auto or a count of at least 1"),
    ({"model": {"moe": {"num_experts": 2, "experts_per_token": 2}}}, None),
    ({"model": {"moe": {"num_experts": 0, "experts_per_token": 4}}}, None),
    ({"model": {"moe": {"num_experts": 2, "experts_per_token": 3}}},
     "model.moe: moe.experts_per_token (3) must be <= moe.num_experts (2)"),
    ({"optimizer": {"b1": 0.9, "b2": 0.9}}, None),
    ({"optimizer": {"b1": 0.9, "b2": 0.0}}, None),
    ({"optimizer": {"b1": 0.9, "b2": 0.8}},
     "optimizer: optimizer.b2 (0.8) is smaller than optimizer.b1 (0.9); did you swap them?"),
    ({"data": {"kind": "text", "path": "gs://b/docs"}}, None),
    ({"data": {"kind": "jsonl"}},
     "data: data.path is required when data.kind is 'jsonl' (a file, directory, glob, or "
     "gs:// prefix)"),
    ({"data": {"kind": "synthetic", "path": "gs://b/docs"}},
     "data: data.path is set but data.kind is 'synthetic'; set data.kind to text, jsonl or "
     "tokens to read files"),
    ({"mesh": {"ici": {"tensor": 1, "fsdp": -1}, "dcn": {"data": -1}}}, None),
    ({"mesh": {"ici": {"tensor": 0}}},
     "mesh.ici: mesh.ici sizes must be >= 1 or -1 (fill in), got {'tensor': 0}"),
    ({"mesh": {"dcn": {"data": -2}}},
     "mesh.dcn: mesh.dcn sizes must be >= 1 or -1 (fill in), got {'data': -2}"),
    ({"mesh": {"ici": {"data": -1, "fsdp": -1}}},
     "mesh.ici: at most one axis of mesh.ici may be -1, got {'data': -1, 'fsdp': -1}"),
    ({"mesh": {"ici": {"foo": 2, "bar": 1, "fsdp": 2}}},
     "mesh.ici: unknown mesh axis 'bar', 'foo' in mesh.ici; valid axes: data, fsdp, context, "
     "tensor, expert"),
]


@pytest.mark.parametrize(("d", "problem"), CROSS_FIELD)
def test_cross_field_rules_at_their_boundaries(d, problem):
    if problem is None:
        TrainerConfig.from_dict(d)
    else:
        assert _problems(d) == [problem]


def test_mesh_axes_are_kept_in_mesh_order_whatever_order_they_are_written_in():
    cfg = TrainerConfig.from_dict({"mesh": {"ici": {"tensor": 2, "data": 2, "fsdp": -1},
                                            "dcn": {"expert": 1, "data": 2}}})
    assert list(cfg.mesh.ici.items()) == [("data", 2), ("fsdp", -1), ("tensor", 2)]
    assert list(cfg.mesh.dcn.items()) == [("data", 2), ("expert", 1)]


# (override, the field it sets, the value read back): values parse as YAML.
OVERRIDES = [
    ("train.steps=7", "train.steps", 7),
    (" train.steps = 7", "train.steps", 7),
    ("optimizer.lr=1e-3", "optimizer.lr", 0.001),
    ("optimizer.clip_norm=null", "optimizer.clip_norm", None),
    ("model.tie_embeddings=true", "model.tie_embeddings", True),
    ("metrics.wandb.tags=[a, b]", "metrics.wandb.tags", ["a", "b"]),
    ("mesh.ici={tensor: 2, fsdp: -1}", "mesh.ici", {"fsdp": -1, "tensor": 2}),
    ("output=gs://b/run=1", "output", "gs://b/run=1"),
    ("checkpoint.local.directory=/mnt/fast", "checkpoint.local.directory", "/mnt/fast"),
    ("data.eos_token=", "data.eos_token", ""),
]


@pytest.mark.parametrize(("override", "field", "value"), OVERRIDES)
def test_an_override_sets_its_field_to_the_value_parsed_as_yaml(override, field, value):
    assert _get(TrainerConfig.from_dict({}, [override]), field) == value


def test_overrides_merge_into_the_file_and_the_last_one_wins():
    d = {"model": {"d_model": 64, "moe": None}, "train": {"steps": 3}}
    cfg = TrainerConfig.from_dict(d, ["model.n_layers=2", "model.moe.num_experts=4",
                                      "train.steps=5", "train.steps=6"])
    assert (cfg.model.d_model, cfg.model.n_layers, cfg.model.moe.num_experts) == (64, 2, 4)
    assert cfg.train.steps == 6
    assert d == {"model": {"d_model": 64, "moe": None}, "train": {"steps": 3}}  # not touched


@pytest.mark.parametrize("override", [
    "train.steps", "=3", " =3", ".steps=3", "train.=3", "train..steps=3"])
def test_an_override_not_of_the_form_section_field_value_is_refused(override):
    assert _problems({}, [override]) == [
        f"override {override!r} is not of the form section.field=value"]


def test_an_override_into_a_value_names_the_value_that_is_not_a_section():
    assert _problems({}, ["model.moe.every=2", "model.moe.every.k=1", "train.steps=3",
                          "train.steps.x=1"]) == [
        "override 'model.moe.every.k=1': model.moe.every is not a section",
        "override 'train.steps.x=1': train.steps is not a section"]


def test_a_value_that_is_not_yaml_reaches_the_field_as_text():
    assert _problems({}, ["optimizer.lr=["]) == [
        "optimizer.lr: Input should be a valid number, unable to parse string as a number "
        "(got '[')"]


def test_the_error_text_counts_its_problems_and_lists_each_on_its_own_line():
    one = ConfigError(["train.steps: too many"])
    assert str(one) == "invalid trainer config (1 problem):\n  - train.steps: too many"
    two = ConfigError(["a: x", "b: y"])
    assert str(two) == "invalid trainer config (2 problems):\n  - a: x\n  - b: y"
    assert _problems({"train": {"steps": 0, "stepz": 1}}) == [
        "train.steps: Input should be greater than or equal to 1 (got 0)",
        "train.stepz: unknown key; did you mean train.steps? train takes: steps, global_batch, "
        "seq_len, grad_accum, seed"]


def test_loading_from_a_file_or_from_nothing(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as err:
        TrainerConfig.load(missing)
    assert err.value.problems == [f"cannot read config file {missing}: No such file or directory"]
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert TrainerConfig.load(empty) == TrainerConfig()
    assert TrainerConfig.load(None, ["train.steps=3"]).train.steps == 3


def test_the_printed_config_lists_sections_and_fields_in_schema_order():
    printed = yaml.safe_load(TrainerConfig().to_yaml())
    assert list(printed) == ["model", "train", "optimizer", "mesh", "data", "checkpoint",
                             "metrics", "compile_cache", "output"]
    assert list(printed["train"]) == ["steps", "global_batch", "seq_len", "grad_accum", "seed"]


@pytest.mark.parametrize("section, field", [
    ("", "output"), ("model", "d_model"), ("model.moe", "every"), ("train", "steps"),
    ("optimizer", "lr"), ("mesh", "ici"), ("data", "kind"), ("checkpoint", "every"),
    ("checkpoint.local", "every"), ("metrics", "port"), ("metrics.wandb", "project"),
    ("compile_cache", "enabled")])
def test_every_section_is_frozen_once_validated(section, field):
    cfg = TrainerConfig()
    obj = _get(cfg, section) if section else cfg
    with pytest.raises(ValidationError, match="frozen"):
        setattr(obj, field, getattr(obj, field))


def test_the_planner_sees_the_model_s_dimensions():
    dense = TrainerConfig().model.to_shape()
    assert dense == ModelShape(vocab_size=512, d_model=256, n_layers=4, n_heads=4, n_kv_heads=4,
                               head_dim=64, mlp_dim=1024, tie_embeddings=False, num_experts=0,
                               experts_per_token=0, num_shared_experts=0, moe_mlp_dim=1024,
                               moe_every=1, first_dense_layers=0)
    moe = TrainerConfig.from_dict({"model": {"tie_embeddings": True, "moe": {
        "num_experts": 8, "experts_per_token": 2, "num_shared_experts": 1, "mlp_dim": 128,
        "every": 2, "first_dense_layers": 1}}}).model.to_shape()
    assert moe == ModelShape(vocab_size=512, d_model=256, n_layers=4, n_heads=4, n_kv_heads=4,
                             head_dim=64, mlp_dim=1024, tie_embeddings=True, num_experts=8,
                             experts_per_token=2, num_shared_experts=1, moe_mlp_dim=128,
                             moe_every=2, first_dense_layers=1)


JAX_DIR = {"JAX_COMPILATION_CACHE_DIR": "gs://shared/jax"}


@pytest.mark.parametrize(("cache", "output", "env", "where"), [
    ({"enabled": False, "directory": "gs://c/x"}, "out", {}, None),
    ({"enabled": False}, "out", JAX_DIR, None),
    ({"directory": "gs://c/x"}, "out", {}, "gs://c/x"),
    ({"directory": "gs://c/x"}, "out", JAX_DIR, "gs://c/x"),
    ({}, "gs://b/run/", JAX_DIR, "gs://shared/jax"),
    ({}, "gs://b/run/", {"JAX_COMPILATION_CACHE_DIR": ""}, "gs://b/run/compile-cache"),
    ({}, "gs://b/run/", {}, "gs://b/run/compile-cache"),
    ({}, "out", {"OTHER": "x"}, "out/compile-cache"),
])
def test_the_compile_cache_lives_where_it_is_told_or_jax_is_or_under_the_output(cache, output,
                                                                                 env, where):
    assert CompileCacheConfig(**cache).resolve_directory(output, env) == where
