"""The command line's own error: options that conflict or do not apply, values out of range,
files named on the command line that cannot be written."""

from __future__ import annotations

from ir.errors import TensorizeError


class UsageError(TensorizeError):
    """The command line asks for something that cannot be done; the message says how to fix
    it. The command exits with status 2."""
