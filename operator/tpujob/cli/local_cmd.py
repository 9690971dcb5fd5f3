"""`tpujob local ...`: run tpujob on this machine. `tpujob local run FILE` runs the jobs in
FILE to the end and shows their progress; `tpujob local up` keeps everything running for kubectl;
`tpujob local api` serves the embedded Kubernetes API server alone. Each writes a kubeconfig
pointing at its server."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

DEFAULT_KUBECONFIG = os.path.join(".tpujob", "kubeconfig")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("local", help="run tpujob on this machine, without a cluster")
    local = parser.add_subparsers(dest="local_command", metavar="SUBCOMMAND")
    local.required = True
    api = local.add_parser(
        "api", help="serve the embedded Kubernetes API server until Ctrl-C",
        description="Serve a Kubernetes API server on 127.0.0.1 (with the JobSet CRD "
                    "preloaded) and write a kubeconfig for kubectl, the kubernetes client "
                    "and kopf.")
    api.add_argument("--port", type=int, default=0,
                     help="port to listen on (default: a free port)")
    api.add_argument("--kubeconfig", default=DEFAULT_KUBECONFIG,
                     help=f"where to write the kubeconfig (default: {DEFAULT_KUBECONFIG})")
    api.add_argument("--crd", action="append", default=[], metavar="FILE",
                     help="also preload the CustomResourceDefinitions in FILE (repeatable)")
    api.add_argument("--no-jobset", action="store_true",
                     help="do not preload the bundled JobSet CRD")
    api.set_defaults(func=run_api)

    run = local.add_parser(
        "run", help="run the jobs in FILE on this machine and show their progress",
        description="Start an embedded Kubernetes API server, the operator (the same code as "
                    "in a cluster), a local executor that runs the JobSet's pods as processes "
                    "(JAX on CPU) and a GCS emulator for gs:// outputs; apply FILE; show each "
                    "TpuTrainingJob's progress until it ends; stop everything. Exit status: 0 "
                    "every job succeeded, 1 a job failed or was refused, 2 FILE is unusable, "
                    "124 timed out, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).")
    run.add_argument("file", metavar="FILE", help="YAML with one or more TpuTrainingJobs")
    _add_common(run)
    run.add_argument("--timeout", type=float, default=None, metavar="S",
                     help="give up after S seconds (exit 124; default: no limit)")
    run.set_defaults(func=run_run)

    up = local.add_parser(
        "up", help="keep the API server, operator, executor and GCS emulator running for kubectl",
        description="Start local mode (API server, operator, executor, GCS emulator), write a "
                    "kubeconfig and keep running until Ctrl-C; then stop everything.")
    up.add_argument("--port", type=int, default=0,
                    help="the embedded API server's port (default: a free port); the real "
                         "kube-apiserver listens on a free port of its own")
    up.add_argument("--kubeconfig", default=DEFAULT_KUBECONFIG,
                    help=f"where to write the kubeconfig (default: {DEFAULT_KUBECONFIG})")
    _add_common(up)
    up.set_defaults(func=run_up)

    build = local.add_parser(
        "build-control-plane",
        help="build the real control plane's programs (once; cached), print where they are",
        description="Build kube-apiserver, kube-controller-manager, kube-scheduler, etcd, the "
                    "JobSet controller, Kueue and helm from their Go modules with the Go on "
                    "PATH, into tpujob's cache (~/.cache/tpujob or $TPUJOB_CACHE_DIR). Nothing "
                    "to do when they are built.")
    build.add_argument("--info", action="store_true", help="print the build's record (JSON)")
    build.set_defaults(func=run_build)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", type=Path, default=None, metavar="DIR",
                        help="work directory: pod logs, the emulated bucket, the operator's log "
                             "(kept); default: a temporary directory, removed at the end")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary work directory and print where it is")
    parser.add_argument("--cpu-devices", type=int, default=1, metavar="N",
                        help="JAX CPU devices per trainer process (default: 1); a v6e-8 runs "
                             "as its 2 host processes with N devices each")
    parser.add_argument("--control-plane", choices=("embedded", "real"), default="embedded",
                        help="embedded (default): the API server written for local mode, "
                             "starts in a second; real: etcd, kube-apiserver, "
                             "kube-controller-manager, kube-scheduler, the JobSet controller "
                             "and the operator installed by helm, built from their Go modules "
                             "the first time (docs/local-control-plane.md)")


def run_api(args: argparse.Namespace) -> int:
    from tpujob.local.apiserver import ApiServer, bundled_crd_paths, load_crds

    paths = ([] if args.no_jobset else bundled_crd_paths()) + list(args.crd)
    try:
        crds = load_crds(paths)
    except (OSError, ValueError) as err:
        print(f"tpujob local api: cannot load CRDs: {err}", file=sys.stderr)
        return 2
    server = ApiServer(port=args.port, crds=crds)
    try:
        url = server.start()
    except OSError as err:
        print(f"tpujob local api: cannot listen on 127.0.0.1:{args.port}: {err}",
              file=sys.stderr)
        return 1
    path = server.write_kubeconfig(args.kubeconfig)
    print(f"Kubernetes API server listening on {url}", flush=True)
    print(f"kubeconfig written to {path}; use it with:\n  export KUBECONFIG={path.resolve()}",
          flush=True)
    # Handlers of our own: a process started in the background by a shell inherits SIGINT
    # ignored, and Python then never raises KeyboardInterrupt for it.
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
        print("stopping", flush=True)
    finally:
        server.stop()
    return 0


def _options(args: argparse.Namespace, timeout: float | None = None):
    from tpujob.local.session import RunOptions

    if args.cpu_devices < 1:
        raise SystemExit("tpujob local: --cpu-devices must be at least 1")
    return RunOptions(timeout_s=timeout, workdir=args.workdir, keep=args.keep,
                      cpu_devices_per_process=args.cpu_devices,
                      control_plane=args.control_plane)


def run_build(args: argparse.Namespace) -> int:
    from tpujob.local.controlplane import build

    return build.main(["--info"] if args.info else [])


def run_run(args: argparse.Namespace) -> int:
    from tpujob.local.session import run_file
    from tpujob.local.session.run import Interrupt, handle_signals

    with handle_signals(Interrupt()) as interrupt:
        return run_file(args.file, _options(args, args.timeout), interrupt=interrupt,
                        log_file=True)


def run_up(args: argparse.Namespace) -> int:
    from tpujob.local.session import serve
    from tpujob.local.session.run import Interrupt, handle_signals

    if args.port and args.control_plane == "real":
        raise SystemExit("tpujob local up: --port is the embedded API server's; the real "
                         "kube-apiserver listens on a free port of its own (the kubeconfig "
                         "names it)")
    with handle_signals(Interrupt()) as interrupt:
        return serve(Path(args.kubeconfig), _options(args), port=args.port, interrupt=interrupt,
                     log_file=True)
