"""The standard variables a foreign trainer reads (JAX's, xpk's, MEGASCALE_*, the TPU runtime's
for two processes per host), table-driven: each container's env resolved for a given pod the way
a kubelet resolves it (downward API, `$(VAR)` expansion)."""

import pytest

from tpujob.api.resource import load_job
from tpujob.builders.jobset import build_jobset
from tpujob.local.executor.podenv import resolve_env
from tpujob_plan.slice_plan import plan_slice

pytestmark = pytest.mark.unit


def _containers(slice_name: str, slices: int = 1, containers: int = 1, env=()) -> list[dict]:
    job = {"apiVersion": "tpujob.dev/v1alpha1", "kind": "TpuTrainingJob",
           "metadata": {"name": "mt", "namespace": "ns", "uid": "u"},
           "spec": {"slice": slice_name, "slices": slices, "image": "maxtext:1",
                    "output": "gs://bucket/run", "containersPerHost": containers,
                    "trainer": {"command": ["python3", "-m", "maxtext.train"]},
                    "env": list(env)}}
    spec = load_job(job).spec
    plan = plan_slice(slice_name, slices=slices, containers_per_host=containers)
    js = build_jobset(job, spec, plan)
    return js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]


def _pod(slice_index: int, host: int) -> dict:
    return {"metadata": {"namespace": "ns", "labels": {"jobset.sigs.k8s.io/job-index":
                                                       str(slice_index)},
                         "annotations": {"batch.kubernetes.io/job-completion-index": str(host)}}}


def _resolved(slice_name, slices, containers, slice_index, host, container=0, env=()):
    c = _containers(slice_name, slices, containers, env)[container]
    return resolve_env(_pod(slice_index, host), c, lambda *_: None)


COORD = "mt-slice-0-0.mt"


@pytest.mark.parametrize(
    "slice_name, slices, containers, pod, container, expected, absent",
    [
        # One slice, one container per host: every JAX and xpk name, the process id included.
        ("v6e-16", 1, 1, (0, 3), 0,
         {"JAX_COORDINATOR_ADDRESS": f"{COORD}:8482", "JAX_COORDINATOR_PORT": "8482",
          "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_COUNT": "4", "JAX_PROCESS_ID": "3",
          "NODE_RANK": "3", "NNODES": "4", "JOB_INDEX": "0", "JOB_COMPLETION_INDEX": "3",
          "PROCESSES_IN_JOB": "4", "TPUJOB_COORDINATOR_HOST": COORD},
         {"MEGASCALE_NUM_SLICES", "TPU_VISIBLE_CHIPS", "TPU_PROCESS_ADDRESSES"}),
        # tpu7x by default: one process per host with every chip, like any other generation.
        ("tpu7x-64", 1, 1, (0, 7), 0,
         {"JAX_NUM_PROCESSES": "8", "JAX_PROCESS_ID": "7", "PROCESSES_IN_JOB": "8"},
         {"TPU_VISIBLE_CHIPS", "TPU_PROCESS_BOUNDS"}),
        # Two slices: MEGASCALE_* with the port; the process id is not a field of the pod, so
        # JAX_PROCESS_ID and NODE_RANK are left out (JOB_INDEX * PROCESSES_IN_JOB +
        # JOB_COMPLETION_INDEX gives it, MaxText's formula).
        ("v6e-16", 2, 1, (1, 2), 0,
         {"MEGASCALE_COORDINATOR_ADDRESS": COORD, "MEGASCALE_PORT": "8081",
          "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "1", "JOB_INDEX": "1",
          "JOB_COMPLETION_INDEX": "2", "PROCESSES_IN_JOB": "4", "JAX_NUM_PROCESSES": "8",
          "NNODES": "8"},
         {"JAX_PROCESS_ID", "NODE_RANK"}),
        # The opt-in tpu7x layout: each container its chips and port, every process listed
        # with the pod's own slice in the host names.
        ("tpu7x-8", 1, 2, (0, 0), 1,
         {"TPU_VISIBLE_CHIPS": "2,3", "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,2,1",
          "TPU_PROCESS_BOUNDS": "2,1,1", "TPU_PROCESS_PORT": "8477",
          "TPU_PROCESS_ADDRESSES": "mt-slice-0-0.mt:8476,mt-slice-0-0.mt:8477",
          "JAX_NUM_PROCESSES": "2", "TPUJOB_CONTAINER_INDEX": "1"},
         {"JAX_PROCESS_ID"}),
        ("tpu7x-64", 2, 2, (1, 5), 0,
         {"TPU_VISIBLE_CHIPS": "0,1", "TPU_PROCESS_BOUNDS": "2,2,4", "TPU_PROCESS_PORT": "8476",
          "JAX_NUM_PROCESSES": "32", "MEGASCALE_SLICE_ID": "1"},
         {"JAX_PROCESS_ID"}),
    ],
)
def test_standard_env(slice_name, slices, containers, pod, container, expected, absent):
    env = _resolved(slice_name, slices, containers, *pod, container=container)
    assert {k: env.get(k) for k in expected} == expected
    assert not absent & set(env)


def test_process_addresses_name_the_pods_own_slice():
    env = _resolved("tpu7x-64", 2, 2, 1, 5)
    addresses = env["TPU_PROCESS_ADDRESSES"].split(",")
    assert len(addresses) == 16  # 8 hosts x 2 processes, this slice only
    assert addresses[:3] == ["mt-slice-1-0.mt:8476", "mt-slice-1-0.mt:8477",
                             "mt-slice-1-1.mt:8476"]


def test_spec_env_replaces_a_standard_variable():
    """MaxText on CPU resolves JAX_COORDINATOR_ADDRESS as a bare host name: the job may set it,
    and its value (here through `$(TPUJOB_COORDINATOR_HOST)`) replaces the operator's."""
    user = [{"name": "JAX_COORDINATOR_ADDRESS", "value": "$(TPUJOB_COORDINATOR_HOST)"}]
    (c,) = _containers("v6e-16", env=user)
    assert [e["name"] for e in c["env"]].count("JAX_COORDINATOR_ADDRESS") == 1
    env = resolve_env(_pod(0, 1), c, lambda *_: None)
    assert env["JAX_COORDINATOR_ADDRESS"] == COORD


@pytest.mark.parametrize("user, address, port", [
    # docs/bring-your-own.md's MaxText-on-CPU form: a bare host name, to which MaxText's CPU
    # path (initialize_jax_for_cpu) adds xpk's port 1234; the coordinator listens there.
    ([{"name": "JAX_COORDINATOR_ADDRESS", "value": "$(TPUJOB_COORDINATOR_HOST)"}], COORD, "1234"),
    ([{"name": "JAX_COORDINATOR_ADDRESS", "value": "coordinator"}], "coordinator", "1234"),
    # An address with its port, or a port of the job's own: as given.
    ([{"name": "JAX_COORDINATOR_ADDRESS", "value": "$(TPUJOB_COORDINATOR_HOST):9999"}],
     f"{COORD}:9999", "8482"),
    ([{"name": "JAX_COORDINATOR_ADDRESS", "value": "$(TPUJOB_COORDINATOR_HOST)"},
      {"name": "JAX_COORDINATOR_PORT", "value": "7777"}], COORD, "7777"),
    ([], f"{COORD}:8482", "8482"),
])
def test_a_bare_coordinator_host_gets_the_port_its_program_adds(user, address, port):
    """The port in JAX_COORDINATOR_PORT is where process 0's coordinator listens: the local
    executor binds it there, and a program that adds its own port to a bare host name must
    find it there."""
    (c,) = _containers("v6e-8", env=user)
    names = [e["name"] for e in c["env"]]
    assert names.count("JAX_COORDINATOR_ADDRESS") == names.count("JAX_COORDINATOR_PORT") == 1
    env = resolve_env(_pod(0, 1), c, lambda *_: None)
    assert (env["JAX_COORDINATOR_ADDRESS"], env["JAX_COORDINATOR_PORT"]) == (address, port)
