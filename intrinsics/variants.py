"""Variant entries: one YAML record standing for a list of intrinsics.

An entry with ``variants:`` (a list of parameter sets) and optional ``params:`` (values shared
by every variant) expands to one entry per set, with every ``{param}`` in its strings replaced.
A string that is exactly one placeholder takes the parameter's own type, so
``extent: "{m}"`` becomes the integer 16. Placeholders that name no parameter (the operand
names of emit templates) stay as they are.
"""

from __future__ import annotations

from typing import Any

from intrinsics import limits
from intrinsics.schema import PLACEHOLDER, MapOf, ParamValue, describe
from intrinsics.source import Findings, YNode

Params = dict[str, Any]

_PARAM_SET = MapOf(ParamValue(), what="parameter")
# Fields that hold the parameters themselves: never substituted.
_PARAM_FIELDS = ("params", "variants")


class Budget:
    """What one file may still expand to: intrinsics, and nodes counting each variant's copy
    (the bounds of :mod:`intrinsics.limits`)."""

    def __init__(self) -> None:
        self.intrinsics = limits.MAX_INTRINSICS
        self.nodes = limits.MAX_VARIANT_NODES

    @property
    def spent(self) -> bool:
        """True once an entry asked for more than was left."""
        return self.intrinsics < 0 or self.nodes < 0

    def take(self, entry: YNode, count: int, findings: Findings, where: str) -> bool:
        """Spend ``count`` copies of ``entry``; False after recording a finding if too many."""
        size = entry.size()
        self.intrinsics -= count
        self.nodes -= count * size
        variants = entry.get("variants")
        loc = (variants.key_loc or variants.loc) if variants is not None else entry.loc
        if self.intrinsics < 0:
            findings.add(loc, f"{where}: a family requires at most {limits.MAX_INTRINSICS} "
                         f"intrinsics, got more with this entry's {count} variants")
        elif self.nodes < 0:
            findings.add(loc, f"{where}: a family requires at most "
                         f"{limits.MAX_VARIANT_NODES} nodes once its variants are expanded, "
                         f"got more with this entry's {count} copies of {size} nodes")
        return not self.spent


def expand(entry: YNode, findings: Findings, where: str,
           budget: Budget | None = None) -> list[tuple[Params, YNode]]:
    """Each variant of ``entry`` as (its parameters, the substituted entry).

    An entry without ``variants`` is one variant with the ``params`` it declares (often none).
    Returns an empty list after recording a finding when the parameter fields are malformed,
    or when the variants would exceed what is left of ``budget`` (default: a fresh one).
    """
    if budget is None:
        budget = Budget()
    before = len(findings)
    defaults_node = entry.get("params")
    variants_node = entry.get("variants")
    if defaults_node is not None:
        _PARAM_SET.check(defaults_node, findings, f"{where}: params")
    if variants_node is not None:
        if not variants_node.is_sequence or not variants_node.value:
            findings.add(variants_node.loc, f"{where}: variants requires a non-empty list of "
                         f"parameter sets, got {describe(variants_node)}")
        else:
            for index, item in enumerate(variants_node.value):
                _PARAM_SET.check(item, findings, f"{where}: variants[{index}]")
    if len(findings) > before:
        return []
    defaults = defaults_node.plain() if defaults_node is not None else {}
    sets = [item.plain() for item in variants_node.value] if variants_node is not None else [{}]
    if not budget.take(entry, len(sets), findings, where):
        return []
    expanded = []
    for values in sets:
        params = _resolve({**defaults, **values})
        expanded.append((params, substitute(entry, params) if params else entry))
    return expanded


def _resolve(params: Params) -> Params:
    """Let shared parameters refer to a variant's own (``params: {elem: "{in}"}``), one level."""
    return {name: substitute_text(value, params) if isinstance(value, str) else value
            for name, value in params.items()}


def substitute_text(text: str, params: Params) -> Any:
    """``text`` with each ``{param}`` replaced; a lone placeholder yields the value itself."""
    whole = PLACEHOLDER.fullmatch(text)
    if whole is not None and whole.group(1) in params:
        return params[whole.group(1)]

    def replace(match: Any) -> str:
        name = match.group(1)
        return str(params[name]) if name in params else match.group(0)

    return PLACEHOLDER.sub(replace, text)


def substitute(node: YNode, params: Params) -> YNode:
    """A copy of ``node`` with parameters substituted into every string below it."""
    if node.is_mapping:
        items = {key: child if key in _PARAM_FIELDS else substitute(child, params)
                 for key, child in node.value.items()}
        changed = any(items[key] is not node.value[key] for key in items)
        return node.with_value(items, False) if changed else node
    if node.is_sequence:
        children = [substitute(child, params) for child in node.value]
        changed = any(new is not old for new, old in zip(children, node.value))
        return node.with_value(children, False) if changed else node
    if not isinstance(node.value, str):
        return node
    value = substitute_text(node.value, params)
    if value == node.value and type(value) is str:
        return node
    return node.with_value(value, True)
