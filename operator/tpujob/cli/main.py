"""Entry point of the `tpujob` command: one subcommand per module, registered in COMMANDS."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Subcommand name -> module that defines `register(subparsers)`; the parser it registers sets
# `func(args) -> int`. A command module keeps heavy imports inside its handler, so that one
# command's dependencies never slow another down.
COMMANDS: dict[str, str] = {
    "plan": "tpujob.cli.plan_cmd",
    "render": "tpujob.cli.render_cmd",
    "local": "tpujob.cli.local_cmd",
    "operator": "tpujob.cli.operator_cmd",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpujob", description="Run JAX training on Google Cloud TPU slices.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for module_name in COMMANDS.values():
        importlib.import_module(module_name).register(subparsers)
    return parser


# Exit status of a command whose reader went away (`tpujob plan ... | head`): that of a
# program ended by SIGPIPE, as the shell reports it.
EXIT_BROKEN_PIPE = 128 + 13


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # Quietly, as Unix tools end: no traceback, and nothing more written at exit (Python
        # flushes stdout then, which would fail again), as the Python documentation advises.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
