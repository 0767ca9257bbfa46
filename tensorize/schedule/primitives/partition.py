"""partition: one block's nest as two blocks over the two halves of a spatial iterator.

A block over a spatial iterator ``i`` in ``range(E)`` becomes, cut at ``at``::

    for i in range(at):          # the block, keeping its name
        block(i)
    for i in range(E - at):      # <name>_rest, the same body at i + at
        block_rest(i + at)

Each output element is computed by exactly one of the two, by the same terms in the same
order, so the result is the same value (for floats too). The two are separate nests, which a
GPU backend runs as separate launches: the stream-K hybrid runs the output tiles of its full
waves in the first, unsplit, and splits the reduction of the second.
"""

from __future__ import annotations

from ir import Block, BlockRealize, Expr, For, IterKind, IterVar, PrimFunc, Var, substitute
from tensorize.schedule import tree
from tensorize.schedule.check import arg_check, check, check_root_nest
from tensorize.schedule.handles import BlockRV, LoopRV
from tensorize.schedule.sites import Site, bound_iterator, locate
from tensorize.schedule.splicing import splice_func, unique_name, with_regions

__all__ = ["partition"]

_PRIMITIVE = "partition"


def partition(func: PrimFunc, block: BlockRV, loop: LoopRV, at: int
              ) -> tuple[PrimFunc, BlockRV]:
    """Cut the nest of ``block`` along the spatial iterator that ``loop`` binds: the block
    keeps the iterator's first ``at`` values, a new block ``<name>_rest`` right after its
    nest takes the others (module docs).

    Preconditions, each refused with its reason: the block sits directly in the root block
    in a perfect loop nest binding each iterator to one loop in order, with no predicate;
    ``loop`` is one of those loops and binds a spatial iterator (a reduction cut in two
    would run its init twice); ``0 < at < extent``.

    The block's iterator and loop get extent ``at``; the new block is a copy with extent
    ``extent - at`` whose body and init read the iterator as ``i + at``. Returns the new
    function and the handle of ``<name>_rest``.

    >>> from ir import script as T
    >>> from tensorize.schedule import Schedule
    >>> @T.prim_func
    ... def f(A: T.Buffer((5, 8), "int8"), O: T.Buffer((5,), "int32")):
    ...     for i, k in T.grid(5, 8):
    ...         with T.block("O"):
    ...             vi, vk = T.axis.remap("SR", [i, k])
    ...             with T.init():
    ...                 O[vi] = 0
    ...             O[vi] += T.cast(A[vi, vk], "int32")
    >>> sch = Schedule(f)
    >>> sch.partition(sch.get_block("O"), sch.get_loops(sch.get_block("O"))[0], 3)
    BlockRV('O_rest')
    >>> print(sch.func)
    @T.prim_func
    def f(A: T.Buffer((5, 8), "int8"), O: T.Buffer((5,), "int32")):
        for i, k in T.grid(3, 8):
            with T.block("O"):
                vi, vk = T.axis.remap("SR", [i, k])
                T.reads(O[vi], A[vi, vk])
                T.writes(O[vi])
                with T.init():
                    O[vi] = 0
                O[vi] += T.cast(A[vi, vk], "int32")
        for i, k in T.grid(2, 8):
            with T.block("O_rest"):
                vi, vk = T.axis.remap("SR", [i, k])
                T.reads(O[vi + 3], A[vi + 3, vk])
                T.writes(O[vi + 3])
                with T.init():
                    O[vi + 3] = 0
                O[vi + 3] += T.cast(A[vi + 3, vk], "int32")
    """
    arg_check(isinstance(at, int) and not isinstance(at, bool) and at >= 1, _PRIMITIVE, "at",
              "a positive int", at)
    site = locate(func, block, _PRIMITIVE)
    check_root_nest(func, site, _PRIMITIVE)
    cut = _cut_iterator(func, site, loop, at)
    first = _nest(site, site.name, cut, at, {}, 0)
    # The rest gets variables of its own: loops are found by their variable.
    fresh = {v: Var(v.name, v.type) for v in (*(iv.var for iv in site.block.iter_vars),
                                               *(l.var for l in site.loops))}
    rest_name = unique_name(f"{site.name}_rest", tree.block_names(func))
    second = _nest(site, rest_name, cut, cut.extent - at, fresh, at)
    return splice_func(func, {id(site.loops[0]): (first, second)}), BlockRV(rest_name)


def _nest(site: Site, name: str, cut: IterVar, extent: int, renamed: dict[Var, Var],
          offset: int) -> For:
    """The block's nest named ``name``, with ``cut`` (and its loop) of ``extent``, each
    variable in ``renamed`` replaced by its new one and ``cut`` read as itself plus
    ``offset`` in the body and init."""
    def new(old: Var) -> Var:
        return renamed.get(old, old)

    values: dict[Var, Expr] = {iv.var: new(iv.var) for iv in site.block.iter_vars}
    if offset:
        values[cut.var] = new(cut.var) + offset
    iters = tuple(IterVar(new(iv.var), extent if iv is cut else iv.extent, iv.kind)
                  for iv in site.block.iter_vars)
    init = site.block.init
    block = with_regions(Block(name, iters, (), (), substitute(site.block.body, values),
                               None if init is None else substitute(init, values),
                               loc=site.block.loc))
    stmt: BlockRealize | For = BlockRealize(tuple(new(l.var) for l in site.loops), block,
                                            loc=site.realize.loc)
    for iv, loop_node in reversed(list(zip(site.block.iter_vars, site.loops))):
        stmt = For(new(loop_node.var), extent if iv is cut else loop_node.extent, stmt,
                   loop_node.kind, loop_node.thread, loop_node.loc)
    return stmt


def _cut_iterator(func: PrimFunc, site: Site, loop: LoopRV, at: int) -> IterVar:
    """The spatial iterator ``loop`` binds, of extent greater than ``at``."""
    iv = bound_iterator(func, site, loop, _PRIMITIVE)
    check(iv.kind is IterKind.SPATIAL, _PRIMITIVE,
          f"loop {loop.var.name} binds the reduce iterator {iv.var.name} of block "
          f"{site.name!r}; only a spatial iterator is cut in two", site.realize)
    check(at < iv.extent, _PRIMITIVE,
          f"block {site.name!r} requires the cut inside the extent of {iv.var.name}, got "
          f"{at} of {iv.extent}", site.realize)
    return iv
