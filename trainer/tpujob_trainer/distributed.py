"""Joining the job: JAX's CPU device count, `jax.distributed` from the operator's env, and the
check that the processes and devices are the ones the job expects (the "only worker 0 started"
failure: a 4-host slice where one host runs alone sees a quarter of the chips and trains ~8x
slower instead of failing). Also: a process that fails alone tells the others, which stop at once
instead of waiting in a collective until JAX's heartbeat timeout (100 s) notices it is gone."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

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


# Each process's watcher waits on its own key; a failing process writes every other process's
# key, and a process ending normally writes its own (to release its watcher before exit: a
# thread still inside the blocking get when the interpreter ends aborts the process).
_NEWS_KEY = "tpujob/news/{}"
_DONE = "done"
_WATCH_INTERVAL_MS = 60_000
_stopping = threading.Event()
_watcher: threading.Thread | None = None


def _client():
    # jax.distributed keeps its coordination-service client here (multihost_utils and Orbax
    # use it the same way); None unless this is a multi-process run.
    from jax._src import distributed as jax_distributed
    return jax_distributed.global_state.client


def announce_failure(reason: Reason, message: str) -> None:
    """Tell the other processes that this one is failing (best effort, never raises)."""
    _stopping.set()
    client = _client()
    if client is None:
        return
    me = jax.process_index()
    news = json.dumps({"process": me, "reason": reason.value, "message": message[:500]})
    try:
        for p in range(jax.process_count()):
            if p != me:
                client.key_value_set(_NEWS_KEY.format(p), news, allow_overwrite=True)
    except Exception:  # the service may already be gone (process 0 failed): nothing to tell
        return
    if me == 0:
        # Process 0 hosts the coordination service: give the waiting peers a moment to
        # receive the news before it goes away with this process.
        time.sleep(1.0)


def watch_for_failures() -> None:
    """Exit with PeerLost as soon as another process announces a failure: one pending blocking
    get per process on the coordination service, until `stop_watching()`."""
    global _watcher
    client = _client()
    if client is None:
        return
    key = _NEWS_KEY.format(jax.process_index())

    def watch() -> None:
        while not _stopping.is_set():
            try:
                value = client.blocking_key_value_get(key, _WATCH_INTERVAL_MS)
            except Exception:  # timed out (nobody failed), or the service is going away
                _stopping.wait(1.0)
                continue
            if value == _DONE or _stopping.is_set():
                return
            failed = json.loads(value)
            message = (f"process {failed['process']} failed ({failed['reason']}: "
                       f"{failed['message']}); stopping with it")
            write_termination_message(Reason.PEER_LOST, message)
            print(f"tpujob-train: {Reason.PEER_LOST.value}: {message}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(EXIT_CODES[Reason.PEER_LOST])

    _watcher = threading.Thread(target=watch, name="tpujob-peer-failures", daemon=True)
    _watcher.start()


def stop_watching(timeout_s: float = 10.0) -> None:
    """Release this process's watcher (normal end); wait briefly for it to return."""
    _stopping.set()
    client = _client()
    if _watcher is None or client is None:
        return
    try:
        client.key_value_set(_NEWS_KEY.format(jax.process_index()), _DONE, allow_overwrite=True)
    except Exception:  # the service is gone: the pending get fails and the watcher returns
        pass
    _watcher.join(timeout_s)


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
