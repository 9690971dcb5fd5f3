"""`tpujob local ...`: run tpujob on this machine. `tpujob local api` serves the embedded
Kubernetes API server in the foreground and writes a kubeconfig pointing at it."""

from __future__ import annotations

import argparse
import os
import sys
import threading

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
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        print("stopping", flush=True)
    finally:
        server.stop()
    return 0
