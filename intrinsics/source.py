"""Reading a YAML description while keeping where every value came from.

PyYAML's composer gives nodes with 0-based marks; :func:`read_yaml` turns them into
:class:`YNode` values (plain Python scalars, dicts and lists) that each carry a 1-based
:class:`~ir.errors.SourceLoc`, so every later check can point at the user's line. Problems are
gathered in a :class:`Findings` list and raised once, as one ``IntrinsicSpecError``.

Reading is bounded (:mod:`intrinsics.limits`): the file's bytes, its nesting depth, and the
nodes it stands for once aliases are expanded are counted while composing, so a small file
cannot make the walks that follow take minutes or gigabytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from intrinsics import limits
from ir.errors import IntrinsicSpecError, SourceLoc


@dataclass(frozen=True)
class YNode:
    """One YAML value with its location.

    ``value`` is a Python scalar (str, int, float, bool or None), a ``dict[str, YNode]`` for a
    mapping or a ``list[YNode]`` for a sequence. ``loc`` spans the value; ``key_loc`` the key
    it sits under, when it is a mapping value. ``style`` is PyYAML's scalar style (None for
    plain, ``'"'``, ``"'"``, ``'|'`` or ``'>'``). ``substituted`` marks a scalar rewritten by
    a variant's parameters, and ``raw`` is the PyYAML node it was read from.
    """

    value: Any
    loc: SourceLoc
    key_loc: SourceLoc | None = None
    style: str | None = None
    substituted: bool = False
    raw: yaml.Node | None = field(default=None, compare=False, repr=False)

    @property
    def is_mapping(self) -> bool:
        return isinstance(self.value, dict)

    @property
    def is_sequence(self) -> bool:
        return isinstance(self.value, list)

    @property
    def is_scalar(self) -> bool:
        return not (self.is_mapping or self.is_sequence)

    def get(self, key: str) -> YNode | None:
        """The value under ``key`` of a mapping node (None when absent or not a mapping)."""
        if not self.is_mapping:
            return None
        return self.value.get(key)

    def at(self, key: str) -> SourceLoc:
        """Where the field ``key`` is written, or this node's own location when it is absent."""
        child = self.get(key)
        if child is None:
            return self.loc
        return child.key_loc or child.loc

    def plain(self) -> Any:
        """The Python value without locations."""
        if self.is_mapping:
            return {key: child.plain() for key, child in self.value.items()}
        if self.is_sequence:
            return [child.plain() for child in self.value]
        return self.value

    def size(self) -> int:
        """The number of nodes in this tree: this one, its keys and everything below."""
        if self.is_mapping:
            return 1 + sum(1 + child.size() for child in self.value.values())
        if self.is_sequence:
            return 1 + sum(child.size() for child in self.value)
        return 1

    def with_value(self, value: Any, substituted: bool) -> YNode:
        """The same node holding another value."""
        return replace(self, value=value, substituted=substituted)


class Findings:
    """Problems found in one description, each at its YAML location, raised together."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.items: list[IntrinsicSpecError] = []
        self._keys: list[tuple[object, ...]] = []

    def add(self, loc: SourceLoc | None, message: str, key: str | None = None) -> None:
        """Record ``message`` at ``loc``; ``key`` (default: the message) deduplicates.

        Variants of one entry share its YAML lines, so one mistake would be reported once per
        variant; a finding with the same location and key as an earlier one is dropped.
        """
        where = (loc.file, loc.line, loc.col) if loc is not None else None
        dedup = (where, key if key is not None else message)
        if dedup in self._keys:
            return
        self._keys.append(dedup)
        self.items.append(IntrinsicSpecError(message, loc))

    def merge(self, other: Findings, rekey: Callable[[str], str] | None = None) -> None:
        """Record the findings of ``other`` here; ``rekey`` rewrites their dedup keys."""
        for error, (_, key) in zip(other.items, other._keys):
            text = str(key)
            self.add(error.loc, error.message, rekey(text) if rekey is not None else text)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def sorted(self) -> list[IntrinsicSpecError]:
        """The findings by file, line and column."""
        return sorted(self.items, key=lambda e: (e.loc.file, e.loc.line, e.loc.col)
                      if e.loc is not None else ("", 0, 0))

    def error(self, what: str) -> IntrinsicSpecError:
        """One IntrinsicSpecError carrying every finding, sorted by line."""
        ordered = self.sorted()
        count = len(ordered)
        noun = "problem" if count == 1 else "problems"
        first = ordered[0].loc if ordered else None
        return IntrinsicSpecError(f"{count} {noun} in {what}", first, tuple(ordered))

    def raise_if_any(self, what: str) -> None:
        """Raise :meth:`error` when there is any finding."""
        if self.items:
            raise self.error(what)


def loc_of(node: yaml.Node, file: str) -> SourceLoc:
    """A PyYAML node's span as a 1-based SourceLoc (end column inclusive)."""
    start, end = node.start_mark, node.end_mark
    end_col = end.column if end.line == start.line else None
    return SourceLoc(file, start.line + 1, start.column + 1, end.line + 1, end_col)


def read_yaml(path: Path, findings: Findings) -> YNode | None:
    """Compose ``path`` with the safe loader into a YNode tree; None after a recorded problem.

    The file is refused, at the line where a bound of :mod:`intrinsics.limits` is crossed,
    when it is too long, nests too deeply or expands through aliases to too many nodes; any
    other problem the reader meets is a finding too, never an exception.
    """
    file = str(path)
    text = _read_text(path, findings)
    if text is None:
        return None
    try:
        loader = _BoundedLoader(text)
    except yaml.reader.ReaderError as err:
        findings.add(_position(file, text, err.position), "invalid YAML: the character "
                     f"#x{err.character:04x} is not allowed in a description ({err.reason})")
        return None
    try:
        root = loader.get_single_node()
        if root is None:
            findings.add(SourceLoc(file, 1, 1), "the description is empty; it requires "
                         "'target', 'scopes' and 'intrinsics'")
            return None
        return _convert(root, loader, file, None, findings)
    except _LimitError as err:
        findings.add(_mark_loc(file, err.mark), err.message)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        context = f" ({err.context})" if err.context else ""
        findings.add(_mark_loc(file, mark), f"invalid YAML: {err.problem}{context}")
    except yaml.YAMLError as err:
        findings.add(SourceLoc(file, 1, 1), f"invalid YAML: {err}")
    except RecursionError:
        # The depth bound stops the composer first; this catches a caller already deep.
        findings.add(SourceLoc(file, 1, 1), "the description nests too deeply to be read; "
                     f"it requires at most {limits.MAX_DEPTH} levels")
    finally:
        loader.dispose()
    return None


def _read_text(path: Path, findings: Findings) -> str | None:
    """The file's text, read no further than the size bound."""
    file = str(path)
    try:
        with path.open("rb") as stream:
            data = stream.read(limits.MAX_DOCUMENT_BYTES + 1)
    except OSError as err:
        findings.add(None, f"{file}: cannot read the description: {err.strerror}")
        return None
    if len(data) > limits.MAX_DOCUMENT_BYTES:
        findings.add(SourceLoc(file, 1, 1), f"a description requires at most "
                     f"{limits.MAX_DOCUMENT_BYTES} bytes, got more; split the family")
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        col = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        findings.add(SourceLoc(file, line, col), "cannot read the description: it requires "
                     f"UTF-8 text, got byte 0x{data[err.start]:02x}")
        return None


def _position(file: str, text: str, position: int) -> SourceLoc:
    """The 1-based line and column of a character offset."""
    line = text.count("\n", 0, position) + 1
    return SourceLoc(file, line, position - (text.rfind("\n", 0, position) + 1) + 1)


def _mark_loc(file: str, mark: yaml.Mark | None) -> SourceLoc | None:
    return SourceLoc(file, mark.line + 1, mark.column + 1) if mark is not None else None


class _LimitError(yaml.YAMLError):
    """A bound of :mod:`intrinsics.limits` crossed at ``mark`` while composing."""

    def __init__(self, message: str, mark: yaml.Mark) -> None:
        super().__init__(message)
        self.message = message
        self.mark = mark


class _BoundedLoader(yaml.SafeLoader):
    """The safe loader, bounding nesting depth and the node count after alias expansion.

    Composing shares an anchored node between its aliases, so it stays cheap; what a later
    walk of the tree would visit is counted instead: each node once, and at each alias the
    expanded size of the node it names. An alias of a node still being composed (``&a
    [*a]``) would make the tree infinite and is refused.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.depth = 0
        self.expanded = 0
        self.sizes: dict[int, int] = {}  # id(node) -> nodes in it once expanded

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = self.anchors.get(event.anchor)
            if node is not None:  # an undefined alias is the composer's to report
                size = self.sizes.get(id(node))
                if size is None:
                    raise _LimitError(f"alias *{event.anchor} requires a node written before "
                                     "it, got the node that contains it (a recursive "
                                     "structure)", event.start_mark)
                self._count(size, event.start_mark)
            return super().compose_node(parent, index)
        if self.depth >= limits.MAX_DEPTH:
            raise _LimitError(f"a description requires at most {limits.MAX_DEPTH} levels of "
                             "nesting, got more", event.start_mark)
        before = self.expanded
        self._count(1, event.start_mark)
        self.depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        self.sizes[id(node)] = self.expanded - before
        return node

    def _count(self, nodes: int, mark: yaml.Mark) -> None:
        self.expanded += nodes
        if self.expanded > limits.MAX_NODES:
            raise _LimitError(f"a description requires at most {limits.MAX_NODES} nodes once "
                             "its aliases are expanded, got more here; share less through "
                             "aliases", mark)


# What a tagged scalar's constructor raises besides YAMLError: ValueError for `!!int abc`
# or an integer past Python's digit limit, KeyError for `!!bool abc`, AttributeError for
# `!!timestamp abc`.
_CONSTRUCTOR_ERRORS = (yaml.YAMLError, ValueError, LookupError, AttributeError, TypeError)


_UNREADABLE = object()  # what _construct returns for a value it recorded a finding about


def _construct(node: yaml.Node, loader: yaml.SafeLoader, loc: SourceLoc,
               findings: Findings) -> Any:
    """The Python value of a scalar (or key) node; _UNREADABLE after recording why it has
    none."""
    try:
        return loader.construct_object(node, deep=True)
    except yaml.MarkedYAMLError as err:
        findings.add(loc, f"invalid YAML value: {err.problem}")
    except _CONSTRUCTOR_ERRORS:
        text = str(node.value)
        shown = text if len(text) <= 40 else text[:37] + "..."
        findings.add(loc, f"invalid YAML value: {shown!r} cannot be read as "
                     f"!!{node.tag.rsplit(':', 1)[-1]}")
    return _UNREADABLE


def _convert(node: yaml.Node, loader: yaml.SafeLoader, file: str, key_loc: SourceLoc | None,
             findings: Findings) -> YNode:
    """Turn a composed node into a YNode, recording duplicate keys and odd keys."""
    loc = loc_of(node, file)
    if isinstance(node, yaml.MappingNode):
        try:
            loader.flatten_mapping(node)  # resolve '<<' merge keys, as safe_load would
        except yaml.MarkedYAMLError as err:
            findings.add(loc, f"invalid YAML merge: {err.problem}")
        items: dict[str, YNode] = {}
        for key_node, value_node in node.value:
            kloc = loc_of(key_node, file)
            key = _construct(key_node, loader, kloc, findings)
            if key is _UNREADABLE:
                continue
            if not isinstance(key, str):
                findings.add(kloc, f"a field name requires a string, got {key!r}")
                key = str(key)
            if key in items:
                first = items[key].key_loc
                line = f" (first written at line {first.line})" if first is not None else ""
                findings.add(kloc, f"duplicate key '{key}'{line}")
                continue
            items[key] = _convert(value_node, loader, file, kloc, findings)
        return YNode(items, loc, key_loc, raw=node)
    if isinstance(node, yaml.SequenceNode):
        children = [_convert(child, loader, file, None, findings) for child in node.value]
        return YNode(children, loc, key_loc, raw=node)
    value = _construct(node, loader, loc, findings)
    return YNode(None if value is _UNREADABLE else value, loc, key_loc, node.style, raw=node)
