"""The TPU compiler's answers kept on disk (`tpujob_trainer.aot_cache`): a step compiled once for
a slice is answered from the cache after, and anything that changes the compiler's program (the
program, the slice, the compiler, its flags) compiles again."""

from __future__ import annotations

import json

import pytest

from tpujob_trainer import aot, aot_cache
from tpujob_trainer.config.root import TrainerConfig

BASE = dict(program="module @jit_step {}", slice_name="v6e-8", slices=1,
            device_kind="TPU v6 lite", versions={"jax": "0.10.2", "libtpu": "0.0.42"},
            compiler_env={}, settings={"jax_optimization_level": "DEFAULT"})


@pytest.mark.parametrize("change", [
    {"program": "module @jit_step {} "},
    {"slice_name": "v6e-16"},
    {"slices": 2},
    {"device_kind": "TPU v5"},
    {"versions": {"jax": "0.10.2", "libtpu": "0.0.43"}},
    {"versions": {"jax": "0.10.3", "libtpu": "0.0.42"}},
    {"compiler_env": {"XLA_FLAGS": "--xla_dump_to=/x"}},
    {"compiler_env": {"LIBTPU_INIT_ARGS": "--xla_tpu_flag=1"}},
    {"settings": {"jax_optimization_level": "O0"}},
])
def test_the_key_changes_with_everything_the_compile_depends_on(change):
    same = aot_cache.key(**BASE)
    assert same == aot_cache.key(**BASE) and len(same) == 64
    assert aot_cache.key(**{**BASE, **change}) != same


def test_the_key_ignores_the_order_of_maps():
    a = aot_cache.key(**{**BASE, "versions": {"jax": "1", "libtpu": "2"}})
    assert a == aot_cache.key(**{**BASE, "versions": {"libtpu": "2", "jax": "1"}})


def test_the_folder_is_the_variables_and_none_without_it(tmp_path):
    assert aot_cache.directory({aot_cache.ENV: str(tmp_path)}) == tmp_path
    assert aot_cache.directory({aot_cache.ENV: "  "}) is None
    assert aot_cache.directory({}) is None


def test_an_entry_reads_back_and_a_damaged_one_is_a_miss(tmp_path):
    deep = tmp_path / "deep" / "er"
    aot_cache.write(deep, "k", result={"temp_bytes": 5})  # its folders made
    assert aot_cache.read(deep, "k")["result"] == {"temp_bytes": 5}
    aot_cache.write(tmp_path, "k", result={"temp_bytes": 5})
    aot_cache.write(tmp_path, "r", refused="RESOURCE_EXHAUSTED: HBM")
    assert aot_cache.read(tmp_path, "k") == {"format": 1, "result": {"temp_bytes": 5}}
    assert aot_cache.read(tmp_path, "r")["refused"] == "RESOURCE_EXHAUSTED: HBM"
    assert aot_cache.read(tmp_path, "absent") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "k.json", "r.json"]  # no temp files
    for damaged in ("{not json", json.dumps({"format": 0, "result": {}}),
                    json.dumps({"format": 1}), json.dumps([1])):
        (tmp_path / "k.json").write_text(damaged)
        assert aot_cache.read(tmp_path, "k") is None


def test_a_write_to_a_folder_that_cannot_be_made_is_logged_not_raised(tmp_path, caplog):
    (tmp_path / "file").write_text("")
    aot_cache.write(tmp_path / "file", "k", result={})
    assert "not written" in caplog.text


TINY = {"model": {"vocab_size": 512, "d_model": 128, "n_layers": 1, "n_heads": 1,
                  "n_kv_heads": 1, "head_dim": 128, "mlp_dim": 256, "remat": "full"},
        "train": {"global_batch": 8, "seq_len": 128}}
FIGURES = dict(argument_bytes=10, output_bytes=10, alias_bytes=8, temp_bytes=7, code_bytes=1,
               flops=2.0, bytes_accessed=3.0, optimal_seconds=None, cost_model_note="invalid",
               compile_s=61.5)


@pytest.fixture
def compiles(tmp_path, monkeypatch):
    """The compiler replaced by one that counts its calls and answers `answer[0]`; the cache
    in a folder of the test's own."""
    calls, answer = [], [{"result": FIGURES}]
    monkeypatch.setenv(aot_cache.ENV, str(tmp_path))
    monkeypatch.setattr(aot, "_compile", lambda lowered, *a: calls.append(lowered) or answer[0])
    return calls, answer


def _step(slice_name="v6e-8", **model):
    cfg = TrainerConfig.from_dict({**TINY, "model": {**TINY["model"], **model}})
    return aot.compile_step(cfg, slice_name)


def test_a_step_compiled_once_is_answered_from_the_cache(compiles, tmp_path, monkeypatch):
    calls, _ = compiles
    first = _step()
    assert (len(calls), first.cached, first.temp_bytes, first.compile_s) == (1, False, 7, 61.5)
    again = _step()
    assert (len(calls), again.cached) == (1, True)
    assert again.to_dict() == {**first.to_dict(), "cached": True}
    assert len(list(tmp_path.glob("*.json"))) == 1
    # What changes the program or the compiler compiles again.
    _step(remat="minimal")
    _step(slice_name="tpu7x-8")
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_enable_some_pass=false")
    _step()
    assert len(calls) == 4 and len(list(tmp_path.glob("*.json"))) == 4
    # Without the variable, nothing is read or kept.
    monkeypatch.delenv(aot_cache.ENV)
    assert _step().cached is False and len(calls) == 5


def test_the_compilers_refusal_is_kept_too(compiles):
    calls, answer = compiles
    answer[0] = {"refused": "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory "
                            "required for HLO temporaries (74.45G) exceeds available HBM (31.25G)."}
    for _ in range(2):
        with pytest.raises(aot.StepDoesNotFit, match="it needs 74.45G of HBM per device"):
            _step()
    assert len(calls) == 1


def test_a_damaged_entry_compiles_again_and_is_replaced(compiles, tmp_path):
    calls, _ = compiles
    _step()
    [entry] = tmp_path.glob("*.json")
    entry.write_text("{")
    assert _step().cached is False and len(calls) == 2
    assert _step().cached is True and len(calls) == 2
