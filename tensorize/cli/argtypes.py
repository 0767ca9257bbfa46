"""Argument types the commands share, for argparse's ``type=``."""

from __future__ import annotations

import argparse
import re


def seed(text: str) -> int:
    """``--seed``: a non-negative integer (argparse reports anything else as a usage error)."""
    if not re.fullmatch(r"\d+", text.strip()):
        raise argparse.ArgumentTypeError(f"requires a non-negative integer, got {text!r}")
    return int(text)


def positive(text: str) -> int:
    """A positive integer (``--threads``, ``--bench``)."""
    if not re.fullmatch(r"\d+", text.strip()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"requires a positive integer, got {text!r}")
    return int(text)


threads = positive
