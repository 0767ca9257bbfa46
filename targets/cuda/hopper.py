"""A GEMM for Hopper (sm_90a) from the wgmma family of ``intrinsics/cuda_wgmma.yaml``:
``C[m, n] = sum_k acc(A[m, k]) * acc(B[k, n])``, A row-major M x K, B row-major K x N.

Two launches, and up to two more:

1. A B stored K rows of N is read in place, MN-major, where the type's descriptor loads
   offer that layout (the 16-bit types': ``transpose: 1``, the instruction's imm-trans-b)
   and its rows are a multiple of 16 bytes (a tensor map's row stride must be); else
   ``pack_b`` writes it transposed (``B_t``, N rows of K: the 8-bit types have no
   transposed wgmma operand), 32 x 32 tiles at a time through shared memory so that both
   its reads and its writes are coalesced. ``pack_a`` copies A into ``A_k`` only when its
   rows are not a multiple of 16 bytes. Neither pads to the tile: the tensor copies
   zero-fill past the extents. A kernel's operands may come laid out otherwise
   (:class:`GemmOperands`): a B stored N rows of K (a dense layer's weight) is read in
   place, K-major, where its rows are a multiple of 16 bytes, and an A stored K rows of M
   is packed transposed as B is.
2. ``gemm``: one block per 64 x n tile of C, warp-specialised: a consumer warpgroup
   (threads 0-127) and a producer warp (128-159, lane 0 issuing); or per 128 x n tile,
   two consumer warpgroups and a producer warpgroup (below). Each of the ``stages``
   shared stages has a full mbarrier (one arrival and the stage's bytes: the producer's
   ``arrive.expect_tx`` and its TMA tensor copies) and an empty one (one arrival per
   consumer thread). A stage holds, per operand, its rows of the stage's bytes of k as
   boxes of rows x the swizzle span (:func:`choose_loads`: the widest mode of the YAML's
   descriptor loads whose span divides the stage, so 128 bytes of k are one box per operand
   with the 128-byte swizzle), landed one after another from the operand's 2-d tensor map
   with the mode's swizzle; an MN-major B as one box per k step and panel of n (a step's 16
   rows of k by the span's bytes of n: the widest MN-major mode whose span divides the
   tile's bytes of n), a step's panels one after another, so that the descriptor's panel
   offset is the YAML's constant; the stages start at a multiple of the larger repeat. The
   descriptors name each k step's 32 bytes within a box row (without swizzle: two boxes of
   16 bytes, the leading byte offset apart; MN-major: the step's panels); each is built
   once and advanced by the step's offset. The producer refills a stage once its empty
   phase completes; the consumers wait on its full phase, issue the stage's wgmmas, commit
   them, wait for the previous stage's group (``wait_group 1``) and release that stage.
   With two consumer warpgroups (``HopperTiling.consumers``) a block computes a 128 x n
   tile: a stage holds A's two 64-row tiles one after another (each landed and read as the
   one warpgroup's tile is), then B's, which both warpgroups' wgmmas read; each warpgroup
   builds its descriptor of A at its own tile and stores its 64 rows; the empty mbarriers
   expect both warpgroups' arrivals. The producer is then a warpgroup (threads 256-383,
   the first issuing), which lowers its registers by ``setmaxnreg.dec`` while the
   consumers raise theirs by ``setmaxnreg.inc``, to the compute intrinsic's
   ``producer_registers`` and ``consumer_registers``; the kernel is launched one block an
   SM (``__launch_bounds__(384, 1)``: 168 registers a thread at launch), which the counts
   must fit.
   The accumulators go to C (or its padded copy) through the YAML's store; or, where
   elementwise blocks follow the GEMM (:class:`GemmOperands`' ``epilogue``), through their
   expression, computed on the
   registers and stored into the kernel's output where it lies inside M x N
   (:mod:`.hopper_epilogue`): C's sums never reach global memory. In thread-block
   clusters (``HopperTiling.cluster``, neighbours along N sharing A's tile) the first
   block's copy of A is multicast into every block, each block's full mbarrier expecting
   A's bytes and its own B's, and each consumer releases a stage on every block's empty
   mbarrier (the first block's next copy of A overwrites it in all); cluster barriers
   follow the set-up and end the kernel.
3. ``unpad`` (only when M or N is not a multiple of the tile, and no epilogue is fused): C
   from its padded copy.

A batch of GEMMs (``GemmOperands.batch``, every operand's first dimension) runs a batch per
``blockIdx.z``. Each operand's batches are stacked under one 2-d tensor map (A as batches x
M rows of K, B packed to batches x N rows of K; a transposing pack runs a batch per
``blockIdx.z``), and a block's copies start M (A) or N (B) rows further per batch; a B read
MN-major is batches x K rows of N, its copies K rows further, and is read so only where K
is whole stages (a stage overhanging K would read the next batch's rows into products
with A's zeros, which an infinite element would make NaN). A tile
overhanging M or N then reads the next batch's first rows rather than zeros, but those feed
only sums past M or N, which the store drops: a batched GEMM always stores through the
bounded store of an epilogue (:meth:`.hopper_epilogue.Epilogue.store_of` where none is
fused), never a padded C.

Each launch is an ``extern "C"`` function, so that ptxas, cuobjdump and a GPU's module
name it as the launch does. Every instruction of the protocol is named by the compute
intrinsic's parameters and checked against :data:`.wgmma.PROTOCOL`; the fill, descriptor,
multiply and store are the YAML's templates, and the swizzle modes the descriptor loads'
parameters (the backend names none). The tensor maps travel as
:class:`.emit.TensorMap` records of the launch: the emulation encodes them with its own
encoder (``emulation/wgmma.h``).
"""

from __future__ import annotations

from dataclasses import dataclass

from intrinsics import Intrinsic, Registry
from ir import Buffer
from targets.cuda.cexpr import PRELUDE, ctype
from targets.cuda.emit import SHARED_ACCESS, CudaKernel, Launch, TensorMap
from targets.cuda.errors import EmitError
from targets.cuda.hopper_epilogue import Epilogue, emit_epilogue
from targets.cuda.ptx import MMA_PRELUDE
from targets.cuda.wgmma import PROTOCOL, TRANSPOSABLE, ptx_type, wgmma_prelude
from targets.cuda.writer import CppWriter

__all__ = ["GemmOperands", "HopperTiling", "Loads", "Registers", "Swizzle", "block_threads",
           "choose_loads", "emit_gemm", "offers_mn_major", "registers_of", "swizzle_of",
           "transpose_of"]

WARPGROUP = 128
# The consumer warpgroups of a block, at most: each owns 64 rows of the block's tile.
MAX_CONSUMERS = 2
# The register counts setmaxnreg may name (PTX ISA): multiples of 8 in this range.
REGISTER_STEP = 8
MIN_REGISTERS = 24
MAX_REGISTERS = 256
PACK_THREADS = 256
# A transposing pack moves tiles of TRANSPOSE_TILE x TRANSPOSE_TILE elements through shared
# memory, with blocks of TRANSPOSE_TILE x TRANSPOSE_ROWS threads.
TRANSPOSE_TILE = 32
TRANSPOSE_ROWS = 8
TILE_M = 64
# Bytes of k one wgmma reads (16 f16 or 32 8-bit values: two core matrices of 8 rows of
# 16 bytes, the leading byte offset of the YAML's descriptor templates apart).
STEP_BYTES = 32
# Bytes of k in one core matrix row: the narrowest box row (no swizzle).
CORE_BYTES = 16
# The alignment of the dynamic shared array itself.
SHARED_ALIGNMENT = 128
MAX_GRID = 65535
# The blocks of a portable thread-block cluster, at most.
MAX_CLUSTER = 8


@dataclass(frozen=True, slots=True)
class HopperTiling:
    """How the GEMM is cut: ``steps`` wgmma k steps per pipeline stage (at most the GEMM's),
    ``stages`` stages in shared memory (at least 2: the producer fills one while the
    warpgroup reads another; at most the GEMM's stages, but never under 2), ``cluster``
    blocks of a thread-block cluster along N (1: none), which share their tile of A: the
    first block's tensor copy of it is multicast to all. ``consumers``: the consumer
    warpgroups of a block (1 or 2), each owning 64 rows of its tile and issuing its own
    wgmmas on the shared stage of B; two have a producer warpgroup that gives registers
    back to them (setmaxnreg)."""

    steps: int = 4
    stages: int = 4
    cluster: int = 1
    consumers: int = 1

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise EmitError(f"HopperTiling requires steps >= 1, got {self.steps}")
        if self.stages < 2:
            raise EmitError(f"HopperTiling requires stages >= 2, got {self.stages}")
        if not 1 <= self.cluster <= MAX_CLUSTER:
            raise EmitError(f"HopperTiling requires a cluster of 1 to {MAX_CLUSTER} blocks, "
                            f"got {self.cluster}")
        if not 1 <= self.consumers <= MAX_CONSUMERS:
            raise EmitError(f"HopperTiling requires 1 to {MAX_CONSUMERS} consumer warpgroups, "
                            f"got {self.consumers}")

    @property
    def block_m(self) -> int:
        """The rows of a block's tile: 64 per consumer warpgroup."""
        return TILE_M * self.consumers


def block_threads(consumers: int) -> int:
    """The threads of a block of ``consumers`` consumer warpgroups: one has a producer warp
    beside it, two a producer warpgroup (the unit setmaxnreg moves registers of)."""
    return WARPGROUP + 32 if consumers == 1 else (consumers + 1) * WARPGROUP


@dataclass(frozen=True, slots=True)
class Registers:
    """The setmaxnreg counts of a block with a producer warpgroup, from the compute
    intrinsic's parameters: ``producer`` (setmaxnreg.dec: it holds no accumulators) and
    ``consumer`` (setmaxnreg.inc) registers a thread."""

    producer: int
    consumer: int

    def total(self, consumers: int) -> int:
        """The registers of the block's warpgroups after both setmaxnreg."""
        return WARPGROUP * (self.producer + consumers * self.consumer)


def registers_of(intrinsic: Intrinsic) -> Registers:
    """The setmaxnreg counts of a wgmma compute intrinsic (``producer_registers``,
    ``consumer_registers``); EmitError naming its YAML line and the parameter when one is
    not a multiple of 8 in [24, 256], or the producer's is not below the consumers'."""
    where = f"intrinsic {intrinsic.name} ({intrinsic.loc.file}:{intrinsic.loc.line})"
    counts = []
    for param in ("producer_registers", "consumer_registers"):
        value = intrinsic.params.get(param)
        if (not isinstance(value, int) or isinstance(value, bool) or value % REGISTER_STEP
                or not MIN_REGISTERS <= value <= MAX_REGISTERS):
            raise EmitError(f"{where}: parameter '{param}' requires a multiple of "
                            f"{REGISTER_STEP} in [{MIN_REGISTERS}, {MAX_REGISTERS}] "
                            f"(setmaxnreg's count), got {value!r}")
        counts.append(value)
    producer, consumer = counts
    if producer >= consumer:
        raise EmitError(f"{where}: parameters 'producer_registers' and 'consumer_registers' "
                        f"require the producer's below the consumers' (it gives registers "
                        f"back to them), got {producer} and {consumer}")
    return Registers(producer, consumer)


@dataclass(frozen=True, slots=True)
class GemmOperands:
    """The GEMM's buffers as a kernel declares them: ``a`` holds M x K (``a_transposed``:
    K x M), ``b`` K x N (``b_transposed``: N x K), ``c`` M x N, each dense in row-major
    order; dimensions of extent 1 may stand anywhere (a batch of one), only the order of
    the elements counts. ``params``: the kernel's parameters in order (their names: the
    three buffers, in the kernel's own order; with an ``epilogue``, A, B and the epilogue's
    inputs and output, C then being the sums the epilogue reads and never stored).
    ``batch``: GEMMs of these shapes, each operand's first dimension (blockIdx.z)."""

    a: Buffer
    b: Buffer
    c: Buffer
    a_transposed: bool = False
    b_transposed: bool = False
    params: tuple[str, ...] = ()
    epilogue: Epilogue | None = None
    batch: int = 1

    @property
    def own(self) -> tuple[Buffer, ...]:
        """The kernel's buffers the launches take: A, B and C, or with an epilogue A, B and
        the epilogue's inputs and output (each once)."""
        if self.epilogue is None:
            return (self.a, self.b, self.c)
        named = {x.name: x for x in (self.a, self.b, *self.epilogue.inputs,
                                     self.epilogue.output)}
        return tuple(named.values())

    def check(self, m: int, n: int, k: int) -> None:
        """EmitError naming the buffer whose elements are not its matrix's, or an order of
        parameters that is not the three buffers'."""
        shapes = ((self.a, (k, m) if self.a_transposed else (m, k)),
                  (self.b, (n, k) if self.b_transposed else (k, n)), (self.c, (m, n)))
        for buffer, (rows, cols) in shapes:
            if buffer.strides is not None:
                raise EmitError(f"emit_gemm requires {buffer.name} dense in row-major order, "
                                f"got strides {buffer.strides}")
            size = (self.batch, rows, cols)
            if [d for d in buffer.shape if d != 1] != [d for d in size if d != 1]:
                text = " x ".join(str(d) for d in size[self.batch == 1:])
                raise EmitError(f"emit_gemm requires {buffer.name} of {text} elements (unit "
                                f"dimensions aside), got shape {buffer.shape}")
        if self.epilogue is not None:
            self.epilogue.check(m, n, self.batch)
        own = [x.name for x in self.own]
        if self.params and sorted(self.params) != sorted(own):
            listed = f"{', '.join(own[:-1])} and {own[-1]}"
            raise EmitError(f"emit_gemm requires the parameters {listed} in some order, got "
                            f"{', '.join(self.params)}")


@dataclass(frozen=True, slots=True)
class Swizzle:
    """A shared-memory swizzle mode, as a descriptor load intrinsic's parameters give it
    (``intrinsics/cuda_wgmma.yaml``): ``bytes`` of k in a row of a box (its span; 16 without
    swizzle), ``repeat`` the bytes after which its pattern repeats (the alignment of a box),
    ``tensor_map`` its number in a tensor map."""

    bytes: int
    repeat: int
    tensor_map: int


SWIZZLE_PARAMS = ("swizzle_bytes", "swizzle_repeat", "tensor_map_swizzle")


def swizzle_of(load: Intrinsic) -> Swizzle:
    """The swizzle mode of a descriptor load intrinsic; EmitError naming its YAML line and
    the parameter when one is missing or not a positive power of two (a span of 16 bytes or
    more, a repeat of 8 spans)."""
    where = f"intrinsic {load.name} ({load.loc.file}:{load.loc.line})"
    values = []
    for param in SWIZZLE_PARAMS:
        value = load.params.get(param)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise EmitError(f"{where}: parameter '{param}' requires a non-negative integer, "
                            f"got {value!r}")
        values.append(value)
    span, repeat, tensor_map = values
    if span < CORE_BYTES or span & (span - 1) or repeat != 8 * span:
        raise EmitError(f"{where}: parameters 'swizzle_bytes' and 'swizzle_repeat' require a "
                        f"power of two of 16 or more and 8 times it, got {span} and {repeat}")
    return Swizzle(span, repeat, tensor_map)


def transpose_of(load: Intrinsic) -> int:
    """The imm-trans flag of a descriptor load intrinsic (its ``transpose`` parameter: 0 for
    a K-major tile, 1 for an MN-major one); EmitError naming its YAML line otherwise."""
    value = load.params.get("transpose")
    if value not in (0, 1) or isinstance(value, bool):
        raise EmitError(f"intrinsic {load.name} ({load.loc.file}:{load.loc.line}): parameter "
                        f"'transpose' requires 0 (K-major) or 1 (MN-major), got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Loads:
    """A GEMM's descriptor load intrinsics: ``a`` and ``b``, each with its swizzle mode
    (``swizzle_a``, ``swizzle_b``)."""

    a: Intrinsic
    b: Intrinsic
    swizzle_a: Swizzle
    swizzle_b: Swizzle

    @property
    def b_mn(self) -> bool:
        """Whether B's tile is MN-major (k rows of n: B read in place from K x N)."""
        return transpose_of(self.b) == 1

    @property
    def repeat(self) -> int:
        """The larger of the two modes' repeats: where a stage starts."""
        return max(self.swizzle_a.repeat, self.swizzle_b.repeat)


def _offered(intrinsic: Intrinsic, registry: Registry, operand: str, transpose: int
             ) -> dict[int, Intrinsic]:
    """``operand``'s descriptor loads of ``intrinsic`` with imm-trans flag ``transpose``, by
    swizzle span. EmitError for a transposed load of A or of an input type wgmma reads
    K-major alone."""
    by_span = {}
    for name in intrinsic.loads[operand]:
        load = registry.get(name)
        flag = transpose_of(load)
        dtype = load.operands[0].buffer.dtype.name
        if flag and (operand == "A" or ptx_type(dtype) not in TRANSPOSABLE):
            raise EmitError(f"intrinsic {load.name} ({load.loc.file}:{load.loc.line}): "
                            f"parameter 'transpose' requires 0 for {operand} of {dtype} "
                            f"(wgmma reads it K-major alone), got 1")
        if flag == transpose:
            by_span[swizzle_of(load).bytes] = load
    return by_span


def offers_mn_major(intrinsic: Intrinsic, registry: Registry) -> bool:
    """Whether ``intrinsic`` lists an MN-major descriptor load of B (its 16-bit types')."""
    return bool(_offered(intrinsic, registry, "B", 1))


def choose_loads(intrinsic: Intrinsic, registry: Registry, steps: int, b_mn: bool = False
                 ) -> Loads:
    """A's and B's descriptor loads of ``intrinsic`` for stages of ``steps`` wgmma k steps.
    K-major B: of the modes the YAML offers both operands, the widest whose span divides a
    stage's bytes of k (so a stage is whole boxes). MN-major B (``b_mn``): A's widest mode
    dividing a stage's bytes of k, and B's widest MN-major mode dividing the tile's bytes
    of n. EmitError when none does."""
    stage = steps * STEP_BYTES
    offered_a = _offered(intrinsic, registry, "A", 0)
    offered_b = _offered(intrinsic, registry, "B", int(b_mn))
    if b_mn:
        tile = intrinsic.operands[1].buffer.shape[1] * \
            intrinsic.operands[1].buffer.dtype.numpy.itemsize
        spans_a = [span for span in offered_a if stage % span == 0]
        spans_b = [span for span in offered_b if tile % span == 0]
        if not spans_a or not spans_b:
            raise EmitError(f"intrinsic {intrinsic.name}: requires a descriptor load of A "
                            f"whose swizzle span divides a stage's {stage} bytes of k and an "
                            f"MN-major one of B whose span divides the tile's {tile} bytes of "
                            f"n, got spans {sorted(offered_a)} and {sorted(offered_b)}")
        load_a, load_b = offered_a[max(spans_a)], offered_b[max(spans_b)]
        return Loads(load_a, load_b, swizzle_of(load_a), swizzle_of(load_b))
    fitting = [span for span in offered_a if span in offered_b and stage % span == 0]
    if not fitting:
        raise EmitError(f"intrinsic {intrinsic.name}: requires descriptor loads of A and B "
                        f"with a common swizzle span dividing a stage's {stage} bytes of k, "
                        f"got spans {sorted(offered_a)} and {sorted(offered_b)}")
    span = max(fitting)
    load_a, load_b = offered_a[span], offered_b[span]
    return Loads(load_a, load_b, swizzle_of(load_a), swizzle_of(load_b))


@dataclass(frozen=True, slots=True)
class _Layout:
    """One operand's tile in a stage: ``rows`` (64 for A, n for B) of ``steps`` wgmma k steps
    of ``elem``-byte elements; ``k_stages`` stages along k. K-major, landed as boxes of rows
    x ``span`` bytes of k (the swizzle's), one after another; MN-major (``mn``, B from K x N),
    as boxes of a k step's rows of k x ``span`` bytes of n (a panel), each step's panels one
    after another. ``tiles``: such tiles one after another in a stage (A's, one per consumer
    warpgroup, each its own 64 rows)."""

    rows: int
    steps: int
    k_stages: int
    span: int
    elem: int
    mn: bool = False
    tiles: int = 1

    @property
    def k_step(self) -> int:
        """Elements of k in one wgmma step."""
        return STEP_BYTES // self.elem

    @property
    def panels(self) -> int:
        """MN-major: the panels of ``span`` bytes of n across the tile's rows."""
        return self.rows * self.elem // self.span

    @property
    def box_bytes(self) -> int:
        """Bytes of one box (K-major without swizzle: one column of core matrices, the
        descriptors' leading offset; MN-major: a step's rows of one panel, ditto)."""
        return (self.k_step if self.mn else self.rows) * self.span

    @property
    def box(self) -> tuple[int, int]:
        """A box's extents in elements, inner first (the tensor map's)."""
        return (self.span // self.elem, self.k_step if self.mn else self.rows)

    @property
    def boxes(self) -> int:
        """Boxes of one stage."""
        return self.steps * self.panels if self.mn else self.steps * STEP_BYTES // self.span

    @property
    def tile_bytes(self) -> int:
        """Bytes of one stage of one tile."""
        return self.boxes * self.box_bytes

    @property
    def stage_bytes(self) -> int:
        """Bytes of one stage of the operand: its tiles."""
        return self.tiles * self.tile_bytes


def _protocol(intrinsic: Intrinsic) -> dict[str, str]:
    """The helper names of the compute intrinsic's protocol parameters, each checked."""
    names = {}
    for param, helper in PROTOCOL.items():
        given = intrinsic.params.get(param)
        if given != helper:
            raise EmitError(f"intrinsic {intrinsic.name} ({intrinsic.loc.file}:"
                            f"{intrinsic.loc.line}): parameter '{param}' requires the helper "
                            f"{helper}, got {given!r}")
        names[param] = helper
    return names


def _check_gemm(intrinsic: Intrinsic, m: int, n: int, k: int, batch: int, block_m: int
                ) -> None:
    if intrinsic.kind != "compute" or "warpgroup" not in intrinsic.params:
        raise EmitError(f"emit_gemm requires a wgmma compute intrinsic, got {intrinsic.name}")
    if intrinsic.params["warpgroup"] != WARPGROUP:
        raise EmitError(f"intrinsic {intrinsic.name}: parameter 'warpgroup' requires "
                        f"{WARPGROUP}, got {intrinsic.params['warpgroup']}")
    if min(m, n, k) < 1:
        raise EmitError(f"emit_gemm requires positive extents, got {m} x {n} x {k}")
    if -(-m // block_m) > MAX_GRID:
        raise EmitError(f"emit_gemm requires at most {MAX_GRID} row tiles of {block_m} "
                        f"(gridDim.y), got m = {m}")
    if not 1 <= batch <= MAX_GRID:
        raise EmitError(f"emit_gemm requires 1 to {MAX_GRID} batches (gridDim.z), got {batch}")


def emit_gemm(intrinsic: Intrinsic, registry: Registry, m: int, n: int, k: int,
              tiling: HopperTiling = HopperTiling(), name: str = "gemm_hopper",
              operands: GemmOperands | None = None) -> CudaKernel:
    """The GEMM of ``m x n x k`` through the wgmma compute ``intrinsic`` (of ``registry``,
    which holds its loads, store and fill) as CUDA C++ for sm_90a: the launches of the
    module docstring, over ``operands`` (default: row-major A, B and C of the intrinsic's
    types). Raises EmitError for an intrinsic that is not a wgmma one, a protocol
    parameter naming a helper this backend does not define, a bad tiling, or operands that
    are not the GEMM's."""
    batch = operands.batch if operands is not None else 1
    _check_gemm(intrinsic, m, n, k, batch, tiling.block_m)
    protocol = _protocol(intrinsic)
    registers = registers_of(intrinsic) if tiling.consumers > 1 else None
    a_op, b_op, c_op = intrinsic.operands
    tile_n = c_op.buffer.shape[1]
    in_dtype, acc_dtype = a_op.buffer.dtype, c_op.buffer.dtype
    if operands is None:
        operands = GemmOperands(Buffer("A", (m, k), in_dtype), Buffer("B", (k, n), in_dtype),
                                Buffer("C", (m, n), acc_dtype))
    operands.check(m, n, k)
    elem = in_dtype.numpy.itemsize
    k_step = a_op.buffer.shape[1]
    block_m = tiling.block_m
    m_tiles = -(-m // block_m)
    # Whole clusters along N: a block past N's tiles reads zeros and writes the padding.
    n_tiles = -(-n // (tile_n * tiling.cluster)) * tiling.cluster
    k_steps = -(-k // k_step)
    steps = min(tiling.steps, k_steps)
    k_stages = -(-k_steps // steps)
    stages = min(tiling.stages, max(k_stages, 2))
    # A B stored K x N is read in place, MN-major, where the type admits it and a map can
    # stride its rows; batched, only where K is whole stages (else a stage's k rows past K
    # would be the next batch's, multiplying A's zeros: not zero for an infinite B).
    b_mn = (not operands.b_transposed and offers_mn_major(intrinsic, registry)
            and n * elem % CORE_BYTES == 0 and (batch == 1 or k % (steps * k_step) == 0))
    loads = choose_loads(intrinsic, registry, steps, b_mn)
    layout_a = _Layout(TILE_M, steps, k_stages, loads.swizzle_a.bytes, elem,
                       tiles=tiling.consumers)
    layout_b = _Layout(tile_n, steps, k_stages, loads.swizzle_b.bytes, elem, b_mn)
    # A fused epilogue stores only the elements inside M x N; a plain store writes whole
    # tiles, into a padded copy where the tiles overhang.
    # Batches store through the bounded store too: their tiles would overhang into the next.
    epilogue = operands.epilogue or (Epilogue.store_of(operands.c, m, n) if batch > 1
                                     else None)
    padded = epilogue is None and (m % block_m != 0 or n != n_tiles * tile_n)
    # A tensor map's row stride is a multiple of 16 bytes: rows of k padded to that.
    k_row = -(-k * elem // CORE_BYTES) * CORE_BYTES // elem
    a, b, c = operands.a, operands.b, operands.c
    # Each operand is read in place where it is k-major with rows a map can stride (or B
    # MN-major, above), else packed (transposed where it is not k-major) into rows of k_row.
    # The batches' rows stacked: one 2-d tensor map over them all (module docstring).
    a_rows = a if not operands.a_transposed and k_row == k else \
        Buffer(f"{a.name}_k", (batch * m, k_row), in_dtype)
    b_rows = b if b_mn or (operands.b_transposed and k_row == k) else \
        Buffer(f"{b.name}_t", (batch * n, k_row), in_dtype)
    c_pad = Buffer(f"{c.name}_padded", (m_tiles * block_m, n_tiles * tile_n), acc_dtype)
    order = operands.params or tuple(x.name for x in operands.own)
    own = {x.name: x for x in operands.own}
    extra = [x for x in (a_rows, b_rows) if x is not a and x is not b] + \
        ([c_pad] if padded else [])
    buffers = (*(own[p] for p in order), *extra)
    if len({x.name for x in buffers}) != len(buffers):
        raise EmitError(f"emit_gemm requires parameter names other than its intermediates', "
                        f"got {', '.join(order)} beside {', '.join(x.name for x in extra)}")
    signature = ", ".join(f"{ctype(x.dtype)}* __restrict__ {x.name}" for x in buffers)
    out = CppWriter()
    launches = []
    packs = (("b", b, b_rows, not operands.b_transposed),
             ("a", a, a_rows, operands.a_transposed))
    for operand, source, packed, transposed in packs:
        if packed is not source:
            launches.append(_pack(out, f"{name}_pack_{operand}", signature, source, packed,
                                  transposed, k, batch))
    b_map = (TensorMap(b.name, (n, batch * k), n * elem, layout_b.box,
                       loads.swizzle_b.tensor_map) if b_mn else
             TensorMap(b_rows.name, (k, batch * n), k_row * elem, layout_b.box,
                       loads.swizzle_b.tensor_map))
    maps = (TensorMap(a_rows.name, (k, batch * m), k_row * elem, layout_a.box,
                      loads.swizzle_a.tensor_map), b_map)
    staged = _Stages(stages, layout_a, layout_b, loads.repeat, tiling.cluster, k)
    kernel = f"{name}_gemm"
    gemm_signature = signature + "".join(
        f", const __grid_constant__ CUtensorMap tz_map_{x}" for x in ("a", "b"))
    result = _Result(c_pad if padded else c, c_pad.shape[1] if padded else n, epilogue,
                     (m, n, batch))
    _gemm(out, kernel, gemm_signature,
          _Calls(intrinsic, loads.a, loads.b, registry, protocol, registers), staged, result)
    launches.append(Launch(kernel, (n_tiles, m_tiles, batch),
                           (block_threads(tiling.consumers), 1, 1), tiled=True,
                           dynamic_shared=staged.shared, stages=stages, tensor_maps=maps,
                           tensorized=True, cluster=tiling.cluster))
    if padded:
        _unpad(out, f"{name}_unpad", signature, c, c_pad, m, n)
        launches.append(Launch(f"{name}_unpad", (-(-m * n // PACK_THREADS), 1, 1),
                               (PACK_THREADS, 1, 1)))
    headers = ["#include <mma.h>", "#include <cuda_fp16.h>", "#include <cuda_bf16.h>",
               "#include <cuda_fp8.h>"]
    source = "\n".join([f"// {name}: generated by tensorize's CUDA backend (wgmma, sm_90a).",
                        *headers, "", PRELUDE, SHARED_ACCESS, MMA_PRELUDE,
                        wgmma_prelude([intrinsic]), out.text()])
    written = c if epilogue is None else epilogue.output
    return CudaKernel(name, source, tuple(launches), tuple(x.name for x in buffers), buffers,
                      (written.name,))


def _pack(out: CppWriter, kernel: str, signature: str, source: Buffer, packed: Buffer,
          transposed: bool, depth: int, batch: int) -> Launch:
    """The launch writing ``packed`` (rows of k, zero past ``depth``, the GEMM's k; the
    ``batch`` GEMMs' rows one after another) from ``source``: read as k rows of each
    batch's packed rows when ``transposed`` (through shared tiles, :func:`_transpose`, a
    batch per blockIdx.z), else as those rows of k, one thread per element."""
    rows, row = packed.shape
    if transposed:
        _transpose(out, kernel, signature, source, packed, depth, batch)
        return Launch(kernel, (-(-rows // batch // TRANSPOSE_TILE), -(-row // TRANSPOSE_TILE),
                               batch), (TRANSPOSE_TILE, TRANSPOSE_ROWS, 1))
    with out.block(f'extern "C" __global__ void {kernel}({signature})'):
        out.line(f"const long long i = static_cast<long long>(blockIdx.x) * {PACK_THREADS} "
                 "+ threadIdx.x;")
        with out.block(f"if (i < {rows * row}LL)"):
            out.line(f"const long long r = i / {row}, kk = i % {row};")
            _words(out, source)
            out.line(f"reinterpret_cast<tz_word*>({packed.name})[i] = kk < {depth} ? "
                     f"src[r * {depth} + kk] : tz_word(0);")
    return Launch(kernel, (-(-rows * row // PACK_THREADS), 1, 1), (PACK_THREADS, 1, 1))


def _words(out: CppWriter, source: Buffer) -> None:
    """``tz_word``, an unsigned integer of the element's size, and ``src``, ``source`` read
    as such words (a copy moves bits, whatever the type)."""
    word = {1: "unsigned char", 2: "unsigned short"}[source.dtype.numpy.itemsize]
    out.line(f"using tz_word = {word};")
    out.line(f"const tz_word* src = reinterpret_cast<const tz_word*>({source.name});")


def _transpose(out: CppWriter, kernel: str, signature: str, source: Buffer, packed: Buffer,
               depth: int, batch: int) -> None:
    """``packed`` (rows of k) from ``source`` (``depth`` rows of k's rows), a tile of
    TRANSPOSE_TILE x TRANSPOSE_TILE per block: each warp reads a tile row along the
    source's rows (consecutive addresses) into shared memory, and after the barrier writes
    a tile row along k (consecutive again), so neither side strides through memory. Of
    ``batch`` such matrices one after another, blockIdx.z's."""
    rows, row = packed.shape
    rows //= batch
    tile = TRANSPOSE_TILE
    # One pad element a tile row staggers the column reads across banks.
    pitch = tile + 1
    target = packed.name
    with out.block(f'extern "C" __global__ void {kernel}({signature})'):
        _words(out, source)
        if batch > 1:
            out.line(f"src += static_cast<long long>(blockIdx.z) * {depth * rows};")
            out.line(f"tz_word* tz_dst = reinterpret_cast<tz_word*>({packed.name}) + "
                     f"static_cast<long long>(blockIdx.z) * {rows * row};")
            target = "tz_dst"
        out.line(f"__shared__ __align__(128) tz_word tz_tile[{tile * pitch}];")
        out.line('tz_shared_declare(tz_tile, "tz_tile");')
        out.line(f"const long long r0 = static_cast<long long>(blockIdx.x) * {tile}, "
                 f"k0 = static_cast<long long>(blockIdx.y) * {tile};")
        with out.block(f"for (int y = threadIdx.y; y < {tile}; y += {TRANSPOSE_ROWS})"):
            out.line("const long long kk = k0 + y, r = r0 + threadIdx.x;")
            out.line(f"tz_shared_store(tz_tile, y * {pitch} + threadIdx.x) = "
                     f"kk < {depth} && r < {rows} ? src[kk * {rows} + r] : tz_word(0);")
        out.line("__syncthreads();")
        with out.block(f"for (int y = threadIdx.y; y < {tile}; y += {TRANSPOSE_ROWS})"):
            out.line("const long long r = r0 + y, kk = k0 + threadIdx.x;")
            with out.block(f"if (r < {rows} && kk < {row})"):
                out.line(f"reinterpret_cast<tz_word*>({target})[r * {row} + kk] = "
                         f"tz_shared_load(tz_tile, threadIdx.x * {pitch} + y);")


@dataclass(frozen=True, slots=True)
class _Stages:
    """The shared stages of one GEMM: ``count`` of them, each A's then B's tile of one k
    stage, then the full and the empty mbarrier of each, from ``tz_tiles``: the dynamic
    shared memory's first multiple of ``repeat`` bytes (the swizzle pattern's; boxes land
    at multiples of it). ``depth``: the GEMM's k. ``cluster``: the blocks
    whose A stages the first block's copies fill (multicast), each releasing a stage to
    every block's producer."""

    count: int
    a: _Layout
    b: _Layout
    repeat: int
    cluster: int
    depth: int

    @property
    def consumers(self) -> int:
        """The consumer warpgroups: one per tile of A."""
        return self.a.tiles

    @property
    def bytes(self) -> int:
        """One stage's tiles: the bytes its mbarrier's phase expects."""
        return self.a.stage_bytes + self.b.stage_bytes

    @property
    def shared(self) -> int:
        """The block's shared memory: the stages and two 8-byte mbarriers each, after at most
        ``repeat`` - 128 bytes skipped to align them (the array itself is 128-byte aligned)."""
        return self.count * (self.bytes + 16) + self.repeat - SHARED_ALIGNMENT

    def base(self, operand: str) -> str:
        """The shared address of ``operand``'s (``a`` or ``b``) tile in stage 0 (a C++
        expression); of A's, the consumer warpgroup ``tz_group``'s where there are several."""
        if operand == "b":
            return f"tz_tiles + {self.a.stage_bytes}"
        return "tz_tiles" if self.consumers == 1 else f"tz_tiles + tz_group * {self.a.tile_bytes}"

    def start(self, operand: str, stage: str) -> str:
        """The shared address of ``operand``'s tiles in stage ``stage``."""
        base = "tz_tiles" if operand == "a" else self.base(operand)
        return f"{base} + {stage} * {self.bytes}"

    def offset(self, operand: str, stage: str, step: str) -> str:
        """The bytes from ``operand``'s :meth:`base` to its tile of k step ``step`` in stage
        ``stage``: the stage, the step's box, and its 32 bytes within a row of the box where
        a box holds several steps (MN-major: the step's panels)."""
        layout = self.a if operand == "a" else self.b
        if layout.mn:
            return f"{stage} * {self.bytes} + {step} * {layout.rows * STEP_BYTES}"
        per_box = layout.span // STEP_BYTES
        if per_box <= 1:
            step_bytes = STEP_BYTES * layout.box_bytes // layout.span
            return f"{stage} * {self.bytes} + {step} * {step_bytes}"
        return (f"{stage} * {self.bytes} + {step} / {per_box} * {layout.box_bytes} + "
                f"{step} % {per_box} * {STEP_BYTES}")


@dataclass(frozen=True, slots=True)
class _Calls:
    """What the kernel calls, from the YAML: the wgmma ``compute`` intrinsic, A's and B's
    descriptor ``load_a``, ``load_b`` (of one swizzle mode), the ``registry`` holding its
    store and fill, the ``protocol``'s helpers, and the setmaxnreg counts (``registers``)
    of a block with a producer warpgroup (None: a producer warp, no setmaxnreg)."""

    compute: Intrinsic
    load_a: Intrinsic
    load_b: Intrinsic
    registry: Registry
    protocol: dict[str, str]
    registers: Registers | None = None


@dataclass(frozen=True, slots=True)
class _Result:
    """Where the consumers' tiles go: ``buffer`` (C or its padded copy), rows ``ld``
    elements apart, by the YAML's store; or, with an ``epilogue``, through it into its
    output, the elements inside M x N alone (``extents``: M, N and the batches)."""

    buffer: Buffer
    ld: int
    epilogue: Epilogue | None
    extents: tuple[int, int, int]


def _gemm(out: CppWriter, kernel: str, signature: str, calls: _Calls, stages: _Stages,
          result: _Result) -> None:
    """The warp-specialised kernel (module docstring): its shared memory and mbarriers,
    then the producer's and the consumers' loops, which end in ``result``'s store. With a
    producer warpgroup, one block an SM (``__launch_bounds__``' second argument), so that
    ptxas gives each thread the registers the warpgroups then move by setmaxnreg."""
    protocol = calls.protocol
    consumers = stages.consumers
    threads = block_threads(consumers)
    bounds = f"{threads}, 1" if consumers > 1 else f"{threads}"
    dims = f" __cluster_dims__({stages.cluster}, 1, 1)" if stages.cluster > 1 else ""
    out.line(f'extern "C" __global__ void __launch_bounds__({bounds}){dims} {kernel}('
             f"{signature})")
    # In a cluster the set-up ends at the cluster's barrier: no block multicasts into
    # another, or arrives on its mbarriers, before that block has initialised them.
    sync = f"{protocol['cluster_sync']}();" if stages.cluster > 1 else "__syncthreads();"
    with out.block(""):
        out.line(f"TZ_CTA_SHARED(tz_smem, {stages.shared});")
        out.line(f'tz_shared_declare(tz_smem, {stages.shared}, "tz_smem");')
        out.line(f"unsigned char* tz_tiles = tz_smem + (0u - tz_shared_address(tz_smem)) % "
                 f"{stages.repeat};")
        barriers = stages.count * stages.bytes
        out.line(f"unsigned long long* tz_full = reinterpret_cast<unsigned long long*>("
                 f"tz_tiles + {barriers});")
        out.line(f"unsigned long long* tz_empty = tz_full + {stages.count};")
        with out.block("if (threadIdx.x == 0)"):
            with out.block(f"for (int s = 0; s < {stages.count}; ++s)"):
                out.line(f"{protocol['barrier_init']}(&tz_full[s], 1);")
                out.line(f"{protocol['barrier_init']}(&tz_empty[s], "
                         f"{WARPGROUP * consumers * stages.cluster});")
        out.line(sync)
        producer = WARPGROUP * consumers
        if calls.registers is None:
            with out.block(f"if (threadIdx.x == {producer})"):
                _producer(out, protocol, stages, result.extents)
        else:
            # The producer warpgroup gives back what it does not need, all of its threads;
            # its first alone issues the copies.
            with out.block(f"if (threadIdx.x >= {producer})"):
                out.line(f"{protocol['setmaxnreg_dec']}<{calls.registers.producer}>();")
                with out.block(f"if (threadIdx.x == {producer})"):
                    _producer(out, protocol, stages, result.extents)
        with out.block(f"if (threadIdx.x < {producer})"):
            _consumers(out, calls, stages, result)
        if stages.cluster > 1:
            # No block leaves while another may still arrive on its mbarriers.
            out.line(sync)


def _producer(out: CppWriter, protocol: dict[str, str], stages: _Stages,
              extents: tuple[int, int, int]) -> None:
    """The producer's loop: each k stage waits until the consumers have released the
    stage it refills (its empty mbarrier; from the second round of stages on), then
    expects the stage's bytes on its full mbarrier and issues, per operand, one tensor copy
    per box of the stage (of each of A's tiles), each box after the last; in a cluster,
    A's by the first block alone, multicast to every block (whose full mbarriers each
    expect A's bytes too). Each
    batch's rows start ``extents``' M (A) or N (B) rows further in the stacked maps (an
    MN-major B's, the GEMM's K rows: :func:`_coordinates`)."""
    n = stages.count
    if stages.cluster > 1:
        out.line(f"const unsigned tz_rank = {protocol['cluster_rank']}();")
    with out.block(f"for (int kt = 0; kt < {stages.a.k_stages}; ++kt)"):
        out.line(f"const int stage = kt % {n};")
        out.line(f"if (kt >= {n}) while (!{protocol['try_wait']}(&tz_empty[stage], "
                 f"(kt / {n} - 1) % 2)) {{}}")
        out.line(f"{protocol['expect_tx']}(&tz_full[stage], {stages.bytes});")
        m, n, batches = extents
        for operand, layout, row, rows in (("a", stages.a, "blockIdx.y", m),
                                           ("b", stages.b, "blockIdx.x", n)):
            out.line("#pragma unroll")
            with out.block(f"for (int col = 0; col < {layout.tiles * layout.boxes}; ++col)"):
                args = (f"{stages.start(operand, 'stage')} + col * {layout.box_bytes}, "
                        f"&tz_map_{operand}, "
                        f"{_coordinates(layout, row, rows, stages.depth, batches)}, "
                        f"&tz_full[stage]")
                if operand == "a" and stages.cluster > 1:
                    mask = (1 << stages.cluster) - 1
                    out.line(f"if (tz_rank == 0) {protocol['multicast']}({args}, {mask});")
                else:
                    out.line(f"{protocol['copy']}({args});")


def _coordinates(layout: _Layout, row: str, rows: int, depth: int, batches: int) -> str:
    """The tensor coordinates (inner, outer) of box ``col`` of k stage ``kt`` in
    ``layout``'s map, its tile's rows being block index ``row``'s, in ``batches`` stacked
    one after another (blockIdx.z's: ``rows`` rows a batch K-major, the GEMM's ``depth``
    MN-major). K-major: the box's k, then the tile's rows (of several tiles, the boxes of
    tile ``col / boxes`` after the previous tiles'); MN-major: the box's panel of n, then
    its step's first k (B's row)."""
    if not layout.mn:
        first = f"blockIdx.z * {rows} + " if batches > 1 else ""
        if layout.tiles == 1:
            return (f"(kt * {layout.boxes} + col) * {layout.box[0]}, "
                    f"{first}{row} * {layout.rows}")
        if layout.boxes == 1:
            return f"kt * {layout.box[0]}, {first}({row} * {layout.tiles} + col) * {layout.rows}"
        return (f"(kt * {layout.boxes} + col % {layout.boxes}) * {layout.box[0]}, "
                f"{first}({row} * {layout.tiles} + col / {layout.boxes}) * {layout.rows}")
    first = f"blockIdx.z * {depth} + " if batches > 1 else ""
    return (f"{row} * {layout.rows} + col % {layout.panels} * {layout.box[0]}, "
            f"{first}(kt * {layout.steps} + col / {layout.panels}) * {layout.k_step}")


def _consumers(out: CppWriter, calls: _Calls, stages: _Stages, result: _Result) -> None:
    """The consumer warpgroups' loop: each k stage waits for its full mbarrier's phase,
    issues the stage's wgmmas, commits them, waits for the previous stage's group and
    releases that stage (one arrival per thread on its empty mbarrier); then the store, or
    the fused epilogue (:mod:`.hopper_epilogue`), of the warpgroup's 64 rows. Where the
    producer is a warpgroup (``calls.registers``), the consumers first take their
    registers (setmaxnreg.inc)."""
    protocol = calls.protocol
    fill = calls.registry.get(calls.compute.fill["C"][0])
    store = calls.registry.get(calls.compute.stores["C"][0])
    acc = ctype(result.buffer.dtype)
    n = stages.count
    tile = "blockIdx.y"
    if calls.registers is not None:
        out.line(f"{protocol['setmaxnreg_inc']}<{calls.registers.consumer}>();")
        # This warpgroup's 64 rows of the block's tile.
        out.line(f"const int tz_group = {protocol['warpgroup_index']}();")
        tile = f"(blockIdx.y * {stages.consumers} + tz_group)"
    out.line(f"{acc} tz_acc[{int(fill.params['lane_registers'])}];")
    out.line(fill.render("cuda", {"dst": "tz_acc"}))
    # Each operand's descriptor is built once, at its stage-0 tile, and advanced to each
    # step's tile: an addition of a constant once the loops are unrolled.
    out.line("unsigned tz_base_a[3], tz_base_b[3], tz_desc_a[3], tz_desc_b[3];")
    out.line(calls.load_a.render("cuda", {"dst": "tz_base_a", "src": stages.base("a")}))
    out.line(calls.load_b.render("cuda", {"dst": "tz_base_b", "src": stages.base("b")}))
    # Unrolled by the stages, so each copy of the body has its stage as a constant.
    out.line(f"#pragma unroll {n}")
    with out.block(f"for (int kt = 0; kt < {stages.a.k_stages}; ++kt)"):
        out.line(f"const int stage = kt % {n};")
        out.line(f"while (!{protocol['try_wait']}(&tz_full[stage], kt / {n} % 2)) {{}}")
        out.line(f"{protocol['fence']}();")
        out.line("#pragma unroll")
        with out.block(f"for (int s = 0; s < {stages.a.steps}; ++s)"):
            for operand in ("a", "b"):
                out.line(f"{protocol['advance']}(tz_desc_{operand}, tz_base_{operand}, "
                         f"{stages.offset(operand, 'stage', 's')});")
            out.line(calls.compute.render("cuda", {"C": "tz_acc", "A": "tz_desc_a",
                                                   "B": "tz_desc_b"}))
        out.line(f"{protocol['commit']}();")
        # The previous stage's group has read its tiles: this thread releases that stage (to
        # every block's producer in a cluster: the first one's copies fill it here too).
        out.line(f"{protocol['wait']}<1>();")
        previous = f"&tz_empty[(kt + {n - 1}) % {n}]"
        if stages.cluster > 1:
            out.line(f"if (kt > 0) for (unsigned r = 0; r < {stages.cluster}; ++r) "
                     f"{protocol['remote_arrive']}({previous}, r);")
        else:
            out.line(f"if (kt > 0) {protocol['arrive']}({previous});")
    out.line(f"{protocol['wait']}<0>();")
    if result.epilogue is not None:
        emit_epilogue(out, result.epilogue, store, result.extents, stages.b.rows,
                      f"{tile} * {TILE_M}")
        return
    ld = result.ld
    out.line(f"{acc}* tz_c = {result.buffer.name} + {tile} * {TILE_M * ld}LL + "
             f"blockIdx.x * {stages.b.rows};")
    out.line(store.render("cuda", {"dst": "tz_c", "src": "tz_acc", "dst.ld": str(ld)}))


def _unpad(out: CppWriter, kernel: str, signature: str, c: Buffer, c_pad: Buffer, m: int,
           n: int) -> None:
    """C (``m x n``) from its padded copy, one thread per element."""
    with out.block(f'extern "C" __global__ void {kernel}({signature})'):
        out.line(f"const long long i = static_cast<long long>(blockIdx.x) * {PACK_THREADS} "
                 "+ threadIdx.x;")
        with out.block(f"if (i < {m * n}LL)"):
            out.line(f"{c.name}[i] = {c_pad.name}[i / {n} * {c_pad.shape[1]} + i % {n}];")
