"""`tpujob plan`: what a slice is, whether a mesh fits its topology and a model its HBM."""

from __future__ import annotations

import argparse
import json
import sys

from tpujob.planning import PlanRequest, plan_many
from tpujob_plan.gpu_catalog import GPU_NAMES
from tpujob_plan.gpu_plan import Launcher
from tpujob_plan.memory import OPTIMIZERS, REMAT_POLICIES
from tpujob_plan.mesh import MESH_AXES
from tpujob_plan.model_shape import PRESETS
from tpujob_plan.zero_memory import STAGES, Offload


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plan", help="size TPU slices or GPU nodes, check a mesh and a model's memory before "
                     "launching",
        description="Plan TPU slices (hosts, chips, JAX processes, node selectors) or GPU "
                    "nodes (GPUs, processes per launcher, network stack); optionally "
                    "check a mesh layout against the physical topology and estimate per-device "
                    "memory for a model. Exits 1 when a slice name is invalid, 2 when a mesh "
                    "or model does not fit.")
    p.add_argument("slices_", metavar="SLICE", nargs="+",
                   help="slice names such as v6e-16, tpu7x-64, v5p-128, v5p-4x4x4, v5e-8, or "
                        f"GPU machine types: {', '.join(GPU_NAMES)}")
    p.add_argument("--slices", type=int, default=1, metavar="N",
                   help="number of slices (multi-slice over DCN); default 1")
    p.add_argument("--nodes", type=int, metavar="N",
                   help="GPU machine types: number of nodes; default 1")
    p.add_argument("--launcher", choices=[v.value for v in Launcher],
                   help="GPU machine types: what starts the processes of a node: jax (one "
                        "process per node, the default), torchrun or accelerate (one per GPU)")
    p.add_argument("--machine-type", help="GKE machine type, e.g. ct6e-standard-8t for a "
                                          "single-host v6e-8")
    p.add_argument("--containers-per-host", type=int, metavar="N",
                   help="trainer containers per host: 1 (default, every chip in one process) or "
                        "2 on tpu7x-standard-4t (two processes of 2 chips, opt-in)")
    p.add_argument("--ici", default="", metavar="AXIS=N,...",
                   help=f"mesh axes within a slice ({', '.join(MESH_AXES)}); one may be -1")
    p.add_argument("--dcn", default="", metavar="AXIS=N,...",
                   help="mesh axes across slices; default data=<slices>")
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model", metavar="FILE|PRESET",
                       help="a trainer config YAML (its `model:` and `train:` sections), a bare "
                            f"model section, or a preset: {', '.join(PRESETS)}")
    model.add_argument("--params", metavar="N",
                       help="a Llama-shaped model of about N parameters, e.g. 8B, 350M")
    p.add_argument("--batch", type=int, metavar="B",
                   help="global batch in sequences; default one per device")
    p.add_argument("--seq", type=int, metavar="L", help="sequence length; default 2048")
    p.add_argument("--remat", choices=(*REMAT_POLICIES, "auto"), default="auto",
                   help="rematerialization policy; auto = least recomputation that fits")
    p.add_argument("--zero", type=int, choices=STAGES, metavar="STAGE",
                   help="GPU nodes under --launcher torchrun or accelerate: the model states "
                        "(parameters, gradients, Adam) each GPU holds under DeepSpeed ZeRO "
                        "stage 0 (plain DDP), 1, 2 or 3, instead of the built-in trainer's "
                        "estimate; with --params or --model")
    p.add_argument("--offload", choices=[o.value for o in Offload],
                   help="with --zero: ZeRO-Offload of the optimizer (stages 1-3) or of the "
                        "optimizer and the parameters (stage 3) to CPU memory")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw")
    p.add_argument("--grad-accum", type=int, default=1, metavar="K")
    p.add_argument("--compile", action="store_true",
                   help="also compile the trainer's step for each slice with the TPU compiler "
                        "(libtpu; no TPU needed) and print its HBM per device beside the "
                        "estimate; needs --model or --params and pip install "
                        "'tpujob[trainer,compile]'; seconds to minutes per slice")
    p.add_argument("--output", "-o", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tpujob.cli.plan_compile import exit_status
    from tpujob.cli.plan_render import render_table
    from tpujob_plan.errors import PlanError

    try:
        request = PlanRequest.from_cli(args)
    except PlanError as err:
        # The option once: some planners' messages already begin with it (`--ici: ...`).
        named = err.message.startswith(f"{err.field}:")
        print(f"error: {err.message if named else f'{err.field}: {err.message}'}",
              file=sys.stderr)
        return 2
    if args.compile and request.model is None:
        print("error: --compile: needs a model to compile (--model FILE|PRESET or --params N)",
              file=sys.stderr)
        return 2
    results = plan_many(args.slices_, request)
    compiled = {}
    if args.compile:
        from tpujob.cli.plan_compile import compile_all
        compiled = compile_all(results, request, args.model)
    if args.output == "json":
        print(json.dumps([r.to_dict() | ({"compiled": compiled[r.requested]}
                                         if r.requested in compiled else {})
                          for r in results if r.ok], indent=2))
    else:
        print(render_table(results, compiled))
    for r in results:
        if not r.ok:
            print(f"error: {r.error}", file=sys.stderr)
    return exit_status(results, compiled)
