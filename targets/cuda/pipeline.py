"""Multi-stage buffering of the shared-memory stages of a tiled kernel's reduction loop, and
double buffering of the fragments its warps load from them.

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
compute must see its tiles complete: the backend issues the copies as ``cp.async`` and
commits each prologue stage and each step's prefetch as one group (an empty one on the last
steps, so the count stays regular).

**The simple form** (compute that is not a slice loop of fragment loads and MMAs) opens
every step with ``cp.async.wait_group N-2`` (of the ``N-1 + ko`` groups committed, the first
``ko + 1`` hold step ``ko``'s tiles) and a ``__syncthreads()``, which also orders the reads
of stage ``(ko - 1) % N`` in the step before ahead of this step's prefetch into it. Its
first MMA after the barrier waits for fragment loads issued after it: the tensor pipe drains
at every step.

**Fragments double-buffered across the barrier.** When the compute is the warp loops around
one loop of ``K1`` slices, each slice loading fragments from the stages and then computing
on them (the GEMM's ``k_1``), every fragment buffer ``F`` those loads fill gets two copies
per warp (leading dimensions ``2, warps...``: in the IR the warps' fragments are distinct
elements, as they are distinct registers on the GPU), and the slices are unrolled so that
each slice loads the *next* slice's fragments into the other copy before computing on its
own (``c(ko, k1) = (ko * K1 + k1) % 2``, a constant per slice when ``K1`` is even)::

    copies(s) into stage s, for s in 0 .. N-2                # prologue, one group each
    [wait N-2; barrier] fragments(0, 0) from stage 0 into copy 0          # the head
    for ko in range(K):
        if ko + N-1 < K: copies(ko + N-1) into stage (ko + N-1) % N       # the prefetch
        for each warp, for k1 in 0 .. K1-1 (unrolled):
            k1 < K1-1:  fragments(ko, k1+1) from stage ko % N into copy c(ko, k1+1)
            k1 = K1-1:  [wait N-2; barrier]
                        if ko + 1 < K: fragments(ko+1, 0) from stage (ko+1) % N
                                       into copy c(ko+1, 0)
            compute(ko, k1) from copy c(ko, k1)

The emitter issues the prefetch (and its commit) after slice 0's fragment loads when
``K1 > 1`` (the copies then overlap the first slice's MMAs), and before the barrier's slice
when ``K1 = 1``. Why the brackets are where they must be:

- *The wait.* When step ``ko`` waits, its own prefetch is committed (slice 0, or before the
  wait with ``K1 = 1``): ``N-1 + ko + 1`` groups, of which ``wait_group N-2`` leaves at most
  ``N-2`` in flight, so the first ``ko + 2`` are complete (group ``i`` holds step ``i``'s
  tiles), step ``ko + 1``'s among them, which the loads after the barrier read. The head's
  wait (``N-1`` groups committed) completes step 0's.
- *The barrier, for the reads.* It follows every thread's wait, so every thread's copies of
  stage ``(ko+1) % N`` are visible to every warp after it.
- *The barrier, for the overwrite.* Step ``ko + 1``'s prefetch (issued after step ``ko``'s
  barrier) overwrites stage ``ko % N``. Every read of that stage is a fragment load of step
  ``ko``: slice 0's in step ``ko - 1`` after its barrier, the others in step ``ko``'s
  slices before its barrier. So every warp's reads of it precede step ``ko``'s barrier,
  and the prefetch follows it.
- *The registers.* Copy ``c(ko, k1)`` is written by the slice before (or the head), read by
  slice ``k1``'s compute, and next overwritten by slice ``k1 + 1``'s loads (of slice
  ``k1 + 2``), after that compute: one warp's own registers, in program order.

So the first MMAs after each barrier (the last slice's) read registers loaded before it:
the tensor pipe keeps going across the barrier, as CUTLASS's multistage mainloop does
(ptxas may still move MMAs, which read only registers, above the barrier: it does for
WMMA; :func:`targets.cuda.sass.barrier_drains` checks the machine code).
``K1`` odd makes the copy alternate with ``ko``; the emitter then unrolls the step loop by
an even count (:attr:`Pipelined.unroll`), so each copy index is still a constant.
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
    (``commits``, compared by identity).

    For loops whose fragments are double-buffered (:attr:`registers`): ``fragments``, each
    doubled fragment buffer with its original; ``waits``, the statements that
    ``cp.async.wait_group`` (of the count given) and a ``__syncthreads()`` open;
    ``deferred``, (anchor, prefetch) pairs: the prefetch and its commit are issued after the
    anchor rather than where the IR has them; ``unroll``, each such loop's unroll factor."""

    func: PrimFunc
    loops: frozenset[Var]
    staged: dict[Buffer, Buffer]
    stages: dict[Var, int] = field(default_factory=dict)
    commits: tuple[Stmt, ...] = ()
    prologue: tuple[Stmt, ...] = ()
    fragments: dict[Buffer, Buffer] = field(default_factory=dict)
    waits: tuple[tuple[Stmt, int], ...] = ()
    deferred: tuple[tuple[Stmt, Stmt], ...] = ()
    unroll: dict[Var, int] = field(default_factory=dict)

    @property
    def registers(self) -> frozenset[Var]:
        """The pipelined loops whose fragments are double-buffered."""
        return frozenset(self.unroll)

    def commits_after(self, stmt: Stmt) -> bool:
        """Whether a copy group is committed after prologue statement ``stmt``."""
        return any(stmt is c for c in self.commits)

    def in_prologue(self, stmt: Stmt) -> bool:
        """Whether ``stmt`` is a prologue copy (into a stage no other prologue copy
        writes)."""
        return any(stmt is p for p in self.prologue)

    def wait_before(self, stmt: Stmt) -> int | None:
        """The ``cp.async.wait_group`` count that opens ``stmt`` (with a barrier), or
        None."""
        return next((count for s, count in self.waits if s is stmt), None)

    def prefetch_after(self, stmt: Stmt) -> Stmt | None:
        """The prefetch issued (and committed) right after ``stmt``, or None."""
        return next((p for anchor, p in self.deferred if anchor is stmt), None)

    def is_deferred(self, stmt: Stmt) -> bool:
        """Whether ``stmt`` is a prefetch issued at its anchor, not where it stands."""
        return any(stmt is p for _, p in self.deferred)


def software_pipeline(func: PrimFunc, stages: int = STAGES,
                      double_fragments: bool = True) -> Pipelined:
    """Stage ``stages`` deep (at least 2) every block-level serial loop of ``func``'s root
    statements whose body starts with copies from global into shared buffers used nowhere
    else, followed by warp code reading them (module docs); with ``double_fragments``, the
    fragments its slices load are double-buffered across the barrier where the compute has
    that shape (else the simple form). A function without such a loop comes back as is."""
    if not isinstance(stages, int) or stages < 2:
        raise ValueError(f"software_pipeline: argument 'stages': expected an int of at least "
                         f"2, got {stages!r}")
    plan = _Plan(stages, double_fragments)
    root = func.body.block
    body = _rewrite(root.body, root.body, plan)
    if body is root.body:
        return Pipelined(func, frozenset(), {})
    doubled = {old: new for new, old in plan.staged.items()} | plan.fragments_of
    allocs = tuple(doubled.get(b, b) for b in root.alloc_buffers)
    block = replace(root, body=body, alloc_buffers=allocs)
    result = PrimFunc(func.name, func.params, replace(func.body, block=block), func.loc)
    return Pipelined(result, frozenset(plan.stages), plan.staged, plan.stages,
                     tuple(plan.commits), tuple(plan.prologue),
                     {new: old for old, new in plan.fragments_of.items()}, tuple(plan.waits),
                     tuple(plan.deferred), plan.unroll)


@dataclass
class _Plan:
    """What the rewrite has done so far: the stage count asked for, and per loop rewritten
    its stages, the staged buffers, the prologue's statements and its group ends; whether
    to double-buffer fragments, and for loops whose fragments are double-buffered, the
    doubled fragment buffers (by original), the statements a wait and barrier open, the
    deferred prefetches and the unroll factor."""

    wanted: int
    double_fragments: bool
    stages: dict[Var, int] = field(default_factory=dict)
    staged: dict[Buffer, Buffer] = field(default_factory=dict)
    commits: list[Stmt] = field(default_factory=list)
    prologue: list[Stmt] = field(default_factory=list)
    fragments_of: dict[Buffer, Buffer] = field(default_factory=dict)
    waits: list[tuple[Stmt, int]] = field(default_factory=list)
    deferred: list[tuple[Stmt, Stmt]] = field(default_factory=list)
    unroll: dict[Var, int] = field(default_factory=dict)


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
    guard = IfThenElse(ko + ahead < IntImm(stmt.extent, ko.dtype), _seq(prefetch))
    plan.stages[ko] = n
    plan.staged.update({new: old for old, new in staged.items()})
    doubled = (_double_fragments(list(body[count:]), stmt, guard, root, staged, n, plan)
               if plan.double_fragments else None)
    if doubled is not None:
        return _seq([*prologue, *doubled])
    rest = [_staged(s, staged, ko % IntImm(n, ko.dtype), n) for s in body[count:]]
    loop = replace(stmt, body=_seq([guard, *rest]))
    return _seq([*prologue, loop])


def _double_fragments(rest: list[Stmt], loop: For, guard: Stmt, root: Stmt,
                      staged: dict[Buffer, Buffer], n: int, plan: _Plan) -> list[Stmt] | None:
    """The head and the loop with the fragments double-buffered across the barrier (module
    docs), when the compute ``rest`` is warp loops around one slice loop of fragment loads
    from the staged buffers followed by compute that only reads those fragments; else
    None."""
    sliced = _slice_loop(rest, root, staged)
    if sliced is None:
        return None
    warps, slices, loads, compute, fragments = sliced
    ko, k1, steps, count = loop.var, slices.var, loop.extent, slices.extent
    warp_vars = tuple(w.var for w in warps)
    lead = (2, *(w.extent for w in warps))
    doubled = {f: f.with_(shape=(*lead, *f.shape), strides=None) for f in fragments}

    def copy(step: Expr, k: int) -> Expr:
        # c(ko, k1) = (ko * K1 + k1) % 2: a constant when K1 is even, else (ko + k1) % 2.
        if count % 2 == 0:
            return IntImm(k % 2, dtypes.int32)
        if isinstance(step, IntImm):
            return IntImm((step.value + k) % 2, dtypes.int32)
        return (step + IntImm(k, ko.dtype) if k else step) % IntImm(2, ko.dtype)

    def fill(step: Expr, k: int, stage: Expr, parity: Expr) -> list[Stmt]:
        """The fragment loads of slice ``k`` of step ``step`` (``parity`` for the copy's)
        into their copy."""
        bound = {ko: step, k1: IntImm(k, k1.dtype)}
        return [_copied(_staged(_renamed(substitute(s, bound)), staged, stage, n),
                        doubled, copy(parity, k), warp_vars, lead) for s in loads]

    def computed(k: int) -> list[Stmt]:
        return [_copied(_renamed(substitute(s, {k1: IntImm(k, k1.dtype)})), doubled,
                        copy(ko, k), warp_vars, lead) for s in compute]

    zero = IntImm(0, ko.dtype)
    head = _renamed(_in_warps(warps, fill(zero, 0, zero, zero)))
    following = ko + IntImm(1, ko.dtype)
    # (ko + 1) % K, not ko + 1: the guard skips the last step, and the bindings stay in
    # their ranges for every ko.
    last = IfThenElse(following < IntImm(steps, ko.dtype),
                      _seq(fill(following % IntImm(steps, ko.dtype), 0,
                                following % IntImm(n, ko.dtype), following)))
    body: list[Stmt] = []
    for k in range(count - 1):
        ahead = fill(ko, k + 1, ko % IntImm(n, ko.dtype), ko)
        if k == 0:
            plan.deferred.append((ahead[-1], guard))
        body += [*ahead, *computed(k)]
    body += [last, *computed(count - 1)]
    plan.waits += [(head, n - 2), (last, n - 2)]
    plan.fragments_of.update(doubled)
    plan.unroll[ko] = n if count % 2 == 0 or n % 2 == 0 else 2 * n
    return [head, replace(loop, body=_seq([guard, _in_warps(warps, body)]))]


def _slice_loop(rest: list[Stmt], root: Stmt, staged: dict[Buffer, Buffer]
                ) -> tuple[list[For], For, list[Stmt], list[Stmt], list[Buffer]] | None:
    """(warp loops, slice loop, its fragment loads, its compute, the fragment buffers the
    loads fill) when ``rest`` has the shape :func:`_double_fragments` rewrites."""
    if len(rest) != 1:
        return None
    warps: list[For] = []
    stmt = rest[0]
    while isinstance(stmt, For) and (stmt.thread or "").startswith("threadIdx"):
        warps.append(stmt)
        stmt = stmt.body
    if not warps or not isinstance(stmt, For) or stmt.kind not in (
            ForKind.SERIAL, ForKind.UNROLLED) or not isinstance(stmt.body, SeqStmt):
        return None
    parts = stmt.body.stmts
    loads = 0
    while loads < len(parts) and _reads_any(parts[loads], staged):
        loads += 1
    fragments = sorted({b for s in parts[:loads] for b in _written(s)}, key=lambda b: b.name)
    if not loads or loads == len(parts) or any(
            b.scope in ("global", "shared") for b in fragments):
        return None
    for part in parts[loads:]:
        if _reads_any(part, staged) or any(_writes(part, f) for f in fragments):
            return None
    if any(_uses(root, f) != _uses(stmt, f) for f in fragments):
        return None
    return warps, stmt, list(parts[:loads]), list(parts[loads:]), fragments


def _in_warps(warps: list[For], stmts: list[Stmt]) -> Stmt:
    """``stmts`` inside copies of the warp loops ``warps``."""
    inner = _seq(stmts)
    for warp in reversed(warps):
        inner = replace(warp, body=inner)
    return inner


def _reads_any(stmt: Stmt, buffers: dict[Buffer, Buffer]) -> bool:
    return any(_uses(stmt, b) for b in buffers)


def _written(stmt: Stmt) -> set[Buffer]:
    """The buffers the blocks of ``stmt`` declare they write."""
    found: set[Buffer] = set()
    post_order_visit(stmt, lambda n: found.update(r.buffer for r in n.writes)
                     if isinstance(n, Block) else None)
    return found


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
    return _StageBlocks(doubled, (stage,), (stages,), ("stage",)).visit(stmt)


def _copied(stmt: Stmt, doubled: dict[Buffer, Buffer], copy: Expr, warps: tuple[Var, ...],
            extents: tuple[int, ...]) -> Stmt:
    """``stmt`` with every block touching a double-buffered fragment given iterators for
    its copy (bound to ``copy``) and its warp (bound to the warp loops' ``warps``), of
    ``extents``, through which it indexes the fragment's leading dimensions."""
    names = ("copy", *("warp" for _ in warps))
    return _StageBlocks(doubled, (copy, *warps), extents, names).visit(stmt)


class _StageBlocks(Mutator):
    def __init__(self, doubled: dict[Buffer, Buffer], bindings: tuple[Expr, ...],
                 extents: tuple[int, ...], names: tuple[str, ...]) -> None:
        self.doubled = doubled
        self.bindings = bindings
        self.extents = extents
        self.names = names

    def visit_BlockRealize(self, realize: BlockRealize) -> BlockRealize:
        if not any(_uses(realize.block, b) for b in self.doubled):
            return realize
        leads = tuple(Var(name, dtypes.int32) for name in self.names)
        inner = _AddStage(self.doubled, leads)
        block: Block = realize.block
        added = tuple(IterVar(var, extent) for var, extent in zip(leads, self.extents))
        block = replace(block, iter_vars=(*block.iter_vars, *added),
                        reads=inner.visit(block.reads), writes=inner.visit(block.writes),
                        body=inner.visit(block.body))
        return replace(realize, block=block, bindings=(*realize.bindings, *self.bindings))


class _AddStage(Mutator):
    def __init__(self, doubled: dict[Buffer, Buffer], leads: tuple[Var, ...]) -> None:
        self.doubled = doubled
        self.leads = leads

    def visit_BufferLoad(self, load: BufferLoad) -> Expr:
        indices = self.visit(load.indices)
        if load.buffer not in self.doubled:
            return load if indices is load.indices else replace(load, indices=indices)
        return BufferLoad(self.doubled[load.buffer], (*self.leads, *indices), load.loc)

    def visit_BufferStore(self, store: BufferStore) -> Stmt:
        value = self.visit(store.value)
        indices = self.visit(store.indices)
        if store.buffer not in self.doubled:
            return replace(store, value=value, indices=indices)
        return BufferStore(self.doubled[store.buffer], value, (*self.leads, *indices),
                           store.loc)

    def visit_BufferRegion(self, region: BufferRegion) -> BufferRegion:
        if region.buffer not in self.doubled:
            return region
        ones = tuple(Range(lead, IntImm(1, dtypes.int32)) for lead in self.leads)
        return BufferRegion(self.doubled[region.buffer], (*ones, *region.ranges), region.loc)
