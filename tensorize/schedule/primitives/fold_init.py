"""fold_init: let a resetting intrinsic do a tensorized block's init.

After ``tensorize`` with an accumulating intrinsic, the tile's init (zeroing the accumulator
tile) stays as plain stores in the outer block's ``init``. A machine whose instruction can
overwrite instead of accumulate (the NPU's ``gemm ... reset``, described as a variant with
``resets: true``) needs no separate zeroing: where the reduction starts, call the resetting
variant instead. The block's body becomes ``if <all reduce iterators are 0>: reset call
else: accumulate call`` and its init goes away. That is exact: the init ran in precisely the
block instances where the condition holds, right before the call, and zeroing then adding
is overwriting.
"""

from __future__ import annotations

from intrinsics import Intrinsic, Registry
from ir import (BlockRealize, BufferRegion, BufferStore, Expr, For, IfThenElse, IntImm,
                IntrinsicCall, IterKind, PrimFunc, Stmt, and_, eq)
from ir.arith import Interval, simplify
from tensorize.schedule import tree
from tensorize.schedule.check import arg_check, check, fail, get_block
from tensorize.schedule.handles import BlockRV

__all__ = ["fold_init"]

_PRIMITIVE = "fold_init"


def fold_init(func: PrimFunc, block: BlockRV, reset: str | Intrinsic, *,
              registry: Registry | None = None) -> tuple[PrimFunc, None]:
    """Replace the init of a tensorized block by calls of ``reset``, the resetting variant of
    the intrinsic the block calls, wherever the block's reduce iterators are all 0.

    Preconditions: the block's body is one intrinsic call; ``reset`` resets its accumulator
    and has the same operands as the called intrinsic (shapes, dtypes, roles); the init only
    stores zeros, exactly once into each element of the call's accumulator region.
    ``reset`` is an Intrinsic, or the name of one in ``registry`` (a Schedule passes the
    registry it was made with; its trace records the name either way). Returns the new
    function.
    """
    found = get_block(func, block, _PRIMITIVE)
    realize: BlockRealize = found.node
    blk = realize.block
    call = blk.body
    check(blk.init is not None, _PRIMITIVE, f"block {blk.name!r} has no init to fold")
    check(isinstance(call, IntrinsicCall), _PRIMITIVE,
          f"block {blk.name!r} must be tensorized (its body one intrinsic call), got a "
          f"{type(call).__name__}")
    if isinstance(reset, str):
        if registry is None:
            fail(_PRIMITIVE, f"argument 'reset': expected an Intrinsic, or a name with the "
                             f"registry that declares it (Schedule(func, registry=...)), got "
                             f"{reset!r}")
        arg_check(reset in registry, _PRIMITIVE, "reset", "the name of a known intrinsic", reset)
        reset = registry.get(reset)
    arg_check(isinstance(reset, Intrinsic), _PRIMITIVE, "reset", "an intrinsic or its name",
              reset)
    check(reset.resets, _PRIMITIVE, f"{reset.name} does not reset its accumulator "
                                    "(resets: false), so it cannot stand for the init")
    check(_fits(reset, call), _PRIMITIVE,
          f"{reset.name} has other operands than the call of {call.intrinsic} (shapes and "
          "dtypes must agree region by region); it must be its resetting variant")
    position = next(n for n, o in enumerate(reset.operands)
                    if o.role in ("accumulator", "output"))
    region = call.args[position]
    _check_init_zeroes(blk.name, blk.init, region)
    reduce_vars = [iv.var for iv in blk.iter_vars if iv.kind is IterKind.REDUCE]
    first: Expr = eq(reduce_vars[0], 0)
    for var in reduce_vars[1:]:
        first = and_(first, eq(var, 0))
    body = IfThenElse(first, IntrinsicCall(reset.name, call.args, call.loc), call)
    new_block = blk.__class__(blk.name, blk.iter_vars, blk.reads, blk.writes, body, None,
                              blk.alloc_buffers, blk.annotations, blk.loc)
    new = BlockRealize(realize.bindings, new_block, realize.predicate, realize.loc)
    return tree.replace_stmt(func, realize, new), None


def _fits(reset: Intrinsic, call: IntrinsicCall) -> bool:
    """True when each of the call's arguments has the shape and dtype of ``reset``'s
    operand in its place (a region's extents of more than 1, in order)."""
    if len(reset.operands) != len(call.args):
        return False
    for operand, arg in zip(reset.operands, call.args):
        if operand.is_scalar:
            if isinstance(arg, BufferRegion):
                return False
            continue
        if not isinstance(arg, BufferRegion) or arg.buffer.dtype != operand.dtype:
            return False
        extents = [simplify(r.extent) for r in arg.ranges]
        wide = tuple(e.value for e in extents if isinstance(e, IntImm) and e.value > 1)
        if wide != tuple(d for d in operand.shape if d > 1):
            return False
    return True


def _check_init_zeroes(name: str, init: Stmt, region) -> None:
    """The init must be a loop nest storing 0 once into each element of ``region``."""
    loops: list[For] = []
    stmt = init
    while isinstance(stmt, For):
        loops.append(stmt)
        stmt = stmt.body
    if not (isinstance(stmt, BufferStore) and isinstance(stmt.value, IntImm)
            and stmt.value.value == 0 and stmt.buffer is region.buffer):
        fail(_PRIMITIVE, f"the init of block {name!r} must be loops around one store of 0 into "
                         f"{region.buffer.name}")
    ranges = {loop.var: Interval(0, loop.extent - 1) for loop in loops}
    used = []
    for index, rng in zip(stmt.indices, region.ranges):
        offset = simplify(index - rng.start, ranges)
        extent = simplify(rng.extent)
        if isinstance(offset, IntImm) and offset.value == 0 and extent == IntImm(1):
            continue
        loop = next((l for l in loops if l.var is offset), None)
        if loop is None or not (isinstance(extent, IntImm) and loop.extent == extent.value):
            fail(_PRIMITIVE, f"the init of block {name!r} does not zero exactly the "
                             f"accumulator region of its call (index {index} against the "
                             f"region starting at {rng.start})")
        used.append(loop)
    check(len(used) == len(loops) and len({id(l) for l in used}) == len(loops), _PRIMITIVE,
          f"the init of block {name!r} stores some element of the accumulator region more "
          "than once")


