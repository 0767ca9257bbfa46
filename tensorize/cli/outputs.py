"""Files ``tensorize run`` writes (``-o`` and ``--trace``): checked before any work, written
whole or not at all.

A path is refused up front when it names a directory, when its directory is missing or not
writable, when it is the kernel file itself (by resolved path, or the same file under
another name), or when the file system refuses to look it up at all (a name too long, a
directory this user may not search). Writing is :mod:`tensorize.atomic`'s: a temporary file in the same directory, renamed over
the path only once complete.
"""

from __future__ import annotations

import os
from pathlib import Path

from tensorize.cli.errors import UsageError


# Characters of a path shown in a message; a longer one is shortened in the middle.
_SHOWN = 80


def check_output_path(option: str, name: str, kernel: Path) -> Path:
    """The path ``name`` given to ``option``, refused (UsageError) if it cannot be written or
    would overwrite ``kernel``."""
    try:
        return _check_output_path(option, name, kernel)
    except (OSError, ValueError) as err:
        # ENAMETOOLONG, EACCES on a directory on the way, an embedded NUL: the file system
        # cannot even look the path up.
        reason = getattr(err, "strerror", None) or str(err)
        raise UsageError(f"{option} requires a path this file system can write, got "
                         f"{_shown(name)}: {reason}; choose a shorter or other path") from None


def _shown(name: str) -> str:
    """``name`` for a message: whole when short, else its ends and its length."""
    if len(name) <= _SHOWN:
        return name
    half = _SHOWN // 2
    return f"{name[:half]}...{name[-half:]} ({len(name)} characters)"


def _check_output_path(option: str, name: str, kernel: Path) -> Path:
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
    if path.resolve() == kernel.resolve() or (
            path.exists() and kernel.exists() and os.path.samefile(path, kernel)):
        raise UsageError(f"{option} {name} would overwrite the kernel file {kernel}; choose "
                         "another path")
    return path
