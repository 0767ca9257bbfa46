"""Why-not report: one line per (block, intrinsic) pair, saying how the block maps onto the
intrinsic or why it does not.

A matched line shows the cheapest mapping (here wrapped)::

    conv: npu_gemm  M=(vn,vh,vw) N=(vco) K=(vrh,vrw,vrc)  calls 72 pad 0%
        A=pad B=W C=conv  pack A  (best of 98)

GEMM-shaped intrinsics label their iterators M (indexing the output and the first input), N
(the output and the second input) and K (the reduction); other intrinsics use their own
iterator names. ``outer (...)`` lists block iterators left as loops around the calls,
``pack`` the operands whose data must be repacked first. A line that did not match reads
``block: intrinsic  no match: <reason>``.
"""

from __future__ import annotations

from collections.abc import Iterable

import ir
from intrinsics import Intrinsic, Registry
from tensorize.match import match_function
from tensorize.match.result import Match, Mismatch

__all__ = ["explain", "format_result"]


def explain(func: ir.PrimFunc, intrinsics: Iterable[Intrinsic], registry: Registry
            ) -> list[str]:
    """One line per block of ``func`` and intrinsic of ``intrinsics`` (blocks in program
    order, intrinsics in the order given): the cheapest mapping, or why there is none.

    Never raises for a block that does not match, elementwise or otherwise; ``registry`` is
    as for :func:`tensorize.match.match_block`.
    """
    lines = []
    for per_block in match_function(func, intrinsics, registry).values():
        lines.extend(format_result(result) for result in per_block.values())
    return lines


def format_result(result: list[Match] | Mismatch) -> str:
    """The report line of one :func:`tensorize.match.match_block` result."""
    if isinstance(result, Mismatch):
        return f"{result.block}: {result.intrinsic.name}  no match: {result.reason}"
    best = result[0]
    labels = _labels(best.intrinsic)
    parts = [f"{best.block}: {best.intrinsic.name}",
             " ".join(f"{labels[t]}=({','.join(group)})" for t, group in best.iter_map.items())]
    if best.outer:
        parts[-1] += f" outer ({','.join(best.outer)})"
    parts.append(f"calls {best.calls} pad {_percent(best.waste)}")
    parts.append(" ".join(f"{operand}={buffer}" for operand, buffer in _by_operand(best)))
    if best.packed:
        parts.append(f"pack {','.join(best.packed)}")
    parts.append(f"(best of {len(result)})" if len(result) > 1 else "(only mapping)")
    return "  ".join(parts)


def _labels(intrinsic: Intrinsic) -> dict[str, str]:
    """M / N / K for a GEMM-shaped intrinsic's iterators, else their own names."""
    inputs = [o for o in intrinsic.inputs if not o.is_scalar]
    output = intrinsic.output.name
    touched = _operands_by_iterator(intrinsic)
    reduce_vars = intrinsic.reduce_vars()
    labels = {}
    for iv in intrinsic.iter_vars:
        operands = touched.get(iv.var.name, frozenset())
        if iv.var in reduce_vars and len(reduce_vars) == 1:
            labels[iv.var.name] = "K"
        elif len(inputs) == 2 and operands == {output, inputs[0].name}:
            labels[iv.var.name] = "M"
        elif len(inputs) == 2 and operands == {output, inputs[1].name}:
            labels[iv.var.name] = "N"
    names = {iv.var.name: iv.var.name for iv in intrinsic.iter_vars}
    if len(labels) != len(names) or len(set(labels.values())) != len(labels):
        return names
    return labels


def _operands_by_iterator(intrinsic: Intrinsic) -> dict[str, frozenset[str]]:
    """Iterator name -> the operands the semantics indexes with it."""
    operand_of = {id(o.buffer): o.name for o in intrinsic.operands}
    store = intrinsic.semantics
    accesses = [(store.buffer, store.indices)]
    ir.post_order_visit(store.value, lambda node: accesses.append((node.buffer, node.indices))
                        if isinstance(node, ir.BufferLoad) else None)
    found: dict[str, set[str]] = {}
    for buffer, indices in accesses:
        names: list[str] = []
        ir.post_order_visit(indices, lambda node: names.append(node.name)
                            if isinstance(node, ir.Var) else None)
        for name in names:
            found.setdefault(name, set()).add(operand_of[id(buffer)])
    return {name: frozenset(operands) for name, operands in found.items()}


def _by_operand(match: Match) -> list[tuple[str, str]]:
    """(operand, kernel buffer) pairs in the intrinsic's declared operand order."""
    buffer_of = {operand: buffer for buffer, operand in match.buffer_map.items()}
    return [(o.name, buffer_of[o.name]) for o in match.intrinsic.operands
            if o.name in buffer_of]


def _percent(fraction: float) -> str:
    if 0 < fraction < 0.005:
        return "<1%"
    return f"{round(fraction * 100)}%"
