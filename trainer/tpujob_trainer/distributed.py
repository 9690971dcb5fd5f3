"""Joining the job: JAX's CPU device count, `jax.distributed` from the operator's env, and the
check that the processes and devices are the ones the job expects (the "only worker 0 started"
failure: a 4-host slice where one host runs alone sees a quarter of the chips and trains ~8x
slower instead of failing). Also: a process that fails alone tells the others, which stop at once
instead of waiting in a collective until JAX's heartbeat timeout (100 s) notices it is gone; one
that dies without a word is noticed through the lifeline (lifeline.py)."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

import jax

from tpujob_trainer import env as envvars
from tpujob_trainer.env import ProcessEnv
from tpujob_trainer.exits import EXIT_CODES, Reason, TrainerExit, write_termination_message
from tpujob_trainer.lifeline import Lifeline

# JAX aborts the process (SIGABRT) when its own connect timeout passes; a watchdog that fires
# first turns a job that did not assemble into the contract's exit instead.
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
    reason = _join_failure_reason(penv)

    def give_up() -> None:
        _leave(reason, _describe_join_failure(penv))

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
        raise TrainerExit(reason, f"{_describe_join_failure(penv)} ({type(e).__name__}: {first})") from e
    finally:
        watchdog.cancel()


def _join_failure_reason(penv: ProcessEnv) -> Reason:
    """Process 0 hosts the coordinator: when the job does not assemble there, a process of the
    job is missing (MeshMismatch, fatal). Any other process that cannot join has usually come up
    before process 0, or outlived it: PeerLost, retried (a wrong address fails the same way on
    every restart, up to the job's restart limit, each time with the message saying so)."""
    return Reason.MESH_MISMATCH if penv.process_id == 0 else Reason.PEER_LOST


def _describe_join_failure(penv: ProcessEnv) -> str:
    who = f"process {penv.process_id} of {penv.process_count}"
    within = f"within {penv.init_timeout_s}s ({envvars.INIT_TIMEOUT_S})"
    if penv.process_id == 0:
        return (f"{who} (the coordinator, at {penv.coordinator_address}) could not join the "
                f"other processes {within}: not every process of the job started, or the others "
                "cannot reach this address")
    return (f"{who} could not join the job through the coordinator (process 0) at "
            f"{penv.coordinator_address} {within}: {_probe(penv.coordinator_address)}. Check "
            f"that process 0 is running and that {envvars.COORDINATOR_ADDRESS} is its host and "
            "port. Exiting to be restarted, since process 0 is usually still starting or has just "
            "restarted")


def _probe(address: str) -> str:
    """What answers at `address` now, in words (a TCP connect, nothing more)."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=2):
            return (f"something at {address} accepts connections, but the job did not assemble "
                    "(a process of the job is missing, or what listens there is not the JAX "
                    "coordinator)")
    except OSError as e:
        return f"nothing answers at {address} ({e.strerror or type(e).__name__})"


def _leave(reason: Reason, message: str) -> None:
    """Exit now with `reason`, from any thread (the main one may be blocked in JAX). The first
    caller's account is the one written: the lock is never released, the process ends."""
    _exit_lock.acquire()
    _leaving.set()
    write_termination_message(reason, message, final=True)
    print(f"tpujob-train: {reason.value}: {message}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(EXIT_CODES[reason])


# Each process's watcher waits on its own key; a failing process writes every other process's
# key, and a process ending normally writes its own (to release its watcher before exit: a
# thread still inside the blocking get when the interpreter ends aborts the process).
_NEWS_KEY = "tpujob/news/{}"
_DONE = "done"
_WATCH_INTERVAL_MS = 60_000
_stopping = threading.Event()
_watcher: threading.Thread | None = None
_lifeline: Lifeline | None = None
_exit_lock = threading.Lock()
_leaving = threading.Event()   # a watcher thread is ending the process with its account
# How long the main thread, its collective failed as a lost peer fails it, waits for the
# lifeline or the news watcher to end the process with the account that names the peer.
PEER_ACCOUNT_WAIT_S = 5.0


def coordination_client():
    """jax.distributed's coordination-service client (multihost_utils and Orbax use it the same
    way); None unless this is a multi-process run."""
    from jax._src import distributed as jax_distributed
    return jax_distributed.global_state.client


def announce_failure(reason: Reason, message: str) -> None:
    """Tell the other processes that this one is failing (best effort, never raises)."""
    _stopping.set()
    client = coordination_client()
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


def watch_for_failures(penv: ProcessEnv) -> None:
    """Exit with PeerLost as soon as another process announces a failure (one pending blocking
    get per process on the coordination service) or dies without a word (its lifeline closes),
    until `stop_watching()`."""
    global _watcher, _lifeline
    client = coordination_client()
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
            _leave(Reason.PEER_LOST, _news_text(value))

    _watcher = threading.Thread(target=watch, name="tpujob-peer-failures", daemon=True)
    _watcher.start()
    _lifeline = Lifeline.start(
        client, process_id=penv.process_id, coordinator_address=penv.coordinator_address,
        bind_address=penv.bind_address, on_lost=_peer_vanished)


def defer_to_peer_account(timeout_s: float = PEER_ACCOUNT_WAIT_S) -> None:
    """For the main thread when a collective failed the way a lost peer fails it ("Connection
    reset by peer", a heartbeat timeout). The lifeline and the news watcher see the same loss,
    usually at the same moment (a killed process's sockets all close together), and say which
    process was lost and how: give them until `timeout_s` to end the process with that account
    (this call then never returns); return if none comes, for the main thread's own."""
    if _lifeline is None and _watcher is None:
        return
    if _leaving.wait(timeout_s):
        _exit_lock.acquire()  # held by the leaving thread until the process exits


def _news_text(value: str) -> str:
    news = json.loads(value)
    if "text" in news:
        return news["text"]
    return f"process {news['process']} failed ({news['reason']}: {news['message']}); stopping with it"


def _peer_vanished(process: int) -> None:
    """`process`'s lifeline closed without a goodbye: it died without a word."""
    if _stopping.is_set():
        return  # this process is leaving with a reason of its own
    client, me = coordination_client(), jax.process_index()
    if process != 0:
        # A process failing with a reason posts it before it leaves: the watcher reports that.
        try:
            if client.key_value_try_get(_NEWS_KEY.format(me)) != _DONE:
                return
        except Exception:  # no news
            pass
    coordinator = " (the coordinator)" if process == 0 else ""
    message = (f"process {process}{coordinator} vanished without a reason: its connection to "
               f"process {me} closed (killed, e.g. by SIGKILL or the OOM killer, crashed, or its "
               "host went away); stopping with it")
    if me == 0:
        # The others wait in a collective for the dead process: tell them (they would otherwise
        # learn it only when this process, and the coordination service with it, is gone).
        relay = json.dumps({"process": process, "text": message})
        for p in range(jax.process_count()):
            if p not in (me, process):
                try:
                    client.key_value_set(_NEWS_KEY.format(p), relay, allow_overwrite=True)
                except Exception:
                    break
    _leave(Reason.PEER_LOST, message)


def stop_watching(timeout_s: float = 10.0) -> None:
    """Release this process's watcher and lifeline (normal end); wait briefly for the watcher."""
    _stopping.set()
    if _lifeline is not None:
        _lifeline.close()
    client = coordination_client()
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
