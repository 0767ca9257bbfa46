"""The device helpers of the Hopper family (``intrinsics/cuda_wgmma.yaml``): warpgroup
``wgmma.mma_async`` on shared-memory matrix descriptors, and the TMA tensor copies and
mbarriers that feed it. Each wraps one inline PTX instruction (or builds one operand), so the
YAML names a helper and never holds PTX text.

Two layers, as in :mod:`.ptx`. The **instructions** (``tz_wgmma_m64n*`` and the fence, commit
and wait around them; ``tz_mbarrier_*``, ``tz_tensor_copy_2d`` and its multicast to a
thread-block cluster, the cluster's rank and barrier; ``tz_setmaxnreg_dec``/``_inc``, a
warpgroup giving back or taking registers; ``tz_warpgroup_index``, a shuffle from lane 0)
are inline PTX or intrinsics on the GPU;
the host emulation (``emulation/wgmma.h``) defines its own, which model the asynchrony (a
tensor copy is in flight until its mbarrier phase completes, a wgmma reads its tiles until
its group is waited for) and encode a tensor map in a layout of their own, not the
driver's. The **helpers** the templates call to build an operand or move accumulators
(``tz_wgmma_desc``, ``tz_wgmma_store_m64n*``, ``tz_wgmma_fill_m64n*``, and
``tz_wgmma_acc_row``/``tz_wgmma_acc_col``, a register's place in the tile, which a fused
epilogue calls) are plain C++ shared by both, so the emulation runs the descriptor encoding
and the fragment layout the GPU does.

Descriptor (PTX ISA, "Matrix Descriptor Format"), 64 bits: the shared address of the tile
>> 4 in bits 0-13, the leading byte offset >> 4 in bits 16-29, the stride byte offset >> 4
in bits 32-45, the swizzle mode in bits 62-63 (0: none). A kernel holds an operand as three
words: the descriptor's two, and the instruction's imm-trans flag for the tile (1: MN-major,
the 16-bit types' B alone), which is no part of the descriptor but of the wgmma instruction:
``tz_wgmma_desc`` sets it from the load intrinsic's ``transpose``, and the wgmma call, once
inlined, passes it as its immediate. Accumulator of an m64nN tile: the
thread of warp ``w`` (of the warpgroup) and lane ``l`` holds, in register ``r``, row
``16 w + l / 4 + 8 ((r / 2) % 2)``, column ``8 (r / 4) + 2 (l % 4) + r % 2``.
"""

from __future__ import annotations

from collections.abc import Iterable

from intrinsics import Intrinsic
from targets.cuda.errors import EmitError

__all__ = ["FRAGMENT", "PROTOCOL", "TRANSPOSABLE", "ptx_type", "wgmma_prelude"]

# The protocol parameters of a wgmma compute intrinsic, and the helper each must name (a
# kernel's calls come from the YAML; a name this module does not define is refused).
PROTOCOL = {
    "fence": "tz_wgmma_fence",
    "advance": "tz_wgmma_desc_advance",
    "commit": "tz_wgmma_commit_group",
    "wait": "tz_wgmma_wait_group",
    "barrier_init": "tz_mbarrier_init",
    "expect_tx": "tz_mbarrier_arrive_expect_tx",
    "arrive": "tz_mbarrier_arrive",
    "copy": "tz_tensor_copy_2d",
    "try_wait": "tz_mbarrier_try_wait",
    "cluster_rank": "tz_cluster_rank",
    "cluster_sync": "tz_cluster_sync",
    "remote_arrive": "tz_mbarrier_arrive_cluster",
    "multicast": "tz_tensor_copy_2d_multicast",
    "setmaxnreg_dec": "tz_setmaxnreg_dec",
    "setmaxnreg_inc": "tz_setmaxnreg_inc",
    "warpgroup_index": "tz_warpgroup_index",
}

_PTX_TYPES = {"float16": "f16", "bfloat16": "bf16", "int8": "s8", "float8_e4m3": "e4m3",
              "float8_e5m2": "e5m2", "float32": "f32", "int32": "s32"}
# The input types whose wgmma takes imm-trans operands (an MN-major tile); the 8-bit ones
# read K-major tiles alone.
TRANSPOSABLE = ("f16", "bf16")

# The fixed part: the asynchronous protocol on the GPU, and the C++ both sides share.
_COMMON = """\
#ifndef TZ_EMULATION
#include <cuda.h>
__device__ inline void tz_wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ inline void tz_wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N> __device__ inline void tz_wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
// An mbarrier expecting `count` arrivals a phase; the init is made visible to the
// asynchronous proxy (the bulk copies' complete_tx) before any thread uses it.
__device__ inline void tz_mbarrier_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;"
               :: "r"(tz_shared_address(bar)), "r"(count) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// One arrival, and `bytes` more the phase waits for (the copies' complete_tx).
__device__ inline void tz_mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(tz_shared_address(bar)), "r"(bytes) : "memory");
}
// One arrival.
__device__ inline void tz_mbarrier_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];"
               :: "r"(tz_shared_address(bar)) : "memory");
}
// True once the phase of parity `parity` has completed.
__device__ inline bool tz_mbarrier_try_wait(unsigned long long* bar, unsigned parity) {
  unsigned done;
  asm volatile("{\\n .reg .pred p;\\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\n"
               " selp.u32 %0, 1, 0, p;\\n}"
               : "=r"(done) : "r"(tz_shared_address(bar)), "r"(parity) : "memory");
  return done != 0;
}
// The box of the 2-d tensor map `map` (a __grid_constant__ kernel parameter, read through
// its generic address) at element coordinates (x, y), inner first, into `dst` (128-byte
// aligned shared memory) by the TMA unit, counted against `bar`'s transactions; elements
// outside the tensor are zero-filled.
__device__ inline void tz_tensor_copy_2d(void* dst, const CUtensorMap* map, int x, int y,
                                         unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
               "[%0], [%1, {%2, %3}], [%4];"
               :: "r"(tz_shared_address(dst)), "l"(reinterpret_cast<unsigned long long>(map)),
                  "r"(x), "r"(y), "r"(tz_shared_address(bar)) : "memory");
}
// The same with .multicast::cluster: the box lands at `dst`'s offset in the shared memory of
// each block of the cluster whose bit `mask` sets, counted against the mbarrier at `bar`'s
// offset there.
__device__ inline void tz_tensor_copy_2d_multicast(void* dst, const CUtensorMap* map, int x,
                                                   int y, unsigned long long* bar,
                                                   unsigned short mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;"
               :: "r"(tz_shared_address(dst)), "l"(reinterpret_cast<unsigned long long>(map)),
                  "r"(x), "r"(y), "r"(tz_shared_address(bar)), "h"(mask) : "memory");
}
// This block's rank in its cluster.
__device__ inline unsigned tz_cluster_rank() {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}
// Every thread of the cluster arrives and waits for the others: the blocks' mbarriers are
// initialised for the cluster after it, and no block leaves while another may still reach
// its shared memory.
__device__ inline void tz_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\\n"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// One arrival on the mbarrier at `bar`'s offset in the cluster's block `rank`.
__device__ inline void tz_mbarrier_arrive_cluster(unsigned long long* bar, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote) : "r"(tz_shared_address(bar)), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];"
               :: "r"(remote) : "memory");
}
// The warpgroup's registers a thread lowered (dec) or raised (inc) to N, a multiple of 8 in
// [24, 256]; every thread of the warpgroup executes it with the same N.
template <unsigned N> __device__ inline void tz_setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N));
}
template <unsigned N> __device__ inline void tz_setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N));
}
// The thread's warpgroup in its block, from lane 0 (CUTLASS's canonical_warp_group_idx): the
// same value, but one ptxas knows is uniform across the warp, so that what is computed from
// it (a descriptor) stays in uniform registers rather than moving there before each wgmma.
__device__ inline int tz_warpgroup_index() {
  return __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
}
// Each block's dynamic shared memory (the emulation gives each block of a cluster its own).
#define TZ_CTA_SHARED(name, bytes) extern __shared__ __align__(128) unsigned char name[]
// Two adjacent elements at `dst` (aligned to both) by one store: their bits as one word of
// twice the element's size (the emulation's checks the alignment and the bounds).
template <int BYTES> struct tz_pair_word;
template <> struct tz_pair_word<1> { using type = unsigned short; };
template <> struct tz_pair_word<2> { using type = unsigned; };
template <> struct tz_pair_word<4> { using type = unsigned long long; };
template <class T> __device__ inline void tz_wgmma_store_pair(T* dst, T x, T y) {
  using Word = typename tz_pair_word<sizeof(T)>::type;
  const T pair[2] = {x, y};
  Word word;
  memcpy(&word, pair, sizeof word);
  *reinterpret_cast<Word*>(dst) = word;
}
#endif
// The operand of a tile at `tile` (shared memory): its descriptor (see targets/cuda/wgmma.py)
// in d[0] and d[1], and in d[2] the instruction's imm-trans flag for it (1: MN-major), a
// constant the wgmma call passes as its immediate once inlined.
__device__ inline void tz_wgmma_desc(unsigned* d, const void* tile, unsigned leading,
                                     unsigned stride, unsigned swizzle, unsigned transpose) {
  unsigned long long desc = (tz_shared_address(tile) & 0x3FFFFu) >> 4;
  desc |= static_cast<unsigned long long>(leading >> 4 & 0x3FFFu) << 16;
  desc |= static_cast<unsigned long long>(stride >> 4 & 0x3FFFu) << 32;
  desc |= static_cast<unsigned long long>(swizzle & 3u) << 62;
  d[0] = static_cast<unsigned>(desc);
  d[1] = static_cast<unsigned>(desc >> 32);
  d[2] = transpose;
}
// The operand `base` with its start address `bytes` further (a multiple of 16): the
// address field is the low 14 bits of address >> 4, and shared addresses stay below 256 KiB,
// so the addition never carries out of it.
__device__ inline void tz_wgmma_desc_advance(unsigned* d, const unsigned* base, unsigned bytes) {
  d[0] = base[0] + (bytes >> 4);
  d[1] = base[1];
  d[2] = base[2];
}
"""

# The helpers naming an accumulator register's place in the tile and storing a register pair
# (the store intrinsic's parameters, which a fused epilogue calls), as PROTOCOL names the
# compute intrinsic's.
FRAGMENT = {"row": "tz_wgmma_acc_row", "col": "tz_wgmma_acc_col", "pair": "tz_wgmma_store_pair"}

# The fragment layout as a register's place, which a fused epilogue calls.
_LAYOUT = """\
// The row and column, in the warpgroup's 64 x n tile, of this thread's register r.
__device__ inline int tz_wgmma_acc_row(int r) {
  const unsigned t = threadIdx.x % 128;
  return 16 * (t / 32) + t % 32 / 4 + 8 * (r / 2 % 2);
}
__device__ inline int tz_wgmma_acc_col(int r) {
  return 8 * (r / 4) + 2 * (threadIdx.x % 4) + r % 2;
}
"""

# Per accumulator width n: the store of a thread's pairs and the fill. The store spells the
# layout out rather than calling the helpers above: written through them, nvcc 13 splits each
# pair's 8-byte store in two (64 STG.E where this issues 32 STG.E.64).
_FRAGMENT = """\
template <class T> __device__ inline void tz_wgmma_store_m64n{n}(T* dst, const T* acc, int ld) {{
  const unsigned t = threadIdx.x % 128, w = t / 32, l = t % 32;
#pragma unroll
  for (int r = 0; r < {regs}; r += 2)
    tz_ptx_store2(dst + (16 * w + l / 4 + 8 * (r / 2 % 2)) * ld + 8 * (r / 4) + 2 * (l % 4),
                  acc[r], acc[r + 1]);
}}
template <class T> __device__ inline void tz_wgmma_fill_m64n{n}(T* acc) {{
#pragma unroll
  for (int r = 0; r < {regs}; ++r) acc[r] = T(0);
}}
"""


def ptx_type(dtype_name: str) -> str:
    """The PTX type of an IR dtype (``float16`` -> ``f16``); EmitError for one wgmma lacks."""
    if dtype_name not in _PTX_TYPES:
        raise EmitError(f"wgmma has no PTX type for {dtype_name}")
    return _PTX_TYPES[dtype_name]


def _instruction(intrinsic: Intrinsic) -> str:
    """The inline PTX of one wgmma compute intrinsic, named as its template calls it."""
    a, b, c = intrinsic.operands
    n = c.buffer.shape[1]
    k = a.buffer.shape[1]
    ta, tb, tc = (ptx_type(o.buffer.dtype.name) for o in (a, b, c))
    integer = tc == "s32"
    ctype = "int" if integer else "float"
    name = f"tz_wgmma_m64n{n}k{k}_{ta}_{tb}_{tc}"
    head = (f"__device__ inline void {name}({ctype}* d, const unsigned* a, const unsigned* b) {{\n"
            "  const unsigned long long da = a[0] | static_cast<unsigned long long>(a[1]) << 32;\n"
            "  const unsigned long long db = b[0] | static_cast<unsigned long long>(b[1]) << 32;\n")
    if ta not in TRANSPOSABLE:
        # 8-bit floats take scale-a and scale-b immediates, integers none; both read
        # K-major tiles alone (their descriptors' flag is 0: the emitter refuses another).
        scales = ", 1, 1" if not integer else ""
        return head + _asm(intrinsic, scales) + "}\n"
    # 16-bit inputs take scale-a, scale-b, imm-trans-a and imm-trans-b: B's flag is its
    # operand's third word, a constant once inlined, so one branch is left.
    return (head + "  if (b[2]) {\n" + _asm(intrinsic, ", 1, 1, 0, 1", "  ")
            + "  } else {\n" + _asm(intrinsic, ", 1, 1, 0, 0", "  ") + "  }\n}\n")


def _asm(intrinsic: Intrinsic, immediates: str, indent: str = "") -> str:
    """The inline PTX statement of one wgmma compute intrinsic with its trailing
    ``immediates`` (scales and transposes), on ``d``, ``da`` and ``db``."""
    a, b, c = intrinsic.operands
    m, n = c.buffer.shape
    k = a.buffer.shape[1]
    ta, tb, tc = (ptx_type(o.buffer.dtype.name) for o in (a, b, c))
    regs = m * n // 128
    outs = ", ".join(f"%{r}" for r in range(regs))
    constraint = '"+r"' if tc == "s32" else '"+f"'
    bindings = ", ".join(f"{constraint}(d[{r}])" for r in range(regs))
    pad = "  " + indent
    return (f'{pad}asm volatile("{{\\n .reg .pred p;\\n setp.ne.b32 p, 1, 0;\\n"\n'
            f'{pad}             " wgmma.mma_async.sync.aligned.m64n{n}k{k}.{tc}.{ta}.{tb} "\n'
            f'{pad}             "{{{outs}}}, %{regs}, %{regs + 1}, p{immediates};\\n}}"\n'
            f"{pad}             : {bindings}\n"
            f'{pad}             : "l"(da), "l"(db) : "memory");\n')


def wgmma_prelude(computes: Iterable[Intrinsic]) -> str:
    """The helpers a Hopper kernel calling the wgmma ``computes`` needs: the protocol, the
    descriptor, each accumulator width's store and fill, and each instruction (GPU only;
    the emulation defines every one)."""
    computes = list(computes)
    widths = sorted({c.operands[2].buffer.shape[1] for c in computes})
    fragments = "".join(_FRAGMENT.format(n=n, regs=n // 2) for n in widths)
    instructions = "".join(_instruction(c) for c in computes)
    return (_COMMON + _LAYOUT + fragments + "#ifndef TZ_EMULATION\n" + instructions
            + "#endif\n")
