"""``--intrinsics-dir DIR``: the option every command that uses the registry shares.

Kept apart from the commands' modules and free of imports of the registry itself, so that
building a command's parser (``tensorize run --help``) loads no description and no backend.
"""

from __future__ import annotations

import argparse

# The registry's environment variable (intrinsics.ENV_VAR), named here without importing the
# registry; a test checks that the two agree.
ENV_VAR = "TENSORIZE_INTRINSICS_PATH"


def add_registry_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--intrinsics-dir DIR`` (repeatable) to a command that uses the registry."""
    parser.add_argument(
        "--intrinsics-dir", action="append", default=[], metavar="DIR",
        help=f"also load the *.yaml families in DIR (repeatable; see also {ENV_VAR})")
