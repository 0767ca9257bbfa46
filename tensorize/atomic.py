"""Writing a file whole or not at all: a temporary file beside it, renamed over it once
complete, so a failed or interrupted write never leaves half a file (reports, plots, tables,
emitted code, traces)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

from ir.errors import TensorizeError

# Characters of the file's name kept in its temporary file's name, so that a name the file
# system takes still does once the temporary file's prefix and suffix are added.
_TEMPORARY_STEM = 64


class OutputError(TensorizeError):
    """A file the run writes could not be written (a full disk, a file size limit, no
    permission); the message names the file."""


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write`` on a temporary file beside ``path``, then rename it over ``path``."""
    stem = path.name[:_TEMPORARY_STEM]
    temporary = path.with_name(f".{stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        write(temporary)
        os.replace(temporary, path)
    except OSError as err:
        raise OutputError(f"writing {path} failed: {err.strerror or err}") from None
    finally:
        temporary.unlink(missing_ok=True)


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all."""
    write_atomically(path, lambda temporary: temporary.write_text(text))
