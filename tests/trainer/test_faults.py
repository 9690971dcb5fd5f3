"""Faults through the real CLI, each ending with the contract's exit code and reason: checkpoint
storage failing mid-save, a coordinator that never answers, a process killed mid-training."""

from __future__ import annotations

import contextlib
import signal
import socket
import time
from collections.abc import Iterator

import pytest

from tests.support.http_faults import faulty_proxy
from tests.trainer.helpers import (
    TINY_YAML,
    LiveRun,
    free_port,
    parse_events,
    process_env,
    run_cli,
    run_two_processes,
    wait_until_complete,
)
from tpujob_trainer.checkpoint import StepDirs
from tpujob_trainer.gcs_env import build_gcs_emulator_env

pytestmark = pytest.mark.integration

COMMON = ["--config", str(TINY_YAML), "metrics.port=null", "metrics.measure_peak=false",
          "metrics.memory_every=1000000"]
MESH = "mesh.ici={data: 2, fsdp: 2, tensor: 2}"


@pytest.mark.parametrize("fault", ["503", "stall"])
def test_storage_failing_mid_save_exits_42_and_the_rerun_resumes_from_the_last_good_checkpoint(
        tmp_path, gcs, fault):
    out = gcs.fresh_prefix("save-fails")
    ckpts = f"{out}/checkpoints"
    # The timeout must outlast a healthy save on a busy machine: with 3 s the first save, before
    # any fault, once timed out (its background write to the emulated gs:// then took ~3 s,
    # waiting out curl's `Expect: 100-continue`, which the emulator now answers).
    args = [*COMMON, "train.steps=1000000", "checkpoint.every=5", "checkpoint.save_timeout_s=15",
            f"output={out}"]
    with faulty_proxy(gcs.url) as storage:
        env = build_gcs_emulator_env(storage.url)
        with LiveRun(args, tmp_path, env=env, name="first") as first:
            # Save 10 starts only once 5 is complete; its background writes are still in flight
            # when the storage starts answering 503 to everything, or stops answering.
            first.wait_for(lambda e: e["event"] == "checkpoint" and e["step"] == 10, timeout=120)
            storage.fail(fault)
            # The signal is the save's own timeout named in the exit reason (below), not a wall
            # clock a busy machine stretches; a save left waiting on the stalled storage would
            # never end, and `finish` fails the test at its timeout.
            failed = first.finish(timeout=60)
        assert storage.faulted > 0
        assert failed.returncode == 42, failed.stderr[-3000:]
        assert failed.termination["reason"] == "CheckpointError"
        message = failed.termination["message"]
        assert f"checkpoint {ckpts}/" in message and "checkpoint.save_timeout_s=15s" in message
        failed_step = int(message.split(f"checkpoint {ckpts}/")[1].split()[0])
        assert failed_step >= 10, message
        assert not failed.of("end")

        storage.heal()
        complete = StepDirs(ckpts).complete_steps(quiet=True)
        assert 5 in complete and failed_step not in complete
        with LiveRun(args, tmp_path, env=env, name="rerun") as rerun:
            restored = rerun.wait_for(lambda e: e.get("phase") == "after_restore")
            first_step = rerun.wait_for(lambda e: e["event"] == "step")
    assert restored["step"] == complete[-1] and first_step["step"] == complete[-1] + 1


@contextlib.contextmanager
def silent_listener() -> Iterator[str]:
    """`host:port` of a socket that accepts connections and never says a word."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.listen(8)
        yield f"127.0.0.1:{server.getsockname()[1]}"


@pytest.mark.parametrize("coordinator", ["nothing listens", "accepts, never speaks"])
def test_a_coordinator_that_never_answers_ends_a_peer_with_peer_lost_in_bounded_time(
        tmp_path, coordinator):
    with contextlib.ExitStack() as stack:
        address = (f"127.0.0.1:{free_port()}" if coordinator == "nothing listens"
                   else stack.enter_context(silent_listener()))
        env = process_env(1, int(address.rsplit(":", 1)[1]), init_timeout_s=3)
        t0 = time.monotonic()
        run = run_cli([*COMMON], tmp_path, env=env, timeout=45)
        took = time.monotonic() - t0
    assert (run.returncode, run.termination["reason"]) == (42, "PeerLost"), run.stderr[-2000:]
    message = run.termination["message"]
    assert message.startswith("process 1 of 2 could not join the job through the coordinator "
                              f"(process 0) at {address} within 3s (TPUJOB_INIT_TIMEOUT_S): ")
    if coordinator == "nothing listens":
        assert f"nothing answers at {address}" in message
    else:
        assert f"something at {address} accepts connections" in message
    assert "Check that process 0 is running" in message and "TPUJOB_COORDINATOR_ADDRESS" in message
    assert took < 30


@pytest.mark.slow
def test_a_process_killed_mid_training_ends_the_job_with_peer_lost_and_both_resume(tmp_path, gcs):
    out = gcs.fresh_prefix("killed")
    ckpts = f"{out}/checkpoints"
    args = [*COMMON, MESH, "train.steps=40", "checkpoint.every=5", f"output={out}"]
    port = free_port()
    with (LiveRun(args, tmp_path, env=process_env(0, port), name="p0") as p0,
          LiveRun(args, tmp_path, env=process_env(1, port), name="p1") as p1):
        p0.wait_for(lambda e: e["event"] == "checkpoint" and e["step"] == 5, timeout=120)
        wait_until_complete(ckpts, 5)
        assert p0.proc.poll() is None and p1.proc.poll() is None, "the run ended too soon"
        p1.proc.send_signal(signal.SIGKILL)
        survivor = p0.finish(timeout=60)
        assert p1.finish(timeout=30).returncode == -signal.SIGKILL
    # Without the lifeline, process 0 waits in the step's collective until JAX's heartbeat
    # timeout (100 s, past `finish`'s 60), and JAX then aborts it with no reason: the reason
    # below is the signal that the lifeline ended it (benchmarks/peer_failure.py times the
    # same lifeline on a peer that fails with a reason).
    assert (survivor.returncode, survivor.termination["reason"]) == (42, "PeerLost"), \
        survivor.stderr[-3000:]
    assert survivor.termination["message"].startswith("process 1 vanished without a reason")
    assert not survivor.of("end")

    complete = StepDirs(ckpts).complete_steps(quiet=True)
    assert complete and complete[-1] >= 5
    (code0, out0, err0, term0), (code1, _, err1, _) = run_two_processes(args, tmp_path, timeout=120)
    assert (code0, code1) == (0, 0), err0[-2000:] + err1[-2000:]
    events = parse_events(out0)
    restored = [e["step"] for e in events if e.get("phase") == "after_restore"]
    assert restored == [complete[-1]]
    steps = [e["step"] for e in events if e["event"] == "step"]
    assert steps == list(range(complete[-1] + 1, 41)) and term0["reason"] == "Completed"
