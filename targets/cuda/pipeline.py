"""Multi-stage buffering of the shared-memory stages of a tiled kernel's reduction loop.

The CUDA schedule leaves each step ``ko`` of the reduction as: copy the step's tiles into
shared memory, then let the warps compute on them. :func:`software_pipeline` rewrites such a
loop, in the IR, into ``N`` stages of every staged buffer (``N`` = ``stages``, at most the
loop's extent ``K``) and prefetches ``N - 1`` steps ahead::

    copies(s) into stage s, for s in 0 .. N-2                # prologue, one group each
    for ko in range(K):
        if ko + N-1 < K:
            copies(ko + N-1) into stage (ko + N-1) % N       # a later step's tiles ...
        compute(ko) from stage ko % N                        # ... load while this one runs

Each staged buffer ``S`` becomes ``S`` with a leading dimension of ``N``; every block
touching it gets one more spatial iterator, the stage, bound to ``s``, ``(ko + N-1) % N`` or
``ko % N``. Run in order, the result computes what the loop did (the host executor checks
that). On a GPU the prefetch must not overwrite the stage that warps still read, and the
compute must see its tiles complete: the backend issues the copies as ``cp.async``, commits
each prologue stage and each step's prefetch as one group (an empty one on the last steps,
so the count stays regular), and opens every step with ``cp.async.wait_group N-2`` (of the
``N-1 + ko`` groups committed, the first ``ko + 1`` hold step ``ko``'s tiles) and a
``__syncthreads()``, which also orders the reads of stage ``(ko - 1) % N`` in the step
before ahead of this step's prefetch into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ir import (Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, Expr, For,
                ForKind, IfThenElse, IntImm, IterVar, Mutator, PrimFunc, Range, SeqStmt, Stmt, Var,
                dtypes, substitute)
from ir.visitor import post_order_visit
from targets.cuda.vector import zero_filled

__all__ = ["Pipelined", "software_pipeline"]

STAGES = 3


@dataclass(frozen=True, slots=True)
class Pipelined:
    """A rewritten function: ``func``, the variables of its pipelined loops with their
    stage counts (``stages``), the staged buffers (``staged``, each with its original) that
    its prefetches fill, and the prologue statements after which a copy group is committed
    (``commits``, compared by identity)."""

    func: PrimFunc
    loops: frozenset[Var]
    staged: dict[Buffer, Buffer]
    stages: dict[Var, int] = field(default_factory=dict)
    commits: tuple[Stmt, ...] = ()
    prologue: tuple[Stmt, ...] = ()

    def commits_after(self, stmt: Stmt) -> bool:
        """Whether a copy group is committed after prologue statement ``stmt``."""
        return any(stmt is c for c in self.commits)

    def in_prologue(self, stmt: Stmt) -> bool:
        """Whether ``stmt`` is a prologue copy (into a stage no other prologue copy
        writes)."""
        return any(stmt is p for p in self.prologue)


def software_pipeline(func: PrimFunc, stages: int = STAGES) -> Pipelined:
    """Stage ``stages`` deep (at least 2) every block-level serial loop of ``func``'s root
    statements whose body starts with copies from global into shared buffers used nowhere
    else, followed by warp code reading them (module docs). A function without such a loop
    comes back as is."""
    if not isinstance(stages, int) or stages < 2:
        raise ValueError(f"software_pipeline: argument 'stages': expected an int of at least "
                         f"2, got {stages!r}")
    plan = _Plan(stages)
    root = func.body.block
    body = _rewrite(root.body, root.body, plan)
    if body is root.body:
        return Pipelined(func, frozenset(), {})
    doubled = {old: new for new, old in plan.staged.items()}
    allocs = tuple(doubled.get(b, b) for b in root.alloc_buffers)
    block = replace(root, body=body, alloc_buffers=allocs)
    result = PrimFunc(func.name, func.params, replace(func.body, block=block), func.loc)
    return Pipelined(result, frozenset(plan.stages), plan.staged, plan.stages,
                     tuple(plan.commits), tuple(plan.prologue))


@dataclass
class _Plan:
    """What the rewrite has done so far: the stage count asked for, and per loop rewritten
    its stages, the staged buffers, the prologue's statements and its group ends."""

    wanted: int
    stages: dict[Var, int] = field(default_factory=dict)
    staged: dict[Buffer, Buffer] = field(default_factory=dict)
    commits: list[Stmt] = field(default_factory=list)
    prologue: list[Stmt] = field(default_factory=list)


def _rewrite(stmt: Stmt, root: Stmt, plan: _Plan) -> Stmt:
    if isinstance(stmt, SeqStmt):
        parts = tuple(_rewrite(s, root, plan) for s in stmt.stmts)
        flat: list[Stmt] = []
        for part in parts:
            flat.extend(part.stmts if isinstance(part, SeqStmt) else (part,))
        return stmt if all(a is b for a, b in zip(parts, stmt.stmts)) else SeqStmt(tuple(flat))
    if not isinstance(stmt, For) or stmt.kind is ForKind.THREAD_BINDING and (
            stmt.thread or "").startswith("threadIdx"):
        return stmt
    copies = _leading_copies(stmt, root)
    if copies is None:
        body = _rewrite(stmt.body, root, plan)
        return stmt if body is stmt.body else replace(stmt, body=body)
    count = len(copies)
    body = stmt.body.stmts
    n = min(plan.wanted, stmt.extent)
    staged = {b: b.with_(shape=(n, *b.shape), strides=None) for b in copies}
    ko = stmt.var
    ahead = IntImm(n - 1, ko.dtype)
    prologue: list[Stmt] = []
    for s in range(n - 1):
        step = IntImm(s, ko.dtype)
        prologue += [_staged(_renamed(substitute(c, {ko: step})), staged, step, n)
                     for c in body[:count]]
        plan.commits.append(prologue[-1])
    plan.prologue += prologue
    # (ko + N-1) % K, not ko + N-1: the guard skips the last steps, and the bindings stay
    # in their ranges for every ko.
    following = (ko + ahead) % IntImm(stmt.extent, ko.dtype)
    prefetch = [_staged(substitute(c, {ko: following}), staged,
                        (ko + ahead) % IntImm(n, ko.dtype), n) for c in body[:count]]
    rest = [_staged(s, staged, ko % IntImm(n, ko.dtype), n) for s in body[count:]]
    guard = IfThenElse(ko + ahead < IntImm(stmt.extent, ko.dtype), _seq(prefetch))
    loop = replace(stmt, body=_seq([guard, *rest]))
    plan.stages[ko] = n
    plan.staged.update({new: old for old, new in staged.items()})
    return _seq([*prologue, loop])


def _seq(stmts: list[Stmt]) -> Stmt:
    return stmts[0] if len(stmts) == 1 else SeqStmt(tuple(stmts))


def _leading_copies(loop: For, root: Stmt) -> list[Buffer] | None:
    """The shared buffers the loop's leading copy nests fill, when the loop qualifies."""
    if loop.kind is not ForKind.SERIAL or loop.extent < 2 or not isinstance(loop.body, SeqStmt):
        return None
    buffers: list[Buffer] = []
    stmts = loop.body.stmts
    for stmt in stmts:
        target = _copy_target(stmt)
        if target is None:
            break
        buffers.append(target)
    rest = stmts[len(buffers):]
    if not buffers or not rest or not any(_has_warp_loop(s) for s in rest):
        return None
    for buffer in buffers:
        if _uses(root, buffer) != _uses(loop, buffer) or any(
                _writes(s, buffer) for s in rest):
            return None
    return buffers


def _copy_target(stmt: Stmt) -> Buffer | None:
    """The shared buffer a perfect loop nest copies into from global memory (zero-padded or
    not), or None."""
    while isinstance(stmt, For) and stmt.kind is not ForKind.THREAD_BINDING:
        stmt = stmt.body
    if not isinstance(stmt, BlockRealize):
        return None
    store = stmt.block.body
    if not isinstance(store, BufferStore) or store.buffer.scope != "shared":
        return None
    # A zero-padded load (a convolution's halo) is a copy too: a zero-filling cp.async.
    filled = zero_filled(store.value)
    load = filled[0] if filled is not None else store.value
    if isinstance(load, BufferLoad) and load.buffer.scope == "global":
        return store.buffer
    return None


def _has_warp_loop(stmt: Stmt) -> bool:
    found: list[bool] = []
    post_order_visit(stmt, lambda n: found.append(True) if isinstance(n, For)
                     and (n.thread or "").startswith("threadIdx") else None)
    return bool(found)


def _uses(stmt: Stmt, buffer: Buffer) -> int:
    count: list[int] = []
    post_order_visit(stmt, lambda n: count.append(1) if isinstance(
        n, (BufferLoad, BufferStore, BufferRegion)) and n.buffer is buffer else None)
    return len(count)


def _writes(stmt: Stmt, buffer: Buffer) -> bool:
    found: list[bool] = []
    post_order_visit(stmt, lambda n: found.append(True) if isinstance(n, BufferStore)
                     and n.buffer is buffer else None)
    return bool(found)


def _renamed(stmt: Stmt) -> Stmt:
    """``stmt`` with fresh loop and block iterator variables (a second copy of a nest)."""
    fresh: dict[Var, Var] = {}

    def collect(node: object) -> None:
        if isinstance(node, (For, IterVar)):
            fresh[node.var] = Var(node.var.name, node.var.dtype)

    post_order_visit(stmt, collect)
    return _Rename(fresh).visit(stmt)


class _Rename(Mutator):
    def __init__(self, fresh: dict[Var, Var]) -> None:
        self.fresh = fresh

    def visit_Var(self, var: Var) -> Var:
        return self.fresh.get(var, var)


def _staged(stmt: Stmt, doubled: dict[Buffer, Buffer], stage: Expr, stages: int) -> Stmt:
    """``stmt`` with every block touching a staged buffer given a stage iterator (of
    ``stages``) bound to ``stage``, through which it indexes the buffer's leading
    dimension."""
    return _StageBlocks(doubled, stage, stages).visit(stmt)


class _StageBlocks(Mutator):
    def __init__(self, doubled: dict[Buffer, Buffer], stage: Expr, stages: int) -> None:
        self.doubled = doubled
        self.stage = stage
        self.stages = stages

    def visit_BlockRealize(self, realize: BlockRealize) -> BlockRealize:
        if not any(_uses(realize.block, b) for b in self.doubled):
            return realize
        var = Var("stage", dtypes.int32)
        inner = _AddStage(self.doubled, var)
        block: Block = realize.block
        block = replace(block, iter_vars=(*block.iter_vars, IterVar(var, self.stages)),
                        reads=inner.visit(block.reads), writes=inner.visit(block.writes),
                        body=inner.visit(block.body))
        return replace(realize, block=block, bindings=(*realize.bindings, self.stage))


class _AddStage(Mutator):
    def __init__(self, doubled: dict[Buffer, Buffer], stage: Var) -> None:
        self.doubled = doubled
        self.stage = stage

    def visit_BufferLoad(self, load: BufferLoad) -> Expr:
        indices = self.visit(load.indices)
        if load.buffer not in self.doubled:
            return load if indices is load.indices else replace(load, indices=indices)
        return BufferLoad(self.doubled[load.buffer], (self.stage, *indices), load.loc)

    def visit_BufferStore(self, store: BufferStore) -> Stmt:
        value = self.visit(store.value)
        indices = self.visit(store.indices)
        if store.buffer not in self.doubled:
            return replace(store, value=value, indices=indices)
        return BufferStore(self.doubled[store.buffer], value, (self.stage, *indices), store.loc)

    def visit_BufferRegion(self, region: BufferRegion) -> BufferRegion:
        if region.buffer not in self.doubled:
            return region
        whole = Range(self.stage, IntImm(1, dtypes.int32))
        return BufferRegion(self.doubled[region.buffer], (whole, *region.ranges), region.loc)
