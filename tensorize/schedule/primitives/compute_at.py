"""compute_at and reverse_compute_at: move a block into the loop nest of its consumer or producer.

``compute_at`` moves a producer under a loop of its consumer and recomputes, in each iteration,
only the region the consumers under that loop read there. ``reverse_compute_at`` moves a
consumer under a loop of its producer and computes, in each iteration, exactly what the
producers under that loop have finished.

The moved block keeps its iterators; it gets new loops ``ax0, ax1, ...`` over the region,
its bindings become ``start + ax`` and a predicate guards them where the region may leave the
iterator's domain. Regions come from the blocks' declared reads and writes, seen through their
bindings and relaxed (:func:`ir.regions.relax_region`) over the loops inside the target loop.

The analysis it shares with ``cache_read``, ``cache_write``, ``decompose_reduction`` and the
inline primitives lives in :mod:`tensorize.schedule.sites` (where a block sits),
:mod:`tensorize.schedule.coverage` (regions and exact coverage) and
:mod:`tensorize.schedule.splicing` (building and placing statements).
"""

from __future__ import annotations

from collections.abc import Mapping

from ir import (BlockRealize, Buffer, BufferRegion, Expr, For, IntImm, IterKind, IterVar, PrimFunc,
                Var)
from ir.arith import Interval, const_int, linearize, prove, simplify
from ir.visitor import vars_of
from tensorize.schedule import tree
from tensorize.schedule.check import check, fail, get_loop
from tensorize.schedule.coverage import (box_of, check_complete, clipped_box, covers_domain,
                                         offset_of, region_in_loops, regions_of, relax, union,
                                         writes_exactly)
from tensorize.schedule.handles import BlockRV, LoopRV
from tensorize.schedule.sites import (Site, body_stmts, child_index, fork, locate, loop_chain,
                                      loop_ranges, loops_below, loops_to, position_in, same_scope,
                                      scope_ranges, sibling_sites)
from tensorize.schedule.splicing import build_nest, removal, splice_func, with_body
from tensorize.schedule.tree import Located

__all__ = ["compute_at", "reverse_compute_at"]


# -- the primitives ----------------------------------------------------------------------------

def _single_output(site: Site, primitive: str) -> Buffer:
    outputs = list(dict.fromkeys(r.buffer for r in site.block.writes))
    check(len(outputs) == 1, primitive,
          f"block {site.name!r} writes {len(outputs)} buffers "
          f"({', '.join(b.name for b in outputs)}); {primitive} moves a block with one output",
          site.realize)
    return outputs[0]


def _iterator_windows(site: Site, region: BufferRegion, box: list[tuple[Expr, int]],
                      primitive: str, role: str) -> dict[int, tuple[Expr, int]]:
    """For each iterator indexing ``region`` (as ``iterator + c``, width ``w``), the window
    ``(start, extent)`` of values for which that access stays within ``box``
    (``role`` "cover": touches it; "inside": lies in it). Keyed by iterator position."""
    windows: dict[int, tuple[Expr, int]] = {}
    iterators = site.block.iter_vars
    for rng, (start, extent) in zip(region.ranges, box):
        found = offset_of(rng.start, iterators)
        width = const_int(rng.extent)
        if found is None:
            continue
        check(found != "other" and width is not None, primitive,
              f"block {site.name!r} accesses {region.buffer.name} at index {rng.start}; "
              f"{primitive} requires each dimension indexed by one iterator plus a constant",
              site.realize)
        iv, offset = found  # type: ignore[misc]
        position = iterators.index(iv)
        if role == "cover":
            window = (simplify(start - offset - (width - 1)), extent + width - 1)
        else:
            window = (simplify(start - offset), extent - width + 1)
        check(window[1] > 0, primitive,
              f"block {site.name!r} reads {region.buffer.name}[{rng.start}:+{width}], wider "
              f"than the {extent} elements produced per iteration", site.realize)
        if position in windows:
            window = _intersect(windows[position], window, site, iv, primitive)
        windows[position] = window
    return windows


def _intersect(a: tuple[Expr, int], b: tuple[Expr, int], site: Site, iv: IterVar,
               primitive: str) -> tuple[Expr, int]:
    gap = linearize(b[0]) - linearize(a[0])
    check(gap.is_const, primitive,
          f"iterator {iv.var.name} of block {site.name!r} is constrained by two windows "
          f"starting at {a[0]} and {b[0]}, which cannot be compared", site.realize)
    low = max(0, gap.const)
    high = min(a[1], gap.const + b[1])
    check(high > low, primitive,
          f"iterator {iv.var.name} of block {site.name!r} has no value in both windows "
          f"starting at {a[0]} and {b[0]}", site.realize)
    return simplify(a[0] + low), high - low


def compute_at(func: PrimFunc, block: BlockRV, loop: LoopRV) -> tuple[PrimFunc, None]:
    """Move a producer block under ``loop`` of its consumers, computing in each iteration only
    the region of its output that the consumers under ``loop`` read in that iteration.

    The block gets new loops over that region, inserted in ``loop``'s body before the first
    statement holding a consumer; iterators its output does not depend on (reduce iterators
    among them) keep their whole range.

    Preconditions, each refused with its reason:

    - ``loop`` sits directly in the block's scope and is not around the block;
    - the block is complete: one output, an intermediate buffer (not a parameter) that no
      other block writes; its loops run its whole iteration domain; a reduction has an init;
    - every block that reads the output is under ``loop`` (at least one is);
    - the block comes before ``loop`` in program order, and no block in between (including
      those in ``loop``'s nest) writes a buffer the block reads;
    - its output is indexed by one iterator plus a constant per dimension.

    Returns the new function.

    >>> from ir import script as T
    >>> from tensorize.schedule import Schedule
    >>> @T.prim_func
    ... def scale_add(A: T.Buffer((8,), "int32"), C: T.Buffer((8,), "int32")):
    ...     B = T.alloc_buffer((8,), "int32")
    ...     for i in range(8):
    ...         with T.block("B"):
    ...             vi = T.axis.spatial(8, i)
    ...             B[vi] = A[vi] * 2
    ...     for i in range(8):
    ...         with T.block("C"):
    ...             vi = T.axis.spatial(8, i)
    ...             C[vi] = B[vi] + 1
    >>> sch = Schedule(scale_add)
    >>> outer, inner = sch.split(sch.get_loops(sch.get_block("C"))[0], [2, 4])
    >>> sch.compute_at(sch.get_block("B"), outer)
    >>> print(sch.func)
    @T.prim_func
    def scale_add(A: T.Buffer((8,), "int32"), C: T.Buffer((8,), "int32")):
        B = T.alloc_buffer((8,), "int32")
        for i_0 in range(2):
            for ax0 in range(4):
                with T.block("B"):
                    vi = T.axis.spatial(8, i_0 * 4 + ax0)
                    T.reads(A[vi])
                    T.writes(B[vi])
                    B[vi] = A[vi] * 2
            for i_1 in range(4):
                with T.block("C"):
                    vi = T.axis.spatial(8, i_0 * 4 + i_1)
                    T.reads(B[vi])
                    T.writes(C[vi])
                    C[vi] = B[vi] + 1
    """
    name = "compute_at"
    site = locate(func, block, name)
    target = get_loop(func, loop, name)
    same_scope(site, target, name)
    var = target.node.var.name
    output = _single_output(site, name)
    check(output not in func.params, name,
          f"block {site.name!r} writes {output.name}, a parameter of {func.name}: an output "
          "must be computed whole, not only where a consumer reads it", site.realize)
    siblings = sibling_sites(func, site.scope)
    others = [s for s in siblings if s.realize is not site.realize]
    writers = [s.name for s in others if output in s.writes()]
    check(not writers, name,
          f"block {site.name!r} is not the only writer of {output.name} (also "
          f"{', '.join(writers)})", site.realize)
    check_complete(site, name)
    readers = [s for s in others if output in s.reads()]
    check(bool(readers), name, f"no block reads {output.name}, the output of block "
                               f"{site.name!r}", site.realize)
    outside = [s.name for s in readers if not s.is_under(target.node)]
    check(not outside, name,
          f"block(s) {', '.join(outside)} read {output.name} but are not under loop {var}; "
          f"they would see only the part computed for the consumers under {var}", target.node)
    sequence, at, to = fork(site.chain, loop_chain(target), name)
    check(at < to, name,
          f"block {site.name!r} runs after loop {var}; the consumers under {var} would run "
          "before it", target.node)
    for other in others:
        spot = position_in(sequence, other)
        if spot is None or not at <= spot <= to:
            continue
        clash = sorted(b.name for b in other.writes() & site.reads())
        check(not clash, name,
              f"block {other.name!r} writes {', '.join(clash)}, which block {site.name!r} "
              f"reads, between its place and loop {var}", other.realize)
    required = union([relax(region, loops_below(reader, target.node)[1:])
                      for reader in readers for region in regions_of(reader, output, False)])
    written = next(r for r in site.block.writes if r.buffer is output)
    windows = _iterator_windows(site, written, box_of(required), name, "cover")
    starts, extents = [], []
    for position, iv in enumerate(site.block.iter_vars):
        start, extent = windows.get(position, (IntImm(0), iv.extent))
        if extent >= iv.extent:
            start, extent = IntImm(0), iv.extent
        starts.append(start)
        extents.append(extent)
    ranges = {**scope_ranges(site), **loop_ranges(loops_to(target))}
    nest = build_nest(site.block, starts, extents, ranges)
    stmts = list(body_stmts(target.node))
    first = min(child_index(target.node, reader) for reader in readers)
    stmts.insert(first, nest)
    edits = {id(removal(site, name)): (), id(target.node): (with_body(target.node, stmts),)}
    return splice_func(func, edits), None


def _check_no_partial_reduction(producer: Site, target: Located, consumer: Site,
                                primitive: str) -> None:
    """Refuse when a loop at or outside ``target`` advances a reduction of the producer: under
    it, the producer's output holds partial sums."""
    outside = {id(loop.var) for loop in loops_to(target)}
    for iv, binding in zip(producer.block.iter_vars, producer.realize.bindings):
        carried = [v.name for v in vars_of(binding) if id(v) in outside]
        if iv.kind is IterKind.REDUCE and carried:
            fail(primitive, f"loop {carried[0]} carries the reduction of block "
                            f"{producer.name!r} (iterator {iv.var.name}); under loop "
                            f"{target.node.var.name}, block {consumer.name!r} would read "
                            "partial results", target.node)


def reverse_compute_at(func: PrimFunc, block: BlockRV, loop: LoopRV) -> tuple[PrimFunc, None]:
    """Move a consumer block under ``loop`` of its producers, computing in each iteration
    exactly the part whose inputs the producers under ``loop`` have finished by then.

    The block gets new loops over that part, inserted in ``loop``'s body after the last
    statement holding a producer.

    Preconditions, each refused with its reason:

    - ``loop`` sits directly in the block's scope and is not around the block;
    - the block is complete (its loops run its whole domain; a reduction has an init);
    - some block under ``loop`` writes a buffer the block reads (a producer), and ``loop``
      comes before the block in program order;
    - no loop at or outside ``loop`` carries a producer's reduction (the block would read
      partial sums), and each producer writes, per iteration of ``loop``, exactly a box;
    - no block between ``loop`` and the block touches what the block writes, or writes what
      it reads (except the producers under ``loop``);
    - the block reads the produced buffers with one iterator plus a constant per dimension,
      only inside what is produced in the same iteration, and over all iterations still runs
      its whole domain.

    Returns the new function.

    >>> from ir import script as T
    >>> from tensorize.schedule import Schedule
    >>> @T.prim_func
    ... def scale_add(A: T.Buffer((8,), "int32"), C: T.Buffer((8,), "int32")):
    ...     B = T.alloc_buffer((8,), "int32")
    ...     for i in range(8):
    ...         with T.block("B"):
    ...             vi = T.axis.spatial(8, i)
    ...             B[vi] = A[vi] * 2
    ...     for i in range(8):
    ...         with T.block("C"):
    ...             vi = T.axis.spatial(8, i)
    ...             C[vi] = B[vi] + 1
    >>> sch = Schedule(scale_add)
    >>> (i,) = sch.get_loops(sch.get_block("B"))
    >>> sch.reverse_compute_at(sch.get_block("C"), i)
    >>> [b.name for b in sch.get_child_blocks(i)]
    ['B', 'C']
    """
    name = "reverse_compute_at"
    site = locate(func, block, name)
    target = get_loop(func, loop, name)
    same_scope(site, target, name)
    var = target.node.var.name
    check_complete(site, name)
    siblings = sibling_sites(func, site.scope)
    others = [s for s in siblings if s.realize is not site.realize]
    producers = [s for s in others if s.is_under(target.node) and s.writes() & site.reads()]
    check(bool(producers), name,
          f"no block under loop {var} writes what block {site.name!r} reads "
          f"({', '.join(sorted(b.name for b in site.reads())) or 'it reads nothing'})",
          target.node)
    sequence, at, to = fork(loop_chain(target), site.chain, name)
    check(at < to, name,
          f"block {site.name!r} runs before loop {var}; moving it under {var} would make it "
          "read what its producers write later", target.node)
    for other in others:
        spot = position_in(sequence, other)
        if spot is None or not at <= spot <= to:
            continue
        touched = sorted(b.name for b in (other.reads() | other.writes()) & site.writes())
        check(not touched, name,
              f"block {other.name!r} accesses {', '.join(touched)}, which block {site.name!r} "
              f"writes, between loop {var} and the block; moving the block would change what "
              "it sees", other.realize)
        if not other.is_under(target.node):
            clash = sorted(b.name for b in other.writes() & site.reads())
            check(not clash, name,
                  f"block {other.name!r} writes {', '.join(clash)}, which block {site.name!r} "
                  f"reads, between loop {var} and the block", other.realize)
    windows: dict[int, tuple[Expr, int]] = {}
    produced: dict[Buffer, BufferRegion] = {}
    for buffer in dict.fromkeys(b for p in producers for b in p.writes() & site.reads()):
        produced[buffer] = _produced_region(buffer, producers, target, site, name)
        for region in site.block.reads:
            if region.buffer is buffer:
                for position, window in _iterator_windows(site, region,
                                                          box_of(produced[buffer]), name,
                                                          "inside").items():
                    if position in windows:
                        window = _intersect(windows[position], window, site,
                                            site.block.iter_vars[position], name)
                    windows[position] = window
    ranges = {**scope_ranges(site), **loop_ranges(loops_to(target))}
    starts, extents = [], []
    for position, iv in enumerate(site.block.iter_vars):
        start, extent = windows.get(position, (IntImm(0), iv.extent))
        if extent >= iv.extent and prove(start <= 0, ranges) and \
                prove(start + extent >= iv.extent, ranges):
            start, extent = IntImm(0), iv.extent
        check(iv.kind is IterKind.SPATIAL or (extent == iv.extent and const_int(start) == 0),
              name, f"reduce iterator {iv.var.name} of block {site.name!r} would run over only "
                    f"part of its range under loop {var}", site.realize)
        starts.append(start)
        extents.append(extent)
    nest = build_nest(site.block, starts, extents, ranges)
    moved = next(node for node, _ in tree.walk_under(nest) if isinstance(node, BlockRealize))
    new_loops = [node for node, _ in tree.walk_under(nest) if isinstance(node, For)]
    _check_reads_inside(site, moved, produced, ranges, new_loops, var, name)
    domain = {iv.var: iv.extent for iv in site.scope.block.iter_vars}
    domain.update({loop.var: loop.extent for loop in (*loops_to(target), *new_loops)})
    covered = covers_domain(moved, domain)
    check(bool(covered), name,
          f"under loop {var}, block {site.name!r} would not run its whole domain: the "
          f"producers under {var} do not produce everything it reads", target.node)
    stmts = list(body_stmts(target.node))
    last = max(child_index(target.node, producer) for producer in producers)
    stmts.insert(last + 1, nest)
    edits = {id(removal(site, name)): (), id(target.node): (with_body(target.node, stmts),)}
    return splice_func(func, edits), None


def _produced_region(buffer: Buffer, producers: list[Site], target: Located, consumer: Site,
                     primitive: str) -> BufferRegion:
    """The region of ``buffer`` the producers under ``target`` finish in one of its
    iterations; each must write exactly that box."""
    var = target.node.var.name
    boxes: list[BufferRegion] = []
    for producer in producers:
        if buffer not in producer.writes():
            continue
        _check_no_partial_reduction(producer, target, consumer, primitive)
        inner = loops_below(producer, target.node)[1:]
        region = union(regions_of(producer, buffer, True))
        relaxed = relax(region, inner)
        exact = writes_exactly(producer, region, inner, clipped_box(relaxed))
        check(bool(exact), primitive,
              f"block {producer.name!r} does not write all of {buffer.name}"
              f"[{_show(relaxed)}] in each iteration of loop {var} (or the check cannot tell); "
              f"block {consumer.name!r} cannot tell what is finished", producer.realize)
        boxes.append(relaxed)
    for other in boxes[1:]:
        check(all(const_int(a.extent) == const_int(b.extent)
                  and linearize(a.start) == linearize(b.start)
                  for a, b in zip(boxes[0].ranges, other.ranges)), primitive,
              f"the blocks under loop {var} write different regions of {buffer.name} "
              f"([{_show(boxes[0])}] and [{_show(other)}])", target.node)
    return boxes[0]


def _check_reads_inside(site: Site, moved: BlockRealize, produced: dict[Buffer, BufferRegion],
                        ranges: Mapping[Var, Interval], new_loops: list[For], var: str,
                        primitive: str) -> None:
    inner_ranges = {**ranges, **loop_ranges(new_loops)}
    for region in site.block.reads:
        if region.buffer not in produced:
            continue
        read = relax(region_in_loops(moved, region), new_loops)
        for got, have in zip(read.ranges, produced[region.buffer].ranges):
            inside = prove(got.start >= have.start, inner_ranges) and \
                prove(got.start + got.extent <= have.start + have.extent, inner_ranges)
            check(inside, primitive,
                  f"block {site.name!r} reads {region.buffer.name}[{_show(read)}], beyond "
                  f"[{_show(produced[region.buffer])}] that the blocks under loop {var} "
                  "produce in that iteration", moved)


def _show(region: BufferRegion) -> str:
    """The ranges of a region as ``start:+extent`` (a point as its index)."""
    parts = []
    for rng in region.ranges:
        extent = const_int(rng.extent)
        parts.append(str(rng.start) if extent == 1 else f"{rng.start}:+{rng.extent}")
    return ", ".join(parts)
