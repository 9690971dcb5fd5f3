"""The real Kubernetes control plane's programs, built from their Go modules and cached.

    tpujob local build-control-plane        # builds what is missing, prints the bin folder
    from tpujob.local.controlplane.build import ensure_built
    binaries = ensure_built()               # {"kube-apiserver": Path, ...}

What it builds (pins in `PINS`), each from the Go module proxy with the machine's Go:

- kube-apiserver, kube-controller-manager and kube-scheduler from `k8s.io/kubernetes`, and
  etcd (its server's `etcdmain`, at the version that Kubernetes release requires), from one
  small module of our own that requires `k8s.io/kubernetes` and pins every staging module
  (`k8s.io/api`, `k8s.io/apiserver`, ...) to the matching v0.x with `replace`: the kubernetes
  module's own go.mod points them at its source tree, which a module download does not have;
- the JobSet controller (`sigs.k8s.io/jobset`, its root `main.go`), Kueue
  (`sigs.k8s.io/kueue/cmd/kueue`) and `helm` (`helm.sh/helm/v4/cmd/helm`), each from a module
  of our own that requires it (`go get`, then `go build`): `go install module@version` asks the
  proxy for the module's version list to look for a deprecation notice, and the proxy here
  refuses that list for `sigs.k8s.io/jobset` (403) while serving its v0.12.0.

Where: `$TPUJOB_CACHE_DIR`, else `$XDG_CACHE_HOME/tpujob`, else `~/.cache/tpujob`, in a folder
named after the pins (`control-plane-<digest>/bin`), never inside the repository. Go's own
caches (`go env GOMODCACHE GOCACHE`) hold the downloads and compiled packages. A finished
build writes `built.json` (pins, binaries, seconds); a later call with the same pins finds it
and starts no process. Two processes building at once are serialized by a file lock.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from tpujob.local.cache import cache_root, locked

KUBERNETES = "v1.35.4"
PINS = {
    "k8s.io/kubernetes": KUBERNETES,
    "k8s.io staging modules": "v0" + KUBERNETES[2:],   # v1.35.4 -> v0.35.4
    "sigs.k8s.io/jobset": "v0.12.0",
    "sigs.k8s.io/kueue": "v0.17.0",
    "helm.sh/helm/v4": "v4.3.1",
}
KUBE_PROGRAMS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
INSTALLS = {  # binary name -> (module, main package)
    "jobset": ("sigs.k8s.io/jobset", "sigs.k8s.io/jobset"),
    "kueue": ("sigs.k8s.io/kueue", "sigs.k8s.io/kueue/cmd/kueue"),
    "helm": ("helm.sh/helm/v4", "helm.sh/helm/v4/cmd/helm"),
}
BINARIES = (*KUBE_PROGRAMS, "etcd", *INSTALLS)
MARKER = "built.json"
LAYOUT = 2   # what a build folder holds; a change builds a new folder
# Manifests the control plane needs at run time, copied from a module into `share/<name>/`
# (the module cache may be cleaned): Kueue's CRDs and its webhook configurations, and the
# ProvisioningRequest CRD of the cluster-autoscaler API module at the version Kueue requires
# (Kueue starts its provisioning admission check only when that kind is served). Each module is
# resolved in Kueue's build folder, so its version is the one Kueue was built against.
SHARED = {
    "kueue": ("sigs.k8s.io/kueue", ("config/components/crd/bases",
                                    "config/components/webhook/manifests.yaml")),
    "provisioning": ("k8s.io/autoscaler/cluster-autoscaler/apis",
                     ("config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml",)),
}
SHARED_FROM = "kueue"   # the build folder (src-<name>) the shared modules are resolved in

ETCD_MAIN = """package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""


class BuildError(RuntimeError):
    """A program of the control plane cannot be built here; the message says what refused."""


def build_dir() -> Path:
    digest = hashlib.sha256(json.dumps({**PINS, "layout": LAYOUT}, sort_keys=True).encode()
                            ).hexdigest()[:10]
    return cache_root() / f"control-plane-{digest}"


def build_go_mod(kubernetes_go_mod: str) -> str:
    """Our module's go.mod: `k8s.io/kubernetes` at its pin, and each staging module the
    kubernetes go.mod replaces with a folder of its tree replaced by its published v0.x."""
    staging = PINS["k8s.io staging modules"]
    replaced = []
    in_replace = False
    for line in kubernetes_go_mod.splitlines():
        text = line.strip()
        if text.startswith("replace ("):
            in_replace = True
        elif in_replace and text == ")":
            in_replace = False
        elif in_replace and "=> ./staging/" in text:
            replaced.append(text.split()[0])
    if not replaced:
        raise BuildError("the k8s.io/kubernetes go.mod names no staging modules to replace: "
                         "its layout changed; pin another version in PINS")
    lines = ["module tpujob.dev/controlplane", "", "go 1.25.0", "",
             f"require k8s.io/kubernetes {PINS['k8s.io/kubernetes']}", "", "replace ("]
    lines += [f"\t{module} => {module} {staging}" for module in replaced]
    lines += [")", ""]
    return "\n".join(lines)


def version_ldflags() -> str:
    """What the Kubernetes release build stamps into its programs (hack/lib/version.sh): a
    plain `go build` says v0.0.0-master, and clients that check the server's version (helm's
    `kubeVersion`, kubectl's skew warning) refuse or warn."""
    version = PINS["k8s.io/kubernetes"]
    major, minor = version.lstrip("v").split(".")[:2]
    values = {"gitVersion": version, "gitMajor": major, "gitMinor": minor,
              "gitTreeState": "clean", "buildDate": "1970-01-01T00:00:00Z"}
    return " ".join(f"-X k8s.io/component-base/version.{k}={v}" for k, v in values.items())


def read_marker(directory: Path) -> dict | None:
    """The marker of a finished build with today's pins whose binaries are all there."""
    try:
        marker = json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if marker.get("pins") != PINS:
        return None
    if not all(os.access(directory / "bin" / name, os.X_OK) for name in BINARIES):
        return None
    return marker


def missing_shared(directory: Path) -> list[str]:
    """The shared manifests a finished build folder lacks (a build made before one was
    listed, or one deleted): copied without building anything again."""
    return [f"{name}/{Path(item).name}" for name, (_, items) in SHARED.items() for item in items
            if not (directory / "share" / name / Path(item).name).exists()]


def shared(name: str, item: str) -> Path:
    """A manifest copied from a program's module at build time (`SHARED`)."""
    return build_dir() / "share" / name / item


def binaries(directory: Path | None = None) -> dict[str, Path]:
    folder = (directory or build_dir()) / "bin"
    return {name: folder / name for name in BINARIES}


def is_built() -> bool:
    return read_marker(build_dir()) is not None


def ensure_built(progress=None) -> dict[str, Path]:
    """The programs' paths, building what is missing first (minutes the first time on a
    machine; nothing once built). `progress(str)` hears each step."""
    directory = build_dir()
    if read_marker(directory) and not missing_shared(directory):
        return binaries(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    with locked(directory.with_name(directory.name + ".lock")):
        if read_marker(directory):
            if missing_shared(directory):
                go, env = _go_env(directory)
                _copy_shared(directory, go, env, progress or (lambda _: None))
            return binaries(directory)
        _build(directory, progress or (lambda _: None))
    return binaries(directory)


def _go_env(directory: Path) -> tuple[str, dict[str, str]]:
    go = shutil.which("go")
    if go is None:
        raise BuildError("the real control plane is built with Go (1.25 or newer), and `go` "
                         "is not on PATH")
    flags = " ".join(f for f in (os.environ.get("GOFLAGS", ""), "-trimpath", "-mod=mod") if f)
    return go, {**os.environ, "GOFLAGS": flags, "GOBIN": str(directory / "bin")}


def _copy_shared(directory: Path, go: str, env: dict[str, str], progress) -> None:
    """Copy each shared manifest from its module, resolved (and downloaded if the module
    cache lost it) in the build folder of `SHARED_FROM`."""
    folder = directory / f"src-{SHARED_FROM}"
    for name, (module, items) in SHARED.items():
        progress(f"copying the manifests of {module}")
        info = json.loads(_go([go, "mod", "download", "-json", module], folder, env, module))
        for item in items:
            source, dest = Path(info["Dir"]) / item, directory / "share" / name / Path(item).name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, dest, dirs_exist_ok=True)
            else:
                shutil.copyfile(source, dest)


def _build(directory: Path, progress) -> None:
    go, env = _go_env(directory)
    started = time.monotonic()
    src, bin_dir = directory / "src", directory / "bin"
    (src / "etcd").mkdir(parents=True, exist_ok=True)
    bin_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}

    kube = f"k8s.io/kubernetes@{PINS['k8s.io/kubernetes']}"
    progress(f"downloading {kube}")
    info = json.loads(_go([go, "mod", "download", "-json", kube], src, env, kube))
    (src / "go.mod").write_text(build_go_mod(Path(info["GoMod"]).read_text()))
    (src / "etcd" / "main.go").write_text(ETCD_MAIN)
    (src / "tools.go").write_text(
        "//go:build tools\n\npackage controlplane\n\nimport (\n" +
        "".join(f'\t_ "k8s.io/kubernetes/cmd/{p}"\n' for p in KUBE_PROGRAMS) + ")\n")
    _go([go, "mod", "tidy"], src, env, "go mod tidy of the control plane module")
    for program in KUBE_PROGRAMS:
        progress(f"building {program} {PINS['k8s.io/kubernetes']}")
        t0 = time.monotonic()
        _go([go, "build", f"-ldflags=-s -w {version_ldflags()}", "-o", str(bin_dir / program),
             f"k8s.io/kubernetes/cmd/{program}"], src, env, program)
        timings[program] = round(time.monotonic() - t0, 1)
    progress("building etcd (the version Kubernetes requires)")
    t0 = time.monotonic()
    _go([go, "build", "-ldflags=-s -w", "-o", str(bin_dir / "etcd"), "./etcd"], src, env, "etcd")
    timings["etcd"] = round(time.monotonic() - t0, 1)
    for name, (module, package) in INSTALLS.items():
        target = f"{module}@{PINS[module]}"
        progress(f"building {target}")
        t0 = time.monotonic()
        folder = directory / f"src-{name}"
        folder.mkdir(exist_ok=True)
        (folder / "go.mod").write_text(f"module tpujob.dev/build-{name}\n\ngo 1.25.0\n")
        _go([go, "get", target], folder, env, target)
        _go([go, "build", "-ldflags=-s -w", "-o", str(bin_dir / name), package], folder, env,
            target)
        timings[name] = round(time.monotonic() - t0, 1)
    _copy_shared(directory, go, env, progress)
    etcd_version = _go([go, "list", "-m", "-f", "{{.Version}}", "go.etcd.io/etcd/server/v3"],
                       src, env, "etcd version").strip()
    marker = {"pins": PINS, "etcd": etcd_version, "go": _go([go, "env", "GOVERSION"], src, env,
                                                            "go version").strip(),
              "seconds": round(time.monotonic() - started, 1), "steps": timings}
    tmp = directory / (MARKER + ".tmp")
    tmp.write_text(json.dumps(marker, indent=1) + "\n")
    tmp.replace(directory / MARKER)


def _go(cmd: list[str], cwd: Path, env: dict[str, str], what: str) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise BuildError(f"building {what} failed (exit {proc.returncode}): "
                         f"{' '.join(cmd[:4])}\n{tail}")
    return proc.stdout


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="tpujob local build-control-plane",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--info", action="store_true", help="print the build's record as JSON")
    args = ap.parse_args(argv)
    try:
        paths = ensure_built(lambda line: print(line, file=sys.stderr, flush=True))
    except BuildError as err:
        print(f"tpujob: {err}", file=sys.stderr)
        return 1
    folder = next(iter(paths.values())).parent
    print((folder.parent / MARKER).read_text() if args.info else folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
