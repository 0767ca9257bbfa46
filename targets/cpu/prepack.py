"""A kernel's packing of its constant inputs split off, to run once: a network's weights are
packed when the model is loaded (as MLAS packs them), and each call runs only the rest.

:func:`split_constants` takes a function, tensorized with its packing stages (the CPU
schedule's copies of each input into its tiled layout, ``tensorize.engine.cpu_schedule``),
and the names of its parameters that do not change between calls. It returns two functions
that together compute what the one did:

- ``pack``: the function's top-level stages that read nothing but those constants and what
  such stages wrote; its parameters are the constants it reads, then the buffers it fills
  that the rest reads (``packed``), which are its outputs;
- ``kernel``: the remaining stages, the ``packed`` buffers as parameters in the place of the
  first constant (a constant the rest still reads stays a parameter too).

Run ``pack`` once on the constants, then ``kernel`` per call with the packed arrays as
inputs. Both are plain functions: :func:`targets.cpu.emit` emits either, and the per-call
kernel's figures (instructions, time) no longer hold the packing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ir import (Block, Buffer, BufferLoad, BufferStore, PrimFunc, SeqStmt, Stmt, make_root,
                seq)
from ir.visitor import post_order_visit
from targets.cpu.errors import EmitError

__all__ = ["Prepacked", "split_constants"]


@dataclass(frozen=True)
class Prepacked:
    """A function split at its constants' packing: ``pack`` (run once), ``kernel`` (run per
    call) and the names of the ``packed`` buffers the one fills and the other reads."""

    pack: PrimFunc
    kernel: PrimFunc
    packed: tuple[str, ...]


@dataclass(frozen=True)
class _Access:
    """The buffers a top-level statement reads and writes."""

    reads: frozenset[Buffer]
    writes: frozenset[Buffer]


def split_constants(func: PrimFunc, constants: Iterable[str]) -> Prepacked:
    """``func`` split into the packing of its ``constants`` (parameter names) and the rest
    (module docs). EmitError when a name is not a parameter, a constant is written, or no
    top-level stage that depends on the constants alone fills a buffer the rest reads
    (nothing to pack once)."""
    names = tuple(constants)
    params = {p.name: p for p in func.params}
    unknown = [n for n in names if n not in params]
    if unknown:
        raise EmitError(f"function {func.name}: split_constants requires parameter names, got "
                        f"{', '.join(unknown)}; its parameters are {', '.join(params)}")
    fixed = frozenset(params[n] for n in names)
    stmts = _top_level(func.root.body)
    accesses = [_access(s) for s in stmts]
    written = [n for n in names if any(params[n] in a.writes for a in accesses)]
    if written:
        raise EmitError(f"function {func.name}: split_constants requires constants the "
                        f"function only reads, got {', '.join(written)}, which it writes")
    hoisted = _hoisted(accesses, fixed, frozenset(func.params))
    kept = [i for i in range(len(stmts)) if i not in hoisted]
    rest_reads = frozenset().union(*(accesses[i].reads for i in kept))
    filled = frozenset().union(*(accesses[i].writes for i in hoisted))
    packed = tuple(b for b in func.allocs if b in filled and b in rest_reads)
    if not packed:
        raise EmitError(f"function {func.name}: no top-level stage that reads only the "
                        f"constants {', '.join(names)} (and what such stages wrote) fills a "
                        "buffer the rest reads: nothing packs once")
    pack_reads = frozenset().union(*(accesses[i].reads for i in hoisted))
    pack = PrimFunc(f"{func.name}_pack",
                    (*(p for p in func.params if p in fixed and p in pack_reads), *packed),
                    make_root(seq(*(stmts[i] for i in sorted(hoisted))),
                              tuple(b for b in func.allocs if b in filled and b not in packed)),
                    func.loc)
    kernel = PrimFunc(func.name, _kernel_params(func.params, fixed, packed, rest_reads),
                      make_root(seq(*(stmts[i] for i in kept)),
                                tuple(b for b in func.allocs if b not in filled)),
                      func.loc)
    return Prepacked(pack, kernel, tuple(b.name for b in packed))


def _top_level(body: Stmt) -> tuple[Stmt, ...]:
    """The root block's statements, in order."""
    return body.stmts if isinstance(body, SeqStmt) else (body,)


def _access(stmt: Stmt) -> _Access:
    """What ``stmt`` reads and writes: its blocks' declared regions and its loads and
    stores (an intrinsic call's operands are its block's declared regions)."""
    reads: set[Buffer] = set()
    writes: set[Buffer] = set()

    def visit(node: object) -> None:
        if isinstance(node, Block):
            reads.update(r.buffer for r in node.reads)
            writes.update(w.buffer for w in node.writes)
        elif isinstance(node, BufferLoad):
            reads.add(node.buffer)
        elif isinstance(node, BufferStore):
            writes.add(node.buffer)

    post_order_visit(stmt, visit)
    return _Access(frozenset(reads), frozenset(writes))


def _hoisted(accesses: list[_Access], fixed: frozenset[Buffer], params: frozenset[Buffer]
             ) -> set[int]:
    """The statements (by position) that can run once: in program order, each that reads
    only ``fixed`` buffers and what earlier such statements wrote, and writes intermediates
    only. One that shares a written buffer with a statement left per call is barred (the
    buffer would be filled partly once, partly per call), and the walk repeats without it,
    since what later statements may read has shrunk."""
    barred: set[int] = set()
    while True:
        known, hoisted = set(fixed), set()
        for i, access in enumerate(accesses):
            # A reduction reads the buffer it accumulates (a column sum of B): what it
            # writes is its own, not an input from the call.
            if i not in barred and access.writes and access.reads - access.writes <= known \
                    and not access.writes & params:
                hoisted.add(i)
                known |= access.writes
        per_call = frozenset().union(
            *(a.writes for i, a in enumerate(accesses) if i not in hoisted))
        shared = {i for i in hoisted if accesses[i].writes & per_call}
        if not shared:
            return hoisted
        barred |= shared


def _kernel_params(params: tuple[Buffer, ...], fixed: frozenset[Buffer],
                   packed: tuple[Buffer, ...], rest_reads: frozenset[Buffer]
                   ) -> tuple[Buffer, ...]:
    """The per-call kernel's parameters: ``params`` with the ``packed`` buffers in the
    place of the first constant, and each constant the kernel no longer reads dropped."""
    result: list[Buffer] = []
    placed = False
    for param in params:
        if param in fixed and not placed:
            result.extend(packed)
            placed = True
        if param not in fixed or param in rest_reads:
            result.append(param)
    return tuple(result)
