"""An NPU described by a user's YAML file: its `machine:` section for the simulator and,
when the file declares intrinsics, the family the tensorizer uses for it.

The file is read by the intrinsic descriptions' bounded reader (:func:`intrinsics.source.
read_yaml`: size, nesting and alias limits, every problem at its file:line), never by a bare
YAML load; the section is then validated by the simulator's own rules
(:func:`simulator.config.machine_from_node`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from intrinsics import Registry, load_registry, search_dirs
from intrinsics.registry import BUILTIN_DIR, family_files
from intrinsics.source import Findings, YNode, read_yaml
from ir.errors import IntrinsicSpecError, SourceLoc
from simulator import MachineConfig
from simulator import load_machine as load_builtin_machine
from simulator.config import machine_from_node

PathLike = str | os.PathLike[str]


def load_machine(path: PathLike | None = None) -> MachineConfig:
    """The machine described in the `machine:` section of ``path`` (default: the built-in
    ``intrinsics/npu.yaml``). Raises IntrinsicSpecError listing every problem at its
    file:line: the YAML itself, the reader's limits, each field of the section."""
    if path is None:
        return load_builtin_machine()
    file = Path(path)
    root = _read(file)
    section = root.get("machine")
    if section is None or section.raw is None:
        raise IntrinsicSpecError(f"{file} requires a top-level 'machine:' mapping (the "
                                 "simulator's parameters, docs/simulator.md), got none",
                                 SourceLoc(str(file), 1, 1))
    return machine_from_node(section.raw, str(file), section.key_loc)


def declares_family(path: PathLike) -> bool:
    """True when the machine file also declares intrinsics (a family of its own)."""
    return _read(Path(path)).get("intrinsics") is not None


def machine_registry(path: PathLike, extra_dirs: Iterable[PathLike] = ()) -> Registry:
    """The registry for runs on the machine in ``path``: the built-in families and those of
    ``extra_dirs`` (and ``TENSORIZE_INTRINSICS_PATH``), where the file's own family, when it
    declares intrinsics, takes the place of the built-in NPU family (whose 16x16 tiles are
    the built-in machine's)."""
    file = Path(path)
    files = family_files(search_dirs(extra_dirs))
    if not declares_family(file):
        return load_registry(files)
    builtin = (BUILTIN_DIR / "npu.yaml").resolve()
    return load_registry([f for f in files if f.resolve() != builtin] + [file])


def _read(file: Path) -> YNode:
    """The file's tree, read once until the file changes (a run asks for the machine, then
    for its family)."""
    try:
        stat = file.stat()
        key = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        key = None  # read_yaml reports why the file cannot be read
    return _read_cached(str(file), key)


@lru_cache(maxsize=16)
def _read_cached(file: str, key: tuple[int, int] | None) -> YNode:
    findings = Findings(file)
    root = read_yaml(Path(file), findings)
    findings.raise_if_any(f"machine description {file}")
    if root is None or not root.is_mapping:
        raise IntrinsicSpecError(f"{file} requires a mapping with a top-level 'machine:' "
                                 "section, got another document", SourceLoc(file, 1, 1))
    return root
