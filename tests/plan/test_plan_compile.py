"""`tpujob plan --compile`: the trainer config each slice compiles (the planned model, batch,
sequence, remat and mesh), and the command as a user runs it, with the real TPU compiler."""

import json
import os
import shutil
import subprocess
import sys
from argparse import Namespace

import pytest
import yaml

from tpujob.cli.plan_compile import compile_lines, compiled_fits, size, trainer_config
from tpujob.planning import PlanRequest, plan_one

pytestmark = pytest.mark.integration


def _request(model: str, **kw) -> PlanRequest:
    args = Namespace(model=model, params=None, batch=kw.get("batch"), seq=kw.get("seq"),
                     grad_accum=kw.get("grad_accum", 1), remat=kw.get("remat", "auto"),
                     optimizer="adamw", slices=kw.get("slices", 1), machine_type=None,
                     containers_per_host=None, ici=kw.get("ici", ""), dcn=kw.get("dcn", ""))
    return PlanRequest.from_cli(args)


def test_a_preset_compiles_its_shape_with_the_planned_batch_remat_and_mesh():
    request = _request("mixtral-8x7b", batch=16, seq=4096, remat="full", ici="fsdp=4,expert=2")
    result = plan_one("v6e-8", request)
    cfg = trainer_config(result, request, "mixtral-8x7b")
    assert cfg["model"]["d_model"] == 4096 and cfg["model"]["n_kv_heads"] == 8
    assert cfg["model"]["moe"] == {"num_experts": 8, "experts_per_token": 2,
                                   "num_shared_experts": 0, "mlp_dim": 14336, "every": 1,
                                   "first_dense_layers": 0}
    assert cfg["model"]["remat"] == "full"
    assert cfg["train"] == {"global_batch": 16, "seq_len": 4096, "grad_accum": 1}
    assert cfg["mesh"]["ici"]["fsdp"] == 4 and cfg["mesh"]["ici"]["expert"] == 2
    assert cfg["mesh"]["dcn"] == {} and cfg["optimizer"] == {"kind": "adamw"}
    assert {v for k, v in cfg["mesh"]["ici"].items() if k not in ("fsdp", "expert")} <= {1}


def test_a_config_file_compiles_its_own_model_section_and_the_remat_the_estimate_chose(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({
        "model": {"d_model": 512, "n_layers": 2, "param_dtype": "bfloat16"},
        "train": {"global_batch": 16, "seq_len": 512},
        "optimizer": {"kind": "adamw", "peak_lr": 1e-3}}))
    request = _request(str(path), slices=2)
    result = plan_one("v6e-8", request)
    cfg = trainer_config(result, request, str(path))
    assert cfg["model"]["param_dtype"] == "bfloat16" and cfg["model"]["d_model"] == 512
    assert cfg["model"]["remat"] == result.memory.remat != "auto"
    assert cfg["train"]["global_batch"] == 16 and cfg["train"]["seq_len"] == 512
    assert cfg["optimizer"]["peak_lr"] == 1e-3
    dcn = cfg["mesh"]["dcn"]  # two slices: data parallel across them
    assert dcn["data"] == 2 and {v for k, v in dcn.items() if k != "data"} <= {1}


@pytest.mark.parametrize("hbm,usable,fits", [(10, 20, True), (20, 20, True), (21, 20, False)])
def test_the_compiled_verdict_is_against_usable_hbm(hbm, usable, fits):
    class Memory:
        usable_bytes = usable
        per_device_bytes = 15

    class Result:
        memory = Memory()

    assert compiled_fits(Result(), {"hbm_bytes": hbm}) is fits
    assert compiled_fits(Result(), {"error": "x"}) is False
    line = compile_lines(Result(), {"hbm_bytes": hbm, "argument_bytes": 1, "temp_bytes": 2,
                                    "flops": 1e12, "bytes_accessed": 1e9, "compile_s": 3,
                                    "optimal_seconds": None, "cost_model_note": "invalid"})[0]
    assert ("DOES NOT FIT" in line) is (not fits)


def test_sizes_print_in_gib_or_mib():
    assert (size(3 * 2**30), size(2**30 // 20)) == ("3.00 GiB", "51.2 MiB")


def _tpujob(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("tpujob", path=os.path.dirname(sys.executable)) or "tpujob"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=600)


def test_plan_compile_prints_the_compilers_hbm_beside_the_estimate():
    r = _tpujob("plan", "v6e-8", "tpu7x-8", "--model", "tiny", "--batch", "8", "--seq", "256",
                "--compile")
    assert r.returncode == 0, r.stderr[-2000:]
    blocks = r.stdout.split("\n\n")[1:]
    assert len(blocks) == 2
    for block in blocks:
        assert "by the TPU compiler (fits; the estimate" in block
        assert "accessed per device; cost model:" in block
    j = _tpujob("plan", "v6e-8", "--model", "tiny", "--batch", "8", "--seq", "256",
                "--compile", "-o", "json")
    assert j.returncode == 0, j.stderr[-2000:]
    compiled = json.loads(j.stdout)[0]["compiled"]
    assert compiled["device_kind"] == "TPU v6 lite" and compiled["hbm_bytes"] > 0
    # The first command compiled this very step for this slice: the compiler's answer is kept.
    assert compiled["cached"] is True


@pytest.mark.parametrize("set_to", [None, "/elsewhere"])
def test_plan_compile_keeps_the_compilers_answers_in_tpujobs_cache(monkeypatch, tmp_path,
                                                                    set_to):
    import tpujob.cli.plan_compile as pc
    from tpujob_trainer import aot_cache

    monkeypatch.setenv("TPUJOB_CACHE_DIR", str(tmp_path))
    if set_to is None:
        monkeypatch.delenv(aot_cache.ENV, raising=False)
    else:
        monkeypatch.setenv(aot_cache.ENV, set_to)
    seen = {}

    def run(cmd, env, **kw):
        seen.update(env)
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps({"cached": True}), stderr="")

    monkeypatch.setattr(pc.subprocess, "run", run)
    request = _request("tiny", batch=8, seq=256)
    assert pc.compile_one(plan_one("v6e-8", request), request, "tiny") == {"cached": True}
    assert seen[aot_cache.ENV] == (set_to or str(tmp_path / "tpu-compile"))


def test_an_answer_from_the_compile_cache_says_so():
    class Memory:
        usable_bytes = 100
        per_device_bytes = 50

    class Result:
        memory = Memory()

    figures = {"hbm_bytes": 50, "argument_bytes": 1, "temp_bytes": 2, "flops": 1e12,
               "bytes_accessed": 1e9, "compile_s": 81.4, "optimal_seconds": None,
               "cost_model_note": "invalid"}
    assert compile_lines(Result(), figures)[1].endswith("compiled in 81 s")
    assert compile_lines(Result(), {**figures, "cached": True})[1].endswith(
        "compiled in 81 s (answered from the compile cache)")


def test_plan_compile_needs_a_model():
    r = _tpujob("plan", "v6e-8", "--compile")
    assert r.returncode == 2
    assert "--compile: needs a model" in r.stderr


class _Mesh:
    def __init__(self, valid: bool):
        self.valid = valid


class _Memory:
    usable_bytes = 100
    per_device_bytes = 50


class _Result:
    def __init__(self, name="v6e-8", ok=True, fits=True, mesh_valid=True, batch_error=None,
                 memory=True):
        self.requested, self.ok, self.fits = name, ok, fits
        self.mesh = _Mesh(mesh_valid)
        self.batch_error = batch_error
        self.memory = _Memory() if memory else None


@pytest.mark.parametrize("result,want", [
    (_Result(), True),
    (_Result(fits=False), True),            # the estimate says no: the compiler decides
    (_Result(ok=False), False),
    (_Result(mesh_valid=False), False),
    (_Result(batch_error="does not split"), False),
    (_Result(memory=False), False),         # no model: nothing to compile
])
def test_what_is_compiled(result, want):
    from tpujob.cli.plan_compile import compilable

    assert compilable(result) is want


FITS, TOO_BIG, FAILED = {"hbm_bytes": 90}, {"hbm_bytes": 101}, {"error": "x"}


@pytest.mark.parametrize("results,compiled,want", [
    ([_Result()], {}, 0),
    ([_Result(fits=False)], {}, 2),
    ([_Result(fits=False)], {"v6e-8": FITS}, 0),     # the compiler's verdict replaces the estimate's
    ([_Result()], {"v6e-8": TOO_BIG}, 2),
    ([_Result()], {"v6e-8": FAILED}, 2),
    ([_Result(), _Result("bad", ok=False)], {"v6e-8": FITS}, 1),
    ([_Result(), _Result("v5p-8", fits=False)], {"v6e-8": FITS}, 2),
])
def test_exit_status(results, compiled, want):
    from tpujob.cli.plan_compile import exit_status

    assert exit_status(results, compiled) == want


def test_the_compiled_lines_read_the_compilers_figures():
    class Memory:
        usable_bytes = 10 * 2**30
        per_device_bytes = 3 * 2**30

    class Result:
        memory = Memory()

    lines = compile_lines(Result(), {
        "hbm_bytes": 2 * 2**30, "argument_bytes": 2**30, "temp_bytes": 2**30 // 10 + 1,
        "flops": 1.5e12, "bytes_accessed": 2.5e9, "optimal_seconds": 0.0123,
        "cost_model_note": "valid", "compile_s": 42.4})
    assert lines == [
        "  compiled        2.00 GiB/device by the TPU compiler (fits; the estimate 3.00 GiB is "
        "+50% off): arguments 1.00 GiB, temporaries 0.10 GiB",
        "  compiled step   1.50 TFLOP and 2.5 GB accessed per device; cost model: 12.3 ms/step; "
        "compiled in 42 s"]
    assert size(2**30 // 10 - 1) == "102.4 MiB"
    failed = compile_lines(Result(), {"error": "the compile did not run (exit 1): boom"})
    assert failed == ["  compiled        FAILED: the compile did not run (exit 1): boom"]
