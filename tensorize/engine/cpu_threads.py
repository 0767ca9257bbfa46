"""A CPU kernel over several cores: its output rows split into parts, one kernel per part.

A GEMM-shaped kernel whose outermost loop walks the rows of its output (``C[i, ..]``) and of
the inputs it shares them with (``A[i, ..]``) computes each row on its own. :func:`plan_rows`
cuts those rows into one part per thread, each a whole number of :data:`GRANULE` rows (whole
register tiles of every height up to 8, and row offsets that keep a buffer's 64-byte
alignment when its rows are a multiple of 4 bytes), and none smaller than
:data:`MIN_MACS_PER_THREAD` of work; :func:`slice_rows` gives the kernel of one part: the same
function over ``rows`` rows. Each part is tensorized and compiled like any kernel, and the
parts run at once on views of the arrays (``targets.cpu.run_parts``).

Why kernels per part and Python threads rather than a thread pool in the emitted code: a
ctypes call releases the GIL, so the parts run truly in parallel; each part's code is the
single-thread kernel, unchanged (its packing of the shared input is done once per part,
which costs what one pass over that input costs); and results stay exact for any thread
count because the parts write disjoint rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ir import (Block, BlockRealize, Buffer, BufferLoad, BufferStore, For, IterKind, IterVar,
                Mutator, PrimFunc, ScheduleError, Var)
from ir.visitor import post_order_visit
from tensorize.schedule import tree

__all__ = ["GRANULE", "MIN_MACS_PER_THREAD", "RowSplit", "plan_rows", "slice_rows",
           "split_rows"]

# Rows in a part are a multiple of this (see the module docs).
GRANULE = 16
# The least work (multiply-accumulates, or loop iterations) worth a thread of its own: a
# part's thread starts and joins in about 0.1 ms, while 2**24 MACs take 0.08 ms on a core at
# 210 GMAC/s (docs/cpu_targets.md, "Threads").
MIN_MACS_PER_THREAD = 1 << 24


@dataclass(frozen=True, slots=True)
class RowSplit:
    """The rows of a kernel cut into parts: ``parts`` as ``(first row, rows)``, and the
    parameters (by name) whose first dimension is those rows; the others are shared by
    every part."""

    parts: tuple[tuple[int, int], ...]
    sliced: tuple[str, ...]


def plan_rows(func: PrimFunc, threads: int, min_work: int = MIN_MACS_PER_THREAD
              ) -> RowSplit | str:
    """The split of ``func``'s output rows over at most ``threads`` parts of at least
    ``min_work`` iterations each, or why it has none (one part: too little work, or a
    kernel whose rows are not independent)."""
    found = _row_loop(func)
    if isinstance(found, str):
        return found
    loop, sliced = found
    work = sum(math.prod(iv.extent for iv in r.block.iter_vars) for r in _realizes(func))
    parts = split_rows(loop.extent, work, threads, min_work)
    return parts if isinstance(parts, str) else RowSplit(parts, sliced)


def split_rows(rows: int, work: int, threads: int, min_work: int = MIN_MACS_PER_THREAD
               ) -> tuple[tuple[int, int], ...] | str:
    """``rows`` rows of ``work`` iterations in all cut into at most ``threads`` parts of
    whole :data:`GRANULE`s and at least ``min_work`` iterations each, as ``(first row,
    rows)``; or why they make one part."""
    useful = min(threads, -(-rows // GRANULE), work // min_work)
    if useful < 2:
        return (f"{work:,} iterations over {rows} rows make one part (a thread takes at "
                f"least {GRANULE} rows and {min_work:,} iterations)")
    per = -(-rows // useful // GRANULE) * GRANULE
    return tuple((s, min(per, rows - s)) for s in range(0, rows, per))


def slice_rows(func: PrimFunc, split: RowSplit, rows: int) -> PrimFunc:
    """``func`` over ``rows`` of its output rows: the row loop's extent, the row iterator's
    and the sliced parameters' first dimension become ``rows``. ScheduleError when ``func``
    has no such rows (:func:`plan_rows` says why)."""
    found = _row_loop(func)
    if isinstance(found, str):
        raise ScheduleError("slice_rows", found)
    loop, _ = found
    buffers = {p: p.with_(shape=(rows, *p.shape[1:])) for p in func.params
               if p.name in split.sliced}
    return _Slice(loop.var, rows, buffers).visit(func)


class _Slice(Mutator):
    """Shrinks the row loop, the iterator it binds and the sliced buffers."""

    def __init__(self, var: Var, rows: int, buffers: dict[Buffer, Buffer]) -> None:
        self.var = var
        self.rows = rows
        self.buffers = buffers
        self.iterators: set[Var] = set()

    def visit_Buffer(self, buffer: Buffer) -> Buffer:
        return self.buffers.get(buffer, buffer)

    def visit_For(self, loop: For) -> For:
        body = self.visit(loop.body)
        extent = self.rows if loop.var is self.var else loop.extent
        return For(loop.var, extent, body, loop.kind, loop.thread, loop.loc)

    def visit_BlockRealize(self, realize: BlockRealize) -> BlockRealize:
        bound = {iv.var for iv, b in zip(realize.block.iter_vars, realize.bindings)
                 if b is self.var or b == self.var}
        self.iterators |= bound
        return BlockRealize(realize.bindings, self.visit(realize.block),
                            realize.predicate, realize.loc)

    def visit_IterVar(self, iv: IterVar) -> IterVar:
        if iv.var in self.iterators:
            return IterVar(iv.var, self.rows, iv.kind, iv.loc)
        return iv


def _realizes(func: PrimFunc) -> list[BlockRealize]:
    return [s for s, _ in tree.walk_stmts(func)
            if isinstance(s, BlockRealize) and s is not func.body]


def _row_loop(func: PrimFunc) -> tuple[For, tuple[str, ...]] | str:
    """The outermost loop of a one-block kernel, when it binds a spatial iterator that
    indexes the first dimension of the output (and maybe inputs) and nothing else: the
    rows; with the parameters it indexes. Else why not."""
    realizes = _realizes(func)
    if len(realizes) != 1:
        return f"the kernel has {len(realizes)} blocks; rows are split for one block"
    realize = realizes[0]
    loop = func.body.block.body
    if not isinstance(loop, For):
        return "the kernel's block has no loop around it"
    bound = [iv for iv, b in zip(realize.block.iter_vars, realize.bindings) if b is loop.var
             or b == loop.var]
    if len(bound) != 1 or bound[0].kind is not IterKind.SPATIAL or bound[0].extent != loop.extent:
        return "the kernel's outermost loop is not a spatial iterator of its block"
    row = bound[0].var
    sliced, other = _row_uses(realize.block, row)
    if other or not sliced or any(b.name not in {p.name for p in func.params}
                                  for b in sliced):
        return "the kernel's rows index more than the first dimension of its parameters"
    output = realize.block.body
    if not isinstance(output, BufferStore) or output.buffer not in sliced:
        return "the kernel's rows do not index its output"
    return loop, tuple(sorted(b.name for b in sliced))


def _row_uses(block: Block, row: Var) -> tuple[set[Buffer], bool]:
    """The buffers whose first index is ``row`` itself, and whether ``row`` appears anywhere
    else (another dimension, an expression) or such a buffer is also accessed at another
    first index (``A[j, k]`` beside ``A[i, k]``: a part would need others' rows)."""
    sliced: set[Buffer] = set()
    unsliced: set[Buffer] = set()
    elsewhere = False

    def uses(expr: object) -> bool:
        found: list[Var] = []
        post_order_visit(expr, lambda n: found.append(n) if n is row or n == row else None)
        return bool(found)

    def visit(node: object) -> None:
        nonlocal elsewhere
        if isinstance(node, (BufferLoad, BufferStore)):
            first, rest = node.indices[:1], node.indices[1:]
            if first and (first[0] is row or first[0] == row):
                sliced.add(node.buffer)
            else:
                unsliced.add(node.buffer)
                elsewhere = elsewhere or bool(first) and uses(first[0])
            if any(uses(i) for i in rest):
                elsewhere = True

    post_order_visit(block.body, visit)
    if block.init is not None:
        post_order_visit(block.init, visit)
    return sliced, elsewhere or bool(sliced & unsliced)
