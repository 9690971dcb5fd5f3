"""What the JobSet builder and the spec fingerprint must keep, each found missing by mutation
testing (tools/mutation.py): the signal exit codes, the ports of a host's processes, the config
mount, the pod's network settings, the grace period, and a fingerprint that neither key order
nor an operator upgrade changes."""

from __future__ import annotations

import pytest

from tpujob.api.resource import load_job
from tpujob.builders import names
from tpujob.builders.fingerprint import build_fingerprint, changed_fields, encode_fingerprint
from tpujob.builders.jobset import build_jobset
from tpujob_plan.slice_plan import plan_slice

pytestmark = pytest.mark.unit
TINY = {"model": {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4,
                  "n_kv_heads": 2, "head_dim": 16, "mlp_dim": 128},
        "train": {"steps": 10, "global_batch": 16, "seq_len": 64}}


def _job(slice_name: str = "v6e-16", **spec) -> dict:
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": {"name": "llm", "namespace": "team-a", "uid": "u-1"},
            "spec": {"slice": slice_name, "image": "trainer:1", "output": "gs://bucket/run",
                     **spec}}


def _jobset(slice_name: str = "v6e-16", **spec) -> dict:
    job = _job(slice_name, **spec)
    return build_jobset(job, load_job(job).spec, plan_slice(slice_name))


def _pod(jobset: dict) -> dict:
    return jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def _not_in(jobset: dict) -> list[int]:
    """The exit codes the pod failure policy does not fail the Job at once for."""
    rules = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"]
    [values] = {tuple(r["onExitCodes"]["values"]) for r in rules if "onExitCodes" in r}
    return list(values)


@pytest.mark.parametrize("retry_on_signal, signals", [(True, list(range(129, 256))),
                                                       (False, [])])
def test_every_signal_exit_and_nothing_past_255_is_retryable(retry_on_signal, signals):
    codes = _not_in(_jobset(trainer={"config": TINY}, restartPolicy={
        "retryOnSignal": retry_on_signal, "retryableExitCodes": [42]}))
    # 128 + N for every signal N (SIGTERM on preemption is 143, SIGKILL 137); 128 itself is
    # not a signal exit and 256 is not an exit code.
    assert codes == [42, *signals]


@pytest.mark.parametrize("slice_name", ["tpu7x-8", "v6e-16"])
def test_each_process_of_a_host_has_its_own_metrics_port(slice_name):
    pod = _pod(_jobset(slice_name, trainer={"config": TINY}))
    ports = [c["ports"][0]["containerPort"] for c in pod["containers"]]
    # Host networking: the processes of one host share its ports.
    assert ports == [names.METRICS_PORT + i for i in range(len(ports))]
    assert [c["args"][-1] for c in pod["containers"]] == [f"metrics.port={p}" for p in ports]


def test_the_trainer_config_is_mounted_read_only_only_for_the_built_in_trainer():
    pod = _pod(_jobset(trainer={"config": TINY}))
    [mount] = [m for c in pod["containers"] for m in c["volumeMounts"]
               if m["mountPath"] == names.CONFIG_MOUNT]
    assert mount["readOnly"] is True
    assert {"name": mount["name"], "configMap": {"name": "llm-trainer"}} in pod["volumes"]
    custom = _pod(_jobset(trainer={"command": ["python", "train.py"]}))
    assert not [v for v in custom["volumes"] if "configMap" in v]
    assert not [m for c in custom["containers"] for m in c["volumeMounts"]
                if m["mountPath"] == names.CONFIG_MOUNT]


def test_pods_resolve_each_other_by_name_before_they_are_ready():
    # JAX's coordinator (process 0) is reached by its host name while every pod is starting,
    # before any is Ready.
    network = _jobset(trainer={"config": TINY})["spec"]["network"]
    assert network == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}


def test_the_grace_period_leaves_two_minutes_for_the_last_checkpoint():
    # On SIGTERM (a preemption, a stop) the trainer finishes its async checkpoint; the pod
    # gets 120 s for it before SIGKILL (TERMINATION_GRACE_SECONDS).
    assert _pod(_jobset(trainer={"config": TINY}))["terminationGracePeriodSeconds"] == 120


def test_the_fingerprint_ignores_key_order():
    spec = load_job(_job(trainer={"config": TINY},
                         resources={"requests": {"cpu": "4", "memory": "8Gi"}})).spec
    config = {k: dict(reversed(list(v.items()))) for k, v in reversed(list(TINY.items()))}
    reordered = load_job(_job(trainer={"config": config},
                              resources={"requests": {"memory": "8Gi", "cpu": "4"}})).spec
    assert changed_fields(reordered, encode_fingerprint(spec)) == ()


def test_a_fingerprint_written_by_an_earlier_operator_still_reads_the_same():
    # JobSets in a cluster carry fingerprints from the operator that made them: the hash of a
    # field must not change across versions, or every running job reads as changed.
    fingerprint = build_fingerprint(load_job(_job()).spec)
    assert (fingerprint["image"], fingerprint["slice"], fingerprint["output"]) == (
        "8dcdcf088ecd", "6f8d9ba27e5e", "2780ff59fbfc")
