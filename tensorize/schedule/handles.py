"""Handles to blocks and loops, valid across the rewrites of one schedule."""

from __future__ import annotations

from dataclasses import dataclass

from ir import Var


@dataclass(frozen=True, slots=True)
class BlockRV:
    """A block, named by its (unique) block name."""

    name: str

    def __repr__(self) -> str:
        return f"BlockRV({self.name!r})"


@dataclass(frozen=True, slots=True, eq=False)
class LoopRV:
    """A loop, named by its loop variable (an identity that primitives keep)."""

    var: Var

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LoopRV) and other.var is self.var

    def __hash__(self) -> int:
        return id(self.var)

    def __repr__(self) -> str:
        return f"LoopRV({self.var.name})"
