"""The engine's schedule for a GEMM on Hopper (sm_90a): which wgmma intrinsic of the
registry (``intrinsics/cuda_wgmma.yaml``), and how the k loop is staged.

A block computes a 64 x n tile of C: a producer warp issues the TMA tensor copies of each k
stage into one of ``stages`` shared stages once the consumers have released it, and one
consumer warpgroup (128 threads) consumes each stage with ``steps`` wgmmas
(``targets/cuda/hopper.py``, full and empty mbarriers per stage). Or a 128 x n tile: two
consumer warpgroups, each its 64 rows on the stage's shared tile of B, and a producer
warpgroup that gives them registers (setmaxnreg, the counts from the YAML).

Choices, in order:

- the tile's width n: of the widths the registry offers for the input type, the one that
  pads N least, ties to the wider (a 128-wide tile reads A once for twice the columns);
- ``steps``: 4 wgmma k steps a stage (128 bytes of k: 64 f16 or 128 8-bit values), fewer
  when K is shorter;
- the consumer warpgroups: two where the 128-row tiles still give every SM of the
  architecture (``sm_count`` of the ``gpu:`` section) a block, pad M no more than 64-row
  ones, their stages fit shared memory (at least 2) and the setmaxnreg counts fit the
  registers a block of 384 threads has at launch; else one. Two read B once for 128 rows
  (a stage's bytes per multiply-accumulate fall by a third at n = 128: 256 rows of k for
  128 x 128 against 192 for 64 x 128) and feed two warpgroups from one producer; a GEMM of
  fewer such blocks than SMs keeps the 64-row tiles, whose twice as many blocks reach more
  SMs;
- ``stages``: 4, fewer when K has fewer stages (never under 2) or when the stages would not
  fit the architecture's ``max_shared_per_block`` (the ``gpu:`` section);
- thread-block clusters: the caller's option (``cluster``, 1 by default: none), blocks
  along N sharing A's tile by a multicast tensor copy.

:func:`hopper_view` is how ``auto_tensorize(..., arch="sm_90a")`` finds such a GEMM in a
kernel: a block that a wgmma intrinsic matches with one block iterator per intrinsic
iterator (the others of extent 1, but for at most one spatial batch iterator indexing every
operand's first dimension: blockIdx.z), its result zeroed by its init, and each operand
indexed by its two iterators, one per dimension, in either order for A and B (a
dense layer's weight, N rows of K, is read in place) and in the intrinsic's order for C;
then nothing, or only elementwise blocks reading C where it lies (a bias, an activation, a
requantisation, a narrowing), which the sm_80 path's ``fuse_epilogue_chain`` inlines into
one and the kernel computes on the accumulator registers (C is then never stored).
Anything else is refused with the reason (a ScheduleError), and the engine goes on with the
families of the ``gpu:`` section's architectures. The tensorized IR tiles the block to the
intrinsic's shape and calls it (so the host validates the mapping by the intrinsic's
semantics); the CUDA kernel is :func:`hopper_kernel`'s, over the kernel's own buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

from intrinsics import Intrinsic, Registry
from intrinsics.gpu_target import GpuArchitecture
from ir import (Block, BlockRealize, Buffer, BufferLoad, BufferStore, Cast, FloatImm, IntImm,
                IterKind, PrimFunc, Stmt, Var, dtypes, post_order_visit)
from ir.dtypes import DType
from ir.errors import ScheduleError
from ir.visitor import Mutator, substitute
from targets.cuda.emit import CudaKernel
from targets.cuda.errors import EmitError
from targets.cuda.hopper import (REGISTER_STEP, SHARED_ALIGNMENT, STEP_BYTES, TILE_M,
                                 GemmOperands, HopperTiling, block_threads, choose_loads,
                                 emit_gemm, offers_mn_major, registers_of)
from targets.cuda.hopper_epilogue import Epilogue
from tensorize.engine.cuda_schedule import fuse_epilogue_chain
from tensorize.engine.gemm_view import to_intrinsic_shape
from tensorize.engine.generic_schedule import schedule_generic
from tensorize.match import Match, match_block
from tensorize.schedule import Schedule, tree

__all__ = ["HOPPER_ARCH", "HopperChoice", "HopperGemm", "hopper_gemm", "hopper_kernel",
           "hopper_schedule", "hopper_view", "schedule_hopper"]

# The architecture the wgmma family needs (its intrinsics' feature) and whose limits apply.
HOPPER_ARCH = "sm_90a"
LIMITS_ARCH = "sm_90"
STEPS = 4
STAGES = 4
MIN_STAGES = 2
_WHO = "hopper schedule"


@dataclass(frozen=True, slots=True)
class HopperGemm:
    """A kernel's GEMM as the Hopper schedule takes it: the block, the wgmma ``intrinsic``
    and the mapping (``match``) that compute it, its extents, the kernel's buffers in their
    layouts (``operands``) and the ``tiling``."""

    block: str
    match: Match
    m: int
    n: int
    k: int
    operands: GemmOperands
    intrinsic: Intrinsic
    tiling: HopperTiling

    @property
    def fused(self) -> tuple[str, ...]:
        """The kernel's blocks computed in the consumers' store (its epilogue), in order."""
        epilogue = self.operands.epilogue
        return epilogue.blocks if epilogue is not None else ()

    def describe(self) -> str:
        """One line: the block, its extents, the tile, the pipeline and the blocks fused."""
        width = _width(self.intrinsic)
        cluster = (f"; clusters of {self.tiling.cluster} blocks along N, A's tile multicast "
                   "to each" if self.tiling.cluster > 1 else "")
        epilogue = self.operands.epilogue
        fused = ""
        if epilogue is not None:
            blocks = "block" if len(epilogue.blocks) == 1 else "blocks"
            fused = (f"; {blocks} {', '.join(epilogue.blocks)} fused into the consumers' "
                     f"store (computed on the accumulator registers, {self.block}'s sums "
                     "never stored)")
        batches = self.operands.batch
        size = f"{self.m} x {self.n} x {self.k}"
        if batches > 1:
            size = f"{batches} batches (blockIdx.z) of {size}"
        if self.tiling.consumers == 1:
            roles = "one consumer warpgroup and one TMA producer warp"
        else:
            registers = registers_of(self.intrinsic)
            roles = (f"two consumer warpgroups (setmaxnreg.inc to {registers.consumer} "
                     f"registers) and one TMA producer warpgroup (setmaxnreg.dec to "
                     f"{registers.producer})")
        return (f"block {self.block}: {size} on {self.tiling.block_m} x {width} tiles, "
                f"{self.tiling.steps} wgmma k steps x {self.tiling.stages} stages, "
                f"{roles} per block{cluster}{fused}")


@dataclass(frozen=True, slots=True)
class HopperChoice:
    """What ``auto_tensorize`` made of the Hopper schedule for a kernel on sm_90a: the
    ``gemm`` it computes, or None and the ``reason`` the schedule refused it."""

    gemm: HopperGemm | None
    reason: str = ""


def _candidates(registry: Registry, in_dtype: DType) -> list[Intrinsic]:
    return [i for i in registry.compute_intrinsics("cuda")
            if i.feature == HOPPER_ARCH and i.operands[0].buffer.dtype == in_dtype]


def hopper_schedule(m: int, n: int, k: int, in_dtype: DType, registry: Registry,
                    cluster: int = 1, batch: int = 1) -> tuple[Intrinsic, HopperTiling]:
    """The wgmma intrinsic and tiling for ``batch`` GEMMs of ``m x n x k`` of ``in_dtype``
    inputs (the module docstring's choices), in thread-block clusters of ``cluster`` blocks
    along N. Raises ScheduleError naming the input type when the registry has no wgmma
    intrinsic for it, or the shared memory needed when even 2 stages do not fit."""
    candidates = _candidates(registry, in_dtype)
    if not candidates:
        raise ScheduleError("hopper_schedule", f"requires a wgmma intrinsic (feature "
                            f"{HOPPER_ARCH}) for {in_dtype} inputs, got none in the registry")
    intrinsic = min(candidates, key=lambda i: (-(-n // _width(i)) * _width(i), -_width(i)))
    return intrinsic, _tiling(intrinsic, (m, n, k, batch), registry, cluster)


def _tiling(intrinsic: Intrinsic, extents: tuple[int, int, int, int], registry: Registry,
            cluster: int) -> HopperTiling:
    """The steps, stages and consumer warpgroups of ``intrinsic``'s GEMM (``extents``: M,
    N, K and the batches; the module docstring), in clusters of ``cluster`` blocks;
    ScheduleError for a cluster the backend refuses or setmaxnreg counts it rejects."""
    m, n, k, batch = extents
    k_step = intrinsic.operands[0].buffer.shape[1]
    k_steps = -(-k // k_step)
    steps = min(STEPS, k_steps)
    k_stages = -(-k_steps // steps)
    limits = registry.gpu("cuda").architectures[LIMITS_ARCH]
    consumers = _consumers(intrinsic, (m, n, batch), registry, steps)
    fitting = _stages_fitting(intrinsic, registry, steps, consumers)
    if fitting < MIN_STAGES:
        raise ScheduleError("hopper_schedule", f"requires {MIN_STAGES} stages of "
                            f"{_stage_bytes(intrinsic, steps, consumers)} bytes within "
                            f"{limits.max_shared_per_block} bytes of shared memory")
    stages = max(MIN_STAGES, min(STAGES, k_stages, fitting))
    try:
        return HopperTiling(steps=steps, stages=stages, cluster=cluster, consumers=consumers)
    except EmitError as err:
        raise ScheduleError("hopper_schedule", err.message) from None


def _consumers(intrinsic: Intrinsic, extents: tuple[int, int, int], registry: Registry,
               steps: int) -> int:
    """The consumer warpgroups of a block for ``intrinsic``'s GEMM (``extents``: M, N and
    the batches) with stages of ``steps`` k steps: 2 where the module docstring's
    conditions hold, else 1."""
    m, n, batch = extents
    limits = registry.gpu("cuda").architectures[LIMITS_ARCH]
    tall = 2 * TILE_M
    # Fewer 128-row blocks than SMs: the 64-row tiles' twice as many blocks reach more SMs.
    if -(-m // tall) * -(-n // _width(intrinsic)) * batch < limits.sm_count:
        return 1
    # 128-row tiles padding M further than 64-row ones would compute rows nobody reads.
    if -(-m // tall) * tall != -(-m // TILE_M) * TILE_M:
        return 1
    if not _registers_fit(intrinsic, limits):
        return 1
    return 2 if _stages_fitting(intrinsic, registry, steps, 2) >= MIN_STAGES else 1


def _registers_fit(intrinsic: Intrinsic, limits: GpuArchitecture) -> bool:
    """Whether the YAML's setmaxnreg counts for two consumer warpgroups and a producer one
    fit the registers such a block gets at launch, one block an SM (``__launch_bounds__``:
    the register file over its threads, in steps of 8, at most the thread's limit).
    ScheduleError naming the YAML's line for counts setmaxnreg cannot take."""
    try:
        registers = registers_of(intrinsic)
    except EmitError as err:
        raise ScheduleError("hopper_schedule", err.message) from None
    threads = block_threads(2)
    at_launch = min(limits.max_registers_per_thread,
                    limits.registers_per_sm // threads) // REGISTER_STEP * REGISTER_STEP
    return registers.total(2) <= threads * at_launch


def _stage_bytes(intrinsic: Intrinsic, steps: int, consumers: int) -> int:
    """A stage's tiles: A's 64 rows per consumer warpgroup and B's, of ``steps`` k steps."""
    return (TILE_M * consumers + _width(intrinsic)) * steps * STEP_BYTES


def _stages_fitting(intrinsic: Intrinsic, registry: Registry, steps: int, consumers: int
                    ) -> int:
    """How many stages of ``steps`` k steps for ``consumers`` warpgroups fit the
    architecture's ``max_shared_per_block``."""
    stage_bytes = _stage_bytes(intrinsic, steps, consumers)
    # The larger repeat of B's two layouts (K-major, and MN-major where the type has it):
    # the kernel's operands, which pick one, are not known here.
    layouts = (False, True) if offers_mn_major(intrinsic, registry) else (False,)
    try:
        repeat = max(choose_loads(intrinsic, registry, steps, b_mn).repeat for b_mn in layouts)
    except EmitError as err:
        raise ScheduleError("hopper_schedule", err.message) from None
    limit = registry.gpu("cuda").architectures[LIMITS_ARCH].max_shared_per_block
    # Each stage also holds its two 8-byte mbarriers (full and empty); the stages start at a
    # multiple of the swizzle pattern's repeat, up to repeat - 128 bytes into the array.
    return (limit - repeat + SHARED_ALIGNMENT) // (stage_bytes + 16)


def _width(intrinsic: Intrinsic) -> int:
    return intrinsic.operands[2].buffer.shape[1]


def hopper_gemm(m: int, n: int, k: int, in_dtype: DType, registry: Registry,
                name: str = "gemm_hopper", cluster: int = 1) -> CudaKernel:
    """The ``m x n x k`` GEMM (A row-major m x k, B row-major k x n, C m x n in the
    intrinsic's accumulator type) as CUDA C++ for sm_90a, scheduled by
    :func:`hopper_schedule` (in clusters of ``cluster`` blocks)."""
    intrinsic, tiling = hopper_schedule(m, n, k, in_dtype, registry, cluster)
    return emit_gemm(intrinsic, registry, m, n, k, tiling, name)


def hopper_kernel(gemm: HopperGemm, registry: Registry, name: str) -> CudaKernel:
    """The CUDA C++ of a kernel's GEMM (:func:`hopper_view`'s) over the kernel's own
    buffers, its launches named after ``name``."""
    return emit_gemm(gemm.intrinsic, registry, gemm.m, gemm.n, gemm.k, gemm.tiling, name,
                     gemm.operands)


def _check(cond: bool, reason: str) -> None:
    if not cond:
        raise ScheduleError(_WHO, reason)


def hopper_view(func: PrimFunc, registry: Registry, intrinsic: str | None = None,
                cluster: int = 1) -> HopperGemm:
    """The GEMM of ``func`` as the Hopper schedule takes it (the module docstring says
    which), with the elementwise blocks after it as its epilogue (``operands.epilogue``),
    through the wgmma intrinsic the schedule's choices pick, or through
    ``intrinsic`` (a name) when given, in thread-block clusters of ``cluster`` blocks.
    Raises ScheduleError with the reason when the kernel is not such a GEMM."""
    blocks = tree.block_names(func)
    _check(bool(blocks), "requires a GEMM block, got a kernel of none")
    name = blocks[0]
    realize = tree.find_block(func, name).node
    epilogue_block = _epilogue_block(func, name, registry)
    block = realize.block
    _check(_zero(block.init), f"block {name} requires an init that zeroes its result (the "
                              "kernel's accumulators start at zero), got "
                              + ("none" if block.init is None else "another init"))
    _check(_whole_domain(func, realize), f"block {name} requires each iterator bound to a "
                                         "loop of its own extent, with no predicate")
    candidates = [i for i in registry.compute_intrinsics("cuda") if i.feature == HOPPER_ARCH
                  and (intrinsic is None or i.name == intrinsic)]
    _check(bool(candidates), f"requires a wgmma intrinsic (feature {HOPPER_ARCH}), got "
                             + (f"{intrinsic}, not one" if intrinsic else "none in the "
                                "registry"))
    results = {i.name: match_block(func, name, i, registry) for i in candidates}
    matches = [m for r in results.values() if isinstance(r, list) for m in r]
    reasons = [r.reason for r in results.values() if not isinstance(r, list) and r]
    _check(bool(matches), f"no wgmma intrinsic matches block {name}: "
                          + (reasons[0] if reasons else "no mapping"))
    in_dtype = matches[0].intrinsic.operands[0].buffer.dtype
    extents = {iv.var.name: iv.extent for iv in block.iter_vars}
    views = [v for v in (_operands(func, block, m, extents, epilogue_block) for m in matches)
             if v is not None]
    _check(bool(views), f"block {name} requires each operand indexed by its two GEMM "
                        "iterators, one per dimension (C as M rows of N), after one batch "
                        "iterator indexing every operand's first dimension where there is "
                        "one, the others of extent 1")
    m, n, k = (extents[views[0][0].iter_map[iv.var.name][0]]
               for iv in views[0][0].intrinsic.iter_vars)
    batch = views[0][1].batch
    if intrinsic is None:
        chosen, tiling = hopper_schedule(m, n, k, in_dtype, registry, cluster, batch)
    else:
        chosen, tiling = candidates[0], _tiling(candidates[0], (m, n, k, batch), registry,
                                                cluster)
    match, operands = next(((mt, ops) for mt, ops in views if mt.intrinsic is chosen),
                           (None, None))
    _check(match is not None and operands is not None,
           f"requires a mapping of block {name} onto {chosen.name}")
    gemm = HopperGemm(name, match, m, n, k, operands, chosen, tiling)
    # The backend's own checks (the operands' shapes, the grid, names that its intermediates
    # would take), so that a kernel taken here always emits.
    try:
        hopper_kernel(gemm, registry, func.name)
    except EmitError as err:
        reason = err.message.removeprefix("emit_gemm ")
        raise ScheduleError(_WHO, f"block {name} {reason}") from None
    return gemm


def _zero(init: Stmt | None) -> bool:
    """Whether ``init`` stores zero (a literal, or a cast of one)."""
    if not isinstance(init, BufferStore):
        return False
    value = init.value.value if isinstance(init.value, Cast) else init.value
    return isinstance(value, (IntImm, FloatImm)) and value.value == 0


def _whole_domain(func: PrimFunc, realize: BlockRealize) -> bool:
    """Whether every iterator of the block is bound to its own loop of its extent."""
    if not (isinstance(realize.predicate, IntImm) and realize.predicate.value == 1):
        return False
    bound = list(realize.bindings)
    if not all(isinstance(b, Var) for b in bound) or len(set(bound)) != len(bound):
        return False
    for var, iv in zip(bound, realize.block.iter_vars):
        loop = tree.find_loop(func, var)
        if loop is None or loop.node.extent != iv.extent:
            return False
    return True


def _epilogue_block(func: PrimFunc, gemm: str, registry: Registry) -> Block | None:
    """The blocks after the GEMM block ``gemm`` as one, each inlined into the next (the sm_80
    path's ``fuse_epilogue_chain``), or None when the kernel is the GEMM alone. Raises
    ScheduleError naming the blocks when the others are not such a chain."""
    blocks = tree.block_names(func)
    if len(blocks) == 1:
        return None
    sch = Schedule(func, registry)
    c = tree.find_block(func, gemm).node.block.writes[0].buffer.name
    fused = fuse_epilogue_chain(sch, c)
    _check(fused is not None and len(tree.block_names(sch.func)) == 2,
           f"requires one GEMM block, then only elementwise blocks reading its result where "
           f"it lies (fused into the consumers' store), got {len(blocks)} blocks "
           f"({', '.join(blocks)}): a second stage, a copy before the GEMM or a block "
           "reading the sums elsewhere is not fused into the warp-specialised kernel")
    return sch.get(fused).block


def _epilogue(block: Block, c: Buffer, extents: tuple[int, int, int], names: tuple[str, ...]
              ) -> Epilogue:
    """The fused epilogue ``block`` (its store at its own iterators, reading C's sums) as the
    backend takes it: its value over the element (row, col) of one batch's M x N result,
    ``extents`` being M, N and the batches. ``names``: the blocks it computes.
    ScheduleError when it reads C other than where it stores."""
    m, n, batches = extents
    store = block.body
    _check(isinstance(store, BufferStore), f"block {block.name} requires one store as its "
                                           f"body, got {type(store).__name__}")
    ivs = [iv.var for iv in block.iter_vars]
    row, col, batch = (Var(x, dtypes.int32) for x in ("row", "col", "batch"))
    # C's dimensions of extent over 1 are the batch's, M's then N's (hopper_view requires
    # that order).
    wide = [v for v, iv in zip(ivs, block.iter_vars) if iv.extent > 1]
    axes = [a for a, extent in ((batch, batches), (row, m), (col, n)) if extent > 1]
    _check(len(wide) == len(axes), f"block {block.name} requires the GEMM's M x N "
                                   f"iteration space, got extents "
                                   f"{[iv.extent for iv in block.iter_vars]}")
    mapping = dict(zip(wide, axes)) | {v: IntImm(0, dtypes.int32) for v in ivs
                                       if v not in wide}
    expected = tuple(mapping[v] for v in ivs)
    acc = Buffer(c.name, (m, n), c.dtype)
    inputs: dict[str, Buffer] = {}

    class _Sums(Mutator):
        def visit_BufferLoad(self, load: BufferLoad) -> BufferLoad:
            if load.buffer.name != c.name:
                inputs.setdefault(load.buffer.name, load.buffer)
                return BufferLoad(load.buffer, self.visit(load.indices))
            _check(tuple(load.indices) == expected,
                   f"block {block.name} requires reading {c.name} at the element it stores "
                   f"({', '.join(map(str, store.indices))}), got "
                   f"{', '.join(map(str, load.indices))}")
            return BufferLoad(acc, (row, col))

    value = _Sums().visit(substitute(store.value, mapping))
    return Epilogue(row, col, value, acc, store.buffer, tuple(inputs.values()), names, batch)


def _operands(func: PrimFunc, block: Block, match: Match, extents: dict[str, int],
              epilogue: Block | None) -> tuple[Match, GemmOperands] | None:
    """The kernel's buffers in their layouts for ``match`` (None when an operand is not
    indexed by its two iterators alone, one per dimension, or C not in M, N order), with
    the fused ``epilogue`` block after the GEMM where there is one."""
    groups = {t: names[0] for t, names in match.iter_map.items() if len(names) == 1}
    if len(groups) != len(match.iter_map):
        return None
    # At most one iterator besides the GEMM's of extent over 1: a spatial batch, the leading
    # dimension of every operand (blockIdx.z).
    outer = [v for v in extents if v not in groups.values() and extents[v] != 1]
    kinds = {iv.var.name: iv.kind for iv in block.iter_vars}
    if len(outer) > 1 or any(kinds[v] is not IterKind.SPATIAL for v in outer):
        return None
    batch = tuple(outer)
    i, j, kk = (groups[iv.var.name] for iv in match.intrinsic.iter_vars)
    by_operand = {operand: buffer for buffer, operand in match.buffer_map.items()}
    buffers = {x.name: x for x in (*func.params, *func.allocs)}
    if epilogue is None and sorted(by_operand.values()) != sorted(p.name for p in func.params):
        return None
    orders = {name: _index_order(block, name, extents) for name in by_operand.values()}
    a, b, c = (by_operand[o.name] for o in match.intrinsic.operands)

    def order(*names: str) -> tuple[str, ...]:
        # A unit extent (a 1 x N x K GEMM's row) indexes nothing: _index_order drops it.
        return batch + tuple(v for v in names if extents[v] > 1)

    # Where a unit extent makes both orders one, the later entry wins: the one read in place.
    wanted = {a: {order(kk, i): True, order(i, kk): False},
              b: {order(kk, j): False, order(j, kk): True}, c: {order(i, j): False}}
    layouts = {name: wanted[name].get(orders[name]) for name in wanted}
    if None in layouts.values():
        return None
    fused = None
    if epilogue is not None:
        names = tuple(b for b in tree.block_names(func) if b != block.name)
        fused = _epilogue(epilogue, buffers[c], (extents[i], extents[j],
                                                 extents[batch[0]] if batch else 1), names)
    return match, GemmOperands(buffers[a], buffers[b], buffers[c], layouts[a], layouts[b],
                               tuple(p.name for p in func.params), fused,
                               extents[batch[0]] if batch else 1)


def _index_order(block: Block, buffer: str, extents: dict[str, int]
                 ) -> tuple[str, ...] | None:
    """The iterators (of extent over 1) indexing ``buffer``'s dimensions of extent over 1,
    in order, when every access agrees and indexes each dimension by one iterator (or a
    constant 0 in a unit dimension); else None."""
    accesses: list[BufferLoad | BufferStore] = []
    for stmt in (block.body, block.init):
        if stmt is not None:
            post_order_visit(stmt, lambda x: accesses.append(x) if isinstance(
                x, (BufferLoad, BufferStore)) and x.buffer.name == buffer else None)
    orders = set()
    for access in accesses:
        order = []
        for index, dim in zip(access.indices, access.buffer.shape):
            if isinstance(index, Var) and extents.get(index.name, 0) > 1:
                order.append(index.name)
            elif dim != 1 or not (isinstance(index, Var) or
                                  (isinstance(index, IntImm) and index.value == 0)):
                return None
        orders.add(tuple(order))
    return orders.pop() if len(orders) == 1 else None


def schedule_hopper(sch: Schedule, gemm: HopperGemm) -> tuple[int, ...]:
    """The IR of the Hopper GEMM: block ``gemm.block`` of ``sch`` in the intrinsic's shape,
    tiled to it and tensorized (the host validates it by the intrinsic's semantics; the
    kernel itself is :func:`hopper_kernel`'s). Returns the padded extents of the
    intrinsic-shaped iteration space."""
    to_intrinsic_shape(sch, gemm.match)
    count = len(gemm.intrinsic.iter_vars)
    ivs = sch.get(sch.get_block(gemm.block)).block.iter_vars
    extents = tuple(iv.extent for iv in ivs[-count:])
    schedule_generic(sch, gemm.block, gemm.intrinsic)
    return extents
