"""`tpujob operator`: run the operator against the current kubeconfig, or in-cluster with the
pod's service account. Stops cleanly on SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    from tpujob.gcp.settings import WorkloadPolicySettings

    p = subparsers.add_parser(
        "operator", help="run the operator (in a cluster, or against your kubeconfig)",
        description="Watch TpuTrainingJobs and run them: validate, create the JobSet (and the "
                    "workload policy where one is needed), and keep each job's status up to "
                    "date. Uses the in-cluster service account in a pod, else the kubeconfig.")
    p.add_argument("--namespace", "-n", action="append", default=[], metavar="NS",
                   help="watch this namespace (repeatable); default: every namespace")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, "
                   "else $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--context", default=None, help="kubeconfig context")
    p.add_argument("--http-port", type=int, default=8080,
                   help="port of /healthz, /readyz and /metrics (default %(default)s; -1: off)")
    p.add_argument("--webhook", action="store_true",
                   help="serve the validating admission webhook (path /validate-tputrainingjob)")
    p.add_argument("--webhook-port", type=int, default=9443, help="default %(default)s")
    p.add_argument("--webhook-cert-dir", default="/etc/tpujob/webhook",
                   help="folder with tls.crt and tls.key (default %(default)s)")
    p.add_argument("--progress-interval", type=float, default=15.0, metavar="SECONDS",
                   help="how often a running job's progress is read (default %(default)s)")
    p.add_argument("--host-report-interval", type=float, default=30.0, metavar="SECONDS",
                   help="how often every trainer container's log is read for its host reports "
                        "(slow hosts; 0: never; default %(default)s)")
    p.add_argument("--relist-interval", type=float, default=300.0, metavar="SECONDS",
                   help="how often jobs and JobSets are listed again, to catch changes no "
                        "watch reported (0: never; default %(default)s)")
    p.add_argument("--workers", type=int, default=4,
                   help="jobs reconciled at the same time (default %(default)s)")
    p.add_argument("--log-format", choices=["text", "json"], default="text")
    p.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    WorkloadPolicySettings.add_arguments(p)
    p.set_defaults(func=run)


def build_policy_ensurer(settings):
    """A callable (policy name, topology) -> None that ensures the policy exists, or None when
    the operator does not manage workload policies."""
    if settings is None or not settings.enabled:
        return None
    from tpujob.gcp import ensure_workload_policy

    client = settings.build_client()

    def ensure(name: str, topology: str) -> None:
        ensure_workload_policy(client, settings.project, settings.region, name, topology,
                               operation_timeout_s=settings.operation_timeout_s)
    return ensure


def run(args: argparse.Namespace) -> int:
    import asyncio

    import kopf

    from tpujob.controller.operator import Operator
    from tpujob.controller.runner import load_api_config
    from tpujob.controller.settings import OperatorSettings
    from tpujob.gcp.settings import WorkloadPolicySettings, WorkloadPolicySettingsError

    try:
        policies = WorkloadPolicySettings.from_args(args)  # checked on construction
    except WorkloadPolicySettingsError as err:
        print(f"tpujob operator: {err}", file=sys.stderr)
        return 2
    kopf.configure(verbose=args.verbose, debug=args.verbose,
                   log_format=kopf.LogFormat.JSON if args.log_format == "json"
                   else kopf.LogFormat.PLAIN)
    if not args.verbose:
        # kopf logs "Handler ... succeeded." at INFO for every watch event: a line per status
        # change of every job and JobSet. The operator logs what it does itself.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    settings = OperatorSettings(
        namespaces=tuple(args.namespace), http_port=None if args.http_port < 0 else args.http_port,
        webhook=args.webhook, webhook_port=args.webhook_port,
        webhook_cert_dir=args.webhook_cert_dir, workload_policies=policies,
        progress_interval_s=args.progress_interval, workers=args.workers,
        host_report_interval_s=args.host_report_interval,
        relist_interval_s=args.relist_interval,
        log_format=args.log_format)
    try:
        api_config = load_api_config(args.kubeconfig, args.context)
    except Exception as err:  # no kubeconfig, bad context: say so plainly
        print(f"tpujob operator: cannot load cluster credentials: {err}", file=sys.stderr)
        return 2
    operator = Operator(settings, api_config, ensure_policy=build_policy_ensurer(policies))
    asyncio.run(operator.run())
    return 0
