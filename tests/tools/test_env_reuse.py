"""Both cached environments (MaxText's, Tunix's) are built once and reused: a marker whose pins
match, with its python there, is returned without building; other pins or a missing python
build again, under a lock beside the environment."""

from __future__ import annotations

import json
import os
import stat

import pytest

from tools import maxtext_env as me
from tools import tunix_env as te

ENVS = [
    pytest.param(me, me.maxtext_python, {"base_yml": "b.yml", "train_module": me.TRAIN_MODULE},
                 "jax", id="maxtext"),
    pytest.param(te, te.tunix_python, {"tunix_version": te.TUNIX_VERSION}, "google-tunix",
                 id="tunix"),
]


def _exe(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _marker(module, fields, directory, pins, python):
    directory.mkdir(parents=True, exist_ok=True)
    marker = {"python": str(python), **fields, "pins": pins}
    (directory / module.MARKER).write_text(json.dumps(marker))
    return marker


@pytest.mark.parametrize("module,python_of,fields,pin", ENVS)
def test_a_built_environment_is_returned_without_building(tmp_path, monkeypatch, module,
                                                          python_of, fields, pin):
    monkeypatch.setenv("TPUJOB_CACHE_DIR", str(tmp_path))
    pins = module.resolved_pins()
    directory = module.env_dir(pins)
    marker = _marker(module, fields, directory, pins, _exe(directory / "bin" / "python"))

    def no_build(*_):
        raise AssertionError("built again although the marker matches")

    monkeypatch.setattr(module, "_build", no_build)
    assert module.ensure() == marker
    assert python_of() == str(directory / "bin" / "python")


@pytest.mark.parametrize("module,python_of,fields,pin", ENVS)
def test_other_pins_or_a_missing_python_build_again(tmp_path, monkeypatch, module, python_of,
                                                    fields, pin):
    monkeypatch.setenv("TPUJOB_CACHE_DIR", str(tmp_path))
    pins = module.resolved_pins()
    directory = module.env_dir(pins)
    # A marker at this place whose pins differ (or whose python is gone) is not trusted.
    _marker(module, fields, directory, {**pins, pin: "0.0.1"}, _exe(directory / "bin" / "python"))
    built = []

    def build(d, p, log):
        built.append((d, p))
        return {"python": "new", "pins": p}

    monkeypatch.setattr(module, "_build", build)
    assert module.ensure()["python"] == "new"
    (directory / module.MARKER).write_text(json.dumps(
        {"python": str(directory / "gone"), "pins": pins}))
    module.ensure()
    assert built == [(directory, pins), (directory, pins)]
    assert os.path.exists(str(directory) + ".lock")
