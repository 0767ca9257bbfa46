"""A GEMM for Hopper (sm_90a) from the wgmma family of ``intrinsics/cuda_wgmma.yaml``:
``C[m, n] = sum_k acc(A[m, k]) * acc(B[k, n])``, A row-major M x K, B row-major K x N.

Three launches (four when the result is padded):

1. ``pack_a`` and ``pack_b`` write A and B into the order the no-swizzle descriptors read
   (K-major 8 x 16-byte core matrices, ``_Layout``), one contiguous run per (tile, k stage),
   zero past the extents. Each stage of the GEMM is then one ``cp.async.bulk`` per operand.
2. ``gemm``: one block per 64 x n tile of C, warp-specialised: a consumer warpgroup
   (threads 0-127) and a producer warp (128-159, lane 0 issuing). Each of the ``stages``
   shared stages has a full mbarrier (one arrival and the stage's bytes: the producer's
   ``arrive.expect_tx`` and its two bulk copies) and an empty one (one arrival per consumer
   thread). The producer refills a stage once its empty phase completes; the consumers
   wait on its full phase, issue the stage's wgmmas, commit them, wait for the previous
   stage's group (``wait_group 1``) and release that stage. The accumulators go to C (or
   its padded copy) through the YAML's store.
3. ``unpad`` (only when M or N is not a multiple of the tile): C from its padded copy.

Every instruction of the protocol is named by the compute intrinsic's parameters and
checked against :data:`.wgmma.PROTOCOL`; the fill, descriptor, multiply and store are the
YAML's templates.
"""

from __future__ import annotations

from dataclasses import dataclass

from intrinsics import Intrinsic, Registry
from ir import Buffer
from targets.cuda.cexpr import PRELUDE, ctype
from targets.cuda.emit import SHARED_ACCESS, CudaKernel, Launch
from targets.cuda.errors import EmitError
from targets.cuda.ptx import MMA_PRELUDE
from targets.cuda.wgmma import PROTOCOL, wgmma_prelude
from targets.cuda.writer import CppWriter

__all__ = ["HopperTiling", "emit_gemm"]

WARPGROUP = 128
# The consumer warpgroup and the producer warp.
BLOCK_THREADS = WARPGROUP + 32
PACK_THREADS = 256
TILE_M = 64
# Bytes of k one wgmma reads (16 f16 or 32 8-bit values: two core matrices of 8 rows of
# 16 bytes, the leading byte offset of the YAML's descriptor templates apart).
STEP_BYTES = 32
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
class _Layout:
    """One operand packed for its descriptors: ``rows`` (64 for A, n for B) of a tile per
    stage, each stage ``steps`` k steps of ``rows / 8`` groups of 2 core matrices (the
    leading byte offset 128 between the two along k, the stride byte offset 256 between
    row groups). ``tiles`` tiles of ``k_stages`` stages each."""

    rows: int
    steps: int
    tiles: int
    k_stages: int

    @property
    def step_bytes(self) -> int:
        """Bytes of one wgmma k step of one tile."""
        return self.rows * STEP_BYTES

    @property
    def stage_bytes(self) -> int:
        """Bytes of one stage of one tile: one bulk copy."""
        return self.steps * self.step_bytes

    @property
    def total_bytes(self) -> int:
        """Bytes of the packed operand."""
        return self.tiles * self.k_stages * self.stage_bytes


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
              tiling: HopperTiling = HopperTiling(), name: str = "gemm_hopper") -> CudaKernel:
    """The GEMM of ``m x n x k`` through the wgmma compute ``intrinsic`` (of ``registry``,
    which holds its loads, store and fill) as CUDA C++ for sm_90a: the launches of the
    module docstring. Raises EmitError for an intrinsic that is not a wgmma one, a protocol
    parameter naming a helper this backend does not define, or a bad tiling."""
    _check_gemm(intrinsic, m, n, k)
    protocol = _protocol(intrinsic)
    a_op, b_op, c_op = intrinsic.operands
    tile_n = c_op.buffer.shape[1]
    in_dtype, acc_dtype = a_op.buffer.dtype, c_op.buffer.dtype
    k_step = a_op.buffer.shape[1]
    m_tiles, n_tiles = -(-m // TILE_M), -(-n // tile_n)
    k_steps = -(-k // k_step)
    steps = min(tiling.steps, k_steps)
    k_stages = -(-k_steps // steps)
    stages = min(tiling.stages, max(k_stages, 2))
    layout_a = _Layout(TILE_M, steps, m_tiles, k_stages)
    layout_b = _Layout(tile_n, steps, n_tiles, k_stages)
    padded = m % TILE_M != 0 or n % tile_n != 0
    a = Buffer("A", (m, k), in_dtype)
    b = Buffer("B", (k, n), in_dtype)
    c = Buffer("C", (m, n), acc_dtype)
    a_pack = Buffer("A_packed", (layout_a.total_bytes // in_dtype.numpy.itemsize,), in_dtype)
    b_pack = Buffer("B_packed", (layout_b.total_bytes // in_dtype.numpy.itemsize,), in_dtype)
    c_pad = Buffer("C_padded", (m_tiles * TILE_M, n_tiles * tile_n), acc_dtype)
    buffers = (a, b, c, a_pack, b_pack, *((c_pad,) if padded else ()))
    signature = ", ".join(f"{ctype(x.dtype)}* __restrict__ {x.name}" for x in buffers)
    out = CppWriter()
    launches = []
    for operand, layout, source, packed, transposed in (
            ("a", layout_a, a, a_pack, False), ("b", layout_b, b, b_pack, True)):
        kernel = f"{name}_pack_{operand}"
        _pack(out, kernel, signature, layout, source, packed, k_step, transposed)
        elements = layout.total_bytes // in_dtype.numpy.itemsize
        launches.append(Launch(kernel, (-(-elements // PACK_THREADS), 1, 1),
                               (PACK_THREADS, 1, 1)))
    staged = _Stages(stages, layout_a, layout_b)
    kernel = f"{name}_gemm"
    _gemm(out, kernel, signature, intrinsic, registry, protocol, (a_pack, b_pack), staged,
          c_pad if padded else c)
    launches.append(Launch(kernel, (n_tiles, m_tiles, 1), (BLOCK_THREADS, 1, 1), tiled=True,
                           dynamic_shared=staged.shared, stages=stages))
    if padded:
        _unpad(out, f"{name}_unpad", signature, c, c_pad)
        launches.append(Launch(f"{name}_unpad", (-(-m * n // PACK_THREADS), 1, 1),
                               (PACK_THREADS, 1, 1)))
    headers = ["#include <mma.h>", "#include <cuda_fp16.h>", "#include <cuda_bf16.h>",
               "#include <cuda_fp8.h>"]
    source = "\n".join([f"// {name}: generated by tensorize's CUDA backend (wgmma, sm_90a).",
                        *headers, "", PRELUDE, SHARED_ACCESS, MMA_PRELUDE,
                        wgmma_prelude([intrinsic]), out.text()])
    return CudaKernel(name, source, tuple(launches), tuple(x.name for x in buffers), buffers,
                      ("C",))


def _pack(out: CppWriter, kernel: str, signature: str, layout: _Layout, source: Buffer,
          packed: Buffer, k_step: int, transposed: bool) -> None:
    """One thread per packed element: the index's digits (tile, k stage, step, row group,
    core matrix, row, element), outermost first, name the element of the source it takes,
    or zero past the extents. B (k rows of n) is read transposed: its rows are n."""
    elem = source.dtype.numpy.itemsize
    per_core_row = 16 // elem
    rows, depth = (source.shape[1], source.shape[0]) if transposed else source.shape
    word = {1: "unsigned char", 2: "unsigned short"}[elem]
    total = layout.total_bytes // elem
    with out.block(f"__global__ void {kernel}({signature})"):
        out.line(f"const long long i = static_cast<long long>(blockIdx.x) * {PACK_THREADS} "
                 "+ threadIdx.x;")
        with out.block(f"if (i < {total}LL)"):
            digits = (("e", per_core_row), ("r", 8), ("c", 2), ("g", layout.rows // 8),
                      ("s", layout.steps), ("ks", layout.k_stages))
            out.line("long long rest = i;")
            for digit, extent in digits:
                out.line(f"const int {digit} = static_cast<int>(rest % {extent}); "
                         f"rest /= {extent};")
            out.line("const long long tile = rest;")
            out.line(f"const long long row = tile * {layout.rows} + g * 8 + r;")
            out.line(f"const long long kk = (static_cast<long long>(ks) * {layout.steps} + s) "
                     f"* {k_step} + c * {per_core_row} + e;")
            index = f"kk * {rows} + row" if transposed else f"row * {depth} + kk"
            out.line(f"using tz_word = {word};")
            out.line(f"const tz_word* src = reinterpret_cast<const tz_word*>({source.name});")
            out.line(f"reinterpret_cast<tz_word*>({packed.name})[i] = row < {rows} && "
                     f"kk < {depth} ? src[{index}] : tz_word(0);")


@dataclass(frozen=True, slots=True)
class _Stages:
    """The shared stages of one GEMM: ``count`` of them, each A's then B's tile of one k
    stage, then the full and the empty mbarrier of each."""

    count: int
    a: _Layout
    b: _Layout

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
          registry: Registry, protocol: dict[str, str], packed: tuple[Buffer, Buffer],
          stages: _Stages, result: Buffer) -> None:
    """The warp-specialised kernel (module docstring): its shared memory and mbarriers,
    then the producer's and the consumers' loops."""
    out.line(f"__global__ void __launch_bounds__({BLOCK_THREADS}) {kernel}({signature})")
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
            _producer(out, protocol, packed, stages)
        with out.block(f"if (threadIdx.x < {WARPGROUP})"):
            _consumers(out, intrinsic, registry, protocol, stages, result)


def _producer(out: CppWriter, protocol: dict[str, str], packed: tuple[Buffer, Buffer],
              stages: _Stages) -> None:
    """The producer's loop: each k stage waits until the consumers have released the
    stage it refills (its empty mbarrier; from the second round of stages on), then
    expects the stage's bytes on its full mbarrier and issues the two bulk copies."""
    a_pack, b_pack = packed
    for tile, buffer, layout, index in (("tz_a", a_pack, stages.a, "blockIdx.y"),
                                        ("tz_b", b_pack, stages.b, "blockIdx.x")):
        out.line(f"const char* {tile} = reinterpret_cast<const char*>({buffer.name}) + "
                 f"static_cast<long long>({index}) * {layout.k_stages * layout.stage_bytes};")
    n = stages.count
    with out.block(f"for (int kt = 0; kt < {stages.a.k_stages}; ++kt)"):
        out.line(f"const int stage = kt % {n};")
        out.line(f"if (kt >= {n}) while (!{protocol['try_wait']}(&tz_empty[stage], "
                 f"(kt / {n} - 1) % 2)) {{}}")
        out.line(f"{protocol['expect_tx']}(&tz_full[stage], {stages.bytes});")
        for operand, tile, layout in (("a", "tz_a", stages.a), ("b", "tz_b", stages.b)):
            out.line(f"{protocol['copy']}({stages.start(operand, 'stage')}, {tile} + kt * "
                     f"{layout.stage_bytes}, {layout.stage_bytes}, &tz_full[stage]);")


def _consumers(out: CppWriter, intrinsic: Intrinsic, registry: Registry,
               protocol: dict[str, str], stages: _Stages, result: Buffer) -> None:
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
    ld = result.shape[1]
    out.line(f"{acc}* tz_c = {result.name} + blockIdx.y * {TILE_M * ld}LL + blockIdx.x * "
             f"{stages.b.rows};")
    out.line(store.render("cuda", {"dst": "tz_c", "src": "tz_acc", "dst.ld": str(ld)}))


def _unpad(out: CppWriter, kernel: str, signature: str, c: Buffer, c_pad: Buffer) -> None:
    """C from its padded copy, one thread per element."""
    m, n = c.shape
    with out.block(f"__global__ void {kernel}({signature})"):
        out.line(f"const long long i = static_cast<long long>(blockIdx.x) * {PACK_THREADS} "
                 "+ threadIdx.x;")
        with out.block(f"if (i < {m * n}LL)"):
            out.line(f"{c.name}[i] = {c_pad.name}[i / {n} * {c_pad.shape[1]} + i % {n}];")
