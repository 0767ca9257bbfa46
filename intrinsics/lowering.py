"""Lowering an intrinsic call to plain loops that compute its semantics.

An executor that cannot run the hardware instruction runs this instead: the loops of the
intrinsic's iteration space around its semantics, with each operand's accesses moved onto
the region of the kernel buffer the call passes for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import ir
from intrinsics.model import Intrinsic, Operand
from ir import IterKind


def lower_call(call: ir.IntrinsicCall, intrinsic: Intrinsic) -> ir.Stmt:
    """Loops computing ``intrinsic``'s semantics on the regions ``call`` passes.

    ``call.args`` are in the intrinsic's operand order: a BufferRegion per tensor operand
    (its non-unit extents equal the operand's shape, in order; extra unit dimensions index
    at their start) and an expression per scalar operand. A resetting intrinsic zeroes its
    output region first.
    """
    who = f"call of {intrinsic.name}"
    if call.intrinsic != intrinsic.name:
        raise ir.IRError(f"{who} requires the call to name it, got {call.intrinsic}", call.loc)
    if len(call.args) != len(intrinsic.operands):
        raise ir.IRError(f"{who} requires {len(intrinsic.operands)} arguments "
                         f"({', '.join(o.name for o in intrinsic.operands)}), got "
                         f"{len(call.args)}", call.loc)
    accesses = {o.buffer: _Access.of(o, arg, who, call.loc)
                for o, arg in zip(intrinsic.operands, call.args)}
    loop_vars = {iv.var: ir.Var(iv.var.name) for iv in intrinsic.iter_vars}
    body = _Retarget(accesses).visit(ir.substitute(intrinsic.semantics, loop_vars))
    nest = _loops(body, intrinsic.iter_vars, loop_vars)
    if not intrinsic.resets:
        return nest
    return ir.seq(_zero_output(intrinsic, accesses), nest)


def lowerer(lookup: Callable[[str], Intrinsic]) -> Callable[[ir.IntrinsicCall], ir.Stmt]:
    """A ``lower_intrinsic`` hook for executors: finds the intrinsic by name and lowers."""

    def lower(call: ir.IntrinsicCall) -> ir.Stmt:
        return lower_call(call, lookup(call.intrinsic))

    return lower


class _Access:
    """How one operand's accesses land in the kernel: a region's buffer and start offsets,
    or, for a scalar operand, the expression passed for it."""

    def __init__(self, buffer: ir.Buffer | None, starts: tuple[ir.Expr, ...],
                 dims: tuple[int, ...], value: ir.Expr | None) -> None:
        self.buffer = buffer
        self.starts = starts
        self.dims = dims
        self.value = value

    @staticmethod
    def of(operand: Operand, arg: ir.BufferRegion | ir.Expr, who: str,
           loc: ir.SourceLoc | None) -> _Access:
        if operand.is_scalar:
            if isinstance(arg, ir.BufferRegion):
                value: ir.Expr = ir.BufferLoad(arg.buffer, tuple(r.start for r in arg.ranges))
            else:
                value = arg
            return _Access(None, (), (), ir.cast(operand.dtype, value))
        if not isinstance(arg, ir.BufferRegion):
            raise ir.IRError(f"{who} requires a buffer region for operand {operand.name}, got "
                             f"{type(arg).__name__}", loc)
        if arg.buffer.dtype != operand.dtype:
            raise ir.IRError(f"{who} requires operand {operand.name} of {operand.dtype}, got "
                             f"{arg.buffer.name} of {arg.buffer.dtype}", loc)
        dims = _dim_map(operand, arg, who, loc)
        return _Access(arg.buffer, tuple(r.start for r in arg.ranges), dims, None)

    def indices(self, operand_indices: tuple[ir.Expr, ...]) -> tuple[ir.Expr, ...]:
        """Kernel-buffer indices for an access the semantics makes with ``operand_indices``."""
        result = list(self.starts)
        for index, dim in zip(operand_indices, self.dims):
            result[dim] = _add(self.starts[dim], index)
        return tuple(result)


def _add(start: ir.Expr, index: ir.Expr) -> ir.Expr:
    if isinstance(start, ir.IntImm) and start.value == 0:
        return index
    return start + index


def _dim_map(operand: Operand, region: ir.BufferRegion, who: str,
             loc: ir.SourceLoc | None) -> tuple[int, ...]:
    """For each operand dimension, the region dimension it runs along (matched from the
    right; region dimensions of extent 1 left over are indexed at their start)."""
    extents = []
    for rng in region.ranges:
        if not isinstance(rng.extent, ir.IntImm):
            raise ir.IRError(f"{who} requires constant region extents for operand "
                             f"{operand.name}, got {rng.extent}", loc)
        extents.append(rng.extent.value)
    dims: list[int] = []
    r = len(extents) - 1
    for size in reversed(operand.shape):
        while r >= 0 and extents[r] != size and extents[r] == 1:
            r -= 1
        if r < 0 or extents[r] != size:
            raise ir.IRError(f"{who} requires a region of shape {list(operand.shape)} for "
                             f"operand {operand.name}, got extents {extents} of "
                             f"{region.buffer.name}", loc)
        dims.append(r)
        r -= 1
    if any(extents[i] != 1 for i in range(r + 1)):
        raise ir.IRError(f"{who} requires a region of shape {list(operand.shape)} for operand "
                         f"{operand.name}, got extents {extents} of {region.buffer.name}", loc)
    return tuple(reversed(dims))


class _Retarget(ir.Mutator):
    """Moves operand accesses onto the kernel's regions and scalar operands onto values."""

    def __init__(self, accesses: Mapping[ir.Buffer, _Access]) -> None:
        self.accesses = accesses

    def visit_BufferLoad(self, load: ir.BufferLoad) -> ir.Expr:
        indices = self.visit(load.indices)
        access = self.accesses.get(load.buffer)
        if access is None:
            return load if indices is load.indices else ir.BufferLoad(load.buffer, indices)
        if access.value is not None:
            return access.value
        return ir.BufferLoad(access.buffer, access.indices(indices), load.loc)  # type: ignore

    def visit_BufferStore(self, store: ir.BufferStore) -> ir.Stmt:
        value = self.visit(store.value)
        indices = self.visit(store.indices)
        access = self.accesses[store.buffer]
        return ir.BufferStore(access.buffer, value, access.indices(indices),  # type: ignore
                              store.loc)


def _loops(body: ir.Stmt, iter_vars: tuple[ir.IterVar, ...],
           loop_vars: Mapping[ir.Var, ir.Var]) -> ir.Stmt:
    for iv in reversed(iter_vars):
        body = ir.For(loop_vars[iv.var], iv.extent, body)
    return body


def _zero_output(intrinsic: Intrinsic, accesses: Mapping[ir.Buffer, _Access]) -> ir.Stmt:
    """Loops over the spatial iterators storing zero where the semantics stores."""
    store = intrinsic.semantics
    spatial = tuple(iv for iv in intrinsic.iter_vars if iv.kind is IterKind.SPATIAL)
    loop_vars = {iv.var: ir.Var(iv.var.name) for iv in spatial}
    zero = ir.BufferStore(store.buffer, ir.const(0, store.buffer.dtype), store.indices)
    body = _Retarget(accesses).visit(ir.substitute(zero, loop_vars))
    return _loops(body, spatial, loop_vars)
