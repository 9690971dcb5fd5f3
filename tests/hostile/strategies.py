"""Hypothesis strategies for hostile TpuTrainingJobs: valid jobs with hostile text wherever the
API takes free text, near-valid jobs with one field broken, and junk where a job should be."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

from tpujob.validation import CREDENTIAL_ENV

# Strings that have broken parsers, shells, templates, YAML and terminals somewhere.
INJECTIONS = (
    "; rm -rf /", "$(id)", "`id`", "${jndi:ldap://x/a}", "{{ .Values.secret }}", "' OR 1=1 --",
    "<script>alert(1)</script>", "../../etc/passwd", "\x00", "\r\nX-Injected: 1", "\u202e",
    "\ufeff", "ジョブ", "🚀", "%s%n", "\\", '"', "null", "~", "- a", "{a: b}", "[1, 2", "*a",
    "&a", "!!python/object/apply:os.system ['id']", "!!bool x", "!!int x", "!!timestamp x",
    "2001-02-30", "0x10", "1e9999", "-0", ".inf", ".nan", "NaN", "yes", "0o777", "1_000",
    "a" * 64, "A" * 254, "-leading-dash", "trailing-dash-", "dots..dots", "UPPER",
)
HUGE_INTS = (10**30, -(10**30), 2**63, -(2**63) - 1, 2**64, 10**300, -1, 0)
SECRET_PREFIX = "tpujob-planted-"

TINY_CONFIG: dict[str, Any] = {
    "model": {"vocab_size": 256, "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
              "head_dim": 16, "mlp_dim": 128},
    "train": {"steps": 10, "global_batch": 16, "seq_len": 64},
}
# (slice, slices) pairs that TINY_CONFIG's batch splits over.
SLICES = (("v6e-8", 1), ("v6e-8", 2), ("v6e-16", 1), ("v6e-4", 2), ("v5p-8", 2),
          ("tpu7x-8", 1), ("tpu7x-8", 2), ("v4-8", 1), ("v5e-8", 1))

long_text = st.builds(lambda c, n: c * n, st.characters(), st.integers(64, 5_000))
hostile_text = st.one_of(st.text(max_size=40), st.sampled_from(INJECTIONS), long_text)
free_text = hostile_text.filter(bool)  # where the API takes any non-empty string
dns_label = st.from_regex(r"\A[a-z]([a-z0-9-]{0,18}[a-z0-9])?\Z")
env_name = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_.-]{0,30}\Z").filter(
    lambda n: not n.startswith("TPUJOB_") and n not in (
        "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", "WANDB_API_KEY") and
    not n.startswith("MEGASCALE_") and not CREDENTIAL_ENV.search(n))
secret_token = st.text(alphabet="0123456789abcdef", min_size=24, max_size=24).map(
    lambda t: SECRET_PREFIX + t)

scalar_junk = st.one_of(st.none(), st.booleans(), st.integers(), st.sampled_from(HUGE_INTS),
                        st.floats(), hostile_text)
junk = st.recursive(scalar_junk, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(hostile_text, inner, max_size=4)),
    max_leaves=12)

OVERRIDE_KEYS = ("train.steps", "train.seq_len", "optimizer.lr", "metrics.wandb.run_name",
                 "metrics.wandb.tags", "checkpoint.every", "model.d_model", "data.kind")


@st.composite
def valid_jobs(draw: st.DrawFn) -> dict[str, Any]:
    """Jobs the API models accept, with hostile text wherever text is free."""
    slice_name, slices = draw(st.sampled_from(SLICES))
    spec: dict[str, Any] = {
        "slice": slice_name, "slices": slices,
        "image": draw(st.sampled_from(("trainer:1", "us-docker.pkg.dev/p/r/t@sha256:" + "a" * 64,
                                       "ジョブ/トレーナー:1", "a" * 300))),
        "output": draw(st.sampled_from(("gs://bucket/run", "/out", "runs/a-b_c.d"))),
    }
    if draw(st.booleans()):
        spec["trainer"] = {"command": draw(st.lists(hostile_text, min_size=1, max_size=3)),
                           "args": draw(st.lists(hostile_text, max_size=3))}
    else:
        spec["trainer"] = {"config": copy.deepcopy(TINY_CONFIG), "overrides": draw(st.lists(
            st.builds(lambda k, v: f"{k}={v}", st.sampled_from(OVERRIDE_KEYS), hostile_text),
            max_size=3))}
    spec["env"] = draw(st.lists(st.fixed_dictionaries({"name": env_name, "value": hostile_text}),
                                max_size=3, unique_by=lambda e: e["name"]))
    if draw(st.booleans()):
        spec["env"].append({"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {
            "name": draw(dns_label), "key": draw(st.from_regex(r"\A[-._a-zA-Z0-9]{1,20}\Z"))}}})
    if draw(st.booleans()):
        spec["wandb"] = {"project": draw(free_text), "tags": draw(st.lists(hostile_text,
                                                                             max_size=3)),
                         "runName": draw(free_text),
                         "apiKeySecret": {"name": draw(dns_label), "key": "api-key"}}
    if draw(st.booleans()):
        spec["resources"] = {"requests": {"memory": draw(st.sampled_from(
            ("16Gi", "500M", 1, "1.5e9", 10**30)))}, "limits": {"cpu": "4"}}
    if draw(st.booleans()):
        spec["scheduling"] = {"queueName": draw(dns_label),
                              "priorityClassName": draw(dns_label)}
    if draw(st.booleans()):
        spec["restartPolicy"] = {"maxRestarts": draw(st.integers(0, 1000)),
                                 "retryableExitCodes": draw(st.lists(st.integers(1, 255),
                                                                     max_size=64))}
    metadata: dict[str, Any] = {"name": draw(dns_label)}
    if draw(st.booleans()):
        metadata["labels"] = {"team": draw(dns_label)}
        metadata["annotations"] = {"note": draw(hostile_text)}
    return {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
            "metadata": metadata, "spec": spec}


# Where a near-valid job gets its one broken value (a path of keys; 0 is a list's first item).
MUTABLE_PATHS: tuple[tuple[Any, ...], ...] = (
    (), ("apiVersion",), ("kind",), ("metadata",), ("metadata", "labels"),
    ("metadata", "annotations"), ("spec",), ("spec", "slice"), ("spec", "slices"),
    ("spec", "machineType"), ("spec", "image"), ("spec", "output"), ("spec", "trainer"),
    ("spec", "trainer", "config"), ("spec", "trainer", "config", "train", "steps"),
    ("spec", "trainer", "config", "model"), ("spec", "trainer", "overrides"),
    ("spec", "trainer", "overrides", 0), ("spec", "trainer", "command"),
    ("spec", "parallelism"), ("spec", "parallelism", "ici"), ("spec", "parallelism", "dcn"),
    ("spec", "parallelism", "ici", "fsdp"), ("spec", "data"), ("spec", "data", "path"),
    ("spec", "wandb"), ("spec", "wandb", "mode"), ("spec", "wandb", "apiKeySecret"),
    ("spec", "env"), ("spec", "env", 0), ("spec", "env", 0, "name"), ("spec", "env", 0, "value"),
    ("spec", "env", 0, "valueFrom"), ("spec", "resources"), ("spec", "resources", "requests"),
    ("spec", "scheduling", "queueName"), ("spec", "restartPolicy"),
    ("spec", "restartPolicy", "maxRestarts"), ("spec", "restartPolicy", "retryableExitCodes"),
    ("spec", "restartPolicy", "onStall"), ("spec", "stallTimeoutSeconds"),
    ("spec", "firstStepTimeoutSeconds"), ("spec", "suspend"), ("status",),
    ("spec", "unknownField"),
)


def set_path(obj: Any, path: tuple[Any, ...], value: Any, delete: bool = False) -> Any:
    """`obj` with the value at `path` replaced (or deleted); missing parents are created."""
    if not path:
        return value
    node = obj
    for key in path[:-1]:
        if isinstance(node, dict):
            node = node.setdefault(key, {})
        elif isinstance(node, list) and isinstance(key, int) and node:
            node = node[0]
        else:
            return obj
    last = path[-1]
    if isinstance(node, dict):
        if delete:
            node.pop(last, None)
        else:
            node[last] = value
    elif isinstance(node, list) and isinstance(last, int):
        if node and delete:
            node.pop(0)
        elif node:
            node[0] = value
        elif not delete:
            node.append(value)
    return obj


@st.composite
def near_valid_jobs(draw: st.DrawFn) -> Any:
    """A valid job with one value replaced by junk, or deleted."""
    job = draw(valid_jobs())
    path = draw(st.sampled_from(MUTABLE_PATHS))
    if path and draw(st.integers(0, 4)) == 0:
        return set_path(job, path, None, delete=True)
    return set_path(job, path, draw(junk))


any_job = st.one_of(valid_jobs(), near_valid_jobs(), junk)
