"""What the host backend does to a function before emitting code: lower intrinsic calls to
their semantics, and list the storage the function needs and the parameters it writes."""

from __future__ import annotations

from collections.abc import Callable

from ir.buffer import Buffer
from ir.errors import ExecutionError
from ir.function import PrimFunc
from ir.stmt import Block, BufferStore, IntrinsicCall, Stmt
from ir.visitor import Mutator, Visitor

LowerIntrinsic = Callable[[IntrinsicCall], Stmt]

# A lowering may itself produce intrinsic calls (a fill inside a compute); deeper than this is
# taken to be a lowering that expands into itself.
_MAX_LOWERING_DEPTH = 8


def lower_intrinsics(func: PrimFunc, lower: LowerIntrinsic | None) -> PrimFunc:
    """``func`` with every IntrinsicCall replaced by ``lower(call)``; unchanged without a hook."""
    if lower is None:
        return func
    return PrimFunc(func.name, func.params, _Lowerer(lower, 0).visit(func.body), func.loc)


class _Lowerer(Mutator):
    def __init__(self, lower: LowerIntrinsic, depth: int) -> None:
        self.lower = lower
        self.depth = depth

    def visit_IntrinsicCall(self, call: IntrinsicCall) -> Stmt:
        if self.depth >= _MAX_LOWERING_DEPTH:
            raise ExecutionError(f"lowering intrinsic {call.intrinsic!r} requires its result to "
                                 f"stop calling intrinsics, still calling them "
                                 f"{_MAX_LOWERING_DEPTH} levels deep", call.loc)
        lowered = self.lower(call)
        if not isinstance(lowered, Stmt):
            raise ExecutionError(f"lower_intrinsic requires a Stmt for intrinsic "
                                 f"{call.intrinsic!r}, got {type(lowered).__name__}", call.loc)
        return _Lowerer(self.lower, self.depth + 1).visit(lowered)


def storage(func: PrimFunc) -> tuple[Buffer, ...]:
    """Every buffer the function's code addresses: parameters first, then every block's
    allocations in program order (the root block's intermediates first)."""
    found: list[Buffer] = list(func.params)

    class _Allocs(Visitor):
        def visit_Block(self, block: Block) -> None:
            for buffer in block.alloc_buffers:
                if not any(buffer is known for known in found):
                    found.append(buffer)
            self.generic_visit(block)

    _Allocs().visit(func.body)
    return tuple(found)


def written_params(func: PrimFunc) -> tuple[Buffer, ...]:
    """The parameters some store writes, in parameter order."""
    stored: set[int] = set()

    class _Stores(Visitor):
        def visit_BufferStore(self, store: BufferStore) -> None:
            stored.add(id(store.buffer))
            self.generic_visit(store)

    _Stores().visit(func.body)
    return tuple(p for p in func.params if id(p) in stored)
