"""Generic walking and rewriting of IR trees.

Both classes dispatch on the node's class name to a ``visit_<ClassName>`` method when one is
defined, and otherwise walk every child field. Buffers and Vars are leaves: a rewrite that
replaces them does so in ``visit_Buffer`` / ``visit_Var``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import cache
from typing import Any

from ir.buffer import Buffer
from ir.expr import Var
from ir.node import Node

_LEAVES = (Buffer, Var)


@cache
def child_fields(cls: type) -> tuple[str, ...]:
    """Names of the dataclass fields of ``cls`` that can hold child nodes (not ``loc``)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.name != "loc")


class Visitor:
    """Walks a tree in pre-order. Override ``visit_<Class>``; call ``self.generic_visit``
    inside it to keep descending."""

    def visit(self, node: Any) -> None:
        """Visit ``node`` (a Node, or a tuple of nodes)."""
        if isinstance(node, tuple):
            for item in node:
                self.visit(item)
            return
        if not isinstance(node, Node):
            return
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is not None:
            method(node)
        else:
            self.generic_visit(node)

    def generic_visit(self, node: Node) -> None:
        """Visit every child of ``node``."""
        if isinstance(node, _LEAVES):
            return
        for name in child_fields(type(node)):
            self.visit(getattr(node, name))


class Mutator:
    """Rebuilds a tree bottom-up, copying only nodes whose children changed.

    A ``visit_<Class>`` method returns the replacement node. When nothing changes, the result
    is the very same object, so callers can test ``result is node``.
    """

    def visit(self, node: Any) -> Any:
        """Rewrite ``node`` (a Node, a tuple of nodes, or a plain value, returned as is)."""
        if isinstance(node, tuple):
            return self._visit_tuple(node)
        if not isinstance(node, Node):
            return node
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is not None:
            return method(node)
        return self.generic_visit(node)

    def _visit_tuple(self, items: tuple[Any, ...]) -> tuple[Any, ...]:
        new_items = tuple(self.visit(item) for item in items)
        if all(new is old for new, old in zip(new_items, items)):
            return items
        return new_items

    def generic_visit(self, node: Node) -> Node:
        """Rewrite the children of ``node``; rebuild it only if one of them changed."""
        if isinstance(node, _LEAVES):
            return node
        changes = {}
        for name in child_fields(type(node)):
            old = getattr(node, name)
            new = self.visit(old)
            if new is not old:
                changes[name] = new
        if not changes:
            return node
        return dataclasses.replace(node, **changes)


def post_order_visit(node: Node, callback: Callable[[Node], None]) -> None:
    """Call ``callback`` on every node below and including ``node``, children first."""

    class _PostOrder(Visitor):
        def visit(self, item: Any) -> None:
            super().visit(item)
            if isinstance(item, Node):
                callback(item)

    _PostOrder().visit(node)


def substitute(node: Any, mapping: dict[Var, Any]) -> Any:
    """Replace free uses of the Vars in ``mapping`` by the given expressions."""
    if not mapping:
        return node

    class _Substitute(Mutator):
        def visit_Var(self, var: Var) -> Any:
            return mapping.get(var, var)

    return _Substitute().visit(node)


def replace_buffers(node: Any, mapping: dict[Buffer, Buffer]) -> Any:
    """Replace every reference to the Buffers in ``mapping`` (loads, stores, regions)."""
    if not mapping:
        return node

    class _ReplaceBuffers(Mutator):
        def visit_Buffer(self, buffer: Buffer) -> Buffer:
            return mapping.get(buffer, buffer)

    return _ReplaceBuffers().visit(node)
