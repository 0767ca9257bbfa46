"""An intrinsic's semantics computed directly in numpy, independently of any IR executor.

GEMM-like semantics, ``T[t] (+)= cast(X[x]) * cast(Y[y])`` with every index a plain iterator,
become one ``numpy.einsum`` whose subscripts say which iterators index which operand. Anything
else is evaluated elementwise over the whole iteration space with numpy broadcasting (one axis
per iterator), then summed over the reduce iterators. Integer arithmetic wraps in its dtype,
as the IR defines it.

A float intrinsic that states its ``accumulation`` (the order of its products, their
rounding, its denormals) has a second model, :func:`hardware_model`: what the hardware
computes, bit for bit, one rounded addition per product in the stated order;
:func:`accumulate` is that one step, shared with references of whole kernels.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping

import ml_dtypes
import numpy as np

import ir
from intrinsics.checks import accumulated_term
from intrinsics.model import Accumulation, Intrinsic
from ir import IterKind

Arrays = Mapping[str, np.ndarray]


class UnsupportedSemantics(Exception):
    """The semantics uses something the numpy model does not know (the check is skipped)."""


def numpy_model(intrinsic: Intrinsic, inputs: Arrays) -> np.ndarray:
    """The output operand's value after one execution on ``inputs`` (by operand name)."""
    store = intrinsic.semantics
    out = intrinsic.output
    term = accumulated_term(store)
    start = np.zeros(out.shape, out.dtype.numpy) if intrinsic.resets \
        else np.array(inputs[out.name], dtype=out.dtype.numpy)
    if term is not None and intrinsic.reduce_vars():
        with np.errstate(all="ignore"):
            return _wrap_add(start, _reduced_term(intrinsic, term, inputs))
    grid = _Grid(intrinsic, inputs, start)
    with np.errstate(all="ignore"):
        values = np.broadcast_to(grid.evaluate(store.value), grid.shape)
    result = start.copy()
    result[grid.indices(store.indices)] = values
    return result


def hardware_model(intrinsic: Intrinsic, inputs: Arrays) -> np.ndarray:
    """The output operand after one execution as the hardware computes it, by the
    intrinsic's ``accumulation``: the products of its reduce iterator's values added to the
    accumulator one at a time, in the stated order, each sum rounded once (and denormals
    flushed where stated); ``pairwise``, the values taken two at a time in ascending order,
    each pair's sum (:func:`pair_sum`) added. Exact where each product and each sum's
    float64 value round to the accumulator's dtype without double rounding: inputs of at
    most 12 significant bits (bfloat16, float16) into float32. UnsupportedSemantics for
    semantics that is not one product of loads indexed by plain iterators."""
    rule = intrinsic.accumulation
    term = accumulated_term(intrinsic.semantics)
    pattern = None if term is None else einsum_subscripts(intrinsic, term)
    if rule is None or pattern is None:
        raise UnsupportedSemantics("no stated accumulation of a product of plain loads")
    subscripts, loads, casts = pattern
    reduce_var = next(iv for iv in intrinsic.iter_vars if iv.kind is IterKind.REDUCE)
    letter = string.ascii_letters[intrinsic.iter_vars.index(reduce_var)]
    x, y = (_read(np.asarray(inputs[_name(intrinsic, load)]), rule).astype(cast.numpy)
            .astype(np.float64) for load, cast in zip(loads, casts))
    # Every product on its own, exact in float64: an einsum that sums over nothing.
    products = np.einsum(subscripts + letter, x, y)
    out = intrinsic.output
    acc = np.zeros(out.shape, out.dtype.numpy) if intrinsic.resets \
        else _read(np.array(inputs[out.name], dtype=out.dtype.numpy), rule)
    if rule.order == "pairwise":
        # Consecutive pairs in ascending order (BFMMLA's 4 k values: two BFDOT steps).
        for step in range(0, reduce_var.extent, 2):
            acc = accumulate(acc, pair_sum(products[..., step], products[..., step + 1],
                                           acc.dtype, rule), rule)
        return acc
    steps = range(reduce_var.extent)
    for step in (steps if rule.order == "ascending" else reversed(steps)):
        acc = accumulate(acc, products[..., step], rule)
    return acc


def hardware_gemm(a: np.ndarray, b: np.ndarray, group: int, rule: Accumulation,
                  acc_dtype: type = np.float32) -> np.ndarray:
    """``a @ b`` as a register-blocked kernel computes it with an intrinsic that adds
    ``group`` k values a call by ``rule``: every output from a zero accumulator, the k
    groups in ascending order, within a group the products in the stated order, each one
    rounded addition (:func:`accumulate`), or under ``pairwise`` its pairs' sums
    (:func:`pair_sum`) in ascending order; a k past the end (padding) adds nothing."""
    if rule.denormals == "flush":
        a, b = flush_denormals(a), flush_denormals(b)
    wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
    k = a.shape[1]
    acc = np.zeros((a.shape[0], b.shape[1]), acc_dtype)
    for start in range(0, k, group):
        steps = range(start, min(start + group, k))
        products = [np.outer(wide_a[:, step], wide_b[step]) for step in steps]
        if rule.order == "pairwise":
            # A k past the end is a zero product: rounded, it adds exactly nothing.
            if len(products) % 2:
                products.append(np.zeros_like(products[0]))
            for first, second in zip(products[::2], products[1::2]):
                acc = accumulate(acc, pair_sum(first, second, acc.dtype, rule), rule)
            continue
        for product in (products if rule.order == "ascending" else reversed(products)):
            acc = accumulate(acc, product, rule)
    return acc


def gemm_bound(a: np.ndarray, b: np.ndarray, rule: Accumulation,
               acc_dtype: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """The exact ``a @ b`` (float64: every product of two inputs of at most 12 significant
    bits is exact there) and, per element, how far :func:`hardware_gemm`'s result may lie
    from it: the recursive-sum bound ``gamma_K * sum |x * y|`` (``gamma_K = K u / (1 - K
    u)``, u the accumulator's unit roundoff, a whole epsilon under round to odd; Higham,
    *Accuracy and Stability of Numerical Algorithms*, 4.2) and, under ``flush``, the
    products of the denormal inputs the hardware reads as zero and a smallest normal for
    each result it may flush (two a k pair and one more: ``2K + 1``)."""
    wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
    abs_a, abs_b = np.abs(wide_a), np.abs(wide_b)
    k = a.shape[1]
    info = ml_dtypes.finfo(acc_dtype)
    unit = float(info.eps) / (1 if rule.rounding == "odd" else 2)
    bound = k * unit / (1 - k * unit) * (abs_a @ abs_b)
    if rule.denormals == "flush":
        dropped = _denormal_part(a) @ abs_b + abs_a @ _denormal_part(b)
        bound = bound + dropped + (2 * k + 1) * float(info.smallest_normal)
    return wide_a @ wide_b, bound


def _denormal_part(values: np.ndarray) -> np.ndarray:
    """The magnitudes of ``values``' denormals (in their own dtype), every other value
    zero: what :func:`flush_denormals` drops."""
    wide = np.abs(values.astype(np.float64))
    return np.where(wide < float(ml_dtypes.finfo(values.dtype).smallest_normal), wide, 0.0)


def accumulate(acc: np.ndarray, product: np.ndarray, rule: Accumulation) -> np.ndarray:
    """``acc + product`` rounded once to ``acc``'s dtype by ``rule.rounding``, a denormal
    result flushed to zero where ``rule`` says so. ``product`` is exact (float64)."""
    return _written(_rounded(acc.astype(np.float64), product, acc.dtype, rule), rule)


def pair_sum(first: np.ndarray, second: np.ndarray, dtype: np.dtype | type,
             rule: Accumulation) -> np.ndarray:
    """The ``pairwise`` order's inner step, as float64 holding values of ``dtype``: each
    exact product rounded to ``dtype`` (and flushed), then their sum rounded (and flushed)."""
    zero = np.zeros_like(first)
    one, two = (_written(_rounded(p, zero, dtype, rule), rule).astype(np.float64)
                for p in (first, second))
    return _written(_rounded(one, two, dtype, rule), rule).astype(np.float64)


def _rounded(x: np.ndarray, y: np.ndarray, dtype: np.dtype | type,
             rule: Accumulation) -> np.ndarray:
    """``x + y`` (float64 values) rounded once to ``dtype`` by ``rule.rounding``. The
    float64 sum ``s`` and its exact error ``e`` (Knuth's TwoSum: ``x + y == s + e``) give
    the result without double rounding: for ``nearest_even``, ``s`` alone rounds as the exact
    sum does when each addend has at most 24 significant bits above the other's lowest
    (the inputs here: 12-bit values, their 24-bit products, float32 sums); for ``odd``, the
    exact sum truncated toward zero, its last bit set when inexact, and an overflow is
    infinity."""
    with np.errstate(all="ignore"):
        total = x + y
        nearest = total.astype(dtype)
        if rule.rounding == "nearest_even":
            return nearest
        virtual = total - x
        error = (x - (total - virtual)) + (y - virtual)
        # What the exact sum has beyond ``nearest``: its sign says which side it lies on.
        rest = (total - nearest.astype(np.float64)) + error
    info = ml_dtypes.finfo(dtype)
    # Truncation never overflows: a sum below the power of two just past the largest finite
    # value is that value (odd already), one at or past it infinity.
    below = np.isinf(nearest) & (np.abs(total) < 2.0 ** info.maxexp)
    nearest = np.where(below, np.copysign(np.float64(info.max), total), nearest).astype(dtype)
    beyond = (rest != 0) & ~np.isnan(rest) & np.isfinite(nearest)
    # A nonzero sum that rounds to zero lies beyond the smallest denormal of its sign.
    tiny = np.copysign(np.float64(info.smallest_subnormal), rest)
    nearest = np.where(beyond & (nearest == 0), tiny, nearest).astype(dtype)
    inward = beyond & (np.sign(rest) != np.sign(nearest.astype(np.float64)))
    uint = _UINT[np.dtype(dtype).itemsize]
    bits = nearest.view(uint)
    # One step toward zero on the bit pattern (sign and magnitude) is nextafter(v, 0).
    bits = np.where(inward, bits - 1, bits)
    bits = np.where(beyond, bits | 1, bits)
    return np.asarray(bits, uint).view(dtype)


_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def flush_denormals(values: np.ndarray) -> np.ndarray:
    """``values`` with every denormal replaced by a zero of its sign (DAZ, FTZ)."""
    tiny = float(ml_dtypes.finfo(values.dtype).smallest_normal)
    wide = values.astype(np.float64)
    denormal = (wide != 0) & (np.abs(wide) < tiny)
    if not denormal.any():
        return values
    return np.where(denormal, np.copysign(0.0, wide), wide).astype(values.dtype)


def _read(values: np.ndarray, rule: Accumulation) -> np.ndarray:
    """An input as the hardware reads it: denormals as zero under ``flush``."""
    return flush_denormals(values) if rule.denormals == "flush" and \
        values.dtype.kind in "fV" else values


def _written(values: np.ndarray, rule: Accumulation) -> np.ndarray:
    """A result as the hardware writes it: a denormal as zero under ``flush``."""
    return flush_denormals(values) if rule.denormals == "flush" else values


def einsum_subscripts(intrinsic: Intrinsic, term: ir.Expr) -> tuple[str, list[ir.BufferLoad],
                                                                      list[ir.DType]] | None:
    """For a product of two (cast) loads indexed by plain iterators: the einsum subscripts,
    the two loads and the dtype each is cast to; None for any other term."""
    if not isinstance(term, ir.BinOp) or term.op != "mul":
        return None
    letters = {iv.var: string.ascii_letters[n] for n, iv in enumerate(intrinsic.iter_vars)}
    loads, casts, subscripts = [], [], []
    for factor in (term.a, term.b):
        cast_to = factor.dtype
        if isinstance(factor, ir.Cast):
            factor = factor.value
        if not isinstance(factor, ir.BufferLoad) or \
                not all(isinstance(i, ir.Var) and i in letters for i in factor.indices):
            return None
        loads.append(factor)
        casts.append(cast_to)
        subscripts.append("".join(letters[i] for i in factor.indices))  # type: ignore[index]
    store = intrinsic.semantics
    if not all(isinstance(i, ir.Var) and i in letters for i in store.indices):
        return None
    output = "".join(letters[i] for i in store.indices)  # type: ignore[index]
    return f"{subscripts[0]},{subscripts[1]}->{output}", loads, casts


def _reduced_term(intrinsic: Intrinsic, term: ir.Expr, inputs: Arrays) -> np.ndarray:
    """The accumulated term summed over the reduce iterators, in the accumulator's dtype."""
    acc = intrinsic.output.dtype.numpy
    pattern = einsum_subscripts(intrinsic, term)
    if pattern is not None:
        subscripts, loads, casts = pattern
        x, y = (np.asarray(inputs[_name(intrinsic, load)]).astype(cast.numpy)
                for load, cast in zip(loads, casts))
        return np.einsum(subscripts, x, y, dtype=acc, casting="unsafe").astype(acc)
    grid = _Grid(intrinsic, inputs, None)
    values = np.broadcast_to(grid.evaluate(term), grid.shape)
    reduce_axes = tuple(n for n, iv in enumerate(intrinsic.iter_vars)
                        if iv.kind is IterKind.REDUCE)
    summed = values.sum(axis=reduce_axes, dtype=acc)
    # The sum is over the grid's spatial axes, in declared order; place it where the store
    # indexes (a transpose when the output lists its iterators in another order).
    spatial = [iv.var for iv in intrinsic.iter_vars if iv.kind is IterKind.SPATIAL]
    order = [spatial.index(i) for i in intrinsic.semantics.indices if isinstance(i, ir.Var)]
    if len(order) != len(spatial):
        raise UnsupportedSemantics("the output is indexed by expressions of iterators")
    return np.transpose(summed, order)


def _wrap_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.add(a, b.astype(a.dtype), dtype=a.dtype)


def _name(intrinsic: Intrinsic, load: ir.BufferLoad) -> str:
    for operand in intrinsic.operands:
        if operand.buffer is load.buffer:
            return operand.name
    raise UnsupportedSemantics(f"the semantics reads {load.buffer.name}, which is no operand")


_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "floordiv": np.floor_divide, "floormod": np.mod, "min": np.minimum, "max": np.maximum,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal, "and": np.logical_and, "or": np.logical_or,
}
_MATH: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "abs": np.abs,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "rint": np.rint,
}


class _Grid:
    """Elementwise evaluation with one broadcast axis per iterator, in declared order."""

    def __init__(self, intrinsic: Intrinsic, inputs: Arrays, output: np.ndarray | None) -> None:
        self.intrinsic = intrinsic
        self.inputs = inputs
        self.output = output
        count = len(intrinsic.iter_vars)
        self.shape = tuple(iv.extent for iv in intrinsic.iter_vars)
        self.axes = {}
        for n, iv in enumerate(intrinsic.iter_vars):
            shape = [1] * count
            shape[n] = iv.extent
            self.axes[iv.var] = np.arange(iv.extent, dtype=np.int64).reshape(shape)

    def indices(self, exprs: tuple[ir.Expr, ...]) -> tuple[np.ndarray, ...]:
        """Index arrays for an access, broadcast over the grid."""
        return tuple(np.broadcast_to(self.evaluate(e), self.shape).astype(np.int64)
                     for e in exprs)

    def evaluate(self, expr: ir.Expr) -> np.ndarray:
        """``expr``'s value at every point of the grid (broadcastable to it)."""
        method = getattr(self, "_" + type(expr).__name__, None)
        if method is None:
            raise UnsupportedSemantics(f"no numpy model for {type(expr).__name__}")
        return method(expr)

    def _IntImm(self, expr: ir.IntImm) -> np.ndarray:
        return np.array(expr.value, dtype=expr.dtype.numpy)

    def _FloatImm(self, expr: ir.FloatImm) -> np.ndarray:
        return np.array(expr.value, dtype=expr.dtype.numpy)

    def _Var(self, expr: ir.Var) -> np.ndarray:
        if expr not in self.axes:
            raise UnsupportedSemantics(f"variable {expr.name} is no iterator")
        return self.axes[expr].astype(expr.dtype.numpy)

    def _BufferLoad(self, expr: ir.BufferLoad) -> np.ndarray:
        name = _name(self.intrinsic, expr)
        source = self.output if self.output is not None and \
            expr.buffer is self.intrinsic.output.buffer else np.asarray(self.inputs[name])
        if not expr.indices:
            return np.asarray(source)[...]
        return source[self.indices(expr.indices)]

    def _Cast(self, expr: ir.Cast) -> np.ndarray:
        # numpy's conversions are the IR's: integers keep their low bits, floats round to
        # nearest even, float to integer truncates toward zero.
        return self.evaluate(expr.value).astype(expr.dtype.numpy)

    def _BinOp(self, expr: ir.BinOp) -> np.ndarray:
        a, b = self.evaluate(expr.a), self.evaluate(expr.b)
        result = _BINARY[expr.op](a, b)
        return np.asarray(result).astype(expr.dtype.numpy)

    def _Not(self, expr: ir.Not) -> np.ndarray:
        return np.logical_not(self.evaluate(expr.a))

    def _Select(self, expr: ir.Select) -> np.ndarray:
        return np.where(self.evaluate(expr.cond), self.evaluate(expr.true_value),
                        self.evaluate(expr.false_value)).astype(expr.dtype.numpy)

    def _Call(self, expr: ir.Call) -> np.ndarray:
        function = _MATH.get(expr.name)
        if function is None:
            raise UnsupportedSemantics(f"no numpy model for function {expr.name}")
        return function(self.evaluate(expr.args[0])).astype(expr.dtype.numpy)
