"""The TE-like builder: describe each tensor by a formula, get a PrimFunc.

.. code-block:: python

    from ir import te

    A = te.placeholder((64, 32), "float32", "A")
    B = te.placeholder((32, 16), "float32", "B")
    k = te.reduce_axis(32, "k")
    C = te.compute((64, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    func = te.create_prim_func([A, B, C], "matmul")

``create_prim_func`` gives the function the script syntax would give for the same kernel: one
block per compute, named after it, under a loop per iterator (spatial iterators for the
output's dimensions, then the reduce axes, in that order), each iterator bound to its loop;
a reduction's block starts its output at the reduction's identity in ``init``. Computes not
listed become the function's intermediate buffers.

Python's ``and``/``or``/``not`` and chained comparisons (``1 <= i < n``) cannot build
expressions: write ``ir.and_(1 <= i, i < n)`` instead.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ir import dtypes
from ir.buffer import Buffer
from ir.dtypes import DType
from ir.errors import KernelError
from ir.expr import BinOp, BufferLoad, Expr, ExprLike, Var, as_expr, const, select
from ir.function import PrimFunc, make_root
from ir.stmt import Block, BlockRealize, BufferStore, For, IterKind, IterVar, Stmt, seq
from ir.regions import infer_block_regions
from ir.verify import verify
from ir.visitor import Mutator, Visitor

__all__ = ["ReduceAxis", "Reduction", "Tensor", "compute", "create_prim_func", "if_then_else",
           "max", "min", "placeholder", "reduce_axis", "sum"]

class Tensor:
    """A placeholder (an input) or the result of a compute: a buffer and how to fill it.

    Index it to read it inside a compute: ``A[i, j]`` is a load of ``A``'s buffer.
    """

    def __init__(self, buffer: Buffer, op: _ComputeOp | None = None) -> None:
        self.buffer = buffer
        self.op = op

    @property
    def name(self) -> str:
        return self.buffer.name

    @property
    def shape(self) -> tuple[int, ...]:
        return self.buffer.shape

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype

    def __getitem__(self, indices: ExprLike | tuple[ExprLike, ...]) -> BufferLoad:
        return self.buffer[indices]

    def __repr__(self) -> str:
        kind = "compute" if self.op is not None else "placeholder"
        return f"Tensor({kind} {self.name}, {self.shape}, {self.dtype})"


@dataclass(frozen=True, slots=True, eq=False)
class ReduceAxis(Var):
    """An axis a reduction runs over, taking the values ``0 .. extent - 1``.

    It is a variable, so it indexes and takes part in arithmetic (``h + rh``); each function
    create_prim_func builds gets its own iterator for it.
    """

    extent: int = field(kw_only=True)

    def __repr__(self) -> str:
        return f"ReduceAxis({self.name}, {self.extent})"


@dataclass(frozen=True, eq=False)
class Reduction:
    """What ``sum``/``max``/``min`` return: ``combiner`` (``add``, ``max`` or ``min``) folds
    ``source`` over ``axes``, starting from ``init``. Only a compute's whole result may be one.
    """

    combiner: str
    source: Expr
    axes: tuple[ReduceAxis, ...]
    init: Expr


@dataclass(frozen=True, eq=False)
class _ComputeOp:
    """A compute's formula over its own placeholder variables (``axes`` then the reduce axes
    of ``value``); create_prim_func gives each function fresh variables."""

    axes: tuple[Var, ...]
    value: Expr | Reduction
    inputs: tuple[Tensor, ...]


# Tensors by buffer, so a compute can find the tensors its formula reads. Weak: a tensor no
# one holds any more cannot be read by a later compute.
_TENSORS: weakref.WeakValueDictionary[Buffer, Tensor] = weakref.WeakValueDictionary()


def placeholder(shape: int | Sequence[int], dtype: DType | str = "float32",
                name: str = "placeholder") -> Tensor:
    """An input tensor of the given shape and dtype."""
    tensor = Tensor(Buffer(name, _shape(shape, name), dtypes.dtype(dtype)))
    _TENSORS[tensor.buffer] = tensor
    return tensor


def reduce_axis(extent: int, name: str = "k") -> ReduceAxis:
    """An axis for ``sum``/``max``/``min`` to reduce over, of ``extent`` values."""
    if not isinstance(extent, int) or isinstance(extent, bool) or extent <= 0:
        raise KernelError(f"reduce_axis {name} requires a positive int extent, got {extent!r}")
    return ReduceAxis(name, extent=extent)


def sum(expr: ExprLike, axis: ReduceAxis | Sequence[ReduceAxis]) -> Reduction:
    """The sum of ``expr`` over ``axis`` (one reduce axis or several); starts at 0."""
    source = as_expr(expr)
    return Reduction("add", source, _axes(axis, "sum"), const(0, source.dtype))


def max(expr: ExprLike, axis: ReduceAxis | Sequence[ReduceAxis]) -> Reduction:
    """The largest ``expr`` over ``axis``; starts at the dtype's smallest value.

    For the larger of two values, use :func:`ir.max_`.
    """
    source = as_expr(expr)
    return Reduction("max", source, _axes(axis, "max"), const(source.dtype.min, source.dtype))


def min(expr: ExprLike, axis: ReduceAxis | Sequence[ReduceAxis]) -> Reduction:
    """The smallest ``expr`` over ``axis``; starts at the dtype's largest value.

    For the smaller of two values, use :func:`ir.min_`.
    """
    source = as_expr(expr)
    return Reduction("min", source, _axes(axis, "min"), const(source.dtype.max, source.dtype))


def if_then_else(cond: Expr, true_value: ExprLike, false_value: ExprLike) -> Expr:
    """``true_value`` where ``cond`` holds, else ``false_value`` (a Select: both evaluated)."""
    return select(cond, true_value, false_value)


def compute(shape: int | Sequence[int], fcompute: Callable[..., ExprLike | Reduction],
            name: str = "compute", dtype: DType | str | None = None) -> Tensor:
    """A tensor whose element at ``(i, j, ...)`` is ``fcompute(i, j, ...)``.

    ``fcompute`` gets one integer variable per dimension and returns an expression, or a
    reduction (``sum``/``max``/``min``) as its whole result. ``dtype`` defaults to the
    expression's; when given, the expression must have it.
    """
    dims = _shape(shape, name)
    axes = tuple(Var(n) for n in _axis_names(fcompute, len(dims), name))
    result = fcompute(*axes)
    wanted = dtypes.dtype(dtype) if dtype is not None else None
    value = result.source if isinstance(result, Reduction) else as_expr(result, wanted)
    out_dtype = wanted if wanted is not None else value.dtype
    if value.dtype != out_dtype:
        raise KernelError(f"compute {name} requires its expression to have dtype {out_dtype}, "
                          f"got {value.dtype}; add a cast (ir.cast)")
    reduce_axes = result.axes if isinstance(result, Reduction) else ()
    _check_free_vars(name, value, axes, reduce_axes)
    op = _ComputeOp(axes, result if isinstance(result, Reduction) else value,
                    _inputs(name, value))
    tensor = Tensor(Buffer(name, dims, out_dtype), op)
    _TENSORS[tensor.buffer] = tensor
    return tensor


def create_prim_func(tensors: Sequence[Tensor], name: str = "main") -> PrimFunc:
    """A PrimFunc whose parameters are ``tensors`` in order, computing each listed compute.

    Every placeholder a listed compute reads must itself be listed; computes that are read
    but not listed become intermediate buffers. Blocks run in dependence order.
    """
    for tensor in tensors:
        if not isinstance(tensor, Tensor):
            raise KernelError(f"create_prim_func requires Tensors, got {type(tensor).__name__}")
    listed = {id(t.buffer) for t in tensors}
    order = _schedule_order(tensors, listed)
    blocks = [_block_nest(t) for t in order]
    allocs = tuple(t.buffer for t in order if id(t.buffer) not in listed)
    if not blocks:
        raise KernelError(f"create_prim_func {name} requires at least one compute, got only "
                          "placeholders")
    func = PrimFunc(name, tuple(t.buffer for t in tensors), make_root(seq(*blocks), allocs))
    verify(func)
    return func


# -- helpers ---------------------------------------------------------------------------------


def _shape(shape: int | Sequence[int], name: str) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    if not dims or any(not isinstance(n, int) or isinstance(n, bool) or n <= 0 for n in dims):
        raise KernelError(f"tensor {name} requires a shape of positive ints, got {shape!r}")
    return dims


def _axes(axis: ReduceAxis | Sequence[ReduceAxis], who: str) -> tuple[ReduceAxis, ...]:
    if isinstance(axis, ReduceAxis):
        axes: tuple[object, ...] = (axis,)
    else:
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else ()
    if not axes or not all(isinstance(a, ReduceAxis) for a in axes):
        raise KernelError(f"{who} requires axis= to be reduce_axis values, got {axis!r}; for "
                          f"the {who} of two values use ir.{who}_")
    return axes  # type: ignore[return-value]


def _axis_names(fcompute: Callable[..., object], ndim: int, name: str) -> list[str]:
    """The names of ``fcompute``'s parameters (i, j, ...), checked against the shape."""
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        return [f"i{d}" for d in range(ndim)]
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return [f"i{d}" for d in range(ndim)]
    if len(params) != ndim:
        raise KernelError(f"compute {name} requires a function of {ndim} indices (one per "
                          f"dimension), got one of {len(params)}")
    return [p.name for p in params]


class _FreeVars(Visitor):
    def __init__(self) -> None:
        self.found: list[Var] = []

    def visit_Var(self, node: Var) -> None:
        if not any(node is seen for seen in self.found):
            self.found.append(node)

    visit_ReduceAxis = visit_Var  # a reduce axis is a Var of its own class


def _check_free_vars(name: str, value: Expr, axes: tuple[Var, ...],
                     reduce_axes: tuple[ReduceAxis, ...]) -> None:
    allowed = [*axes, *reduce_axes]
    collector = _FreeVars()
    collector.visit(value)
    for var in collector.found:
        if not any(var is known for known in allowed):
            raise KernelError(f"compute {name} requires its expression to use only its own "
                              f"indices and the axes it reduces over, got {var.name}; list it "
                              "in axis= of the reduction")


class _Loads(Visitor):
    def __init__(self) -> None:
        self.buffers: list[Buffer] = []

    def visit_BufferLoad(self, load: BufferLoad) -> None:
        if not any(load.buffer is seen for seen in self.buffers):
            self.buffers.append(load.buffer)
        self.generic_visit(load)


def _inputs(name: str, value: Expr) -> tuple[Tensor, ...]:
    loads = _Loads()
    loads.visit(value)
    inputs = []
    for buffer in loads.buffers:
        tensor = _TENSORS.get(buffer)
        if tensor is None:
            raise KernelError(f"compute {name} requires it to read tensors (placeholder or "
                              f"compute results), got buffer {buffer.name}")
        inputs.append(tensor)
    return tuple(inputs)


def _schedule_order(tensors: Sequence[Tensor], listed: set[int]) -> list[Tensor]:
    """The computes to emit, each after the computes it reads (depth first, in list order)."""
    order: list[Tensor] = []
    done: set[int] = set()
    active: set[int] = set()

    def visit(tensor: Tensor, reader: str | None) -> None:
        key = id(tensor.buffer)
        if key in done:
            return
        if tensor.op is None:
            if key not in listed:
                raise KernelError(f"create_prim_func requires placeholder {tensor.name}, read "
                                  f"by compute {reader}, to be listed as a parameter")
            done.add(key)
            return
        if key in active:
            raise KernelError(f"compute {tensor.name} reads itself through its inputs")
        active.add(key)
        for source in tensor.op.inputs:
            visit(source, tensor.name)
        active.discard(key)
        done.add(key)
        order.append(tensor)

    for tensor in tensors:
        visit(tensor, None)
    return order


def _block_nest(tensor: Tensor) -> Stmt:
    """The loops and block computing ``tensor``, with fresh variables."""
    op = tensor.op
    if op is None:
        raise KernelError(f"tensor {tensor.name} is a placeholder and has no block")
    reduction = op.value if isinstance(op.value, Reduction) else None
    template = [(var, n, IterKind.SPATIAL) for var, n in zip(op.axes, tensor.shape)]
    if reduction is not None:
        template += [(axis, axis.extent, IterKind.REDUCE) for axis in reduction.axes]
    iter_vars = tuple(IterVar(Var("v" + var.name), n, kind) for var, n, kind in template)
    loops = tuple(Var(var.name) for var, _, _ in template)
    renaming = {var: iv.var for (var, _, _), iv in zip(template, iter_vars)}
    indices = tuple(iv.var for iv in iter_vars[:len(op.axes)])
    buffer = tensor.buffer
    init = None
    if reduction is None:
        body: Stmt = BufferStore(buffer, _Rename(renaming).visit(op.value), indices)
    else:
        source = _Rename(renaming).visit(reduction.source)
        combined = BinOp(reduction.combiner, BufferLoad(buffer, indices), source)
        body = BufferStore(buffer, combined, indices)
        init = BufferStore(buffer, reduction.init, indices)
    draft = Block(tensor.name, iter_vars, (), (), body, init)
    reads, writes = infer_block_regions(draft)
    block = Block(tensor.name, iter_vars, tuple(reads), tuple(writes), body, init)
    nest: Stmt = BlockRealize(loops, block)
    for loop, iv in zip(reversed(loops), reversed(iter_vars)):
        nest = For(loop, iv.extent, nest)
    return nest


class _Rename(Mutator):
    """Replaces the template variables (reduce axes included) by a function's own."""

    def __init__(self, mapping: dict[Var, Var]) -> None:
        self.mapping = mapping

    def visit_Var(self, node: Var) -> Var:
        return self.mapping.get(node, node)

    visit_ReduceAxis = visit_Var  # a reduce axis is a Var of its own class


