"""A program one process compiled taken by the other processes of a job on one machine
(`step_share.py`): process 0's step and the last process's initial state, what the owner tells
in every case, and what another process does with it. A fake cache and a fake coordination
service stand in for storage and jax.distributed; the real ones are in test_multidevice.py's
two-process run."""

from __future__ import annotations

import pytest

from tpujob_trainer import step_share
from tpujob_trainer.step_share import (
    ENTRY,
    INIT,
    NONE,
    STEP,
    compiled_once,
    owner_of,
    shares,
    word_key,
)


class Cache:
    """Entries by key; `load_or_compile` saves what it compiles unless `saves` is False."""

    def __init__(self, entries=(), saves=True, damaged=(), what=STEP):
        self.entries, self.saves, self.damaged = set(entries), saves, set(damaged)
        self.what = what
        self.calls: list[tuple[str, str]] = []

    def exists(self, key):
        return key in self.entries

    def load(self, key, what="step"):
        self.calls.append(("load", key))
        assert what == self.what
        if key in self.damaged:
            self.entries.discard(key)
            return None
        return f"{what}@{key}" if key in self.entries else None

    def load_or_compile(self, key, compile_fn, cache_hits, what="step"):
        self.calls.append(("load_or_compile", key))
        assert what == self.what   # its log names the program
        if key in self.entries and key not in self.damaged:
            return f"{what}@{key}", "loaded"
        compiled = compile_fn()
        if self.saves:
            self.entries.add(key)
        return compiled, "compiled"


class Client:
    def __init__(self, words=None, fail_set=False, fail_get=False):
        self.words = dict(words or {})
        self.fail_set, self.fail_get = fail_set, fail_get
        self.waited: list[tuple[str, int]] = []

    def key_value_set(self, key, value):
        if self.fail_set:
            raise RuntimeError("coordination service gone")
        self.words[key] = value

    def blocking_key_value_get(self, key, timeout_in_ms):
        self.waited.append((key, timeout_in_ms))
        if self.fail_get or key not in self.words:
            raise RuntimeError("DEADLINE_EXCEEDED")
        return self.words[key]


KEY = word_key(7)


def run(process_index, cache, client, compile_fn=lambda: "compiled-here"):
    # Each process's entry key is its own (its config may name a path of its own): process 1's
    # is k1, never computed as process 0's.
    return compiled_once(cache, client, process_index=process_index, own_key=f"k{process_index}",
                         compile_fn=compile_fn, cache_hits=lambda: 0, wait_s=2.0, n=7)


@pytest.mark.parametrize("program,processes,owner", [
    (STEP, 1, 0), (STEP, 2, 0), (STEP, 8, 0), (INIT, 1, 0), (INIT, 2, 1), (INIT, 8, 7)])
def test_the_step_and_the_initial_state_have_different_owners(program, processes, owner):
    # Two processes on two cores compile the two programs at once, not both of them each.
    assert owner_of(program, processes) == owner


@pytest.mark.parametrize("platform,processes,want", [
    ("cpu", 2, True), ("cpu", 8, True), ("cpu", 1, False), ("tpu", 4, False), ("gpu", 2, False)])
def test_only_processes_sharing_a_machine_share(platform, processes, want):
    assert shares(platform, processes) is want


@pytest.mark.parametrize("entries,saves,want_how,word", [
    ((), True, "compiled", f"{ENTRY} k0"),      # compiled and saved: the others load it
    (("k0",), True, "loaded", f"{ENTRY} k0"),   # loaded whole: there for the others too
    ((), False, "compiled", NONE),              # not saved (JAX's cache served it): each compiles
])
def test_process_0_gets_its_step_as_before_and_always_tells(entries, saves, want_how, word):
    cache, client = Cache(entries, saves), Client()
    assert run(0, cache, client)[1] == want_how
    assert cache.calls == [("load_or_compile", "k0")]
    assert client.words == {KEY: word} and client.waited == []


def test_process_0_tells_none_when_its_compile_fails():
    client = Client()

    def fails():
        raise ValueError("XLA failed")

    with pytest.raises(ValueError, match="XLA failed"):
        run(0, Cache(), client, fails)
    assert client.words == {KEY: NONE}


def test_process_0_that_cannot_tell_still_returns_its_step():
    assert run(0, Cache(), Client(fail_set=True)) == ("compiled-here", "compiled")


@pytest.mark.parametrize("word,entries,damaged,fail_get,want,calls", [
    # Process 0's entry, by the key it says: loaded, nothing compiled or saved here.
    (f"{ENTRY} k0", {"k0"}, (), False, ("step@k0", "loaded"), [("load", "k0")]),
    # Process 0 saved nothing: this process's own way (its own entry, else a compile).
    (NONE, set(), (), False, ("compiled-here", "compiled"), [("load_or_compile", "k1")]),
    (NONE, {"k1"}, (), False, ("step@k1", "loaded"), [("load_or_compile", "k1")]),
    # Said to be there but unreadable here: its own way.
    (f"{ENTRY} k0", {"k0"}, {"k0"}, False, ("compiled-here", "compiled"),
     [("load", "k0"), ("load_or_compile", "k1")]),
    # A word without a key is no entry.
    (ENTRY, {"k0"}, (), False, ("compiled-here", "compiled"), [("load_or_compile", "k1")]),
    # No word in time (or the service failed): its own way.
    (None, {"k0"}, (), True, ("compiled-here", "compiled"), [("load_or_compile", "k1")]),
])
def test_another_process_takes_process_0s_step_where_there_is_one(word, entries, damaged,
                                                                   fail_get, want, calls):
    cache = Cache(entries, damaged=damaged)
    client = Client({KEY: word} if word else {}, fail_get=fail_get)
    assert run(1, cache, client) == want
    assert cache.calls == calls
    assert client.waited == [(KEY, 2000)]
    assert KEY not in client.words or client.words[KEY] == word


def test_each_step_compile_of_a_run_has_a_word_of_its_own():
    # Counted alike on every process; a word once set is never set again.
    client = Client()
    first = compiled_once(Cache(), client, process_index=0, own_key="a",
                          compile_fn=lambda: "s", cache_hits=lambda: 0)
    second = compiled_once(Cache(), client, process_index=0, own_key="b",
                           compile_fn=lambda: "s", cache_hits=lambda: 0)
    assert first == second == ("s", "compiled")
    [one, two] = sorted(client.words)
    assert one != two and sorted(client.words.values()) == [f"{ENTRY} a", f"{ENTRY} b"]


def test_the_last_process_tells_of_the_initial_state_under_a_word_of_its_own():
    # Process 1 of 2 owns the initial state: it compiles and tells; process 0 loads its entry.
    # The word is not the step's: process 0 waits for both at once (the step in a thread).
    cache, client = Cache(what=INIT), Client()
    owner = owner_of(INIT, 2)
    mine = compiled_once(cache, client, process_index=1, own_key="k1", compile_fn=lambda: "init",
                         cache_hits=lambda: 0, program=INIT, owner=owner, n=3)
    assert mine == ("init", "compiled") and client.words == {word_key(3, INIT): f"{ENTRY} k1"}
    assert word_key(3, INIT) != word_key(3, STEP)
    theirs = compiled_once(cache, client, process_index=0, own_key="k0",
                           compile_fn=lambda: pytest.fail("process 0 compiled the init"),
                           cache_hits=lambda: 0, program=INIT, owner=owner, wait_s=2.0, n=3)
    assert theirs == ("init@k1", "loaded")
    assert client.waited == [(word_key(3, INIT), 2000)]


def test_the_wait_covers_a_long_compile():
    assert step_share.WAIT_S >= 1800
