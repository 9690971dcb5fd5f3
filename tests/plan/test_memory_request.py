"""One memory request for every estimate: `tpujob plan --model FILE`, the operator's admission
check and the trainer's `remat: auto` read the same fields of a trainer config (dtypes, MoE
capacity) and get the same estimate."""

from argparse import Namespace

import pytest
import yaml

from tpujob.planning import PlanRequest, plan_one
from tpujob_plan.memory import MemoryRequest
from tpujob_trainer.config.root import TrainerConfig
from tpujob_trainer.remat import resolve_remat

DOC = {"model": {"d_model": 1024, "n_layers": 8, "n_heads": 8, "n_kv_heads": 8, "head_dim": 128,
                 "mlp_dim": 4096, "vocab_size": 32000, "param_dtype": "bfloat16",
                 "dtype": "float32",
                 "moe": {"num_experts": 4, "experts_per_token": 2, "capacity_factor": 2.0}},
       "train": {"global_batch": 16, "seq_len": 1024}}


def _plan(path, remat="auto"):
    args = Namespace(model=str(path), params=None, batch=None, seq=None, grad_accum=1,
                     remat=remat, optimizer="adamw", slices=1, machine_type=None,
                     containers_per_host=None, ici="", dcn="")
    return plan_one("v6e-8", PlanRequest.from_cli(args))


@pytest.mark.parametrize("remat", ["auto", "none", "full"])
def test_plan_model_file_estimates_as_the_trainer_config_does(tmp_path, remat):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(DOC))
    result = _plan(path, remat)
    cfg = TrainerConfig.from_dict({**DOC, "model": {**DOC["model"], "remat": remat}})
    # The plan estimates for the slice's generation (v6e), as the trainer does on its devices.
    want = cfg.memory_request().estimate(result.mesh.axes, result.plan.hbm_bytes_per_device, "v6e")
    assert result.memory.breakdown == want.breakdown and result.memory.remat == want.remat
    assert resolve_remat(cfg, result.mesh.axes, result.plan.hbm_bytes_per_device,
                         "v6e") == want.remat
    unknown = cfg.memory_request().estimate(result.mesh.axes, result.plan.hbm_bytes_per_device)
    assert unknown.per_device_bytes > want.per_device_bytes   # no generation: the largest allowance


def test_the_files_dtypes_and_capacity_count(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(DOC))
    got = _plan(path, "full").memory.breakdown
    f32 = {**DOC, "model": {**DOC["model"], "param_dtype": "float32", "dtype": "bfloat16",
                            "moe": {**DOC["model"]["moe"], "capacity_factor": 1.0}}}
    path.write_text(yaml.safe_dump(f32))
    base = _plan(path, "full").memory.breakdown
    assert got["params"] == pytest.approx(base["params"] / 2)      # bf16 parameters
    assert got["activations"] == pytest.approx(2 * base["activations"])  # f32 compute
    path.write_text(yaml.safe_dump({**DOC, "model": {**DOC["model"], "param_dtype": "float32"}}))
    none_2 = _plan(path, "none").memory.breakdown["activations"]
    path.write_text(yaml.safe_dump(f32 | {"model": {**f32["model"], "dtype": "float32"}}))
    none_1 = _plan(path, "none").memory.breakdown["activations"]
    assert none_2 > none_1   # capacity factor 2.0 keeps more expert activations than 1.0


@pytest.mark.parametrize("remat", ["none", "minimal", "full"])
def test_the_files_moe_routing_counts(tmp_path, remat):
    """Dropless routing: k rows per token whatever the capacity factor, no dispatch or combine
    one-hots (remat none keeps them), and each layer's experts gathered whole (the layer's
    backward holds them, not an `expert` share)."""
    def breakdown(routing, capacity_factor=2.0, ici=""):
        doc = {**DOC, "model": {**DOC["model"], "moe": {**DOC["model"]["moe"], "routing": routing,
                                                        "capacity_factor": capacity_factor}}}
        path = tmp_path / "m.yaml"
        path.write_text(yaml.safe_dump(doc))
        args = Namespace(model=str(path), params=None, batch=None, seq=None, grad_accum=1,
                         remat=remat, optimizer="adamw", slices=1, machine_type=None,
                         containers_per_host=None, ici=ici, dcn="")
        result = plan_one("v6e-8", PlanRequest.from_cli(args))
        cfg = TrainerConfig.from_dict({**doc, "model": {**doc["model"], "remat": remat}})
        want = cfg.memory_request().estimate(result.mesh.axes, result.plan.hbm_bytes_per_device,
                                             "v6e")
        assert result.memory.breakdown == want.breakdown     # the one request, both paths
        return result.memory.breakdown

    dropless, capacity = breakdown("dropless"), breakdown("capacity")
    assert dropless == breakdown("dropless", capacity_factor=0.5)   # the factor does not count
    even = breakdown("capacity", capacity_factor=1.0)
    if remat == "none":
        assert dropless["activations"] < even["activations"] < capacity["activations"]
    else:   # the layer's input (full), projections and router logits (minimal): no routed value
        assert dropless["activations"] == even["activations"] == capacity["activations"]
    split = breakdown("capacity", capacity_factor=1.0, ici="fsdp=4,expert=2")
    whole = breakdown("dropless", ici="fsdp=4,expert=2")
    if remat == "full":   # where the layer's backward is the workspace: the experts whole
        assert whole["workspace"] > split["workspace"]
    else:
        assert whole["workspace"] == split["workspace"]


def test_memory_request_resolves_auto_only():
    from tpujob_plan.model_shape import PRESETS

    r = MemoryRequest(shape=PRESETS["tiny"], global_batch=8, seq_len=64, remat="minimal")
    assert r.resolved_remat({"fsdp": 8}, 1e9) == "minimal"
    auto = MemoryRequest(shape=PRESETS["tiny"], global_batch=8, seq_len=64)
    assert auto.resolved_remat({"fsdp": 8}, None) == "none"
    assert auto.resolved_remat({"fsdp": 8}, 32 * 2**30) == "none"
    huge = MemoryRequest(shape=PRESETS["llama3-8b"], global_batch=64, seq_len=8192)
    assert huge.resolved_remat({"fsdp": 8}, 16 * 2**30) == "full"


@pytest.mark.parametrize("kind, generation", [
    ("TPU v6 lite", "v6e"), ("TPU v5p", "v5p"), ("TPU7x", "tpu7x"), ("cpu", None), ("", None),
])
def test_the_trainer_estimates_for_its_devices_generation(kind, generation):
    from tpujob_trainer.remat import device_generation

    assert device_generation(Namespace(device_kind=kind)) == generation
    assert device_generation(object()) is None


def test_memory_request_defaults_are_the_trainers():
    from tpujob_plan.memory import estimate_memory
    from tpujob_plan.model_shape import PRESETS

    # A MoE request with no capacity factor counts the trainer's default, 1.25, as the
    # estimate's own default does.
    shape = PRESETS["mixtral-8x7b"]
    got = MemoryRequest(shape=shape, global_batch=8, seq_len=2048, remat="none").estimate(
        {"fsdp": 8}, None, "v6e")
    want = estimate_memory(shape, global_batch=8, seq_len=2048, mesh={"fsdp": 8}, remat="none",
                           capacity_factor=1.25, generation="v6e")
    assert got.breakdown == want.breakdown


def test_memory_request_is_frozen_and_an_exact_fit_fits():
    from dataclasses import FrozenInstanceError

    from tpujob_plan.memory import MemoryEstimate
    from tpujob_plan.model_shape import PRESETS

    r = MemoryRequest(shape=PRESETS["tiny"], global_batch=8, seq_len=64)
    with pytest.raises(FrozenInstanceError):
        r.remat = "none"
    # Exactly the usable 95% fits; a byte more does not.
    assert MemoryEstimate({"params": 95.0}, "full", 1.0, hbm_bytes=100.0).fits is True
    assert MemoryEstimate({"params": 96.0}, "full", 1.0, hbm_bytes=100.0).fits is False


@pytest.mark.parametrize("sharding", ["auto", "over_data", "as_params"])
def test_the_files_optimizer_sharding_counts(tmp_path, sharding):
    """Over `data` (and `auto`: a TPU's estimate), each data-parallel replica keeps 1/data of the
    optimizer's state; as_params, all of it. `plan --model FILE` reads the file's mesh section."""
    def breakdown(ici):
        doc = {**DOC, "mesh": {"optimizer_sharding": sharding}}
        path = tmp_path / "m.yaml"
        path.write_text(yaml.safe_dump(doc))
        args = Namespace(model=str(path), params=None, batch=None, seq=None, grad_accum=1,
                         remat="full", optimizer="adamw", slices=1, machine_type=None,
                         containers_per_host=None, ici=ici, dcn="")
        result = plan_one("v6e-8", PlanRequest.from_cli(args))
        cfg = TrainerConfig.from_dict(doc | {"model": {**doc["model"], "remat": "full"}})
        want = cfg.memory_request().estimate(result.mesh.axes, result.plan.hbm_bytes_per_device,
                                             "v6e")
        assert result.memory.breakdown == want.breakdown     # the one request, both paths
        return result.memory.breakdown

    one, two = breakdown("fsdp=8"), breakdown("data=2,fsdp=4")
    assert two["params"] == 2 * one["params"]            # the weights: whole on each replica
    shared = sharding != "as_params"
    assert two["optimizer"] == pytest.approx(2 * one["optimizer"] / (2 if shared else 1))


def test_a_bad_optimizer_sharding_in_the_file_names_the_field(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({**DOC, "mesh": {"optimizer_sharding": "zero1"}}))
    with pytest.raises(Exception, match=r"mesh\.optimizer_sharding.*'auto'.*'as_params'.*'over_data'"):
        _plan(path)


def test_auto_splits_the_optimizer_over_data_only_for_a_tpu_generation():
    """The trainer's `auto` splits on TPU devices only: a device of no known generation (a GPU's
    `remat: auto`) is estimated with the state whole on each replica."""
    from tpujob_plan.model_shape import PRESETS

    r = MemoryRequest(shape=PRESETS["tiny"], global_batch=8, seq_len=64, remat="full")
    mesh = {"data": 2, "fsdp": 4}
    tpu = r.estimate(mesh, None, "v6e").breakdown["optimizer"]
    assert r.estimate(mesh, None).breakdown["optimizer"] == 2 * tpu
    split = MemoryRequest(shape=PRESETS["tiny"], global_batch=8, seq_len=64, remat="full",
                          optimizer_sharding="over_data")
    assert split.estimate(mesh, None).breakdown["optimizer"] == tpu
