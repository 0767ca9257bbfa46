"""The hardware-order reference of a whole kernel: what a target computes, bit for bit, when
a float reduction block runs on an intrinsic that states its ``accumulation``.

A reduction block ``O[o] += cast(X[x]) * cast(Y[y])`` (zero init) is a set of GEMMs
(:func:`split_gemms`): its spatial iterators that index X alone are the rows, those that
index Y alone the columns, the others (indexing both, or neither) a batch; its reduce
iterators, fused in the order of the engine's mapping, the GEMM's K. Each GEMM is then
computed as the register-blocked schedule adds its products
(:func:`intrinsics.oracle.hardware_gemm`: K in ascending groups of the intrinsic's extent,
each group in the stated order) and bounded against float64
(:func:`intrinsics.oracle.gemm_bound`). :func:`expected_outputs` does this for every output
a run writes, or says why the reference cannot follow the kernel (an epilogue after the
GEMM, an index it cannot evaluate), and the output keeps the tolerance check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from intrinsics import Registry
from intrinsics.checks import accumulated_term
from intrinsics.model import Accumulation, Intrinsic
from intrinsics.oracle import gemm_bound, hardware_gemm
from ir import (BinOp, Block, BlockRealize, BufferLoad, BufferStore, Cast, Expr, FloatImm,
                IntImm, IterKind, IterVar, PrimFunc, Var)
from ir.function import make_root
from tensorize.engine import BlockOutcome, Tensorized
from tensorize.match import match_block
from tensorize.match.explain import format_result
from tensorize.schedule import tree
from tensorize.validate import Expected, HardwareOrder

Arrays = Mapping[str, np.ndarray]

# Inputs of at most this many significant bits multiply exactly in float32, and the oracle's
# float64 sums round to float32 as one rounding does (intrinsics.oracle.hardware_model).
_EXACT_BITS = 12


class Unfollowable(Exception):
    """The hardware-order reference cannot follow this block (the message says why)."""


@dataclass(frozen=True)
class GemmSplit:
    """A reduction block as GEMMs: per batch point an (M, K) matrix ``a`` and a (K, N)
    matrix ``b``; :meth:`assemble` places their products in the block's output buffer."""

    output: str
    a: tuple[np.ndarray, ...]
    b: tuple[np.ndarray, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    where: tuple[np.ndarray, ...]
    grid: tuple[int, ...]

    def assemble(self, products: Sequence[np.ndarray], dtype: np.dtype | None = None
                 ) -> np.ndarray:
        """The block's output from one (M, N) product per batch point, in ``a``'s order
        (in ``dtype``, by default the output buffer's)."""
        out = np.zeros(self.shape, self.dtype if dtype is None else dtype)
        out[self.where] = np.stack(products).reshape(self.grid)
        return out


def expected_outputs(func: PrimFunc, result: Tensorized, inputs: Arrays, outputs: Arrays,
                     registry: Registry) -> Expected:
    """What a run of ``result`` (``func`` tensorized) on ``inputs`` is checked against:
    ``outputs`` (the reference executor's) and, for each output written by a block on an
    intrinsic with an ``accumulation``, its hardware-order reference, or why there is none
    (the output is then checked within tolerance)."""
    exact: dict[str, HardwareOrder] = {}
    reasons: list[str] = []
    values: dict[str, np.ndarray] | None = None
    for outcome in result.tensorized:
        intrinsic = registry.get(outcome.intrinsic or "")
        if intrinsic.accumulation is None:
            continue
        try:
            values = values if values is not None else buffer_values(func, inputs)
            name, order = block_reference(func, outcome, intrinsic, values, registry)
        except Unfollowable as why:
            reasons.append(f"block {outcome.block!r} ({intrinsic.name}): {why}")
            continue
        exact[name] = order
    why_not = "; ".join(reasons)
    # Integer outputs are compared exactly anyway; a float one the reference could not
    # follow says why it was not.
    return Expected(outputs, exact, {name: why_not for name, array in outputs.items()
                                     if name not in exact and why_not
                                     and array.dtype.kind not in "iub"})


def block_reference(func: PrimFunc, outcome: BlockOutcome, intrinsic: Intrinsic,
                    values: Arrays, registry: Registry) -> tuple[str, HardwareOrder]:
    """The output the block of ``outcome`` writes and its hardware-order reference on
    ``intrinsic`` (``values``: every buffer of ``func`` after a run, :func:`buffer_values`).
    Raises Unfollowable when the reference cannot follow the block."""
    block = outcome.block
    rule = intrinsic.accumulation
    if rule is None:
        raise Unfollowable(f"{intrinsic.name} states no accumulation")
    if intrinsic.output.dtype.name != "float32":
        raise Unfollowable(f"{intrinsic.name} accumulates in {intrinsic.output.dtype}; the "
                           "reference models float32 sums")
    _realize(func, block)
    _check_last_use(func, block)
    order = k_order(func, block, intrinsic, registry, outcome.mapping)
    split = split_gemms(func, block, values, order)
    if split.output not in {p.name for p in func.params}:
        raise Unfollowable(f"its output {split.output} is no parameter of {func.name}")
    group = math.prod(iv.extent for iv in intrinsic.iter_vars if iv.kind is IterKind.REDUCE)
    acc = intrinsic.output.dtype.numpy
    hardware = [hardware_gemm(a, b, group, rule, acc) for a, b in zip(split.a, split.b)]
    exact, bound = zip(*(gemm_bound(a, b, rule, acc) for a, b in zip(split.a, split.b)))
    wide = np.dtype(np.float64)
    return split.output, HardwareOrder(split.assemble(hardware), split.assemble(exact, wide),
                                       split.assemble(bound, wide), describe(rule),
                                       intrinsic.name)


def describe(rule: Accumulation) -> str:
    """A rule in words: "pairwise, round to odd, flush"."""
    rounding = {"odd": "round to odd", "nearest_even": "round to nearest even"}[rule.rounding]
    denormals = "flush" if rule.denormals == "flush" else "denormals kept"
    return f"{rule.order}, {rounding}, {denormals}"


def buffer_values(func: PrimFunc, inputs: Arrays) -> dict[str, np.ndarray]:
    """Every parameter and intermediate buffer of ``func`` after the reference executor
    runs it on ``inputs``: the intermediates become outputs of a copy of ``func`` (which
    runs only where there are any: the inputs alone are read otherwise)."""
    from targets import host

    if not func.allocs:
        return dict(inputs)
    exposed = PrimFunc(func.name, func.params + func.allocs, make_root(func.root.body))
    written = host.run(exposed, {name: inputs[name] for name in inputs
                                 if name in {p.name for p in func.params}})
    return {**inputs, **written}


def k_order(func: PrimFunc, block: str, intrinsic: Intrinsic, registry: Registry,
            mapping: str) -> tuple[str, ...]:
    """The block's reduce iterators, outermost first, as the engine's mapping (its report
    line, ``mapping``) fuses them onto the intrinsic's reduce iterator; Unfollowable where
    it leaves one a loop around the calls, whose order the reference does not model."""
    found = match_block(func, block, intrinsic, registry)
    matches = [m for m in found if mapping in format_result([m])] \
        if isinstance(found, list) else []
    if not matches:
        raise Unfollowable(f"no mapping of {intrinsic.name} the matcher finds is {mapping!r}")
    reduce = {iv.var.name for iv in _realize(func, block).block.iter_vars
              if iv.kind is IterKind.REDUCE}
    if any(reduce & set(m.outer) for m in matches):
        raise Unfollowable("a reduce iterator stays a loop around the calls")
    target = next(iv.var.name for iv in intrinsic.iter_vars if iv.kind is IterKind.REDUCE)
    orders = {m.iter_map[target] for m in matches}
    if len(orders) != 1:
        raise Unfollowable("its mappings fuse the reduce iterators in different orders")
    return orders.pop()


def split_gemms(func: PrimFunc, block: str, values: Arrays,
                order: Sequence[str] | None = None) -> GemmSplit:
    """Block ``block`` of ``func`` as GEMMs on ``values`` (its buffers by name), its reduce
    iterators fused into K in ``order`` (names; by default as declared). Raises
    Unfollowable for a block that is not ``O[o] += cast(X[x]) * cast(Y[y])`` from zero
    over its whole iteration space, each index an integer expression of its iterators."""
    realize = _realize(func, block)
    body = realize.block.body
    term = accumulated_term(body) if isinstance(body, BufferStore) else None
    if term is None or not isinstance(term, BinOp) or term.op != "mul":
        raise Unfollowable("its body is no product added to its output")
    _check_zero_init(realize.block, body)
    x, y = (_widened_load(factor, body) for factor in (term.a, term.b))
    ivs = realize.block.iter_vars
    reduce = _reduce_order(ivs, order)
    axes = _Axes(ivs, x, y, reduce)
    a = axes.gather(values, x, axes.rows).reshape(axes.batch_size, axes.m, axes.k)
    b = axes.gather(values, y, axes.cols).reshape(axes.batch_size, axes.n, axes.k)
    where = axes.indices(body.indices, axes.batch + axes.rows + axes.cols)
    out = body.buffer
    _check_covers(where, out.shape)
    grid = tuple(iv.extent for iv in axes.batch + axes.rows + axes.cols)
    return GemmSplit(out.name, tuple(a), tuple(np.swapaxes(b, 1, 2)), out.shape,
                     np.dtype(out.dtype.numpy), where, grid)


def _realize(func: PrimFunc, block: str) -> BlockRealize:
    """The realize of ``block``, which must cover its iteration space unconditionally."""
    located = tree.find_block(func, block)
    if located is None:
        raise Unfollowable(f"{func.name} has no block {block!r}")
    realize = located.node
    if not (isinstance(realize.predicate, IntImm) and realize.predicate.value == 1):
        raise Unfollowable("it runs under a predicate")
    return realize


def _check_zero_init(block: Block, body: BufferStore) -> None:
    """The block's init stores zero in its output: the hardware's accumulator starts at 0."""
    init = block.init
    if not (isinstance(init, BufferStore) and init.buffer is body.buffer
            and isinstance(init.value, (FloatImm, IntImm)) and init.value.value == 0):
        raise Unfollowable("it does not start its output from zero")


def _widened_load(factor: Expr, body: BufferStore) -> BufferLoad:
    """A factor that is a load of inputs the accumulator's dtype multiplies exactly."""
    if not (isinstance(factor, Cast) and isinstance(factor.value, BufferLoad)
            and factor.dtype == body.buffer.dtype):
        raise Unfollowable("a factor is no load cast to the accumulator's dtype")
    load = factor.value
    if not load.buffer.dtype.is_float:
        raise Unfollowable(f"{load.buffer.name} is no float buffer")
    if ml_dtypes.finfo(load.buffer.dtype.numpy).nmant + 1 > _EXACT_BITS:
        raise Unfollowable(f"{load.buffer.name} ({load.buffer.dtype}) has more than "
                           f"{_EXACT_BITS} significant bits, whose products the reference "
                           "does not model exactly")
    return load


def _reduce_order(ivs: Sequence[IterVar], order: Sequence[str] | None) -> list[IterVar]:
    """The reduce iterators of ``ivs`` in ``order`` (names; None: as declared)."""
    reduce = [iv for iv in ivs if iv.kind is IterKind.REDUCE]
    if order is None:
        return reduce
    by_name = {iv.var.name: iv for iv in reduce}
    if sorted(order) != sorted(by_name):
        raise Unfollowable(f"K fuses ({', '.join(order)}), not its reduce iterators "
                           f"({', '.join(by_name)})")
    return [by_name[name] for name in order]


class _Axes:
    """The block's iterators as GEMM axes, one numpy axis each in the order batch, rows,
    columns, K: rows index X alone, columns Y alone, the batch both or neither."""

    def __init__(self, ivs: Sequence[IterVar], x: BufferLoad, y: BufferLoad,
                 reduce: list[IterVar]) -> None:
        spatial = [iv for iv in ivs if iv.kind is IterKind.SPATIAL]
        in_x, in_y = _used(x.indices), _used(y.indices)
        self.rows = [iv for iv in spatial if iv.var in in_x and iv.var not in in_y]
        self.cols = [iv for iv in spatial if iv.var in in_y and iv.var not in in_x]
        self.batch = [iv for iv in spatial if iv not in self.rows and iv not in self.cols]
        self.reduce = reduce
        self.batch_size = math.prod(iv.extent for iv in self.batch)
        self.m = math.prod(iv.extent for iv in self.rows)
        self.n = math.prod(iv.extent for iv in self.cols)
        self.k = math.prod(iv.extent for iv in reduce)

    def gather(self, values: Arrays, load: BufferLoad, own: list[IterVar]) -> np.ndarray:
        """``load``'s values over batch x ``own`` x K."""
        source = values.get(load.buffer.name)
        if source is None:
            raise Unfollowable(f"it reads {load.buffer.name}, a buffer local to a block")
        return np.asarray(source)[self.indices(load.indices, self.batch + own + self.reduce)]

    def indices(self, exprs: Sequence[Expr], ivs: list[IterVar]) -> tuple[np.ndarray, ...]:
        """Each index expression evaluated over the grid of ``ivs`` (one axis each)."""
        shape = tuple(iv.extent for iv in ivs)
        env = {iv.var: np.arange(iv.extent).reshape([-1 if n == d else 1
                                                     for d in range(len(ivs))])
               for n, iv in enumerate(ivs)}
        return tuple(np.broadcast_to(_evaluate(e, env), shape) for e in exprs)


def _used(exprs: Sequence[Expr]) -> set[Var]:
    """The variables ``exprs`` read."""
    found: set[Var] = set()
    stack = list(exprs)
    while stack:
        expr = stack.pop()
        if isinstance(expr, Var):
            found.add(expr)
        elif isinstance(expr, BinOp):
            stack += [expr.a, expr.b]
        elif isinstance(expr, Cast):
            stack.append(expr.value)
    return found


_INDEX_OPS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "floordiv": np.floor_divide,
    "floormod": np.mod, "min": np.minimum, "max": np.maximum,
}


def _evaluate(expr: Expr, env: Mapping[Var, np.ndarray]) -> np.ndarray:
    """An integer index expression over the iterators' grid (numpy floors as the IR's
    floordiv and floormod do)."""
    if isinstance(expr, Var) and expr in env:
        return env[expr]
    if isinstance(expr, IntImm):
        return np.asarray(expr.value)
    if isinstance(expr, Cast) and expr.dtype.is_int:
        return _evaluate(expr.value, env)
    if isinstance(expr, BinOp) and expr.op in _INDEX_OPS:
        return _INDEX_OPS[expr.op](_evaluate(expr.a, env), _evaluate(expr.b, env))
    raise Unfollowable(f"an index it cannot evaluate: {type(expr).__name__}")


def _check_covers(where: tuple[np.ndarray, ...], shape: tuple[int, ...]) -> None:
    """The output indices write each element of the output exactly once."""
    flat = np.ravel_multi_index(tuple(np.ravel(w) for w in where), shape, mode="clip") \
        if where else np.zeros(1, np.int64)
    in_range = all(np.all((w >= 0) & (w < extent)) for w, extent in zip(where, shape))
    if not in_range or np.unique(flat).size != math.prod(shape) or flat.size != math.prod(shape):
        raise Unfollowable("it does not write each element of its output once")


def _check_last_use(func: PrimFunc, block: str) -> None:
    """No block after ``block`` reads its output or writes what it reads: its output is the
    kernel's (no epilogue), its operands' values at the end are the ones it read."""
    blocks = [s.block for s, _ in tree.walk_stmts(func) if isinstance(s, BlockRealize)
              and s is not func.body]
    names = [b.name for b in blocks]
    own = blocks[names.index(block)]
    reads = {r.buffer.name for r in own.reads}
    writes = {w.buffer.name for w in own.writes}
    for later in blocks[names.index(block) + 1:]:
        if writes & {r.buffer.name for r in later.reads}:
            raise Unfollowable(f"block {later.name!r} after it reads its output (an "
                               "epilogue the reference does not compute in order)")
        if (reads | writes) & {w.buffer.name for w in later.writes}:
            raise Unfollowable(f"block {later.name!r} after it writes a buffer it uses")
