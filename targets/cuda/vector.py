"""Whether a vectorized copy loop can move its elements as one 16-byte access.

The CUDA schedule splits each copy into shared memory so that its innermost loop is
vectorized and spans 16 bytes. Such a loop becomes one ``uint4`` load and store (or one
``cp.async`` of 16 bytes) when, on both sides of the copy, its elements are consecutive in
memory and the first one is 16-byte aligned for every value of the other loops; otherwise
it stays a scalar loop and the reason goes into the source as a comment. A zero-padded
load (``select(inside, X[...], 0)``: a convolution's halo) moves the same way, as one
zero-filling copy, when ``inside`` is one value over the 16 bytes.

Alignment is proved from the index arithmetic: the loop variable appears in the last index
only, with coefficient 1; the last index with the loop variable at 0 is a multiple of the
lane count (every coefficient and the constant are); and the layout keeps multiples of the
lane count aligned (row strides, or the panel width, pitch and panel stride of a shared
buffer in column panels, are multiples of it). Buffers start 16-byte aligned: cudaMalloc
and the emulation align global memory to 256 bytes, shared arrays are ``__align__(128)``.
"""

from __future__ import annotations

from ir import (
    BinOp,
    BlockRealize,
    BufferLoad,
    BufferStore,
    Expr,
    FloatImm,
    IntImm,
    Mutator,
    Select,
    Var,
    substitute,
)
from ir.arith import Interval, linearize, simplify
from ir.arith.linear import LinearForm
from ir.visitor import post_order_visit
from targets.cuda.memory import SharedLayout

__all__ = ["VECTOR_BYTES", "vector_copy", "vector_store", "without_clamps",
           "zero_filled"]

VECTOR_BYTES = 16


def vector_copy(realize: BlockRealize, lane: Var, lanes: int, env: dict[Var, Expr],
                ranges: dict[Var, Interval], shared: dict) -> tuple[BufferStore, str | None]:
    """(the copy's store, None) when the loop over ``lane`` (``lanes`` iterations) around
    ``realize`` moves 16 consecutive aligned bytes on both sides, else (store, reason).

    ``env`` maps outer block iterators to loop expressions, ``ranges`` gives the loop ranges
    (``lane``'s included) and ``shared`` the layouts of shared buffers.
    """
    block = realize.block
    store = block.body
    if not isinstance(store, BufferStore):
        return store, "the block is not a plain copy"
    filled = zero_filled(store.value)
    if not isinstance(store.value, BufferLoad) and filled is None:
        return store, "the block is not a plain copy"
    load, inside = filled if filled is not None else (store.value, None)
    if store.buffer.dtype != load.buffer.dtype:
        return store, f"it converts {load.buffer.dtype} to {store.buffer.dtype}"
    if lanes * max(store.buffer.dtype.bits // 8, 1) != VECTOR_BYTES:
        return store, f"{lanes} lanes of {store.buffer.dtype} are not {VECTOR_BYTES} bytes"
    if not (realize.predicate.dtype.is_bool and getattr(realize.predicate, "value", 0) == 1):
        return store, "the copy is guarded by a predicate"
    inner = dict(env)
    for iv, binding in zip(block.iter_vars, realize.bindings):
        inner[iv.var] = substitute(binding, env)
    if inside is not None and _uses(simplify(substitute(inside, inner), ranges), lane):
        return store, "its zero padding's condition changes within the 16 bytes"
    for buffer, indices in ((store.buffer, store.indices), (load.buffer, load.indices)):
        placed = tuple(simplify(substitute(i, inner), ranges) for i in indices)
        reason = _access_reason(buffer, placed, lane, lanes, shared.get(buffer))
        if reason is not None:
            return store, f"{buffer.name}: {reason}"
    return store, None


def zero_filled(value: Expr) -> tuple[BufferLoad, Expr] | None:
    """(the load, the condition) when ``value`` is a zero-padded load, ``select(inside,
    X[...], 0)`` (a convolution's halo folded into its copy), else None. Moved as 16 bytes,
    it is one zero-filling copy: ``X``'s bytes where ``inside`` holds, else 16 zeros, and
    nothing is read (``cp.async`` with src-size 0)."""
    if (isinstance(value, Select) and isinstance(value.true_value, BufferLoad)
            and isinstance(value.false_value, (IntImm, FloatImm))
            and value.false_value.value == 0):
        return value.true_value, value.cond
    return None


def without_clamps(indices: tuple[Expr, ...], inside: Expr) -> tuple[Expr, ...]:
    """``indices`` with each clamp ``min(max(e, lo), hi)`` that ``inside`` makes an identity
    replaced by ``e``: a zero-filled load reads only where ``inside`` holds, so the clamps
    that kept its select's load inside the buffer everywhere (a select evaluates both
    values) cost address arithmetic for nothing. ``inside`` proves ``lo <= e <= hi`` when
    it is a conjunction holding comparisons ``f >= 0`` with ``e - lo - f`` and ``hi - e - f``
    non-negative constants."""
    facts = _nonnegative(inside)
    implied = (lambda form: any(not (form - fact).terms and (form - fact).const >= 0
                                for fact in facts))

    class Unclamp(Mutator):
        def visit_BinOp(self, node: BinOp) -> Expr:
            node = self.generic_visit(node)
            inner = node.a if isinstance(node, BinOp) and node.op == "min" else None
            if not (isinstance(inner, BinOp) and inner.op == "max"):
                return node
            value = linearize(inner.a)
            if implied(value - linearize(inner.b)) and implied(linearize(node.b) - value):
                return inner.a
            return node

    return tuple(Unclamp().visit(index) for index in indices)


def _nonnegative(cond: Expr) -> list[LinearForm]:
    """Linear forms ``f`` with ``f >= 0`` wherever ``cond`` holds: one per comparison of
    integers in its conjunction (``a <= b``: ``b - a``; ``a < b``: ``b - a - 1``)."""
    if isinstance(cond, BinOp) and cond.op == "and":
        return _nonnegative(cond.a) + _nonnegative(cond.b)
    if not isinstance(cond, BinOp) or cond.op not in ("le", "lt", "ge", "gt"):
        return []
    low, high = (cond.a, cond.b) if cond.op in ("le", "lt") else (cond.b, cond.a)
    strict = LinearForm.of_const(1 if cond.op in ("lt", "gt") else 0)
    return [linearize(high) - linearize(low) - strict]


def vector_store(realize: BlockRealize, lane: Var, lanes: int, env: dict[Var, Expr],
                 ranges: dict[Var, Interval], shared: dict) -> str | None:
    """None when the loop over ``lane`` around ``realize`` (a computed store, an epilogue's)
    writes 16 consecutive aligned bytes, so each thread can compute its lanes into registers
    and store them at once; else the reason."""
    store = realize.block.body
    if not isinstance(store, BufferStore):
        return "the block is not a single store"
    if lanes * max(store.buffer.dtype.bits // 8, 1) != VECTOR_BYTES:
        return f"{lanes} lanes of {store.buffer.dtype} are not {VECTOR_BYTES} bytes"
    if not (realize.predicate.dtype.is_bool and getattr(realize.predicate, "value", 0) == 1):
        return "the store is guarded by a predicate"
    inner = dict(env)
    for iv, binding in zip(realize.block.iter_vars, realize.bindings):
        inner[iv.var] = substitute(binding, env)
    placed = tuple(simplify(substitute(i, inner), ranges) for i in store.indices)
    reason = _access_reason(store.buffer, placed, lane, lanes, shared.get(store.buffer))
    return None if reason is None else f"{store.buffer.name}: {reason}"


def _access_reason(buffer, indices: tuple[Expr, ...], lane: Var, lanes: int,
                   layout: SharedLayout | None) -> str | None:
    """Why ``buffer[indices]`` over the lanes is not one aligned 16-byte access, or None."""
    if not indices:
        return "a scalar buffer"
    if layout is not None and layout.transposed:
        # Stored with the last two dimensions swapped: the second-last index is the one
        # whose elements are consecutive.
        indices = (*indices[:-2], indices[-1], indices[-2])
    for index in indices[:-1]:
        if any(atom is lane for atom, _ in linearize(index).terms):
            return "the lanes step along a dimension other than the last"
    form = linearize(indices[-1])
    # Other atoms (a step's (ko + 1) % K) are integers the lanes do not change.
    if any(atom is None or (atom is not lane and _uses(atom, lane)) for atom, _ in form.terms):
        return "the last index is not affine in the lanes' loop"
    steps = dict(form.terms)
    if steps.get(lane) != 1:
        return "consecutive lanes are not consecutive elements"
    others = [c for atom, c in form.terms if atom is not lane] + [form.const]
    if any(c % lanes for c in others):
        return f"the first lane's column is not always a multiple of {lanes}"
    if layout is not None and layout.panel is not None:
        sizes = (layout.panel, layout.pitch, layout.panel_stride, *layout.stage_strides)
        if any(s % lanes for s in sizes):
            return f"its panels ({sizes}) are not in multiples of {lanes} elements"
        return None
    strides = layout.strides if layout is not None else buffer.effective_strides
    if strides[-1] != 1:
        return "its last dimension is strided"
    if any(s % lanes for s in strides[:-1]):
        return f"a row stride is not a multiple of {lanes} elements"
    return None


def _uses(expr: Expr, var: Var) -> bool:
    found: list[bool] = []
    post_order_visit(expr, lambda n: found.append(True) if n is var else None)
    return bool(found)
