"""Programs that know nothing of tpujob, in local mode (2 hosts of a v6e-8, JAX on CPU): a plain
JAX script whose `jax.distributed.initialize()` takes no arguments trains to Succeeded, wired
only by the standard variables (JAX's coordinator address, GKE's TPU webhook variables, which
local mode gives as a cluster would); real MaxText and real Tunix from PyPI, each in its own
environment, train to Succeeded with their progress in the job's status. The plain JAX programs
run on both control planes; MaxText and Tunix (two to three minutes each) on the real one: what
they prove is the trainer's own restart and resume, and the planes' part in it (pods, a
restart) is the same as for the built-in trainer's jobs, tested on both in test_training.py."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import json_lines, unique
from tests.support.apiserver import wait_for
from tpujob.api.resource import load_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
CONTROL_PLANES = ("embedded", "real")
PROGRAMS = Path(__file__).resolve().parent / "programs"


def test_plain_jax_with_no_arguments_to_initialize(local):
    name = unique("plain-jax")
    local.apply(name, {
        "slice": "v6e-8", "image": "jax:1", "output": "gs://tpujob-e2e/plain",
        "trainer": {"command": ["python3", str(PROGRAMS / "plain_jax_train.py")],
                    "progress": {"source": "log", "format": "jsonl"}},
        "restartPolicy": {"maxRestarts": 0}})
    job = local.wait_phase(name, "Succeeded", "Failed", timeout=180)
    assert job["status"]["phase"] == "Succeeded", (job["status"], [p.read_text()[-3000:] for p in local.logs(name)])
    valid = next(c for c in job["status"]["conditions"] if c["type"] == "Valid")
    assert "mesh, batch and memory not checked" in valid["message"]
    for host in (0, 1):
        [log] = local.logs(name, host=host)
        lines = json_lines(log)
        start = next(e for e in lines if e.get("event") == "start")
        # Both hosts joined one 2-process JAX job, each as the process its pod's index says.
        assert (start["process"], start["processes"], start["devices"]) == (host, 2, 2)
        losses = [e["loss"] for e in lines if "step" in e]
        assert len(losses) == 8 and losses[-1] < losses[0] / 2, losses


RESOLVE_ITSELF = """
import json, os, socket, sys
job = sys.argv[1]  # the job's name alone: the program builds the host names itself
names = [f"{job}-slice-0-{i}.{job}" for i in (0, 1)]
print(json.dumps({"me": os.environ["TPUJOB_BIND_ADDRESS"],
                  "resolved": [socket.gethostbyname(n) for n in names]}), flush=True)
"""


def test_a_program_resolves_pod_host_names_it_builds_itself(local):
    name = unique("dns")
    local.apply(name, {"slice": "v6e-8", "image": "py:1", "output": "gs://tpujob-e2e/dns",
                       "trainer": {"command": ["python3", "-c", RESOLVE_ITSELF],
                                   "args": [name]},
                       "restartPolicy": {"maxRestarts": 0}})
    job = local.wait_phase(name, "Succeeded", "Failed", timeout=120)
    assert job["status"]["phase"] == "Succeeded", [p.read_text() for p in local.logs(name)]
    seen = [json_lines(local.logs(name, host=h)[0])[0] for h in (0, 1)]
    # Each host resolves both pods' names to their own addresses, as cluster DNS answers.
    assert seen[0]["resolved"] == seen[1]["resolved"] == [seen[0]["me"], seen[1]["me"]]


# -- MaxText from PyPI ---------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
MAXTEXT_STEP = re.compile(r"completed step: (\d+), seconds: ")
MAXTEXT_TINY = {
    "hardware": "cpu", "dataset_type": "synthetic", "enable_goodput_recording": "false",
    "base_emb_dim": 32, "base_num_query_heads": 2, "base_num_kv_heads": 2, "head_dim": 16,
    "base_mlp_dim": 64, "base_num_decoder_layers": 1, "vocab_size": 256,
    "max_target_length": 32, "per_device_batch_size": 2, "weight_dtype": "float32",
    "steps": 200, "enable_checkpointing": "true", "async_checkpointing": "false",
    "checkpoint_period": 20, "jax_distributed_initialization_timeout": 120,
}


@pytest.fixture(scope="module")
def maxtext():
    """MaxText's Python 3.12 environment, built once and cached outside the repository
    (tools/maxtext_env.py). A build that cannot be made fails the test with the reason."""
    from tools.cached_env import EnvBuildError
    from tools.maxtext_env import ensure
    try:
        return ensure()
    except EnvBuildError as err:
        pytest.fail(f"MaxText's environment could not be built: {err}")


def documented_maxtext_job() -> dict:
    """The MaxText-in-local-mode job of docs/bring-your-own.md, as a user would copy it."""
    text = (REPO / "docs" / "bring-your-own.md").read_text()
    block = text.split("<!-- maxtext-local-job -->\n```yaml\n", 1)[1].split("```", 1)[0]
    return yaml.safe_load(block)


def maxtext_job(marker: dict, name: str, output: Path) -> dict:
    """The documented job, with this machine's MaxText environment, a tiny model and a kill
    test's restart policy; its env and progress exactly as documented."""
    spec = documented_maxtext_job()["spec"]
    args = [marker["base_yml"], f"run_name={name}", f"base_output_directory={output}",
            *(f"{k}={v}" for k, v in MAXTEXT_TINY.items())]
    spec["trainer"]["command"] = [marker["python"], "-m", marker["train_module"]]
    spec["trainer"]["args"] = args
    return {**spec, "output": str(output), "restartPolicy": {"maxRestarts": 2},
            "firstStepTimeoutSeconds": 600}


def test_the_documented_maxtext_job_is_the_one_run_below():
    """The MaxText settings the docs show are those the test below runs with (it adds only a
    tiny model and checkpoints), and the docs need no coordinator port."""
    job = documented_maxtext_job()
    load_job({**job, "metadata": {**job["metadata"], "namespace": "default"}})  # a valid job
    spec = job["spec"]
    assert spec["trainer"]["command"][1:] == ["-m", "maxtext.trainers.pre_train.train"]
    shown = dict(a.split("=", 1) for a in spec["trainer"]["args"][1:])
    assert {k: v for k, v in shown.items() if k not in ("run_name", "base_output_directory")} \
        == {k: str(MAXTEXT_TINY[k]) for k in shown if k in MAXTEXT_TINY}
    assert set(shown) - {"run_name", "base_output_directory"} <= set(MAXTEXT_TINY)
    assert "JAX_COORDINATOR_PORT" not in {e["name"] for e in spec["env"]}


def maxtext_steps(path: Path) -> list[int]:
    return [int(m.group(1)) for m in MAXTEXT_STEP.finditer(path.read_text(errors="replace"))]


def _tails(logs: list[Path]) -> str:
    return "\n".join(f"== {p}\n{p.read_text(errors='replace')[-2500:]}" for p in logs)


@pytest.mark.control_planes("real")
def test_maxtext_trains_restarts_after_a_kill_and_resumes_its_checkpoints(local, maxtext,
                                                                          tmp_path):
    name = unique("maxtext")
    output = tmp_path / "out"
    local.apply(name, maxtext_job(maxtext, name, output))
    checkpoints = output / name / "checkpoints"
    try:
        # MaxText saves step 0 as soon as it starts; wait for one made by training.
        wait_for(lambda: [p for p in checkpoints.glob("*") if p.name.isdigit() and int(p.name)],
                 timeout=400, interval=0.1, message="MaxText's first checkpoint after step 0")
    except BaseException:
        pytest.fail(f"no checkpoint: {local.status(name)}\n{_tails(local.logs(name))}")
    # Host 1 killed at once, while MaxText still has most of its steps to run.
    [host1] = [p for p in local.processes(name) if "-slice-0-1-" in p["pod"]]
    os.kill(host1["pid"], signal.SIGKILL)

    job = local.wait_phase(name, "Succeeded", "Failed", timeout=400)
    status = job["status"]
    logs = local.logs(name)
    assert status["phase"] == "Succeeded", (status, _tails(logs))
    assert status["restarts"] == 1
    first, second = logs
    before, after = maxtext_steps(first), maxtext_steps(second)
    # The second run resumed from one of its own checkpoints, not from step 0, and finished.
    # MaxText writes a step's metrics line one step late, and a killed process loses what it
    # had not flushed, so the first log can end a few steps short of the checkpoint it saved
    # (seen: log at step 18, checkpoint 20 resumed as step 21); never a whole period short.
    saved = sorted(int(p.name) for p in checkpoints.glob("*") if p.name.isdigit())
    period = MAXTEXT_TINY["checkpoint_period"]
    assert before and after and after[0] - 1 in saved, (before, after, saved)
    assert after[0] - 1 < max(before) + period, (before, after, saved)
    assert after[0] - 1 >= period
    assert after[-1] == MAXTEXT_TINY["steps"] - 1
    # MaxText's own step lines reached the job's status through process 0's log (what
    # `kubectl get tpujobs` shows in its Step, Loss and Tok/s/dev columns).
    seen = status["progress"]
    assert after[0] <= seen["step"] <= after[-1]
    assert seen["loss"] > 0 and seen["tokensPerSecondPerDevice"] > 0
    assert seen["stepTimeSeconds"] > 0 and seen["tflopsPerDevice"] >= 0


# -- Tunix from PyPI -----------------------------------------------------------------------------

TUNIX_STEPS, TUNIX_CHECKPOINT_EVERY = 80, 20


@pytest.fixture(scope="module")
def tunix():
    """Tunix's environment, built once and cached outside the repository (tools/tunix_env.py).
    A build that cannot be made fails the test with the reason."""
    from tools.cached_env import EnvBuildError
    from tools.tunix_env import ensure
    try:
        return ensure()
    except EnvBuildError as err:
        pytest.fail(f"Tunix's environment could not be built: {err}")


def tunix_job(marker: dict, checkpoints: Path) -> dict:
    return {
        "slice": "v6e-8", "image": f"tunix:{marker['tunix_version']}",
        "output": "gs://tpujob-e2e/tunix",
        "trainer": {"command": [marker["python"], str(PROGRAMS / "tunix_grpo.py")],
                    "args": ["--steps", str(TUNIX_STEPS), "--checkpoint-dir", str(checkpoints),
                             "--checkpoint-every", str(TUNIX_CHECKPOINT_EVERY)],
                    "progress": {"source": "log", "format": "jsonl"}},
        "env": [{"name": "PYTHONPATH", "value": ""}, {"name": "HF_HUB_OFFLINE", "value": "1"}],
        "restartPolicy": {"maxRestarts": 1}, "firstStepTimeoutSeconds": 600,
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


@pytest.mark.control_planes("real")
def test_tunix_grpo_trains_on_two_hosts_resumes_after_a_kill_and_its_reward_rises(
        local, tunix, tmp_path):
    name = unique("tunix")
    checkpoints = tmp_path / "checkpoints"
    local.apply(name, tunix_job(tunix, checkpoints))

    def saved() -> list[int]:
        # Orbax renames a checkpoint to its step only once every process has written it.
        return sorted(int(p.name) for p in (checkpoints / "actor").glob("*") if p.name.isdigit())

    # Orbax saves the first step too; wait for one that training made.
    try:
        wait_for(lambda: [s for s in saved() if s >= TUNIX_CHECKPOINT_EVERY], timeout=400,
                 interval=0.1, message=f"Tunix's checkpoint of step {TUNIX_CHECKPOINT_EVERY}")
    except BaseException:
        pytest.fail(f"no checkpoint: {local.status(name)}\n{_tails(local.logs(name))}")
    # Host 1 killed at once, while Tunix still has most of its steps to run.
    [host1] = [p for p in local.processes(name) if "-slice-0-1-" in p["pod"]]
    os.kill(host1["pid"], signal.SIGKILL)
    at_kill = saved()

    job = local.wait_phase(name, "Succeeded", "Failed", timeout=480)
    status = job["status"]
    assert status["phase"] == "Succeeded", (status, _tails(local.logs(name)))
    assert status["restarts"] == 1
    # Tunix's steps reached the job's status through process 0's JSON lines (pods/log).
    seen = status.get("progress") or {}
    assert (seen.get("step"), seen.get("totalSteps")) == (TUNIX_STEPS, TUNIX_STEPS), status
    assert isinstance(seen.get("loss"), float) and seen["stepTimeSeconds"] >= 0, seen

    runs = {host: [json_lines(p) for p in local.logs(name, host=host)] for host in (0, 1)}
    assert [len(r) for r in runs.values()] == [2, 2]
    starts = {host: [next(e for e in lines if e.get("event") == "start") for lines in r]
              for host, r in runs.items()}
    for host, (first, second) in starts.items():
        # Each time one 2-process JAX job, each host the process its pod's index says.
        for start in (first, second):
            assert (start["process"], start["processes"], start["devices"]) == (host, 2, 2)
        assert first["resumed_at"] == 0
    # The second run resumed from one of Tunix's own checkpoints, not from step 0, and finished.
    # A save host 1 had written its part of can still be committed by host 0 after the kill:
    # the resume is from a periodic checkpoint no older than the newest one complete at the kill.
    resumed = starts[0][1]["resumed_at"]
    assert resumed == starts[1][1]["resumed_at"] >= max(at_kill) >= TUNIX_CHECKPOINT_EVERY, (
        starts, at_kill)
    assert resumed % TUNIX_CHECKPOINT_EVERY == 0, (resumed, at_kill)
    before, after = ([e for e in lines if "step" in e] for lines in runs[0])
    assert [e["step"] for e in before] == list(range(1, len(before) + 1))
    # A step's line is written when Tunix reports its loss, during the next step: the first
    # run's log may end one step short of the checkpoint it saved, never more.
    assert len(before) >= resumed - 1
    assert [e["step"] for e in after] == list(range(resumed + 1, TUNIX_STEPS + 1))

    # GRPO taught the random model to answer with "a" (seen: a mean reward of 0.01 over the
    # first 10 steps, 1.0 over the last 10).
    first, last = [e["reward"] for e in before[:10]], [e["reward"] for e in after[-10:]]
    assert _mean(first) < 0.15 and _mean(last) > 0.5, (before, after)
    # Both processes sampled and scored the same completions: one program over two hosts.
    done = [next(e for e in runs[host][1] if e.get("event") == "done") for host in (0, 1)]
    assert done[0]["steps_done"] == done[1]["steps_done"] == TUNIX_STEPS
    assert done[0]["rewards"] == done[1]["rewards"] == [round(e["reward"], 6) for e in after]
