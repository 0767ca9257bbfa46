"""A GEMM for Hopper (sm_90a) from the wgmma family of ``intrinsics/cuda_wgmma.yaml``:
``C[m, n] = sum_k acc(A[m, k]) * acc(B[k, n])``, A row-major M x K, B row-major K x N.

Two launches, and up to two more:

1. ``pack_b`` writes B transposed (``B_t``, N rows of K: every input type reads one K-major
   layout, and the 8-bit types have no transposed wgmma operand), 32 x 32 tiles at a time
   through shared memory so that both its reads and its writes are coalesced; ``pack_a``
   copies A into ``A_k`` only when its rows are not a multiple of 16 bytes (a tensor map's
   row stride must be). Neither pads to the tile: the tensor copies zero-fill past the
   extents. A kernel's operands may come laid out otherwise (:class:`GemmOperands`): a B
   stored N rows of K (a dense layer's weight) is read in place where its rows are a
   multiple of 16 bytes, and an A stored K rows of M is packed transposed as B is.
2. ``gemm``: one block per 64 x n tile of C, warp-specialised: a consumer warpgroup
   (threads 0-127) and a producer warp (128-159, lane 0 issuing). Each of the ``stages``
   shared stages has a full mbarrier (one arrival and the stage's bytes: the producer's
   ``arrive.expect_tx`` and its TMA tensor copies) and an empty one (one arrival per
   consumer thread). A stage holds, per operand, one box (rows x 16 bytes of k, from the
   operand's 2-d tensor map) per core-matrix column: the boxes land one after another, so
   the no-swizzle descriptors read them with a leading byte offset of rows x 16 (between
   the two core matrices along k) and a stride byte offset of 128 (between 8-row groups).
   The producer refills a stage once its empty phase completes; the consumers wait on its
   full phase, issue the stage's wgmmas, commit them, wait for the previous stage's group
   (``wait_group 1``) and release that stage. The accumulators go to C (or its padded
   copy) through the YAML's store.
3. ``unpad`` (only when M or N is not a multiple of the tile): C from its padded copy.

Each launch is an ``extern "C"`` function, so that ptxas, cuobjdump and a GPU's module
name it as the launch does. Every instruction of the protocol is named by the compute
intrinsic's parameters and checked against :data:`.wgmma.PROTOCOL`; the fill, descriptor,
multiply and store are the YAML's templates. The tensor maps travel as
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
from targets.cuda.ptx import MMA_PRELUDE
from targets.cuda.wgmma import PROTOCOL, wgmma_prelude
from targets.cuda.writer import CppWriter

__all__ = ["GemmOperands", "HopperTiling", "emit_gemm"]

WARPGROUP = 128
# The consumer warpgroup and the producer warp.
BLOCK_THREADS = WARPGROUP + 32
PACK_THREADS = 256
# A transposing pack moves tiles of TRANSPOSE_TILE x TRANSPOSE_TILE elements through shared
# memory, with blocks of TRANSPOSE_TILE x TRANSPOSE_ROWS threads.
TRANSPOSE_TILE = 32
TRANSPOSE_ROWS = 8
TILE_M = 64
# Bytes of k one wgmma reads (16 f16 or 32 8-bit values: two core matrices of 8 rows of
# 16 bytes, the leading byte offset of the YAML's descriptor templates apart).
STEP_BYTES = 32
# Bytes of k in one core matrix row: the inner extent of every tensor-map box.
CORE_BYTES = 16
MAX_GRID = 65535


@dataclass(frozen=True, slots=True)
class HopperTiling:
    """How the GEMM is cut: ``steps`` wgmma k steps per pipeline stage (at most the GEMM's),
    ``stages`` stages in shared memory (at least 2: the producer fills one while the
    warpgroup reads another; at most the GEMM's stages, but never under 2)."""

    steps: int = 4
    stages: int = 4

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise EmitError(f"HopperTiling requires steps >= 1, got {self.steps}")
        if self.stages < 2:
            raise EmitError(f"HopperTiling requires stages >= 2, got {self.stages}")


@dataclass(frozen=True, slots=True)
class GemmOperands:
    """The GEMM's buffers as a kernel declares them: ``a`` holds M x K (``a_transposed``:
    K x M), ``b`` K x N (``b_transposed``: N x K), ``c`` M x N, each dense in row-major
    order; dimensions of extent 1 may stand anywhere (a batch of one), only the order of
    the elements counts. ``params``: the kernel's parameters in order (their names: the
    three buffers, in the kernel's own order)."""

    a: Buffer
    b: Buffer
    c: Buffer
    a_transposed: bool = False
    b_transposed: bool = False
    params: tuple[str, ...] = ()

    def check(self, m: int, n: int, k: int) -> None:
        """EmitError naming the buffer whose elements are not its matrix's, or an order of
        parameters that is not the three buffers'."""
        shapes = ((self.a, (k, m) if self.a_transposed else (m, k)),
                  (self.b, (n, k) if self.b_transposed else (k, n)), (self.c, (m, n)))
        for buffer, (rows, cols) in shapes:
            if buffer.strides is not None:
                raise EmitError(f"emit_gemm requires {buffer.name} dense in row-major order, "
                                f"got strides {buffer.strides}")
            if [d for d in buffer.shape if d != 1] != [d for d in (rows, cols) if d != 1]:
                raise EmitError(f"emit_gemm requires {buffer.name} of {rows} x {cols} "
                                f"elements (unit dimensions aside), got shape {buffer.shape}")
        if self.params and sorted(self.params) != sorted(x.name for x in (self.a, self.b,
                                                                            self.c)):
            raise EmitError(f"emit_gemm requires the parameters {self.a.name}, {self.b.name} "
                            f"and {self.c.name} in some order, got {', '.join(self.params)}")


@dataclass(frozen=True, slots=True)
class _Layout:
    """One operand's tile in a stage: ``rows`` (64 for A, n for B) of ``steps`` wgmma k steps,
    each step two boxes of rows x 16 bytes (one core-matrix column each), ``k_stages`` stages
    along k."""

    rows: int
    steps: int
    k_stages: int

    @property
    def box_bytes(self) -> int:
        """Bytes of one box: one column of core matrices (the descriptors' leading offset)."""
        return self.rows * CORE_BYTES

    @property
    def step_bytes(self) -> int:
        """Bytes of one wgmma k step of one tile."""
        return self.rows * STEP_BYTES

    @property
    def stage_bytes(self) -> int:
        """Bytes of one stage of one tile."""
        return self.steps * self.step_bytes


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


def _check_gemm(intrinsic: Intrinsic, m: int, n: int, k: int) -> None:
    if intrinsic.kind != "compute" or "warpgroup" not in intrinsic.params:
        raise EmitError(f"emit_gemm requires a wgmma compute intrinsic, got {intrinsic.name}")
    if intrinsic.params["warpgroup"] != WARPGROUP:
        raise EmitError(f"intrinsic {intrinsic.name}: parameter 'warpgroup' requires "
                        f"{WARPGROUP}, got {intrinsic.params['warpgroup']}")
    if min(m, n, k) < 1:
        raise EmitError(f"emit_gemm requires positive extents, got {m} x {n} x {k}")
    if -(-m // TILE_M) > MAX_GRID:
        raise EmitError(f"emit_gemm requires at most {MAX_GRID} row tiles of {TILE_M} "
                        f"(gridDim.y), got m = {m}")


def emit_gemm(intrinsic: Intrinsic, registry: Registry, m: int, n: int, k: int,
              tiling: HopperTiling = HopperTiling(), name: str = "gemm_hopper",
              operands: GemmOperands | None = None) -> CudaKernel:
    """The GEMM of ``m x n x k`` through the wgmma compute ``intrinsic`` (of ``registry``,
    which holds its loads, store and fill) as CUDA C++ for sm_90a: the launches of the
    module docstring, over ``operands`` (default: row-major A, B and C of the intrinsic's
    types). Raises EmitError for an intrinsic that is not a wgmma one, a protocol
    parameter naming a helper this backend does not define, a bad tiling, or operands that
    are not the GEMM's."""
    _check_gemm(intrinsic, m, n, k)
    protocol = _protocol(intrinsic)
    a_op, b_op, c_op = intrinsic.operands
    tile_n = c_op.buffer.shape[1]
    in_dtype, acc_dtype = a_op.buffer.dtype, c_op.buffer.dtype
    if operands is None:
        operands = GemmOperands(Buffer("A", (m, k), in_dtype), Buffer("B", (k, n), in_dtype),
                                Buffer("C", (m, n), acc_dtype))
    operands.check(m, n, k)
    elem = in_dtype.numpy.itemsize
    k_step = a_op.buffer.shape[1]
    m_tiles, n_tiles = -(-m // TILE_M), -(-n // tile_n)
    k_steps = -(-k // k_step)
    steps = min(tiling.steps, k_steps)
    k_stages = -(-k_steps // steps)
    stages = min(tiling.stages, max(k_stages, 2))
    layout_a = _Layout(TILE_M, steps, k_stages)
    layout_b = _Layout(tile_n, steps, k_stages)
    padded = m % TILE_M != 0 or n % tile_n != 0
    # A tensor map's row stride is a multiple of 16 bytes: rows of k padded to that.
    k_row = -(-k * elem // CORE_BYTES) * CORE_BYTES // elem
    a, b, c = operands.a, operands.b, operands.c
    # Each operand is read in place where it is k-major with rows a map can stride, else
    # packed (transposed where it is not k-major) into rows of k_row.
    a_rows = a if not operands.a_transposed and k_row == k else \
        Buffer(f"{a.name}_k", (m, k_row), in_dtype)
    b_rows = b if operands.b_transposed and k_row == k else \
        Buffer(f"{b.name}_t", (n, k_row), in_dtype)
    c_pad = Buffer(f"{c.name}_padded", (m_tiles * TILE_M, n_tiles * tile_n), acc_dtype)
    order = operands.params or (a.name, b.name, c.name)
    own = {x.name: x for x in (a, b, c)}
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
                                  transposed, k))
    box = CORE_BYTES // elem
    maps = (TensorMap(a_rows.name, (k, m), k_row * elem, (box, TILE_M)),
            TensorMap(b_rows.name, (k, n), k_row * elem, (box, tile_n)))
    staged = _Stages(stages, layout_a, layout_b, box)
    kernel = f"{name}_gemm"
    gemm_signature = signature + "".join(
        f", const __grid_constant__ CUtensorMap tz_map_{x}" for x in ("a", "b"))
    _gemm(out, kernel, gemm_signature, intrinsic, registry, protocol, staged,
          c_pad if padded else c, c_pad.shape[1] if padded else n)
    launches.append(Launch(kernel, (n_tiles, m_tiles, 1), (BLOCK_THREADS, 1, 1), tiled=True,
                           dynamic_shared=staged.shared, stages=stages, tensor_maps=maps,
                           tensorized=True))
    if padded:
        _unpad(out, f"{name}_unpad", signature, c, c_pad, m, n)
        launches.append(Launch(f"{name}_unpad", (-(-m * n // PACK_THREADS), 1, 1),
                               (PACK_THREADS, 1, 1)))
    headers = ["#include <mma.h>", "#include <cuda_fp16.h>", "#include <cuda_bf16.h>",
               "#include <cuda_fp8.h>"]
    source = "\n".join([f"// {name}: generated by tensorize's CUDA backend (wgmma, sm_90a).",
                        *headers, "", PRELUDE, SHARED_ACCESS, MMA_PRELUDE,
                        wgmma_prelude([intrinsic]), out.text()])
    return CudaKernel(name, source, tuple(launches), tuple(x.name for x in buffers), buffers,
                      (c.name,))


def _pack(out: CppWriter, kernel: str, signature: str, source: Buffer, packed: Buffer,
          transposed: bool, depth: int) -> Launch:
    """The launch writing ``packed`` (rows of k, zero past ``depth``, the GEMM's k) from
    ``source``: read as k rows of the packed rows when ``transposed`` (through shared
    tiles, :func:`_transpose`), else as those rows of k, one thread per element."""
    rows, row = packed.shape
    if transposed:
        _transpose(out, kernel, signature, source, packed, depth)
        return Launch(kernel, (-(-rows // TRANSPOSE_TILE), -(-row // TRANSPOSE_TILE), 1),
                      (TRANSPOSE_TILE, TRANSPOSE_ROWS, 1))
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
               depth: int) -> None:
    """``packed`` (rows of k) from ``source`` (``depth`` rows of k's rows), a tile of
    TRANSPOSE_TILE x TRANSPOSE_TILE per block: each warp reads a tile row along the
    source's rows (consecutive addresses) into shared memory, and after the barrier writes
    a tile row along k (consecutive again), so neither side strides through memory."""
    rows, row = packed.shape
    tile = TRANSPOSE_TILE
    # One pad element a tile row staggers the column reads across banks.
    pitch = tile + 1
    with out.block(f'extern "C" __global__ void {kernel}({signature})'):
        _words(out, source)
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
                out.line(f"reinterpret_cast<tz_word*>({packed.name})[r * {row} + kk] = "
                         f"tz_shared_load(tz_tile, threadIdx.x * {pitch} + y);")


@dataclass(frozen=True, slots=True)
class _Stages:
    """The shared stages of one GEMM: ``count`` of them, each A's then B's tile of one k
    stage, then the full and the empty mbarrier of each. ``box``: the elements of k in one
    box (16 bytes)."""

    count: int
    a: _Layout
    b: _Layout
    box: int

    @property
    def bytes(self) -> int:
        """One stage's tiles: the bytes its mbarrier's phase expects."""
        return self.a.stage_bytes + self.b.stage_bytes

    @property
    def shared(self) -> int:
        """The block's shared memory: the stages and two 8-byte mbarriers each."""
        return self.count * (self.bytes + 16)

    def start(self, operand: str, stage: str) -> str:
        """The shared address of ``operand``'s (``a`` or ``b``) tiles in stage ``stage`` (a
        C++ expression)."""
        offset = "" if operand == "a" else f" + {self.a.stage_bytes}"
        return f"tz_smem + {stage} * {self.bytes}{offset}"

    def tile(self, operand: str, stage: str, step: str) -> str:
        """The shared address of ``operand``'s tile of k step ``step`` in stage ``stage``."""
        layout = self.a if operand == "a" else self.b
        return f"{self.start(operand, stage)} + {step} * {layout.step_bytes}"


def _gemm(out: CppWriter, kernel: str, signature: str, intrinsic: Intrinsic,
          registry: Registry, protocol: dict[str, str], stages: _Stages,
          result: Buffer, ld: int) -> None:
    """The warp-specialised kernel (module docstring): its shared memory and mbarriers,
    then the producer's and the consumers' loops; the tiles go to ``result``, rows ``ld``
    elements apart."""
    out.line(f'extern "C" __global__ void __launch_bounds__({BLOCK_THREADS}) {kernel}('
             f"{signature})")
    with out.block(""):
        out.line(f"TZ_DYNAMIC_SHARED(tz_smem, {stages.shared});")
        out.line(f'tz_shared_declare(tz_smem, {stages.shared}, "tz_smem");')
        barriers = stages.count * stages.bytes
        out.line(f"unsigned long long* tz_full = reinterpret_cast<unsigned long long*>("
                 f"tz_smem + {barriers});")
        out.line(f"unsigned long long* tz_empty = tz_full + {stages.count};")
        with out.block("if (threadIdx.x == 0)"):
            with out.block(f"for (int s = 0; s < {stages.count}; ++s)"):
                out.line(f"{protocol['barrier_init']}(&tz_full[s], 1);")
                out.line(f"{protocol['barrier_init']}(&tz_empty[s], {WARPGROUP});")
        out.line("__syncthreads();")
        with out.block(f"if (threadIdx.x == {WARPGROUP})"):
            _producer(out, protocol, stages)
        with out.block(f"if (threadIdx.x < {WARPGROUP})"):
            _consumers(out, intrinsic, registry, protocol, stages, result, ld)


def _producer(out: CppWriter, protocol: dict[str, str], stages: _Stages) -> None:
    """The producer's loop: each k stage waits until the consumers have released the
    stage it refills (its empty mbarrier; from the second round of stages on), then
    expects the stage's bytes on its full mbarrier and issues, per operand, one tensor copy
    per core-matrix column of the stage (two a k step), each box after the last."""
    n = stages.count
    columns = 2 * stages.a.steps
    with out.block(f"for (int kt = 0; kt < {stages.a.k_stages}; ++kt)"):
        out.line(f"const int stage = kt % {n};")
        out.line(f"if (kt >= {n}) while (!{protocol['try_wait']}(&tz_empty[stage], "
                 f"(kt / {n} - 1) % 2)) {{}}")
        out.line(f"{protocol['expect_tx']}(&tz_full[stage], {stages.bytes});")
        out.line("#pragma unroll")
        with out.block(f"for (int col = 0; col < {columns}; ++col)"):
            out.line(f"const int k0 = (kt * {columns} + col) * {stages.box};")
            for operand, layout, row in (("a", stages.a, "blockIdx.y"),
                                         ("b", stages.b, "blockIdx.x")):
                out.line(f"{protocol['copy']}({stages.start(operand, 'stage')} + col * "
                         f"{layout.box_bytes}, &tz_map_{operand}, k0, {row} * {layout.rows}, "
                         "&tz_full[stage]);")


def _consumers(out: CppWriter, intrinsic: Intrinsic, registry: Registry,
               protocol: dict[str, str], stages: _Stages, result: Buffer, ld: int) -> None:
    """The consumer warpgroup's loop: each k stage waits for its full mbarrier's phase,
    issues the stage's wgmmas, commits them, waits for the previous stage's group and
    releases that stage (one arrival per thread on its empty mbarrier); then the store."""
    load_a = registry.get(intrinsic.loads["A"][0])
    load_b = registry.get(intrinsic.loads["B"][0])
    fill = registry.get(intrinsic.fill["C"][0])
    store = registry.get(intrinsic.stores["C"][0])
    acc = ctype(result.dtype)
    n = stages.count
    out.line(f"{acc} tz_acc[{int(fill.params['lane_registers'])}];")
    out.line(fill.render("cuda", {"dst": "tz_acc"}))
    out.line("unsigned tz_desc_a[2], tz_desc_b[2];")
    # Unrolled by the stages, so each copy of the body has its stage as a constant.
    out.line(f"#pragma unroll {n}")
    with out.block(f"for (int kt = 0; kt < {stages.a.k_stages}; ++kt)"):
        out.line(f"const int stage = kt % {n};")
        out.line(f"while (!{protocol['try_wait']}(&tz_full[stage], kt / {n} % 2)) {{}}")
        out.line(f"{protocol['fence']}();")
        out.line("#pragma unroll")
        with out.block(f"for (int s = 0; s < {stages.a.steps}; ++s)"):
            out.line(load_a.render("cuda", {"dst": "tz_desc_a",
                                            "src": stages.tile("a", "stage", "s")}))
            out.line(load_b.render("cuda", {"dst": "tz_desc_b",
                                            "src": stages.tile("b", "stage", "s")}))
            out.line(intrinsic.render("cuda", {"C": "tz_acc", "A": "tz_desc_a",
                                               "B": "tz_desc_b"}))
        out.line(f"{protocol['commit']}();")
        # The previous stage's group has read its tiles: this thread releases that stage.
        out.line(f"{protocol['wait']}<1>();")
        out.line(f"if (kt > 0) {protocol['arrive']}(&tz_empty[(kt + {n - 1}) % {n}]);")
    out.line(f"{protocol['wait']}<0>();")
    out.line(f"{acc}* tz_c = {result.name} + blockIdx.y * {TILE_M * ld}LL + blockIdx.x * "
             f"{stages.b.rows};")
    out.line(store.render("cuda", {"dst": "tz_c", "src": "tz_acc", "dst.ld": str(ld)}))


def _unpad(out: CppWriter, kernel: str, signature: str, c: Buffer, c_pad: Buffer, m: int,
           n: int) -> None:
    """C (``m x n``) from its padded copy, one thread per element."""
    with out.block(f'extern "C" __global__ void {kernel}({signature})'):
        out.line(f"const long long i = static_cast<long long>(blockIdx.x) * {PACK_THREADS} "
                 "+ threadIdx.x;")
        with out.block(f"if (i < {m * n}LL)"):
            out.line(f"{c.name}[i] = {c_pad.name}[i / {n} * {c_pad.shape[1]} + i % {n}];")
