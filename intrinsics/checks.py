"""Cross-checks of one intrinsic's parts against each other, after its semantics parsed.

Each check records findings instead of raising, so one load reports every problem: operand
roles against what the semantics reads and writes, iterators against where they index,
operand shapes against the iteration space, and the accumulator's dtype against its inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import ir
from intrinsics.model import Intrinsic, Operand
from intrinsics.source import Findings
from ir import IterKind


@dataclass(frozen=True)
class Parts:
    """What the checks look at: the built pieces of one intrinsic and their YAML locations."""

    where: str
    kind: str
    store: ir.BufferStore
    operands: tuple[Operand, ...]
    iter_vars: tuple[ir.IterVar, ...]
    resets: bool
    semantics_loc: ir.SourceLoc
    resets_loc: ir.SourceLoc


def check_all(parts: Parts, findings: Findings) -> None:
    """Run every check on ``parts``."""
    for check in (_check_roles, _check_iterators, _check_extents, _check_dtypes, _check_kind,
                  _check_accepts):
        check(parts, findings)


def loads_in(node: ir.Node) -> list[ir.BufferLoad]:
    """Every buffer load under ``node``, in visiting order."""
    found: list[ir.BufferLoad] = []
    ir.post_order_visit(node, lambda n: found.append(n) if isinstance(n, ir.BufferLoad)
                        else None)
    return found


def operand_positions(intrinsic: Intrinsic) -> dict[str, list[int]]:
    """For each tensor operand, the positions (in the intrinsic's iterator order) of the
    iterators indexing its dimensions, in dimension order."""
    order = {iv.var: n for n, iv in enumerate(intrinsic.iter_vars)}
    by_buffer = {o.buffer: o.name for o in intrinsic.operands}
    found: dict[str, list[int]] = {}

    def visit(node: object) -> None:
        if isinstance(node, (ir.BufferLoad, ir.BufferStore)) and node.buffer in by_buffer:
            found[by_buffer[node.buffer]] = [order[i] for i in node.indices
                                             if isinstance(i, ir.Var) and i in order]

    ir.post_order_visit(intrinsic.semantics, visit)
    return found


def accumulated_term(store: ir.BufferStore) -> ir.Expr | None:
    """For ``C[idx] = C[idx] + x`` (or ``x + C[idx]``), the added term ``x``; else None."""
    value = store.value
    if not isinstance(value, ir.BinOp) or value.op != "add":
        return None
    for own, other in ((value.a, value.b), (value.b, value.a)):
        if isinstance(own, ir.BufferLoad) and own.buffer is store.buffer and \
                _same_indices(own.indices, store.indices):
            return other
    return None


def _same_indices(a: tuple[ir.Expr, ...], b: tuple[ir.Expr, ...]) -> bool:
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b))


def _by_buffer(parts: Parts) -> Mapping[ir.Buffer, Operand]:
    return {o.buffer: o for o in parts.operands}


def _check_roles(parts: Parts, findings: Findings) -> None:
    """The stored operand is the output or accumulator; every operand is used."""
    store = parts.store
    operands = _by_buffer(parts)
    target = operands[store.buffer]
    term = accumulated_term(store)
    reads_target = any(load.buffer is store.buffer for load in loads_in(store.value))
    updates = any(load.buffer is store.buffer and _same_indices(load.indices, store.indices)
                  for load in loads_in(store.value))
    loc = parts.semantics_loc
    if target.role == "input":
        findings.add(loc, f"{parts.where}: the semantics stores to {target.name}, whose role "
                     "is input; declare it output, or accumulator if it updates itself")
    elif target.role == "accumulator" and not updates:
        findings.add(loc, f"{parts.where}: accumulator {target.name} requires the semantics "
                     f"to update it in place ({target.name}[i, j] += ... or "
                     f"{target.name}[i, j] = f({target.name}[i, j], ...)), got a plain store")
    elif target.role == "output" and reads_target:
        findings.add(loc, f"{parts.where}: the semantics reads its output {target.name}; "
                     "declare it with role accumulator")
    used = {load.buffer for load in loads_in(store.value)} | {store.buffer}
    for operand in parts.operands:
        if operand.buffer not in used:
            findings.add(operand.loc, f"{parts.where}: operand {operand.name} is declared "
                         "but the semantics never uses it")
        elif operand.role != "input" and operand.buffer is not store.buffer:
            findings.add(operand.loc, f"{parts.where}: operand {operand.name} has role "
                         f"{operand.role} but the semantics stores to {target.name}; an "
                         "intrinsic writes one operand")
    if parts.resets and term is None:
        findings.add(parts.resets_loc, f"{parts.where}: 'resets: true' requires an "
                     "accumulating semantics (C[...] += ...)")


def _check_iterators(parts: Parts, findings: Findings) -> None:
    """Each iterator is used; spatial ones index the output, reduce ones do not."""
    store = parts.store
    in_output = _vars_in(store.indices)
    everywhere = in_output | {v for load in loads_in(store.value) for v in _vars_in(load.indices)}
    target = store.buffer.name
    accumulates = accumulated_term(store) is not None
    for iv in parts.iter_vars:
        name = iv.var.name
        if iv.var not in everywhere:
            findings.add(iv.loc, f"{parts.where}: iterator {name} is declared but the "
                         "semantics never uses it")
        elif iv.kind is IterKind.SPATIAL and iv.var not in in_output:
            findings.add(iv.loc, f"{parts.where}: spatial iterator {name} requires to index "
                         f"the output {target}, got no use there; declare it kind: reduce")
        elif iv.kind is IterKind.REDUCE and iv.var in in_output:
            findings.add(iv.loc, f"{parts.where}: reduce iterator {name} indexes the output "
                         f"{target}; declare it kind: spatial")
        elif iv.kind is IterKind.REDUCE and not accumulates:
            findings.add(iv.loc, f"{parts.where}: reduce iterator {name} requires the "
                         f"semantics to accumulate ({target}[...] += ...)")


def _vars_in(indices: tuple[ir.Expr, ...]) -> set[ir.Var]:
    found: set[ir.Var] = set()
    for index in indices:
        ir.post_order_visit(index, lambda n: found.add(n) if isinstance(n, ir.Var) else None)
    return found


def _check_extents(parts: Parts, findings: Findings) -> None:
    """Each operand dimension agrees with the extent of what indexes it."""
    ranges = {iv.var: (0, iv.extent - 1) for iv in parts.iter_vars}
    extents = {iv.var: iv.extent for iv in parts.iter_vars}
    operands = _by_buffer(parts)
    accesses: list[ir.BufferLoad | ir.BufferStore] = [parts.store, *loads_in(parts.store.value)]
    for access in accesses:
        operand = operands.get(access.buffer)
        if operand is None:
            continue
        loc = access.loc or parts.semantics_loc
        for dim, (index, size) in enumerate(zip(access.indices, operand.shape)):
            if isinstance(index, ir.Var) and index in extents:
                if extents[index] != size:
                    findings.add(loc, f"{parts.where}: operand {operand.name} dimension {dim} "
                                 f"requires size {extents[index]} (the extent of iterator "
                                 f"{index.name}, which indexes it), got shape "
                                 f"{list(operand.shape)}")
                continue
            span = index_range(index, ranges)
            if span is not None and (span[0] < 0 or span[1] >= size):
                findings.add(loc, f"{parts.where}: operand {operand.name} dimension {dim} "
                             f"requires indices in [0, {size - 1}], got [{span[0]}, "
                             f"{span[1]}] over the iteration space")


def index_range(expr: ir.Expr, ranges: Mapping[ir.Var, tuple[int, int]]) -> tuple[int, int] | None:
    """The smallest and largest value of an integer index, or None when it cannot tell."""
    if isinstance(expr, ir.IntImm):
        return expr.value, expr.value
    if isinstance(expr, ir.Var):
        return ranges.get(expr)
    if isinstance(expr, ir.Cast) and expr.dtype.is_int:
        return index_range(expr.value, ranges)
    if not isinstance(expr, ir.BinOp):
        return None
    a = index_range(expr.a, ranges)
    b = index_range(expr.b, ranges)
    if a is None or b is None:
        return None
    if expr.op == "add":
        return a[0] + b[0], a[1] + b[1]
    if expr.op == "sub":
        return a[0] - b[1], a[1] - b[0]
    if expr.op == "mul":
        products = [x * y for x in a for y in b]
        return min(products), max(products)
    if expr.op == "floordiv" and b[0] == b[1] and b[0] > 0:
        return a[0] // b[0], a[1] // b[0]
    if expr.op == "floormod" and b[0] == b[1] and b[0] > 0:
        return (a[0] % b[0], a[1] % b[0]) if a[1] - a[0] < b[0] and \
            a[0] % b[0] <= a[1] % b[0] else (0, b[0] - 1)
    return None


def _check_dtypes(parts: Parts, findings: Findings) -> None:
    """An accumulator is at least as wide as its inputs, and of their kind (int or float)."""
    store = parts.store
    term = accumulated_term(store)
    if term is None:
        return
    acc = store.buffer.dtype
    for load in loads_in(term):
        source = load.buffer.dtype
        if source.is_float != acc.is_float:
            findings.add(load.loc or parts.semantics_loc,
                         f"{parts.where}: accumulator {store.buffer.name} ({acc}) requires "
                         f"inputs of its kind ({'float' if acc.is_float else 'integer'}), "
                         f"got {load.buffer.name} of {source}")
        elif source.bits > acc.bits:
            findings.add(load.loc or parts.semantics_loc,
                         f"{parts.where}: accumulator {store.buffer.name} requires a dtype "
                         f"at least as wide as its input {load.buffer.name} ({source}), "
                         f"got {acc}")


def _check_accepts(parts: Parts, findings: Findings) -> None:
    """An operand that accepts another dtype (shifted) is one factor of an accumulated
    product of two converted loads, ``C += acc(X) * acc(Y)``: the only form whose shift the
    engine knows how to compensate (``bias * sum Y``)."""
    for operand in parts.operands:
        if operand.accepts is None:
            continue
        term = accumulated_term(parts.store)
        factors = (term.a, term.b) if isinstance(term, ir.BinOp) and term.op == "mul" else ()
        loads = [f.value for f in factors if isinstance(f, ir.Cast)
                 and isinstance(f.value, ir.BufferLoad) and f.dtype == parts.store.buffer.dtype]
        if len(loads) != 2 or operand.buffer not in {load.buffer for load in loads} \
                or not parts.store.buffer.dtype.is_int:
            findings.add(operand.loc or parts.semantics_loc,
                         f"{parts.where}, operand {operand.name}: accepts requires semantics "
                         f"C[..] += acc({operand.name}[..]) * acc(Y[..]) with an integer "
                         f"accumulator, got {ir.print_node(parts.store.value)}")


def _check_kind(parts: Parts, findings: Findings) -> None:
    """Data-movement intrinsics move one tensor, unchanged, and do not reduce: a load or store
    copies elements (converting or saturating them to the output's dtype at most), a fill
    stores a constant or a scalar operand."""
    if parts.kind == "compute":
        return
    loc = parts.semantics_loc
    if any(iv.kind is IterKind.REDUCE for iv in parts.iter_vars):
        findings.add(loc, f"{parts.where}: a {parts.kind} intrinsic requires spatial "
                     "iterators only, got a reduce iterator")
    tensors = {load.buffer for load in loads_in(parts.store.value) if load.buffer.shape}
    wanted = 0 if parts.kind == "fill" else 1
    if len(tensors) != wanted:
        what = "no tensor (a constant or a scalar operand)" if wanted == 0 else "one tensor"
        findings.add(loc, f"{parts.where}: a {parts.kind} intrinsic requires its semantics "
                     f"to read {what}, got {len(tensors)}")
        return
    moved = _moved(parts.store.value)
    if parts.kind == "fill" and not isinstance(moved, (ir.IntImm, ir.FloatImm, ir.BufferLoad)):
        findings.add(loc, f"{parts.where}: a fill intrinsic requires its semantics to store "
                     f"a constant or a scalar operand ({parts.store.buffer.name}[...] = "
                     "i32(0)), got a computation; declare it kind: compute")
    elif parts.kind != "fill" and not isinstance(moved, ir.BufferLoad):
        findings.add(loc, f"{parts.where}: a {parts.kind} intrinsic requires its semantics to "
                     f"copy elements ({parts.store.buffer.name}[i, j] = src[i, j], converted "
                     "as in i8(src[i, j]) or saturated as in i8(min(max(src[i, j], -128), "
                     "127)) at most), got a computation; declare it kind: compute")


def _moved(value: ir.Expr) -> ir.Expr:
    """What a data-movement statement stores once conversions are set aside: each cast, and
    each clamp to the range of the dtype it converts to (a saturating conversion)."""
    while isinstance(value, ir.Cast):
        clamped = _saturated(value.value, value.dtype)
        value = clamped if clamped is not None else value.value
    return value


def _saturated(expr: ir.Expr, dtype: ir.DType) -> ir.Expr | None:
    """``x`` of ``min(max(x, dtype.min), dtype.max)`` (or ``max(min(x, max), min)``); None
    when ``expr`` is not such a clamp."""
    if not (isinstance(expr, ir.BinOp) and isinstance(expr.a, ir.BinOp)
            and {expr.op, expr.a.op} == {"min", "max"}):
        return None
    bounds = {expr.op: expr.b, expr.a.op: expr.a.b}
    low, high = bounds["max"], bounds["min"]
    if isinstance(low, ir.IntImm) and isinstance(high, ir.IntImm) and \
            (low.value, high.value) == (dtype.min, dtype.max):
        return expr.a.a
    return None
