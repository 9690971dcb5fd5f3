"""tools/maxtext_env.py: finding Python 3.12, the cache's marker, rebuilding on other pins.

Nothing here installs MaxText: building is replaced where a test would otherwise build."""

from __future__ import annotations

import stat

import pytest

from tools import maxtext_env as me

pytestmark = pytest.mark.unit


def _exe(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize(("versions", "want"), [
    (["3.12.1", "3.12.10", "3.12.9"], "3.12.10"),   # by version, not by name
    (["3.11.7", "3.12.1", "3.13.0"], "3.12.1"),     # only a 3.12
    (["3.12.1", "3.12.2-dev"], "3.12.2-dev"),
])
def test_pyenv_python312_newest_first(tmp_path, monkeypatch, versions, want):
    for v in versions:
        _exe(tmp_path / "versions" / v / "bin" / ("python3.12" if v.startswith("3.12") else "python"))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert me.find_python312() == str(tmp_path / "versions" / want / "bin" / "python3.12")


def test_python312_on_path_when_pyenv_has_none(tmp_path, monkeypatch):
    exe = _exe(tmp_path / "bin" / "python3.12")
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "nopyenv"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert me.find_python312() == str(exe)


def test_no_python312_says_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(me.MaxTextEnvError) as err:
        me.find_python312()
    text = str(err.value)
    assert "Python 3.12" in text and f"{tmp_path}/versions/3.12*" in text and "PATH" in text


def test_pins_take_the_trainers_jax_and_maxtexts_version():
    pins = me.resolved_pins({"jax": "9.9.9", "jaxlib": "9.9.8", "flax": "1", "optax": "2"})
    assert (pins["jax"], pins["jaxlib"], pins["maxtext"]) == ("9.9.9", "9.9.8", me.MAXTEXT_VERSION)
    assert not any(name.startswith(("tensorflow", "google-cloud")) for name in pins)
