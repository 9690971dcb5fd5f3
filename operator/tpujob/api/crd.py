"""The TpuTrainingJob CustomResourceDefinition, built from the API models.

`python -m tpujob.api.crd` writes `manifests/crd.yaml` (run it from the repository root after
changing a model); `--check` only compares and fails when the file is out of date."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from tpujob.api.resource import (
    CRD_NAME,
    GROUP,
    KIND,
    LIST_KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    TpuTrainingJob,
)
from tpujob.api.schema import build_structural_schema
from tpujob.api.spec import TpuTrainingJobSpec
from tpujob.api.status import TpuTrainingJobStatus

DEFAULT_OUTPUT = Path("manifests") / "crd.yaml"
REGENERATE_COMMAND = "python -m tpujob.api.crd"
HEADER = (f"# Generated from the models in operator/tpujob/api by `{REGENERATE_COMMAND}`.\n"
          "# Do not edit: change the models and run the command again.\n")


def _column(name: str, type_: str, json_path: str, description: str,
            priority: int = 0) -> dict[str, Any]:
    column: dict[str, Any] = {"name": name, "type": type_, "jsonPath": json_path,
                              "description": description}
    if priority:
        column["priority"] = priority
    return column


def build_printer_columns() -> list[dict[str, Any]]:
    """What `kubectl get tpujobs` shows after NAME; priority-1 columns only with `-o wide`."""
    return [
        _column("Slice", "string", ".spec.slice", "TPU slice of each replica."),
        _column("Hosts", "integer", ".status.slice.hosts", "TPU hosts, all slices together."),
        _column("Phase", "string", ".status.phase", "Lifecycle phase."),
        _column("Step", "integer", ".status.progress.step", "Last completed training step."),
        _column("Loss", "number", ".status.progress.loss", "Training loss."),
        _column("Tok/s/dev", "number", ".status.progress.tokensPerSecondPerDevice",
                "Tokens per second per JAX device."),
        _column("MFU", "number", ".status.progress.mfu", "Model FLOPs utilization (0-1)."),
        _column("Restarts", "integer", ".status.restarts", "Restarts so far."),
        _column("Age", "date", ".metadata.creationTimestamp", "Time since creation."),
        _column("Slices", "integer", ".spec.slices", "Number of slices.", priority=1),
        _column("TFLOP/s/dev", "number", ".status.progress.tflopsPerDevice",
                "Model TFLOP/s per JAX device.", priority=1),
        _column("Reason", "string", ".status.failure.reason", "Why the job failed.", priority=1),
    ]


def build_openapi_schema() -> dict[str, Any]:
    """The version's openAPIV3Schema: a Kubernetes object with our spec and status."""
    return {
        "description": TpuTrainingJob.__doc__,
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "API version: tpujob.dev/v1alpha1."},
            "kind": {"type": "string", "description": f"Kind: {KIND}."},
            "metadata": {"type": "object"},
            "spec": build_structural_schema(TpuTrainingJobSpec),
            "status": build_structural_schema(TpuTrainingJobStatus),
        },
    }


def build_crd() -> dict[str, Any]:
    """The apiextensions.k8s.io/v1 CustomResourceDefinition of TpuTrainingJob."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/name": "tpujob"}},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND, "listKind": LIST_KIND, "plural": PLURAL, "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
            },
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": build_openapi_schema()},
                "subresources": {"status": {}},
                "additionalPrinterColumns": build_printer_columns(),
            }],
        },
    }


def render_crd_yaml() -> str:
    """The exact text of manifests/crd.yaml."""
    return HEADER + yaml.safe_dump(build_crd(), sort_keys=False, width=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=REGENERATE_COMMAND, description="Write the TpuTrainingJob CRD from the API models.")
    parser.add_argument("--output", "-o", type=Path, default=DEFAULT_OUTPUT,
                        help=f"file to write, '-' for stdout (default: {DEFAULT_OUTPUT})")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when the file differs from the models")
    args = parser.parse_args(argv)
    text = render_crd_yaml()
    if str(args.output) == "-":
        sys.stdout.write(text)
        return 0
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run `{REGENERATE_COMMAND}`", file=sys.stderr)
            return 1
        return 0
    if not args.output.parent.is_dir():
        parser.error(f"{args.output.parent} does not exist; run from the repository root "
                     "or pass --output")
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
