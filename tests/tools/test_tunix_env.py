"""tools/tunix_env.py: its pins, its place in the cache, the marker, rebuilding on other pins.

Nothing here installs Tunix: building is replaced where a test would otherwise build."""

from __future__ import annotations

import pytest

from tools import cached_env
from tools import maxtext_env as me
from tools import tunix_env as te

pytestmark = pytest.mark.unit


def test_pins_take_the_trainers_jax_and_tunixs_version():
    pins = te.resolved_pins({"jax": "9.9.9", "jaxlib": "9.9.8", "flax": "1", "optax": "2",
                             "orbax-checkpoint": "3"})
    assert (pins["jax"], pins["jaxlib"], pins["flax"], pins["optax"], pins["orbax-checkpoint"],
            pins["google-tunix"]) == ("9.9.9", "9.9.8", "1", "2", "3", te.TUNIX_VERSION)
    assert list(pins) == sorted(pins)


def test_the_pinned_list_leaves_the_trainers_libraries_to_the_trainer():
    # Those come from the trainer's installation only, never from the list.
    assert not set(te.PINS) & set(cached_env.SAME_AS_TRAINER)
    assert all(name == name.lower() and "_" not in name for name in te.PINS)
    assert not any(name.startswith(("tensorflow", "torch", "vllm", "google-cloud"))
                   for name in te.PINS)


def test_tunix_gets_a_safetensors_maxtext_cannot_share():
    # google-tunix 0.1.7 requires safetensors<0.8; MaxText's environment has 0.8.0.
    major, minor = map(int, te.PINS["safetensors"].split(".")[:2])
    assert (major, minor) < (0, 8) and me.PINS["safetensors"] == "0.8.0"
    assert te.env_dir(te.resolved_pins()) != me.env_dir(me.resolved_pins())


def test_the_environment_is_named_after_tunix_the_python_and_the_pins(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUJOB_CACHE_DIR", str(tmp_path))
    pins = te.resolved_pins()
    directory = te.env_dir(pins, (3, 11))
    assert directory.parent == tmp_path
    assert directory.name.startswith(f"tunix-{te.TUNIX_VERSION}-py311-")
    assert te.env_dir({**pins, "jax": "0.0.1"}, (3, 11)) != directory
    assert te.env_dir(pins, (3, 12)) != directory


@pytest.mark.parametrize("version", [(3, 10, 14), (3, 9, 0)])
def test_an_old_python_says_what_is_needed(version):
    with pytest.raises(te.TunixEnvError) as err:
        te.check_python(version)
    assert "needs Python 3.11 or newer" in str(err.value)
    assert ".".join(map(str, version)) in str(err.value)


def test_the_running_python_is_new_enough():
    te.check_python()


def test_the_run_environment_keeps_the_repositorys_path_out():
    env = te.run_env({"PYTHONPATH": "/repo", "HOME": "/h"})
    assert env == {"HOME": "/h", "HF_HUB_OFFLINE": "1"}


def test_main_reports_a_build_that_cannot_be_made(monkeypatch, capsys):
    def fail(*_):
        raise te.TunixEnvError("no pip here")

    monkeypatch.setattr(te, "ensure", fail)
    assert te.main([]) == 1
    assert "tunix_env: no pip here" in capsys.readouterr().err
