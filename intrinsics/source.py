"""Reading a YAML description while keeping where every value came from.

PyYAML's composer gives nodes with 0-based marks; :func:`read_yaml` turns them into
:class:`YNode` values (plain Python scalars, dicts and lists) that each carry a 1-based
:class:`~ir.errors.SourceLoc`, so every later check can point at the user's line. Problems are
gathered in a :class:`Findings` list and raised once, as one ``IntrinsicSpecError``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

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
    """Compose ``path`` with the safe loader into a YNode tree; None after a recorded problem."""
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) else "it is not UTF-8 text"
        findings.add(None, f"{file}: cannot read the description: {reason}")
        return None
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        loc = SourceLoc(file, mark.line + 1, mark.column + 1) if mark is not None else None
        context = f" ({err.context})" if err.context else ""
        findings.add(loc, f"invalid YAML: {err.problem}{context}")
        return None
    except yaml.YAMLError as err:
        findings.add(SourceLoc(file, 1, 1), f"invalid YAML: {err}")
        return None
    try:
        if root is None:
            findings.add(SourceLoc(file, 1, 1), "the description is empty; it requires "
                         "'target', 'scopes' and 'intrinsics'")
            return None
        return _convert(root, loader, file, None, findings)
    finally:
        loader.dispose()


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
            key = loader.construct_object(key_node, deep=True)
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
    try:
        value = loader.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as err:
        findings.add(loc, f"invalid YAML value: {err.problem}")
        value = None
    return YNode(value, loc, key_loc, node.style, raw=node)
