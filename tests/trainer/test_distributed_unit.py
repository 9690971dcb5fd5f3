"""What a process says and does when the job does not assemble or a peer goes: the join failure's
account per process, the news a failing peer posts, a vanished peer's account (and process 0
relaying it), and the topology check; in one process, with the coordination service's client
and the exit stood in for."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from tpujob_trainer import distributed
from tpujob_trainer.env import ProcessEnv
from tpujob_trainer.exits import Reason, TrainerExit

pytestmark = pytest.mark.unit


def test_a_join_failure_is_fatal_on_process_0_and_retried_elsewhere():
    coordinator = ProcessEnv(coordinator_address="10.0.0.1:8476", process_id=0, process_count=4,
                             init_timeout_s=30)
    assert distributed._join_failure_reason(coordinator) is Reason.MESH_MISMATCH
    assert distributed._describe_join_failure(coordinator) == (
        "process 0 of 4 (the coordinator, at 10.0.0.1:8476) could not join the other processes "
        "within 30s (TPUJOB_INIT_TIMEOUT_S): not every process of the job started, or the "
        "others cannot reach this address")
    peer = ProcessEnv(coordinator_address="127.0.0.1:1", process_id=3, process_count=4,
                      init_timeout_s=30)
    assert distributed._join_failure_reason(peer) is Reason.PEER_LOST
    text = distributed._describe_join_failure(peer)
    assert text.startswith("process 3 of 4 could not join the job through the coordinator "
                           "(process 0) at 127.0.0.1:1 within 30s (TPUJOB_INIT_TIMEOUT_S): "
                           "nothing answers at 127.0.0.1:1 (")
    assert "Check that process 0 is running and that TPUJOB_COORDINATOR_ADDRESS" in text


def test_the_probe_says_whether_anything_listens_at_the_coordinator_s_address():
    with socket.create_server(("127.0.0.1", 0)) as server:
        address = f"127.0.0.1:{server.getsockname()[1]}"
        assert distributed._probe(address).startswith(
            f"something at {address} accepts connections, but the job did not assemble")
    assert distributed._probe(address) == f"nothing answers at {address} (Connection refused)"
    with socket.create_server(("::1", 0), family=socket.AF_INET6) as server:
        address = f"[::1]:{server.getsockname()[1]}"
        assert distributed._probe(address).startswith(f"something at {address} accepts")


@pytest.mark.parametrize("news, text", [
    ({"process": 2, "reason": "DataError", "message": "data.path: no such file"},
     "process 2 failed (DataError: data.path: no such file); stopping with it"),
    ({"process": 1, "text": "process 1 vanished without a reason: ..."},
     "process 1 vanished without a reason: ..."),
])
def test_the_news_a_peer_posts_in_words(news, text):
    assert distributed._news_text(json.dumps(news)) == text


class _Client:
    """The coordination service's key-value calls `_peer_vanished` makes."""

    def __init__(self, values: dict[str, str]):
        self.values = dict(values)
        self.sets: dict[str, str] = {}

    def key_value_try_get(self, key: str) -> str:
        if key not in self.values:
            raise KeyError(key)   # the real client raises (NOT_FOUND) for a missing key
        return self.values[key]

    def key_value_set(self, key: str, value: str, allow_overwrite: bool = False) -> None:
        if not allow_overwrite and (key in self.values or key in self.sets):
            raise RuntimeError(f"ALREADY_EXISTS: {key}")   # as the real client refuses it
        self.sets[key] = value


class _Jax:
    def __init__(self, index: int, count: int):
        self._index, self._count = index, count

    def process_index(self) -> int:
        return self._index

    def process_count(self) -> int:
        return self._count


@pytest.fixture
def peer_world(monkeypatch):
    """Process `me` of `count`, its key-value store, and the accounts it would leave with."""
    left: list[tuple[Reason, str]] = []

    def world(me: int, count: int, values: dict[str, str] | None = None) -> _Client:
        client = _Client(values or {})
        monkeypatch.setattr(distributed, "jax", _Jax(me, count))
        monkeypatch.setattr(distributed, "coordination_client", lambda: client)
        monkeypatch.setattr(distributed, "_stopping", threading.Event())
        monkeypatch.setattr(distributed, "_leave", lambda reason, message: left.append(
            (reason, message)))
        return client
    world.left = left
    return world


def test_a_vanished_peer_ends_process_0_which_tells_the_others(peer_world):
    client = peer_world(me=0, count=4)
    distributed._peer_vanished(2)
    (reason, message), = peer_world.left
    assert reason is Reason.PEER_LOST
    assert message.startswith("process 2 vanished without a reason: its connection to process 0 "
                              "closed (killed, e.g. by SIGKILL or the OOM killer")
    # Processes 1 and 3 wait in a collective for process 2: process 0 relays the account.
    assert sorted(client.sets) == ["tpujob/news/1", "tpujob/news/3"]
    assert all(json.loads(v) == {"process": 2, "text": message} for v in client.sets.values())


def test_process_0_s_relay_replaces_news_a_peer_already_has(peer_world):
    """A peer's key may already hold news (another process failed first): the relay replaces
    it rather than failing, and every later peer is still told."""
    old = json.dumps({"process": 3, "reason": "X", "message": "m"})
    client = peer_world(me=0, count=4, values={"tpujob/news/1": old})
    distributed._peer_vanished(2)
    assert sorted(client.sets) == ["tpujob/news/1", "tpujob/news/3"]


def test_the_coordinator_vanishing_ends_a_peer_without_a_relay(peer_world):
    client = peer_world(me=1, count=4)
    distributed._peer_vanished(0)
    (reason, message), = peer_world.left
    assert message.startswith("process 0 (the coordinator) vanished without a reason: its "
                              "connection to process 1 closed")
    assert client.sets == {}


@pytest.mark.parametrize("me, gone", [(1, 2), (0, 1), (3, 1)])
def test_a_peer_that_posted_its_reason_is_left_to_the_news_watcher(peer_world, me, gone):
    news = json.dumps({"process": gone, "reason": "DataError", "message": "bad data"})
    peer_world(me=me, count=4, values={f"tpujob/news/{me}": news})
    distributed._peer_vanished(gone)
    assert peer_world.left == []


def test_the_coordinator_vanishing_is_reported_whatever_news_there_is(peer_world):
    """Process 0's death takes the coordination service with it: no news can follow it, so a
    lost coordinator is reported at once, without looking for any."""
    news = json.dumps({"process": 2, "reason": "DataError", "message": "bad data"})
    peer_world(me=1, count=4, values={"tpujob/news/1": news})
    distributed._peer_vanished(0)
    (reason, message), = peer_world.left
    assert message.startswith("process 0 (the coordinator) vanished without a reason")


def test_a_process_that_is_leaving_itself_reports_no_peer(peer_world):
    peer_world(me=0, count=2)
    distributed._stopping.set()
    distributed._peer_vanished(1)
    assert peer_world.left == []


@pytest.mark.parametrize("expected, says", [
    (dict(process_count=2), "JAX sees 1 process(es) but the job expects 2: only part of the job "
                            "started"),
    (dict(expected_devices=16), "devices over 1 process(es) but the job expects 16: only part of "
                                "the slice is in this run (e.g. only worker 0 started)"),
])
def test_a_job_that_sees_part_of_its_slice_stops(expected, says):
    with pytest.raises(TrainerExit) as e:
        distributed.check_topology(ProcessEnv(**expected))
    assert e.value.reason is Reason.MESH_MISMATCH and says in str(e.value)
    distributed.check_topology(ProcessEnv(expected_devices=distributed.jax.device_count()))


class _Line:
    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


@pytest.mark.parametrize("multiprocess", [True, False])
def test_a_normal_end_says_done_to_the_peers_and_releases_the_watcher(monkeypatch, multiprocess):
    """The lifeline says `done` (this exit is no loss to the peers); the news watcher, blocked
    on this process's key, is released by `done` there and joined. A single process has
    neither a client nor a watcher: nothing to do, nothing raised."""
    client = _Client({}) if multiprocess else None
    line = _Line()
    released = threading.Event()
    watcher = threading.Thread(target=released.wait, args=(5,)) if multiprocess else None
    if watcher is not None:
        watcher.start()
        monkeypatch.setattr(_Client, "key_value_set", lambda self, key, value, **kw: (
            self.sets.__setitem__(key, value), released.set()))
    monkeypatch.setattr(distributed, "jax", _Jax(1, 2 if multiprocess else 1))
    monkeypatch.setattr(distributed, "coordination_client", lambda: client)
    monkeypatch.setattr(distributed, "_stopping", threading.Event())
    monkeypatch.setattr(distributed, "_lifeline", line if multiprocess else None)
    monkeypatch.setattr(distributed, "_watcher", watcher)
    distributed.stop_watching(timeout_s=5)
    assert distributed._stopping.is_set()
    if multiprocess:
        assert line.closed and client.sets == {"tpujob/news/1": "done"}
        assert not watcher.is_alive()


def test_a_normal_end_before_any_watcher_started_only_stops(monkeypatch):
    """A multi-process run that ends before it started watching (a config error found early):
    nothing to release, nothing written, nothing raised."""
    client = _Client({})
    monkeypatch.setattr(distributed, "jax", _Jax(1, 2))
    monkeypatch.setattr(distributed, "coordination_client", lambda: client)
    monkeypatch.setattr(distributed, "_stopping", threading.Event())
    monkeypatch.setattr(distributed, "_lifeline", None)
    monkeypatch.setattr(distributed, "_watcher", None)
    distributed.stop_watching(timeout_s=5)
    assert distributed._stopping.is_set() and client.sets == {}


@pytest.mark.parametrize("me", [0, 2])
def test_a_failing_process_posts_its_reason_to_every_other(monkeypatch, me):
    """And process 0, which hosts the coordination service, waits a moment before it goes, so
    that the others read the news rather than lose the service."""
    client, slept = _Client({}), []
    monkeypatch.setattr(distributed, "jax", _Jax(me, 3))
    monkeypatch.setattr(distributed, "coordination_client", lambda: client)
    monkeypatch.setattr(distributed, "_stopping", threading.Event())
    monkeypatch.setattr(distributed.time, "sleep", slept.append)
    distributed.announce_failure(Reason.DATA_ERROR, "data.path: no such file " + "x" * 600)
    others = sorted({0, 1, 2} - {me})
    assert sorted(client.sets) == [f"tpujob/news/{p}" for p in others]
    news = json.loads(client.sets[f"tpujob/news/{others[0]}"])
    assert news["process"] == me and news["reason"] == Reason.DATA_ERROR.value
    assert len(news["message"]) == 500 and news["message"].startswith("data.path: no such file")
    assert slept == ([1.0] if me == 0 else [])
    assert distributed._stopping.is_set()


def test_a_second_failing_process_s_news_replaces_a_first_s(monkeypatch):
    """Two processes failing at once both post to process 0's key: the second write replaces
    the first rather than failing, and the others are still told."""
    client = _Client({"tpujob/news/0": json.dumps({"process": 1, "reason": "X", "message": "m"})})
    monkeypatch.setattr(distributed, "jax", _Jax(2, 3))
    monkeypatch.setattr(distributed, "coordination_client", lambda: client)
    monkeypatch.setattr(distributed, "_stopping", threading.Event())
    distributed.announce_failure(Reason.DATA_ERROR, "bad data")
    assert sorted(client.sets) == ["tpujob/news/0", "tpujob/news/1"]


def test_a_single_process_failing_has_no_one_to_tell(monkeypatch):
    monkeypatch.setattr(distributed, "coordination_client", lambda: None)
    monkeypatch.setattr(distributed, "_stopping", threading.Event())
    monkeypatch.setattr(distributed.time, "sleep", lambda s: pytest.fail("slept"))
    distributed.announce_failure(Reason.DATA_ERROR, "no data")
    assert distributed._stopping.is_set()


class _Leaving:
    def __init__(self, comes: bool):
        self.comes, self.waits = comes, []

    def wait(self, timeout):
        self.waits.append(timeout)
        return self.comes


@pytest.mark.parametrize("watched, comes, waits", [
    (False, False, []),        # a single process: no account can come from elsewhere
    (True, False, [2.5]),      # nothing came within the bound: the main thread's own account
    (True, True, [2.5]),       # the account came: wait for its writer to end the process
])
def test_a_failed_collective_waits_for_the_peer_s_account_only_where_one_can_come(
        monkeypatch, watched, comes, waits):
    leaving, lock = _Leaving(comes), threading.Lock()
    monkeypatch.setattr(distributed, "_leaving", leaving)
    monkeypatch.setattr(distributed, "_exit_lock", lock)
    monkeypatch.setattr(distributed, "_lifeline", _Line() if watched else None)
    monkeypatch.setattr(distributed, "_watcher", None)
    distributed.defer_to_peer_account(timeout_s=2.5)
    assert leaving.waits == waits
    assert lock.locked() is comes     # taken (and, in a real exit, never given back)


class _Exited(Exception):
    pass


def test_leaving_from_a_watcher_thread_writes_the_account_that_stays(tmp_path, monkeypatch,
                                                                     capsys):
    """The account is written, kept (no later writer replaces it before the process ends), said
    on stderr, and the process exits with the reason's code."""
    from tpujob_trainer import env as envvars
    from tpujob_trainer import exits

    path = tmp_path / "term"
    monkeypatch.setenv(envvars.TERMINATION_LOG, str(path))
    monkeypatch.setattr(exits, "_ENDING_HOOKS", {})
    monkeypatch.setattr(exits, "_ACCOUNT_LOCK", threading.Lock())
    monkeypatch.setattr(distributed, "_exit_lock", threading.Lock())
    monkeypatch.setattr(distributed, "_leaving", threading.Event())
    codes = []

    def exit_(code):
        codes.append(code)
        raise _Exited

    monkeypatch.setattr(distributed.os, "_exit", exit_)
    with pytest.raises(_Exited):
        distributed._leave(Reason.PEER_LOST, "process 1 vanished")
    assert codes == [exits.EXIT_CODES[Reason.PEER_LOST]]
    assert json.loads(path.read_text()) == {"reason": "PeerLost", "message": "process 1 vanished"}
    assert exits._ACCOUNT_LOCK.locked() and distributed._exit_lock.locked()
    assert distributed._leaving.is_set()
    assert "tpujob-train: PeerLost: process 1 vanished\n" in capsys.readouterr().err


class _JaxJoin:
    """`jax.distributed.initialize` and the device count option `initialize` calls."""

    def __init__(self, error: Exception | None = None):
        self.calls, self.error = [], error
        self.distributed = self
        self.config = self

    def initialize(self, **kwargs):
        self.calls.append(kwargs)
        if self.error is not None:
            raise self.error

    def update(self, name, value):
        pass


@pytest.mark.parametrize("error", [None, RuntimeError("DEADLINE_EXCEEDED: barrier timed out\nmore")])
def test_joining_waits_past_the_job_s_own_timeout_and_a_failure_is_the_contract_s(
        monkeypatch, error):
    """JAX's own timeout is set past the job's, so that the job's watchdog (or JAX's error)
    ends a join that fails with the contract's account, not JAX's abort."""
    fake = _JaxJoin(error)
    monkeypatch.setattr(distributed, "jax", fake)
    penv = ProcessEnv(coordinator_address="127.0.0.1:1", process_id=1, process_count=2,
                      init_timeout_s=40)
    if error is None:
        distributed.initialize(penv)
    else:
        with pytest.raises(TrainerExit) as e:
            distributed.initialize(penv)
        assert e.value.reason is Reason.PEER_LOST
        assert str(e.value).startswith("process 1 of 2 could not join the job")
        assert str(e.value).endswith("(RuntimeError: DEADLINE_EXCEEDED: barrier timed out)")
    (call,) = fake.calls
    assert call == {"coordinator_address": "127.0.0.1:1", "num_processes": 2, "process_id": 1,
                    "coordinator_bind_address": None, "initialization_timeout": 70}


@pytest.mark.parametrize("news, leaves", [
    ("done", False),
    (json.dumps({"process": 0, "reason": "DataError", "message": "bad"}), True),
])
def test_the_news_watcher_leaves_on_news_and_ends_on_done(monkeypatch, news, leaves):
    errors, left = [], []

    def leave(reason, message):   # as the real one, never returns (ends its thread here)
        left.append((reason, message))
        raise SystemExit

    class Client:
        def blocking_key_value_get(self, key, timeout_ms):
            assert key == "tpujob/news/1"
            return news

    monkeypatch.setattr(distributed, "jax", _Jax(1, 2))
    monkeypatch.setattr(distributed, "coordination_client", Client)
    monkeypatch.setattr(distributed, "_stopping", threading.Event())
    monkeypatch.setattr(distributed, "_leave", leave)
    monkeypatch.setattr(distributed.Lifeline, "start", lambda *a, **k: None)
    monkeypatch.setattr(distributed, "_watcher", None)
    monkeypatch.setattr(distributed, "_lifeline", None)
    monkeypatch.setattr(threading, "excepthook", errors.append)
    distributed.watch_for_failures(ProcessEnv(coordinator_address="127.0.0.1:1", process_id=1,
                                              process_count=2))
    watcher = distributed._watcher
    assert watcher.daemon           # never holds the process open at its end
    watcher.join(10)
    assert not watcher.is_alive()
    assert [e.exc_type for e in errors if e.exc_type is not SystemExit] == []
    assert left == ([(Reason.PEER_LOST, "process 0 failed (DataError: bad); stopping with it")]
                    if leaves else [])
