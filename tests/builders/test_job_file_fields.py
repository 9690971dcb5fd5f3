"""Every path that reads a job file refuses an unknown field the same way, before anything is
created: `tpujob render` and `tpujob local run` give the same message, naming the field and
what would be valid; the message says what the field was probably meant to be."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest
import yaml

from tpujob.validation import validate_job

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "manifests" / "examples" / "quickstart.yaml"


def _misspelt(tmp_path: Path) -> Path:
    job = yaml.safe_load(QUICKSTART.read_text())
    job["spec"]["paralelism"] = job["spec"].pop("parallelism")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path


def _render(path: Path, capsys) -> tuple[int, str]:
    from tpujob.cli import render_cmd

    code = render_cmd.run(argparse.Namespace(file=str(path), namespace=None))
    out, err = capsys.readouterr()
    assert out == ""
    return code, err


def test_local_run_refuses_a_misspelt_spec_field_as_render_does_before_starting_anything(
        tmp_path, capsys, monkeypatch):
    from tpujob.local.session import run as run_module

    class NoCluster:
        def __init__(self, *args, **kwargs):
            raise AssertionError("local mode was started for a file that must be refused")

    monkeypatch.setattr(run_module, "LocalCluster", NoCluster)
    path = _misspelt(tmp_path)
    code, rendered = _render(path, capsys)
    assert code == 1
    refusal = validate_job(yaml.safe_load(path.read_text())).message
    assert refusal.startswith("spec.paralelism: ") and refusal in rendered
    out, err = io.StringIO(), io.StringIO()
    options = run_module.RunOptions(workdir=tmp_path / "work")
    assert run_module.run_file(path, options, out=out, err=err) == run_module.EXIT_FAILED
    assert refusal in err.getvalue() and "quickstart" in err.getvalue()
    assert "InvalidSpec" in err.getvalue()
    assert not (tmp_path / "work").exists()  # nothing created, not even the work directory


@pytest.mark.integration
def test_local_mode_creates_objects_with_strict_field_validation_as_kubectl_apply_does(
        tmp_path):
    from tpujob.api.crd import build_crd
    from tpujob.local.apiserver import ApiServer
    from tpujob.local.executor.client import KubeApi
    from tpujob.local.session.cluster import TPUJOBS
    from tpujob.local.session.manifests import ApplyError, apply_documents

    job = yaml.safe_load(_misspelt(tmp_path).read_text())
    with ApiServer(crds=[build_crd()]) as server:
        api = KubeApi(server.url)
        with pytest.raises(ApplyError) as refused:
            apply_documents(api, [job])
        assert refused.value.status == 400
        assert 'unknown field "spec.paralelism"' in refused.value.server_message
        assert api.get(TPUJOBS, "default", "quickstart") is None


def _job(**spec) -> dict:
    job = yaml.safe_load(QUICKSTART.read_text())
    job["spec"].update(spec)
    return job


@pytest.mark.parametrize("change, field, meant", [
    ({"paralelism": {"ici": {"fsdp": -1}}}, "spec.paralelism", "spec.parallelism"),
    ({"restartPolicy": {"maxRestart": 2}}, "spec.restartPolicy.maxRestart",
     "spec.restartPolicy.maxRestarts"),
    ({"parallelism": {"icci": {"fsdp": -1}}}, "spec.parallelism.icci", "spec.parallelism.ici"),
    ({"env": [{"name": "A", "valueFrom": {"secretKeyref": {"name": "s", "key": "k"}}}]},
     "spec.env[0].valueFrom.secretKeyref", "spec.env[0].valueFrom.secretKeyRef"),
])
def test_an_unknown_spec_field_is_refused_with_what_it_was_probably_meant_to_be(
        change, field, meant):
    verdict = validate_job(_job(**change))
    assert (verdict.valid, verdict.reason, verdict.field) == (False, "InvalidSpec", field)
    assert verdict.message.startswith(f"{field}: unknown field; did you mean {meant}?")


def test_an_unknown_field_without_a_near_name_lists_the_valid_ones():
    verdict = validate_job(_job(colour="red"))
    assert verdict.message.startswith("spec.colour: unknown field; ")
    assert "did you mean" not in verdict.message
    assert "spec takes: slice, machineType, containersPerHost, slices, nodes, gpuNetworks, image" in verdict.message
    job = _job()
    job["specc"] = job.pop("spec")
    assert "specc: unknown field; did you mean spec?" in validate_job(job).message


@pytest.mark.parametrize("config, says", [
    ({"train": {"stpes": 60}}, "train.stpes: unknown key; did you mean train.steps? "
                               "train takes: steps, global_batch, seq_len"),
    ({"trainz": {}}, "trainz: unknown key; did you mean train?"),
    ({"data": {"synthetic_patern": "ramp"}}, "did you mean data.synthetic_pattern?"),
    ({"metrics": {"wandb": {"projct": "p"}}}, "did you mean metrics.wandb.project?"),
])
def test_an_unknown_trainer_config_key_says_what_it_was_probably_meant_to_be(config, says):
    from tpujob_trainer.config import ConfigError, TrainerConfig

    with pytest.raises(ConfigError) as err:
        TrainerConfig.from_dict(config)
    assert any(says in p for p in err.value.problems), err.value.problems
    job = _job(trainer={"config": config})
    verdict = validate_job(job)
    assert verdict.reason == "ConfigError" and says in verdict.message


@pytest.mark.parametrize(("text", "says"), [
    ("model: {d_modle: 128}\n", "model.d_modle: unknown key; did you mean model.d_model?"),
    ("model: {moe: {num_expertz: 4}}\n",
     "model.moe.num_expertz: unknown key; did you mean model.moe.num_experts?"),
])
def test_plan_names_what_an_unknown_model_key_was_probably_meant_to_be(tmp_path, text, says):
    from tpujob.planning import PlanError, load_model_file

    path = tmp_path / "model.yaml"
    path.write_text(text)
    with pytest.raises(PlanError) as err:
        load_model_file(str(path))
    assert says in err.value.message
