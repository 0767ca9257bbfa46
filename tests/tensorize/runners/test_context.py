"""The run context is made at the edge and passed down: nothing below the edge loads a
registry or a machine of its own."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[3]
# The edges: the CLI builds the context from its options and tensorize.api from its
# arguments (a sweep point's registry is the one its machine file declares, through
# targets.npu.machine_registry); intrinsics/ defines default_registry.
EDGES = ("tensorize/cli/", "tensorize/api.py")
PACKAGES = ("ir", "simulator", "targets", "tensorize")


def _calls(path: Path, name: str) -> list[int]:
    """The lines of ``path`` that call ``name`` (as a plain name or an attribute)."""
    tree = ast.parse(path.read_text(), str(path))
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and (getattr(node.func, "id", None) == name
                 or getattr(node.func, "attr", None) == name)]


def test_nothing_below_the_edge_falls_back_to_the_default_registry() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(EDGES):
                continue
            found += [f"{relative}:{line}" for line in _calls(path, "default_registry")]
    assert found == []


# The edges that may load the built-in machine: the run context's default (make_context),
# the CLI, and a sweep spec without a base; simulator/config.py and targets/npu/machine.py
# define the loaders.
MACHINE_EDGES = ("tensorize/cli/", "tensorize/runners/context.py", "tensorize/sweep/spec.py",
                 "simulator/config.py", "targets/npu/machine.py")


def _default_machine_calls(path: Path) -> list[int]:
    """The lines of ``path`` that load the built-in machine: a machine loader called without
    a path (or with None)."""
    tree = ast.parse(path.read_text(), str(path))
    names = {"load_machine", "load_builtin_machine", "builtin_machine"}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        given = [*node.args, *(k.value for k in node.keywords)]
        if name in names and all(isinstance(a, ast.Constant) and a.value is None
                                 for a in given):
            found.append(node.lineno)
    return found


def test_nothing_below_the_edge_falls_back_to_the_default_machine() -> None:
    found = []
    for package in (*PACKAGES, "intrinsics"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(MACHINE_EDGES):
                continue
            found += [f"{relative}:{line}" for line in _default_machine_calls(path)]
    assert found == []
