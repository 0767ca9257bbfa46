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
    """Names of the dataclass fields of ``cls`` that can hold child nodes: those equality
    compares (not ``loc``, nor a value cached from the children, such as a BinOp's dtype)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.compare)


class Visitor:
    """Walks a tree in pre-order. Override ``visit_<Class>``; call ``self.generic_visit``
    inside it to keep descending.

    Children without a ``visit_<Class>`` method are expanded on an explicit stack, so an
    expression thousands of operators deep costs no recursion unless a method sees each level.
    """

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
        if type(self).visit is not Visitor.visit:
            # A subclass that intercepts visit() must see every node.
            for name in child_fields(type(node)):
                self.visit(getattr(node, name))
            return
        stack = [getattr(node, name) for name in reversed(child_fields(type(node)))]
        while stack:
            item = stack.pop()
            if isinstance(item, tuple):
                stack.extend(reversed(item))
                continue
            if not isinstance(item, Node):
                continue
            method = getattr(self, "visit_" + type(item).__name__, None)
            if method is not None:
                method(item)
            elif not isinstance(item, _LEAVES):
                stack.extend(getattr(item, name) for name in reversed(child_fields(type(item))))


class Mutator:
    """Rebuilds a tree bottom-up, copying only nodes whose children changed.

    A ``visit_<Class>`` method returns the replacement node. When nothing changes, the result
    is the very same object, so callers can test ``result is node``. As in :class:`Visitor`,
    children without a method of their own are rebuilt on an explicit stack.
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
        if type(self).visit is not Mutator.visit:
            # A subclass that intercepts visit() must see every node.
            changes = {}
            for name in child_fields(type(node)):
                old = getattr(node, name)
                new = self.visit(old)
                if new is not old:
                    changes[name] = new
            return dataclasses.replace(node, **changes) if changes else node
        frames = [_Rebuild(node)]
        while True:
            frame = frames[-1]
            if frame.position == len(frame.old):
                done = frame.result()
                frames.pop()
                if not frames:
                    return done
                frames[-1].take(done)
                continue
            child = frame.old[frame.position]
            if isinstance(child, tuple) or (
                    isinstance(child, Node) and not isinstance(child, _LEAVES)
                    and getattr(self, "visit_" + type(child).__name__, None) is None):
                frames.append(_Rebuild(child))
            else:
                frame.take(self.visit(child))


class _Rebuild:
    """A node or tuple whose children a Mutator is rewriting: the old ones, the new so far."""

    __slots__ = ("container", "names", "old", "new", "position")

    def __init__(self, container: Node | tuple[Any, ...]) -> None:
        self.container = container
        if isinstance(container, tuple):
            self.names: tuple[str, ...] = ()
            self.old: tuple[Any, ...] = container
        else:
            self.names = child_fields(type(container))
            self.old = tuple(getattr(container, name) for name in self.names)
        self.new: list[Any] = []
        self.position = 0

    def take(self, value: Any) -> None:
        """The rewritten child at the current position."""
        self.new.append(value)
        self.position += 1

    def result(self) -> Any:
        """The container, rebuilt only where a child changed."""
        if all(new is old for new, old in zip(self.new, self.old)):
            return self.container
        if isinstance(self.container, tuple):
            return tuple(self.new)
        changes = {name: new for name, new, old in zip(self.names, self.new, self.old)
                   if new is not old}
        return dataclasses.replace(self.container, **changes)


def post_order_visit(node: Node, callback: Callable[[Node], None]) -> None:
    """Call ``callback`` on every node below and including ``node``, children first."""
    stack: list[tuple[Any, bool]] = [(node, False)]
    while stack:
        item, children_done = stack.pop()
        if isinstance(item, tuple):
            stack.extend((child, False) for child in reversed(item))
        elif not isinstance(item, Node):
            continue
        elif children_done or isinstance(item, _LEAVES):
            callback(item)
        else:
            stack.append((item, True))
            stack.extend((getattr(item, name), False)
                         for name in reversed(child_fields(type(item))))


def vars_of(node: Node) -> list[Var]:
    """The variables ``node`` uses, each once, in order of first use."""
    found: dict[int, Var] = {}
    post_order_visit(node, lambda n: found.setdefault(id(n), n) if isinstance(n, Var) else None)
    return list(found.values())


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
