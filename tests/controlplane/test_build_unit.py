"""The real control plane's build: the module that pins Kubernetes' staging modules, the
version stamp, and the record that makes a second build cost nothing."""

from __future__ import annotations

import json
import os

import pytest

from tpujob.local.controlplane import build

pytestmark = pytest.mark.unit

KUBE_GO_MOD = """module k8s.io/kubernetes

go 1.25.0

require (
\tgithub.com/x/y v1.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/apiserver => ./staging/src/k8s.io/apiserver
\tgithub.com/a/b => github.com/a/b v1.2.3
)
"""


def test_every_staging_module_is_pinned_to_its_published_version():
    text = build.build_go_mod(KUBE_GO_MOD)
    assert f"require k8s.io/kubernetes {build.KUBERNETES}" in text
    staging = "v0" + build.KUBERNETES[2:]
    assert f"\tk8s.io/api => k8s.io/api {staging}" in text
    assert f"\tk8s.io/apiserver => k8s.io/apiserver {staging}" in text
    assert "github.com/a/b" not in text, "only the staging tree's replacements are pinned"
    assert staging == "v0.35.4"


def test_a_go_mod_without_staging_replacements_is_refused():
    with pytest.raises(build.BuildError, match="staging modules"):
        build.build_go_mod("module k8s.io/kubernetes\n\nreplace (\n)\n")


def test_the_version_stamp_is_the_releases():
    flags = build.version_ldflags()
    assert f"-X k8s.io/component-base/version.gitVersion={build.KUBERNETES}" in flags
    major, minor = build.KUBERNETES.lstrip("v").split(".")[:2]
    assert f"version.gitMajor={major} " in flags and f"version.gitMinor={minor} " in flags


def _fake_build(directory, pins=None):
    (directory / "bin").mkdir(parents=True)
    for name in build.BINARIES:
        path = directory / "bin" / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    for name, (_, items) in build.SHARED.items():
        for item in items:
            (directory / "share" / name).mkdir(parents=True, exist_ok=True)
            (directory / "share" / name / os.path.basename(item)).write_text("x")
    (directory / build.MARKER).write_text(json.dumps({"pins": pins or build.PINS}))


def test_a_finished_build_with_todays_pins_is_found_and_nothing_is_built(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("TPUJOB_CACHE_DIR", str(tmp_path))
    _fake_build(build.build_dir())
    monkeypatch.setattr(build, "_build", lambda *a: pytest.fail("built again"))
    assert build.ensure_built()["kube-apiserver"] == build.build_dir() / "bin" / "kube-apiserver"
    assert build.is_built()


@pytest.mark.parametrize("damage", ["other pins", "a program missing", "no record"])
def test_a_build_that_is_not_whole_is_not_taken(tmp_path, monkeypatch, damage):
    monkeypatch.setenv("TPUJOB_CACHE_DIR", str(tmp_path))
    directory = build.build_dir()
    _fake_build(directory, {**build.PINS, "k8s.io/kubernetes": "v1.0.0"}
                if damage == "other pins" else None)
    if damage == "a program missing":
        (directory / "bin" / "etcd").unlink()
    elif damage == "no record":
        (directory / build.MARKER).unlink()
    assert build.read_marker(directory) is None


def test_the_build_folder_is_named_after_the_pins(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUJOB_CACHE_DIR", str(tmp_path))
    first = build.build_dir()
    monkeypatch.setattr(build, "PINS", {**build.PINS, "sigs.k8s.io/jobset": "v0.13.0"})
    assert build.build_dir() != first and build.build_dir().parent == tmp_path


def test_a_manifest_missing_is_copied_again_without_building(tmp_path, monkeypatch):
    monkeypatch.setenv("TPUJOB_CACHE_DIR", str(tmp_path))
    directory = build.build_dir()
    _fake_build(directory)
    (directory / "share" / "provisioning" /
     "autoscaling.x-k8s.io_provisioningrequests.yaml").unlink()
    assert build.read_marker(directory) is not None
    assert build.missing_shared(directory) == [
        "provisioning/autoscaling.x-k8s.io_provisioningrequests.yaml"]
    copied = []
    monkeypatch.setattr(build, "_build", lambda *a: pytest.fail("built again"))
    monkeypatch.setattr(build, "_copy_shared", lambda d, go, env, progress: copied.append(d))
    monkeypatch.setattr(build.shutil, "which", lambda name: "/usr/bin/go")
    build.ensure_built()
    assert copied == [directory]
