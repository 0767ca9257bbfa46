"""The common base of IR nodes and the source-location field every node carries."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from ir.errors import SourceLoc


class Node:
    """Base of every IR node. Nodes are frozen, slotted dataclasses: values, not graphs.

    Structural equality with renaming of bound variables is :func:`ir.structural_equal`;
    ``==`` compares fields and so treats two distinct ``Var`` objects as different.
    """

    __slots__ = ()

    def __str__(self) -> str:
        from ir.printer import print_node

        return print_node(self)


def loc_field() -> Any:
    """A ``loc`` dataclass field: optional, and excluded from equality, hashing and repr."""
    return field(default=None, compare=False, hash=False, repr=False)


LocT = SourceLoc | None
