"""Structural equality: two trees are equal when they match field by field, with bound
variables and buffers matched by position rather than by identity (alpha-equivalence)."""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

from ir.buffer import Buffer
from ir.errors import IRError
from ir.expr import Var
from ir.node import Node
from ir.visitor import child_fields


class _Mismatch(Exception):
    def __init__(self, path: str, left: Any, right: Any, why: str) -> None:
        super().__init__(why)
        self.path = path
        self.left = left
        self.right = right
        self.why = why


class _Path:
    """Where a pair of values sits below the roots, rendered only for a mismatch."""

    __slots__ = ("parent", "step")

    def __init__(self, parent: _Path | None, step: str) -> None:
        self.parent = parent
        self.step = step

    def __str__(self) -> str:
        steps = []
        path: _Path | None = self
        while path is not None:
            steps.append(path.step)
            path = path.parent
        return "".join(reversed(steps))


class _Comparer:
    def __init__(self) -> None:
        self.left_to_right: dict[int, Any] = {}
        self.right_to_left: dict[int, Any] = {}

    def compare(self, a: Any, b: Any, path: str) -> None:
        """Compare two trees in pre-order, keeping an explicit stack: an expression may be
        thousands of operators deep."""
        stack: list[tuple[Any, Any, _Path]] = [(a, b, _Path(None, path))]
        while stack:
            a, b, where = stack.pop()
            pairs = self._step(a, b, where)
            stack.extend(reversed(pairs))

    def _step(self, a: Any, b: Any, path: _Path) -> list[tuple[Any, Any, _Path]]:
        """Compare ``a`` and ``b`` themselves; their children, to compare next."""
        if isinstance(a, (Var, Buffer)) or isinstance(b, (Var, Buffer)):
            self._compare_identity(a, b, path)
            return []
        if isinstance(a, tuple) and isinstance(b, tuple):
            if len(a) != len(b):
                raise _Mismatch(str(path), a, b, f"lengths differ: {len(a)} vs {len(b)}")
            return [(x, y, _Path(path, f"[{i}]")) for i, (x, y) in enumerate(zip(a, b))]
        if isinstance(a, Node) and isinstance(b, Node):
            if type(a) is not type(b):
                raise _Mismatch(str(path), a, b,
                                f"node kinds differ: {type(a).__name__} vs {type(b).__name__}")
            return [(getattr(a, name), getattr(b, name), _Path(path, f".{name}"))
                    for name in child_fields(type(a))]
        if type(a) is not type(b) and not (isinstance(a, Enum) and isinstance(b, Enum)):
            raise _Mismatch(str(path), a, b, f"values differ: {a!r} vs {b!r}")
        if a != b and not (isinstance(a, float) and math.isnan(a) and math.isnan(b)):
            # A NaN constant is the same program as another NaN constant.
            raise _Mismatch(str(path), a, b, f"values differ: {a!r} vs {b!r}")
        return []

    def _compare_identity(self, a: Any, b: Any, path: _Path) -> None:
        if type(a) is not type(b):
            raise _Mismatch(str(path), a, b,
                            f"kinds differ: {type(a).__name__} vs {type(b).__name__}")
        mapped = self.left_to_right.get(id(a))
        if mapped is not None:
            if mapped is not b:
                raise _Mismatch(str(path), a, b, "refers to a different variable or buffer")
            return
        if id(b) in self.right_to_left:
            raise _Mismatch(str(path), a, b, "refers to a different variable or buffer")
        # First sight: the two are each other's counterpart from now on; compare their types.
        if isinstance(a, Var):
            if a.dtype != b.dtype:
                raise _Mismatch(str(path), a, b,
                                f"variable dtypes differ: {a.dtype} vs {b.dtype}")
        else:
            for name in ("shape", "dtype", "scope", "strides"):
                if getattr(a, name) != getattr(b, name):
                    raise _Mismatch(f"{path}.{name}", a, b,
                                    f"buffer {name}s differ: {getattr(a, name)} vs "
                                    f"{getattr(b, name)}")
        self.left_to_right[id(a)] = b
        self.right_to_left[id(b)] = a


def structural_equal(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` are the same program up to the names of variables and buffers."""
    try:
        _Comparer().compare(a, b, "root")
    except _Mismatch:
        return False
    return True


def assert_structural_equal(a: Any, b: Any) -> None:
    """Raise IRError naming the first place where ``a`` and ``b`` differ."""
    try:
        _Comparer().compare(a, b, "root")
    except _Mismatch as mismatch:
        raise IRError(f"structural mismatch at {mismatch.path}: {mismatch.why}\n"
                      f"  left:  {_short(mismatch.left)}\n  right: {_short(mismatch.right)}"
                      ) from None


def _short(value: Any) -> str:
    text = str(value) if isinstance(value, Node) else repr(value)
    return text if len(text) < 400 else text[:400] + " ..."
