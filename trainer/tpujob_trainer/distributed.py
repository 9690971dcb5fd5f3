"""Joining the job: JAX's CPU device count, `jax.distributed` from the operator's env, and the
check that the processes and devices are the ones the job expects (the "only worker 0 started"
failure: a 4-host slice where one host runs alone sees a quarter of the chips and trains ~8x
slower instead of failing)."""

from __future__ import annotations

import os
import sys
import threading

import jax

from tpujob_trainer.env import ProcessEnv
from tpujob_trainer.exits import EXIT_CODES, Reason, TrainerExit, write_termination_message

# JAX aborts the process (SIGABRT) when its own connect timeout passes; a watchdog that fires
# first turns a missing peer into the MeshMismatch exit instead.
_JAX_TIMEOUT_MARGIN_S = 30


def configure_devices(penv: ProcessEnv) -> None:
    """CPU device count per process; must run before JAX starts its backends."""
    if penv.cpu_devices:
        jax.config.update("jax_num_cpu_devices", penv.cpu_devices)


def initialize(penv: ProcessEnv) -> None:
    """Connect to the other processes (multi-process jobs only), waiting at most the timeout."""
    configure_devices(penv)
    if not penv.is_multiprocess:
        return
    message = (f"process {penv.process_id} of {penv.process_count} could not join the "
               f"coordinator at {penv.coordinator_address} within {penv.init_timeout_s}s: not "
               "every process of the job started, or the coordinator is unreachable")

    def give_up() -> None:
        write_termination_message(Reason.MESH_MISMATCH, message)
        print(f"tpujob-train: {Reason.MESH_MISMATCH.value}: {message}", file=sys.stderr, flush=True)
        os._exit(EXIT_CODES[Reason.MESH_MISMATCH])

    watchdog = threading.Timer(penv.init_timeout_s, give_up)
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(
            coordinator_address=penv.coordinator_address, num_processes=penv.process_count,
            process_id=penv.process_id,
            coordinator_bind_address=penv.coordinator_bind_address,
            initialization_timeout=penv.init_timeout_s + _JAX_TIMEOUT_MARGIN_S)
    except Exception as e:  # JAX raises several types; all mean "the job did not assemble"
        first = str(e).splitlines()[0] if str(e) else ""
        raise TrainerExit(Reason.MESH_MISMATCH, f"{message} ({type(e).__name__}: {first})") from e
    finally:
        watchdog.cancel()


def check_topology(penv: ProcessEnv) -> None:
    """Fail fast when JAX sees other processes or devices than the job was launched with."""
    procs, devices = jax.process_count(), jax.device_count()
    if procs != penv.process_count:
        raise TrainerExit(
            Reason.MESH_MISMATCH,
            f"JAX sees {procs} process(es) but the job expects {penv.process_count}: only part of "
            "the job started, or the processes were not wired together")
    if penv.expected_devices is not None and devices != penv.expected_devices:
        raise TrainerExit(
            Reason.MESH_MISMATCH,
            f"JAX sees {devices} devices over {procs} process(es) but the job expects "
            f"{penv.expected_devices}: only part of the slice is in this run (e.g. only worker 0 "
            "started), or the slice does not match the job's accelerator")
