"""The TpuTrainingJob CustomResourceDefinition, built from the API models.

`python -m tpujob.api.crd` writes `manifests/crd.yaml` and the field reference in `docs/api.md`
(run it from the repository root after changing a model); `--check` only compares and fails
when either is out of date."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from tpujob.api.reference import build_reference, replace_region
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
from tpujob.api.schema import build_open_schema, build_structural_schema
from tpujob.api.spec import TpuTrainingJobSpec
from tpujob.api.status import TpuTrainingJobStatus
from tpujob_trainer.config.root import TrainerConfig

DEFAULT_OUTPUT = Path("manifests") / "crd.yaml"
DEFAULT_DOCS = Path("docs") / "api.md"
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
        # How long ago the step last moved: a hung job reads as such long before its stall
        # timeout (a date column prints as an age, like AGE).
        _column("Last Step", "date", ".status.progress.lastStepTime",
                "Time since the step last changed."),
        # Strings the operator formats (full precision stays in .status.progress): kubectl
        # prints a number column with every digit.
        _column("Loss", "string", ".status.progress.display.loss",
                "Training loss, 4 significant digits."),
        _column("Tok/s/dev", "string", ".status.progress.display.tokensPerSecondPerDevice",
                "Tokens per second per JAX device."),
        _column("MFU", "string", ".status.progress.display.mfu",
                "Model FLOPs utilization, percent; - where the device's peak is not known."),
        _column("Restarts", "integer", ".status.restarts", "Restarts so far."),
        _column("Reason", "string", ".status.reason",
                "Why the job failed, was refused, waits in its queue or for nodes."),
        _column("Goodput", "string", ".status.goodput.display",
                "Percent of wall time that became training progress (docs/goodput.md)."),
        _column("Age", "date", ".metadata.creationTimestamp", "Time since creation."),
        _column("Slices", "integer", ".spec.slices", "Number of slices.", priority=1),
        _column("TFLOP/s/dev", "string", ".status.progress.display.tflopsPerDevice",
                "Model TFLOP/s per JAX device, 3 significant digits.", priority=1),
        _column("Slow Host", "string", ".status.hosts.display",
                "The host whose own work slows every step, and its score (docs/operator.md).",
                priority=1),
    ]


def build_trainer_config_schema(description: str) -> dict[str, Any]:
    """spec.trainer.config: the trainer's own schema, open. The apiserver refuses wrong types
    and out-of-range values of known keys at `kubectl apply` (negative train.steps, say); it
    keeps unknown keys, so that the operator, validating with the trainer's full schema
    (cross-field rules included), can name a misspelt key instead of it being pruned."""
    schema = build_open_schema(TrainerConfig)
    schema["description"] = description
    return schema


def build_openapi_schema() -> dict[str, Any]:
    """The version's openAPIV3Schema: a Kubernetes object with our spec and status."""
    spec = build_structural_schema(TpuTrainingJobSpec)
    trainer = spec["properties"]["trainer"]["properties"]
    trainer["config"] = {**build_trainer_config_schema(trainer["config"]["description"]),
                         "default": trainer["config"]["default"]}
    return {
        "description": TpuTrainingJob.__doc__,
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "API version: tpujob.dev/v1alpha1."},
            "kind": {"type": "string", "description": f"Kind: {KIND}."},
            "metadata": {"type": "object"},
            "spec": spec,
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


def render_docs(current: str) -> str:
    """docs/api.md with its generated field reference brought up to date."""
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return replace_region(current, build_reference(schema))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=REGENERATE_COMMAND,
        description="Write the TpuTrainingJob CRD and the docs' field reference from the models.")
    parser.add_argument("--output", "-o", type=Path, default=DEFAULT_OUTPUT,
                        help=f"CRD file to write, '-' for stdout (default: {DEFAULT_OUTPUT})")
    parser.add_argument("--docs", type=Path, default=DEFAULT_DOCS,
                        help=f"API doc whose field reference to update (default: {DEFAULT_DOCS}); "
                             "skipped when the file does not exist")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a file differs from the models")
    args = parser.parse_args(argv)
    if str(args.output) == "-":
        sys.stdout.write(render_crd_yaml())
        return 0
    targets = [(args.output, render_crd_yaml())]
    if args.docs.exists():
        targets.append((args.docs, render_docs(args.docs.read_text())))
    if args.check:
        stale = [path for path, text in targets
                 if not path.exists() or path.read_text() != text]
        for path in stale:
            print(f"{path} is out of date: run `{REGENERATE_COMMAND}`", file=sys.stderr)
        return 1 if stale else 0
    if not args.output.parent.is_dir():
        parser.error(f"{args.output.parent} does not exist; run from the repository root "
                     "or pass --output")
    for path, text in targets:
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
