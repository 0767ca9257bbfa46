"""Statements: stores, loops, blocks, branches and intrinsic calls."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ir import dtypes
from ir.buffer import Buffer
from ir.errors import IRError
from ir.expr import Expr, IntImm, Var, check_indices
from ir.node import LocT, Node, loc_field


def check_extent(who: str, extent: object, var: Var, loc: LocT) -> None:
    """Raise IRError unless ``extent`` is a positive int that ``var`` can count up to."""
    if not isinstance(extent, int) or isinstance(extent, bool) or extent <= 0:
        raise IRError(f"{who} requires a positive constant extent, got {extent!r}", loc)
    # The count past the last value must fit too: loops step their variable to the extent.
    if var.dtype.is_int and extent > var.dtype.max:
        raise IRError(f"{who} requires an extent of at most {var.dtype.max} (its variable is "
                      f"{var.dtype}), got {extent}", loc)


class Stmt(Node):
    """Base of statements."""

    __slots__ = ()


class ForKind(Enum):
    """How a loop's iterations run."""

    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unroll"
    THREAD_BINDING = "thread_binding"


THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z",
               "threadIdx.x", "threadIdx.y", "threadIdx.z", "vthread")


class IterKind(Enum):
    """A block iterator's role: spatial iterators index outputs, reduce iterators accumulate."""

    SPATIAL = "spatial"
    REDUCE = "reduce"


@dataclass(frozen=True, slots=True)
class Range(Node):
    """The half-open interval ``[start, start + extent)``."""

    start: Expr
    extent: Expr
    loc: LocT = loc_field()


@dataclass(frozen=True, slots=True)
class BufferRegion(Node):
    """A rectangular region of a buffer: one Range per dimension."""

    buffer: Buffer
    ranges: tuple[Range, ...]
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        if len(self.ranges) != len(self.buffer.shape):
            raise IRError(f"region of {self.buffer.name} needs {len(self.buffer.shape)} ranges, "
                          f"got {len(self.ranges)}", self.loc)

    @staticmethod
    def full(buffer: Buffer) -> BufferRegion:
        """The region covering all of ``buffer``."""
        return BufferRegion(buffer, tuple(Range(IntImm(0), IntImm(n)) for n in buffer.shape))


@dataclass(frozen=True, slots=True)
class BufferStore(Stmt):
    """``buffer[indices] = value``; ``value`` must have the buffer's dtype."""

    buffer: Buffer
    value: Expr
    indices: tuple[Expr, ...]
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        check_indices(self.buffer, self.indices, self.loc)
        if self.value.dtype != self.buffer.dtype:
            raise IRError(f"store to {self.buffer.name} requires a {self.buffer.dtype} value, "
                          f"got {self.value.dtype}; add a cast", self.loc)


@dataclass(frozen=True, slots=True)
class For(Stmt):
    """``for var in range(extent)``; a thread-bound loop names its ``thread`` tag."""

    var: Var
    extent: int
    body: Stmt
    kind: ForKind = ForKind.SERIAL
    thread: str | None = None
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        check_extent(f"loop {self.var.name}", self.extent, self.var, self.loc)
        if (self.kind is ForKind.THREAD_BINDING) != (self.thread is not None):
            raise IRError(f"loop {self.var.name}: a thread tag goes with kind thread_binding",
                          self.loc)
        if self.thread is not None and self.thread not in THREAD_TAGS:
            raise IRError(f"loop {self.var.name}: unknown thread tag {self.thread!r}; expected "
                          f"one of {', '.join(THREAD_TAGS)}", self.loc)


@dataclass(frozen=True, slots=True)
class SeqStmt(Stmt):
    """Statements run in order."""

    stmts: tuple[Stmt, ...]
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        if len(self.stmts) < 2:
            raise IRError("a statement sequence holds at least two statements; use seq()",
                          self.loc)


@dataclass(frozen=True, slots=True)
class IfThenElse(Stmt):
    """``if cond: then_case else: else_case``."""

    cond: Expr
    then_case: Stmt
    else_case: Stmt | None = None
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        if not self.cond.dtype.is_bool:
            raise IRError(f"if requires a bool condition, got {self.cond.dtype}", self.loc)


@dataclass(frozen=True, slots=True)
class IntrinsicCall(Stmt):
    """An opaque call of a hardware intrinsic on buffer regions (what tensorize emits).

    ``args`` are the operands in the intrinsic's declared order: regions for tensors,
    expressions for scalars.
    """

    intrinsic: str
    args: tuple[BufferRegion | Expr, ...]
    loc: LocT = loc_field()


@dataclass(frozen=True, slots=True)
class IterVar(Node):
    """A block iterator: a variable over ``range(extent)``, spatial or reduce."""

    var: Var
    extent: int
    kind: IterKind = IterKind.SPATIAL
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        check_extent(f"iterator {self.var.name}", self.extent, self.var, self.loc)


@dataclass(frozen=True, slots=True)
class Block(Stmt):
    """A unit of computation, isolated from its surroundings.

    The body refers only to its own iterators and buffers; what it reads and writes is
    declared in ``reads``/``writes``. ``init`` runs at the first iteration of the reduce
    iterators (where all of them are 0). ``alloc_buffers`` are buffers local to the block.
    """

    name: str
    iter_vars: tuple[IterVar, ...]
    reads: tuple[BufferRegion, ...]
    writes: tuple[BufferRegion, ...]
    body: Stmt
    init: Stmt | None = None
    alloc_buffers: tuple[Buffer, ...] = ()
    annotations: tuple[tuple[str, str | int | float], ...] = ()
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        if self.init is not None and not any(iv.kind is IterKind.REDUCE for iv in self.iter_vars):
            raise IRError(f"block {self.name!r} has an init but no reduce iterator", self.loc)


@dataclass(frozen=True, slots=True)
class BlockRealize(Stmt):
    """A block placed in a loop nest: its iterators bound to ``bindings`` under ``predicate``."""

    bindings: tuple[Expr, ...]
    block: Block
    predicate: Expr = IntImm(1, dtypes.bool_)
    loc: LocT = loc_field()

    def __post_init__(self) -> None:
        n_iters = len(self.block.iter_vars)
        if len(self.bindings) != n_iters:
            raise IRError(f"block {self.block.name!r} declares {n_iters} iterators but binds "
                          f"{len(self.bindings)}", self.loc)
        for binding in self.bindings:
            if not binding.dtype.is_int:
                raise IRError(f"block {self.block.name!r}: binding requires an integer, got "
                              f"{binding.dtype}", self.loc)
        if not self.predicate.dtype.is_bool:
            raise IRError(f"block {self.block.name!r}: predicate requires bool, got "
                          f"{self.predicate.dtype}", self.loc)


TRUE = IntImm(1, dtypes.bool_)


def seq(*stmts: Stmt) -> Stmt:
    """A statement sequence, flattened; a single statement stands for itself."""
    flat: list[Stmt] = []
    for stmt in stmts:
        if isinstance(stmt, SeqStmt):
            flat.extend(stmt.stmts)
        else:
            flat.append(stmt)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(tuple(flat))
