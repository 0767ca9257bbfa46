"""Where a block sits in a function: its site (realize, ancestors, scope, loops), the
loops and statements around it, and lookups the data-staging primitives share."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ir import Block, BlockRealize, Buffer, For, IterVar, Node, PrimFunc, SeqStmt, Stmt, Var
from ir.arith import Interval
from tensorize.schedule import tree
from tensorize.schedule.check import check, fail, get_block, get_loop
from tensorize.schedule.handles import BlockRV, LoopRV
from tensorize.schedule.tree import Located


# -- where a block sits ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Site:
    """A block in a function: its realize, its ancestors (outermost first), the realize of the
    block it sits in (its scope) and the loops between the two (outermost first)."""

    realize: BlockRealize
    path: tuple[Node, ...]
    scope: BlockRealize
    loops: tuple[For, ...]

    @property
    def block(self) -> Block:
        """The block itself."""
        return self.realize.block

    @property
    def name(self) -> str:
        """The block's name (its handle)."""
        return self.realize.block.name

    @property
    def chain(self) -> tuple[Node, ...]:
        """The ancestors and the realize itself."""
        return self.path + (self.realize,)

    def is_under(self, stmt: Stmt) -> bool:
        """True when ``stmt`` is an ancestor of the block."""
        return any(node is stmt for node in self.path)

    def reads(self) -> set[Buffer]:
        """The buffers the block declares it reads."""
        return {region.buffer for region in self.block.reads}

    def writes(self) -> set[Buffer]:
        """The buffers the block declares it writes."""
        return {region.buffer for region in self.block.writes}


def site_of(realize: BlockRealize, path: tuple[Node, ...]) -> Site:
    """The site of a realize found with its ancestors."""
    return Site(realize, path, tree.enclosing_block(path), tuple(tree.enclosing_loops(path)))


def locate(func: PrimFunc, block: BlockRV, primitive: str) -> Site:
    """The site of the block a handle names; refuses a gone block and the root."""
    found = get_block(func, block, primitive)
    check(bool(found.path), primitive, f"block {block.name!r} is the function body itself")
    return site_of(found.node, found.path)


def sibling_sites(func: PrimFunc, scope: BlockRealize) -> list[Site]:
    """The blocks directly inside ``scope`` (not inside a nested block), in program order."""
    return [site_of(stmt, path) for stmt, path in tree.walk_stmts(func)
            if isinstance(stmt, BlockRealize) and path and tree.enclosing_block(path) is scope]


def loop_chain(loop: Located) -> tuple[Node, ...]:
    """A located loop's ancestors and the loop itself."""
    return loop.path + (loop.node,)


def loops_to(loop: Located) -> list[For]:
    """The loops from the enclosing block down to and including ``loop``, outermost first."""
    return tree.enclosing_loops(loop.path) + [loop.node]


def scope_ranges(site: Site) -> dict[Var, Interval]:
    """The ranges of the scope block's iterators, which the block's bindings may use."""
    return {iv.var: Interval(0, iv.extent - 1) for iv in site.scope.block.iter_vars}


def loop_ranges(loops: Iterable[For]) -> dict[Var, Interval]:
    """Each loop variable over ``[0, extent - 1]``."""
    return {loop.var: Interval(0, loop.extent - 1) for loop in loops}


def loops_below(site: Site, stmt: Stmt) -> list[For]:
    """The block's loops from ``stmt`` (an ancestor or the realize) down, ``stmt`` included
    when it is a loop."""
    chain = site.chain
    depth = next(n for n, node in enumerate(chain) if node is stmt)
    return [node for node in chain[depth:] if isinstance(node, For)]


def bound_iterator(func: PrimFunc, site: Site, loop: LoopRV, primitive: str) -> IterVar:
    """The block's iterator that ``loop`` binds, in a nest of one loop per iterator
    (``check_root_nest``); refused when ``loop`` is not one of the block's loops."""
    found = get_loop(func, loop, primitive).node
    position = next((n for n, l in enumerate(site.loops) if l is found), None)
    check(position is not None, primitive,
          f"loop {loop.var.name} is not one of the loops of block {site.name!r}", site.realize)
    return site.block.iter_vars[position]


def same_scope(site: Site, loop: Located, primitive: str) -> None:
    """Refuse a loop outside the block's scope, or around the block itself."""
    var = loop.node.var.name
    check(tree.enclosing_block(loop.path) is site.scope, primitive,
          f"loop {var} is not in the scope of block {site.name!r} (the block "
          f"{tree.enclosing_block(loop.path).block.name!r} holds it); the loop and the block "
          "must sit directly in one block", loop.node)
    check(not site.is_under(loop.node), primitive,
          f"loop {var} is around block {site.name!r} itself; {primitive} moves a block under a "
          f"loop of {'its consumer' if primitive == 'compute_at' else 'its producer'}",
          loop.node)


def fork(first: tuple[Node, ...], second: tuple[Node, ...], primitive: str
         ) -> tuple[SeqStmt, int, int]:
    """The statement sequence where two chains of ancestors part, and the positions of their
    branches in it."""
    depth = 0
    while depth < min(len(first), len(second)) and first[depth] is second[depth]:
        depth += 1
    parent = first[depth - 1]
    if not isinstance(parent, SeqStmt):
        fail(primitive, "the block and the loop lie on the two branches of an if")
    return parent, _position(parent, first[depth]), _position(parent, second[depth])


def _position(sequence: SeqStmt, child: Node) -> int:
    return next(n for n, stmt in enumerate(sequence.stmts) if stmt is child)


def position_in(sequence: SeqStmt, site: Site) -> int | None:
    """Which statement of ``sequence`` holds the block, or None when none does."""
    chain = site.chain
    for depth, node in enumerate(chain[:-1]):
        if node is sequence:
            return _position(sequence, chain[depth + 1])
    return None


def body_stmts(loop: For) -> tuple[Stmt, ...]:
    """The statements of a loop body, in order."""
    return loop.body.stmts if isinstance(loop.body, SeqStmt) else (loop.body,)


def child_index(loop: For, site: Site) -> int:
    """Which statement of ``loop``'s body holds the block (the block is under ``loop``)."""
    stmts = body_stmts(loop)
    return next(n for n, stmt in enumerate(stmts) if stmt is site.realize or site.is_under(stmt))
