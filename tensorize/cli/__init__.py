"""The ``tensorize`` command line.

Each subcommand lives in its own module exposing ``register(subparsers)``, which adds its
parser and sets ``handler`` to a function taking the parsed arguments and returning an exit
status: 0 success, 1 the work failed (a check, a validation), 2 bad usage or bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ir.errors import TensorizeError
from tensorize import __version__
from tensorize.cli import intrinsics_cmd, run_cmd

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

_SUBCOMMANDS = (run_cmd, intrinsics_cmd)

DESCRIPTION = """\
Map tensor programs onto hardware tensor instructions.

Kernels are Python files with @T.prim_func functions (see examples/script/). Exit status:
0 success, 1 a check or validation failed, 2 bad usage or bad input.
Set TENSORIZE_DEBUG=1 to see internal tracebacks."""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="tensorize", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"tensorize {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _SUBCOMMANDS:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tensorize`` console command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return args.handler(args)
    except TensorizeError as err:
        if os.environ.get("TENSORIZE_DEBUG"):
            raise
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
