"""tools/cached_env.py: where the cached environments live, their markers, one build at a time."""

from __future__ import annotations

import json
import stat

import pytest

from tools import cached_env as ce

pytestmark = pytest.mark.unit


def test_the_cache_is_outside_the_repository(monkeypatch):
    monkeypatch.delenv("TPUJOB_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    root = ce.cache_root()
    assert ce.REPO not in root.parents and root.name == "tpujob"


def test_the_cache_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("TPUJOB_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ce.cache_root() == tmp_path / "xdg" / "tpujob"
    monkeypatch.setenv("TPUJOB_CACHE_DIR", str(tmp_path / "mine"))
    assert ce.cache_root() == tmp_path / "mine"


def test_the_digest_depends_on_every_pin_not_their_order():
    pins = {"a": "1", "b": "2"}
    assert ce.pins_digest(pins) == ce.pins_digest({"b": "2", "a": "1"})
    assert ce.pins_digest(pins) != ce.pins_digest({"a": "1", "b": "3"})


def test_the_trainers_versions_are_read_from_this_python():
    found = ce.trainer_versions("X")
    import jax

    assert found["jax"] == jax.__version__ and set(found) <= set(ce.SAME_AS_TRAINER)


def _python(directory):
    exe = directory / "bin" / "python"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_a_marker_counts_only_with_the_same_pins_and_its_python(tmp_path):
    pins = {"jax": "1"}
    ce.write_marker(tmp_path, "m.json", {"python": str(_python(tmp_path)), "pins": pins})
    assert ce.read_marker(tmp_path, "m.json", pins)["pins"] == pins
    assert ce.read_marker(tmp_path, "m.json", {"jax": "2"}) is None
    assert ce.read_marker(tmp_path, "other.json", pins) is None
    (tmp_path / "m.json").write_text(json.dumps({"python": str(tmp_path / "gone"), "pins": pins}))
    assert ce.read_marker(tmp_path, "m.json", pins) is None
    (tmp_path / "m.json").write_text("{not json")
    assert ce.read_marker(tmp_path, "m.json", pins) is None


def test_ensure_builds_once_then_returns_the_marker(tmp_path):
    directory, pins, built = tmp_path / "env", {"jax": "1"}, []

    def build():
        built.append(1)
        marker = {"python": str(_python(directory)), "pins": pins}
        ce.write_marker(directory, "m.json", marker)
        return marker

    first = ce.ensure(directory, "m.json", pins, build)
    assert ce.ensure(directory, "m.json", pins, build) == first and built == [1]
    assert (tmp_path / "env.lock").exists()


def test_a_failed_step_says_what_and_shows_its_output():
    with pytest.raises(ce.EnvBuildError) as err:
        ce.run(["sh", "-c", "echo no such package: foo >&2; exit 3"], "installing foo")
    assert "installing foo failed (exit 3)" in str(err.value)
    assert "no such package: foo" in str(err.value)
