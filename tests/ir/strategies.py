"""Hypothesis strategies for random, valid and runnable PrimFuncs.

``prim_funcs()`` draws a function of one to a few blocks in sequence. Each block computes one
output buffer (an intermediate that later blocks may read, or for the last block the output
parameter) over spatial iterators matching the output's shape, optionally with reduce
iterators and an init. Loop nests permute and split the iterators (a split that does not
divide adds a predicate), and loops get random kinds. Values mix loads, casts, selects,
min/max, floordiv/floormod and if/else.

Every load index stays in bounds: a buffer dimension is indexed by an iterator whose extent
equals it, by a constant inside it, or by ``floormod(affine expression, extent)``. Integer
arithmetic wraps and divisors are non-zero constants, so every generated function runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

from ir import (
    TRUE,
    BinOp,
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    Cast,
    Expr,
    FloatImm,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    IterKind,
    IterVar,
    Not,
    PrimFunc,
    Select,
    Stmt,
    Var,
    dtypes,
    make_root,
    seq,
)
from ir.dtypes import DType
from ir.regions import infer_block_regions

# Name hints drawn from small pools so that clashes (which the printer must resolve) happen.
_LOOP_NAMES = ("i", "j", "k", "ax0", "i_1")
_ITER_NAMES = ("vi", "vj", "vk", "v")
_BUFFER_NAMES = ("A", "B", "X", "buf", "A_1")
_ARITH = ("add", "sub", "mul", "min", "max")
_COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")


@dataclass
class _Block:
    """What an expression inside a block may use."""

    spatial: list[IterVar]
    reduce: list[IterVar] = field(default_factory=list)

    @property
    def iterators(self) -> list[IterVar]:
        return [*self.spatial, *self.reduce]


def _const(draw: st.DrawFn, dt: DType) -> Expr:
    if dt.is_float:
        return FloatImm(draw(st.sampled_from((0.0, 1.0, -2.0, 0.5, 3.25))), dt)
    if dt.is_bool:
        return IntImm(draw(st.integers(0, 1)), dt)
    low, high = max(dt.min, -100), min(dt.max, 100)
    return IntImm(draw(st.integers(low, high)), dt)


def _index(draw: st.DrawFn, block: _Block, extent: int) -> Expr:
    """An in-bounds index into a dimension of size ``extent``."""
    matching = [iv for iv in block.iterators if iv.extent == extent]
    choice = draw(st.integers(0, 3))
    if matching and choice <= 1:
        return draw(st.sampled_from(matching)).var
    if choice == 2 or not block.iterators:
        return IntImm(draw(st.integers(0, extent - 1)), dtypes.int32)
    iv = draw(st.sampled_from(block.iterators))
    scale = draw(st.integers(1, 3))
    offset = draw(st.integers(0, 4))
    affine: Expr = iv.var if scale == 1 else BinOp("mul", iv.var, IntImm(scale))
    if offset:
        affine = BinOp("add", affine, IntImm(offset))
    return BinOp("floormod", affine, IntImm(extent))


def _load(draw: st.DrawFn, block: _Block, sources: list[Buffer]) -> Expr:
    buffer = draw(st.sampled_from(sources))
    return BufferLoad(buffer, tuple(_index(draw, block, n) for n in buffer.shape))


def _as_dtype(value: Expr, dt: DType) -> Expr:
    """``value`` converted to ``dt``; never float to integer, whose out-of-range results
    differ between machines."""
    if value.dtype == dt or (value.dtype.is_float and not dt.is_float):
        return value if value.dtype == dt else _const_of(dt)
    return Cast(dt, value)


def _const_of(dt: DType) -> Expr:
    return FloatImm(1.0, dt) if dt.is_float else IntImm(1, dt)


def _condition(draw: st.DrawFn, block: _Block, sources: list[Buffer], depth: int) -> Expr:
    """A bool expression over iterators and loaded values."""
    if block.iterators and draw(st.booleans()):
        iv = draw(st.sampled_from(block.iterators))
        bound = IntImm(draw(st.integers(0, iv.extent)))
        return BinOp(draw(st.sampled_from(_COMPARE)), iv.var, bound)
    dt = draw(st.sampled_from(tuple(b.dtype for b in sources)))
    a = _value(draw, block, sources, dt, depth - 1)
    cond = BinOp(draw(st.sampled_from(_COMPARE)), a, _const(draw, dt))
    if draw(st.integers(0, 3)) == 0:
        return Not(cond)
    return cond


def _value(draw: st.DrawFn, block: _Block, sources: list[Buffer], dt: DType,
           depth: int) -> Expr:
    """A value of dtype ``dt``: loads, constants and operators, ``depth`` levels deep."""
    kind = draw(st.integers(0, 7)) if depth > 0 else draw(st.integers(0, 1))
    if kind == 0:
        return _as_dtype(_load(draw, block, sources), dt)
    if kind == 1:
        return _const(draw, dt)
    if kind <= 3:
        op = draw(st.sampled_from(_ARITH))
        a = _value(draw, block, sources, dt, depth - 1)
        return BinOp(op, a, _value(draw, block, sources, dt, depth - 1))
    if kind == 4 and dt.is_int:
        op = draw(st.sampled_from(("floordiv", "floormod")))
        divisor = draw(st.sampled_from((1, 2, 3, 7, -3) if dt.kind == "int" else (1, 2, 3, 7)))
        return BinOp(op, _value(draw, block, sources, dt, depth - 1), IntImm(divisor, dt))
    if kind == 4:
        return BinOp("div", _value(draw, block, sources, dt, depth - 1), FloatImm(2.0, dt))
    if kind == 5:
        return Select(_condition(draw, block, sources, depth),
                      _value(draw, block, sources, dt, depth - 1),
                      _value(draw, block, sources, dt, depth - 1))
    if kind == 6:
        other = draw(st.sampled_from(tuple(b.dtype for b in sources)))
        return _as_dtype(_value(draw, block, sources, other, depth - 1), dt)
    if block.iterators and dt.is_int:
        iv = draw(st.sampled_from(block.iterators))
        return _as_dtype(iv.var, dt)
    return _as_dtype(_load(draw, block, sources), dt)


_Loop = tuple[Var, int, ForKind, str | None]


def _loops(draw: st.DrawFn, iter_vars: list[IterVar],
           kinds: tuple[ForKind, ...]) -> tuple[list[_Loop], list[Expr], Expr]:
    """A loop nest covering the iterators: permuted, some split; bindings and predicate."""
    loops: list[_Loop] = []
    bindings: list[Expr] = []
    guards: list[Expr] = []
    for iv in iter_vars:
        factor = draw(st.sampled_from((0, 0, 2, 3, 4)))
        if factor and iv.extent > 1:
            outer = Var(draw(st.sampled_from(_LOOP_NAMES)))
            inner = Var(draw(st.sampled_from(_LOOP_NAMES)))
            outer_extent = -(-iv.extent // factor)
            loops.append((outer, outer_extent, ForKind.SERIAL, None))
            loops.append((inner, factor, ForKind.SERIAL, None))
            binding = BinOp("add", BinOp("mul", outer, IntImm(factor)), inner)
            if iv.extent % factor:
                guards.append(BinOp("lt", binding, IntImm(iv.extent)))
            bindings.append(binding)
        else:
            var = Var(draw(st.sampled_from(_LOOP_NAMES)))
            loops.append((var, iv.extent, ForKind.SERIAL, None))
            bindings.append(var)
    order = draw(st.permutations(range(len(loops))))
    nest = []
    for position in order:
        var, extent, _, _ = loops[position]
        kind = draw(st.sampled_from(kinds))
        thread = "threadIdx.x" if kind is ForKind.THREAD_BINDING else None
        nest.append((var, extent, kind, thread))
    predicate: Expr = TRUE
    for guard in guards:
        predicate = guard if predicate is TRUE else BinOp("and", predicate, guard)
    return nest, bindings, predicate


def _shape(draw: st.DrawFn, max_dim: int) -> tuple[int, ...]:
    return tuple(draw(st.lists(st.integers(1, max_dim), min_size=1, max_size=3)))


@st.composite
def _block(draw: st.DrawFn, name: str, output: Buffer, sources: list[Buffer],
           kinds: tuple[ForKind, ...], max_dim: int) -> Stmt:
    spatial = [IterVar(Var(draw(st.sampled_from(_ITER_NAMES))), n, IterKind.SPATIAL)
               for n in output.shape]
    reduce = [IterVar(Var(draw(st.sampled_from(_ITER_NAMES))), draw(st.integers(1, max_dim)),
                      IterKind.REDUCE)
              for _ in range(draw(st.integers(0, 2)))]
    block = _Block(spatial, reduce)
    indices = tuple(iv.var for iv in spatial)
    dt = output.dtype
    init = None
    if reduce:
        init = BufferStore(output, _const(draw, dt), indices)
        combine = draw(st.sampled_from(("add", "max", "min")))
        update = _value(draw, block, sources, dt, 2)
        body: Stmt = BufferStore(
            output, BinOp(combine, BufferLoad(output, indices), update), indices)
    elif draw(st.integers(0, 3)) == 0:
        body = IfThenElse(_condition(draw, block, sources, 1),
                          BufferStore(output, _value(draw, block, sources, dt, 2), indices),
                          BufferStore(output, _value(draw, block, sources, dt, 2), indices))
    else:
        body = BufferStore(output, _value(draw, block, sources, dt, 3), indices)
    iter_vars = [*spatial, *reduce]
    order = draw(st.permutations(iter_vars))
    nest, bindings, predicate = _loops(draw, list(order), kinds)
    by_iter = dict(zip((id(iv) for iv in order), bindings))
    draft = Block(name, tuple(iter_vars), (), (), body, init)
    reads, writes = infer_block_regions(draft)
    realized: Stmt = BlockRealize(
        tuple(by_iter[id(iv)] for iv in iter_vars),
        Block(name, tuple(iter_vars), tuple(reads), tuple(writes), body, init), predicate)
    for var, extent, kind, thread in reversed(nest):
        realized = For(var, extent, realized, kind, thread)
    return realized


@st.composite
def prim_funcs(draw: st.DrawFn, max_blocks: int = 3,
               dtype_names: tuple[str, ...] = ("int8", "int32", "float32"),
               max_dim: int = 6, thread_bindings: bool = False) -> PrimFunc:
    """A random valid, runnable PrimFunc.

    ``dtype_names`` are the buffer element types to draw from; ``max_dim`` bounds every
    extent; ``thread_bindings`` allows GPU thread-bound loops among the loop kinds.
    """
    kinds = (ForKind.SERIAL, ForKind.SERIAL, ForKind.PARALLEL, ForKind.UNROLLED,
             ForKind.VECTORIZED)
    if thread_bindings:
        kinds += (ForKind.THREAD_BINDING,)
    element_types = [dtypes.dtype(name) for name in dtype_names]
    names: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(_BUFFER_NAMES))
        names.append(name if name not in names else f"{name}{len(names)}")
    inputs = [Buffer(name, _shape(draw, max_dim), draw(st.sampled_from(element_types)))
              for name in names]
    n_blocks = draw(st.integers(1, max_blocks))
    sources = list(inputs)
    allocs: list[Buffer] = []
    stmts: list[Stmt] = []
    for index in range(n_blocks):
        last = index == n_blocks - 1
        name = f"out{len(inputs)}" if last else draw(st.sampled_from(_BUFFER_NAMES))
        output = Buffer(name, _shape(draw, max_dim), draw(st.sampled_from(element_types)))
        stmts.append(draw(_block(f"b{index}", output, sources, kinds, max_dim)))
        sources.append(output)
        if not last:
            allocs.append(output)
    return PrimFunc("f", (*inputs, output), make_root(seq(*stmts), tuple(allocs)))
