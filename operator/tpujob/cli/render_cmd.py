"""`tpujob render FILE`: every object the operator would create for a job, as YAML, after the
same pre-flight validation the operator runs. Nothing is sent to a cluster."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "render", help="print the objects the operator would create for a job",
        description="Validate a TpuTrainingJob file as the operator would and print the "
                    "ConfigMap and JobSet it would create (YAML documents). Exits 1 when the "
                    "job is invalid, with the field at fault and what would be valid.")
    p.add_argument("file", metavar="FILE", help="a TpuTrainingJob manifest (YAML), or - for stdin")
    p.add_argument("--namespace", "-n", default=None,
                   help="namespace to render into (default: the manifest's, else default)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import yaml

    from tpujob.api.resource import API_VERSION, KIND
    from tpujob.builders.jobset import build_children
    from tpujob.validation import validate_job

    try:
        text = sys.stdin.read() if args.file == "-" else open(args.file).read()
        docs = [d for d in yaml.safe_load_all(text) if d]
    except (OSError, yaml.YAMLError) as err:
        print(f"error: {args.file}: {err}", file=sys.stderr)
        return 1
    out: list[dict] = []
    failed = False
    for doc in docs:
        # A document of our apiVersion without a kind is a job missing its kind: validate_job
        # then says what to write, where skipping it would only report that no job was found.
        if not isinstance(doc, dict) or doc.get("kind", doc.get("apiVersion")) not in (
                KIND, API_VERSION):
            continue
        meta = doc.setdefault("metadata", {})
        if isinstance(meta, dict):  # otherwise validate_job refuses it, naming metadata
            meta["namespace"] = args.namespace or meta.get("namespace") or "default"
            meta.setdefault("uid", "(assigned by the API server)")
        verdict = validate_job(doc)
        name = meta.get("name") if isinstance(meta, dict) else None
        name = name if isinstance(name, str) and name else args.file
        if not verdict.valid:
            print(f"error: {name}: {verdict.reason}: {verdict.message}", file=sys.stderr)
            failed = True
            continue
        assert verdict.job is not None and verdict.plan is not None
        out += build_children(doc, verdict.job.spec, verdict.plan)
        if verdict.plan.workload_policy:
            print(f"# {name}: needs the Compute Engine workload policy "
                  f"{verdict.plan.workload_policy} (HIGH_THROUGHPUT, accelerator topology "
                  f"{verdict.plan.slice_type.topology})", file=sys.stderr)
    if not docs or (not out and not failed):
        print(f"error: {args.file}: no TpuTrainingJob found (a document with kind: "
              f"{KIND})", file=sys.stderr)
        return 1
    print(yaml.safe_dump_all(out, sort_keys=False), end="")
    return 1 if failed else 0
