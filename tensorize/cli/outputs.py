"""Files ``tensorize run`` writes (``-o`` and ``--trace``): checked before any work, written
whole or not at all.

A path is refused up front when it names a directory, when its directory is missing or not
writable, or when it is the kernel file itself (by resolved path, or the same file under
another name). Writing goes to a temporary file in the same directory, renamed over the path
only once complete, so a failed or interrupted run never leaves half a file.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

from tensorize.cli.errors import UsageError


def check_output_path(option: str, name: str, kernel: Path) -> Path:
    """The path ``name`` given to ``option``, refused (UsageError) if it cannot be written or
    would overwrite ``kernel``."""
    path = Path(name)
    if path.is_dir():
        raise UsageError(f"{option} requires a file path, got the directory {name}; name a "
                         "file in it")
    folder = path.parent
    if not folder.is_dir():
        raise UsageError(f"{option} {name} requires an existing directory, got no directory "
                         f"{folder}; create it first")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {name} requires a writable directory, got {folder}, which "
                         "this user cannot write")
    if path.resolve() == kernel.resolve() or (path.exists() and os.path.samefile(path, kernel)):
        raise UsageError(f"{option} {name} would overwrite the kernel file {kernel}; choose "
                         "another path")
    return path


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write`` on a temporary file beside ``path``, then rename it over ``path``."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        write(temporary)
        os.replace(temporary, path)
    except OSError as err:
        raise UsageError(f"writing {path} failed: {err.strerror or err}") from None
    finally:
        temporary.unlink(missing_ok=True)


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all."""
    write_atomically(path, lambda temporary: temporary.write_text(text))
