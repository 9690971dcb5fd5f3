"""One translation from a spec to the trainer's invocation: what the operator's validation loads
(the config file and the arguments over it) is what every container of the JobSet is given, for
each kind of job; and each spec field that reaches the trainer is placed once."""

from __future__ import annotations

import pytest
import yaml

from tpujob.api.resource import load_job
from tpujob.builders.invocation import build_invocation
from tpujob.builders.jobset import build_children
from tpujob.builders.names import CONFIG_FILE, CONFIG_MOUNT, LOCAL_CHECKPOINT_MOUNT
from tpujob.validation import validate_job
from tpujob_plan.slice_plan import plan_slice
from tpujob_trainer.config import TrainerConfig

pytestmark = pytest.mark.unit

MODEL = {"model": {"d_model": 64, "n_layers": 2, "n_heads": 2, "n_kv_heads": 2, "head_dim": 32,
                   "mlp_dim": 128, "vocab_size": 512}, "train": {"global_batch": 16, "seq_len": 64}}
JOBS = {
    "plain": {},
    "overrides": {"trainer": {"config": MODEL, "overrides": ["train.steps=7", "optimizer.lr=0.01"]}},
    "local-node": {"localCheckpoints": {"everySteps": 5, "keep": 2},
                   "trainer": {"config": MODEL, "overrides": ["train.steps=9"]}},
    "local-memory-2-per-host": {"slice": "tpu7x-16", "containersPerHost": 2,
                                "localCheckpoints": {"everySteps": 5, "medium": "Memory"}},
    "wandb": {"wandb": {"project": "p", "apiKeySecret": {"name": "w", "key": "k"}}},
    "own-trainer": {"trainer": {"command": ["python", "train.py"], "args": ["--fast"]},
                    "localCheckpoints": {"everySteps": 3}},
}


def _job(name: str) -> dict:
    body = {"slice": "v6e-16", "image": "trainer:1", "output": "gs://bucket/run",
            "trainer": {"config": MODEL}, **JOBS[name]}
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "llm", "namespace": "team-a", "uid": "u-1"}, "spec": body}


def _built(job: dict) -> tuple[dict | None, list[dict], dict]:
    spec = load_job(job).spec
    plan = plan_slice(spec.slice, slices=spec.slices, containers_per_host=spec.containers_per_host)
    children = build_children(job, spec, plan)
    config_maps = [c for c in children if c["kind"] == "ConfigMap"]
    [jobset] = [c for c in children if c["kind"] == "JobSet"]
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return (yaml.safe_load(config_maps[0]["data"][CONFIG_FILE]) if config_maps else None,
            pod["containers"], pod)


@pytest.mark.parametrize("name", sorted(JOBS))
def test_every_container_runs_what_validation_checked(name):
    job = _job(name)
    invocation = build_invocation(load_job(job).spec, "team-a", "llm")
    config, containers, pod = _built(job)
    verdict = validate_job(job)
    assert verdict.valid
    assert config == invocation.config
    for container in containers:
        port = container["ports"][0]["containerPort"]
        if invocation.config is None:
            assert container.get("args", []) == JOBS[name]["trainer"].get("args", [])
            assert verdict.trainer_config is None
            continue
        # The config the container loads (its file, then its arguments) is the one checked.
        assert TrainerConfig.from_dict(config, container["args"][2:]) == \
            verdict.trainer_config.model_copy(update={"metrics": verdict.trainer_config.metrics
                                                      .model_copy(update={"port": port})})
        # `--config FILE`, then exactly the arguments validation laid over the file, then
        # the process's own metrics port.
        assert container["args"] == ["--config", f"{CONFIG_MOUNT}/{CONFIG_FILE}",
                                     *invocation.config_args, f"metrics.port={port}"]
    assert [v["name"] for v in pod["volumes"]] == [v["name"] for v in invocation.volumes]


@pytest.mark.parametrize("name", sorted(JOBS))
def test_the_local_tier_is_placed_once_in_each_part(name):
    spec = load_job(_job(name)).spec
    invocation = build_invocation(spec, "team-a", "llm")
    local = spec.local_checkpoints is not None
    mounts = [m for m in invocation.mounts if m["mountPath"] == LOCAL_CHECKPOINT_MOUNT]
    volumes = [v for v in invocation.volumes if v["name"] == mounts[0]["name"]] if mounts else []
    env = [e for e in invocation.env if e.get("value") == LOCAL_CHECKPOINT_MOUNT]
    args = [a for a in invocation.config_args if a.startswith("checkpoint.local.directory=")]
    assert (len(mounts), len(volumes), len(env)) == ((1, 1, 1) if local else (0, 0, 0))
    builtin = invocation.config is not None
    assert len(args) == (1 if local and builtin else 0)
    if local and builtin:
        assert invocation.config["checkpoint"]["local"]["every"] == spec.local_checkpoints.every_steps
        # The operator's argument comes first, so a job's own override of it wins.
        assert invocation.config_args.index(args[0]) == 0


def test_an_override_that_breaks_the_config_is_named_after_the_operators_own_arguments():
    job = _job("local-node")
    job["spec"]["trainer"]["overrides"] = ["train.steps=9", "train.steps=zero"]
    verdict = validate_job(job)
    assert not verdict.valid and verdict.reason == "ConfigError"
    assert verdict.field == "spec.trainer.overrides[1]"
