"""Pre-flight validation: an impossible job is refused with the field at fault and what would be
valid; a possible one passes with its plan. And `tpujob render` on top of it."""

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tpujob.validation import validate_job

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "manifests" / "examples").glob("*.yaml"))
TINY = {"model": {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4,
                  "n_kv_heads": 2, "head_dim": 16, "mlp_dim": 128},
        "train": {"steps": 10, "global_batch": 16, "seq_len": 64}}


def _job(**spec) -> dict:
    base = {"slice": "v6e-16", "image": "trainer:1", "output": "gs://bucket/run",
            "trainer": {"config": TINY}}
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u"}, "spec": base | spec}


@pytest.mark.unit
@pytest.mark.parametrize(
    "spec, reason, field, says",
    [
        (dict(slice="v6e-12"), "InvalidSlice", "spec.slice", "Valid v6e sizes"),
        (dict(slice="v5p-7"), "InvalidSlice", "spec.slice", "multiple of 2"),
        (dict(machineType="ct6e-standard-8t"), "InvalidSlice", "spec.machineType",
         "cannot form a 4x4"),
        (dict(slice="tpu7x-64", parallelism={"ici": {"fsdp": 8, "tensor": 4, "context": 2}}),
         "InvalidMesh", "spec.parallelism.ici", "valid layouts: fsdp=16,tensor=4"),
        (dict(parallelism={"ici": {"fsdp": 8}}), "InvalidMesh", "spec.parallelism.ici",
         "multiply to 8 but there are 16"),
        (dict(slices=2, parallelism={"dcn": {"data": 3}}), "InvalidMesh", "spec.parallelism.dcn",
         "multiply to 3 but there are 2"),
        (dict(trainer={"config": TINY | {"train": {"stepz": 3}}}), "ConfigError",
         "spec.trainer.config", "train.stepz"),
        (dict(trainer={"config": TINY, "overrides": ["model.d_model=-1"]}), "ConfigError",
         "spec.trainer.overrides[0]", "model.d_model"),
        (dict(trainer={"config": TINY | {"train": {"global_batch": 12, "seq_len": 64}}}),
         "InvalidBatch", "spec.trainer.config.train.global_batch", "multiple of 16"),
        (dict(slice="v6e-4", trainer={"config": {
            "model": {"vocab_size": 128256, "d_model": 8192, "n_layers": 80, "n_heads": 64,
                      "n_kv_heads": 8, "head_dim": 128, "mlp_dim": 28672},
            "train": {"global_batch": 4, "seq_len": 8192}}}),
         "OutOfMemory", "spec.trainer.config.model", "GiB usable"),
        (dict(trainer={"config": TINY | {"model": {**TINY["model"], "attention": "cudnn"}}}),
         "ConfigError", "spec.trainer.config.model.attention",
         "cudnn runs on a GPU only, and this step runs on a TPU: use auto (it picks cudnn on a "
         "GPU) or xla (v6e-16)"),
        (dict(trainer={"config": TINY | {"model": {**TINY["model"], "attention": "flash"}}}),
         "ConfigError", "spec.trainer.config", "model.attention"),
        (dict(image=""), "InvalidSpec", "spec.image", ""),
        (dict(name="x" * 60), "InvalidName", "metadata.name", "at most 63 characters"),
    ],
)
def test_impossible_jobs_are_refused(spec, reason, field, says):
    name = spec.pop("name", None)
    job = _job(**spec)
    if name:
        job["metadata"]["name"] = name
    verdict = validate_job(job)
    assert not verdict.valid
    assert (verdict.reason, verdict.field) == (reason, field)
    assert says in verdict.message and verdict.message.startswith(field)


LEFT_OUT = object()


@pytest.mark.unit
@pytest.mark.parametrize(
    "key, value, reason, field, says",
    [
        ("apiVersion", LEFT_OUT, "InvalidSpec", "apiVersion", "apiVersion: tpujob.dev/v1alpha1"),
        ("apiVersion", "tpujob.dev/v1", "InvalidSpec", "apiVersion", "'tpujob.dev/v1alpha1'"),
        ("kind", LEFT_OUT, "InvalidSpec", "kind", "kind: TpuTrainingJob"),
        ("metadata", None, "InvalidSpec", "metadata", "must be a mapping"),
        ("metadata", ["j"], "InvalidSpec", "metadata", "must be a mapping"),
        ("metadata", "j", "InvalidSpec", "metadata", "must be a mapping"),
        ("metadata", LEFT_OUT, "InvalidName", "metadata.name", "required; use a DNS label"),
        ("metadata", {"namespace": "ns"}, "InvalidName", "metadata.name", "required"),
        ("metadata", {"name": None}, "InvalidName", "metadata.name", "required"),
        ("metadata", {"name": 5}, "InvalidName", "metadata.name", "must be a string"),
        ("metadata", {"name": ""}, "InvalidName", "metadata.name", "use a DNS label"),
        ("metadata", {"name": "My_Job"}, "InvalidName", "metadata.name", "lowercase letters"),
        ("metadata", {"name": "-j"}, "InvalidName", "metadata.name", "starting and ending"),
        ("metadata", {"name": "a.b"}, "InvalidName", "metadata.name", "use a DNS label"),
        ("metadata", {"name": "j" * 64}, "InvalidName", "metadata.name", "at most 63"),
    ],
)
def test_objects_kubernetes_would_refuse_are_refused(key, value, reason, field, says):
    job = _job()
    if value is LEFT_OUT:
        del job[key]
    else:
        job[key] = value
    verdict = validate_job(job)
    assert not verdict.valid
    assert (verdict.reason, verdict.field) == (reason, field)
    assert says in verdict.message and verdict.message.startswith(field)


@pytest.mark.unit
def test_a_possible_job_passes_with_its_plan():
    verdict = validate_job(_job(parallelism={"ici": {"fsdp": -1, "tensor": 4}}))
    assert verdict.valid, verdict.message
    assert verdict.plan.hosts == 4 and verdict.mesh.axes["fsdp"] == 4


@pytest.mark.unit
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_validates(path):
    verdict = validate_job(yaml.safe_load(path.read_text()))
    assert verdict.valid, verdict.message


def _tpujob(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    exe = shutil.which("tpujob", path=os.path.dirname(sys.executable)) or "tpujob"
    return subprocess.run([exe, *args], capture_output=True, text=True, input=stdin, timeout=60)


@pytest.mark.integration
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_render_every_example(path):
    r = _tpujob("render", str(path))
    assert r.returncode == 0, r.stderr
    objects = list(yaml.safe_load_all(r.stdout))
    kinds = [o["kind"] for o in objects]
    assert kinds[-1] == "JobSet" and kinds.count("JobSet") == 1
    name = yaml.safe_load(path.read_text())["metadata"]["name"]
    assert all(o["metadata"]["ownerReferences"][0]["name"] == name for o in objects)


@pytest.mark.integration
def test_render_refuses_an_invalid_job_and_prints_nothing():
    r = _tpujob("render", "-", stdin=yaml.safe_dump(_job(slice="v6e-12")))
    assert r.returncode == 1 and r.stdout == ""
    assert "InvalidSlice" in r.stderr and "spec.slice" in r.stderr


@pytest.mark.unit
@pytest.mark.parametrize(
    "key, value, says",
    [
        ("metadata", None, "metadata: must be a mapping"),
        ("metadata", ["j"], "metadata: must be a mapping"),
        ("metadata", "j", "metadata: must be a mapping"),
        ("metadata", {"namespace": "ns"}, "metadata.name: required"),
        ("apiVersion", LEFT_OUT, "apiVersion: required: add `apiVersion: tpujob.dev/v1alpha1`"),
        ("kind", LEFT_OUT, "kind: required: add `kind: TpuTrainingJob`"),
    ],
)
def test_render_refuses_a_malformed_object_naming_the_field(tmp_path, capsys, key, value, says):
    from tpujob.cli import render_cmd

    job = _job()
    if value is LEFT_OUT:
        del job[key]
    else:
        job[key] = value
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert render_cmd.run(argparse.Namespace(file=str(path), namespace=None)) == 1
    out, err = capsys.readouterr()
    assert out == "" and says in err


CREDENTIAL = "tpujob-literal-credential-0123"


@pytest.mark.unit
@pytest.mark.parametrize("name", ["HF_TOKEN", "GITHUB_TOKEN", "TOKEN", "OPENAI_API_KEY",
                                  "ANTHROPIC_APIKEY", "api_key", "AWS_SECRET_ACCESS_KEY",
                                  "CLIENT_SECRET", "SECRET_KEY", "MY_SECRETS_JSON",
                                  "DB_PASSWORD", "SMTP_PASSWD", "GPG_PASSPHRASE",
                                  "AWS_ACCESS_KEY", "SSH_PRIVATE_KEY", "hf_token"])
def test_a_literal_value_for_a_credential_like_env_name_is_refused(name):
    job = _job(env=[{"name": "LOG_LEVEL", "value": "info"},
                    {"name": name, "value": CREDENTIAL}])
    verdict = validate_job(job)
    assert not verdict.valid, name
    assert (verdict.reason, verdict.field) == ("InvalidSpec", "spec.env[1].value")
    assert verdict.message.startswith("spec.env[1].value: ") and name in verdict.message
    assert "valueFrom.secretKeyRef" in verdict.message
    assert CREDENTIAL not in verdict.message  # the message goes to status and Events
    # The same variable taken from a Secret is fine.
    job["spec"]["env"][1] = {"name": name, "valueFrom": {"secretKeyRef": {"name": "s",
                                                                          "key": "k"}}}
    assert validate_job(job).valid


@pytest.mark.unit
@pytest.mark.parametrize("name", ["MAX_TOKENS", "TOKENIZER", "NUM_TOKENS_PER_STEP",
                                  "TOKEN_BUDGET", "SECRETARY", "XLA_FLAGS",
                                  "GOOGLE_APPLICATION_CREDENTIALS", "DB_PASSWORD_FILE",
                                  "HF_HOME", "KEYS_DIR", "APIKEYS_DOC_URL"])
def test_names_that_only_look_near_a_credential_keep_their_literal_value(name):
    assert validate_job(_job(env=[{"name": name, "value": "x"}])).valid, name


@pytest.mark.unit
def test_render_and_the_webhook_refuse_a_literal_credential_the_same_way(tmp_path, capsys):
    from tpujob.cli import render_cmd
    from tpujob.controller.admission import review

    job = _job(env=[{"name": "HF_TOKEN", "value": CREDENTIAL}])
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert render_cmd.run(argparse.Namespace(file=str(path), namespace=None)) == 1
    out, err = capsys.readouterr()
    refusal = validate_job(job).message
    assert out == "" and refusal in err and CREDENTIAL not in err
    assert review(job) == refusal
