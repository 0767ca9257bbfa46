"""The device helpers of the Hopper family (``intrinsics/cuda_wgmma.yaml``): warpgroup
``wgmma.mma_async`` on shared-memory matrix descriptors, and the TMA tensor copies and
mbarriers that feed it. Each wraps one inline PTX instruction (or builds one operand), so the
YAML names a helper and never holds PTX text.

Two layers, as in :mod:`.ptx`. The **instructions** (``tz_wgmma_m64n*`` and the fence, commit
and wait around them; ``tz_mbarrier_*``, ``tz_tensor_copy_2d`` and its multicast to a
thread-block cluster, the cluster's rank and barrier) are inline PTX on the GPU;
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
in bits 32-45, the swizzle mode in bits 62-63 (0: none). Accumulator of an m64nN tile: the
thread of warp ``w`` (of the warpgroup) and lane ``l`` holds, in register ``r``, row
``16 w + l / 4 + 8 ((r / 2) % 2)``, column ``8 (r / 4) + 2 (l % 4) + r % 2``.
"""

from __future__ import annotations

from collections.abc import Iterable

from intrinsics import Intrinsic
from targets.cuda.errors import EmitError

__all__ = ["FRAGMENT", "PROTOCOL", "ptx_type", "wgmma_prelude"]

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
}

_PTX_TYPES = {"float16": "f16", "bfloat16": "bf16", "int8": "s8", "float8_e4m3": "e4m3",
              "float8_e5m2": "e5m2", "float32": "f32", "int32": "s32"}

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
// Each block's dynamic shared memory (the emulation gives each block of a cluster its own).
#define TZ_CTA_SHARED(name, bytes) extern __shared__ __align__(128) unsigned char name[]
#endif
// The descriptor of a tile at `tile` (shared memory): see targets/cuda/wgmma.py.
__device__ inline void tz_wgmma_desc(unsigned* d, const void* tile, unsigned leading,
                                     unsigned stride, unsigned swizzle) {
  unsigned long long desc = (tz_shared_address(tile) & 0x3FFFFu) >> 4;
  desc |= static_cast<unsigned long long>(leading >> 4 & 0x3FFFu) << 16;
  desc |= static_cast<unsigned long long>(stride >> 4 & 0x3FFFu) << 32;
  desc |= static_cast<unsigned long long>(swizzle & 3u) << 62;
  d[0] = static_cast<unsigned>(desc);
  d[1] = static_cast<unsigned>(desc >> 32);
}
// The descriptor `base` with its start address `bytes` further (a multiple of 16): the
// address field is the low 14 bits of address >> 4, and shared addresses stay below 256 KiB,
// so the addition never carries out of it.
__device__ inline void tz_wgmma_desc_advance(unsigned* d, const unsigned* base, unsigned bytes) {
  d[0] = base[0] + (bytes >> 4);
  d[1] = base[1];
}
"""

# The helpers naming an accumulator register's place in the tile (the store intrinsic's
# parameters, which a fused epilogue calls), as PROTOCOL names the compute intrinsic's.
FRAGMENT = {"row": "tz_wgmma_acc_row", "col": "tz_wgmma_acc_col"}

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
    m, n = c.buffer.shape
    k = a.buffer.shape[1]
    ta, tb, tc = (ptx_type(o.buffer.dtype.name) for o in (a, b, c))
    regs = m * n // 128
    integer = tc == "s32"
    outs = ", ".join(f"%{r}" for r in range(regs))
    constraint = '"+r"' if integer else '"+f"'
    bindings = ", ".join(f"{constraint}(d[{r}])" for r in range(regs))
    # 16-bit inputs take scale-a, scale-b and transpose-a, transpose-b immediates; 8-bit
    # floats the scales only; integers neither. Both tiles are K-major (no transpose).
    immediates = {"f16": ", 1, 1, 0, 0", "bf16": ", 1, 1, 0, 0", "e4m3": ", 1, 1",
                  "e5m2": ", 1, 1"}.get(ta, "")
    ctype = "int" if integer else "float"
    name = f"tz_wgmma_m64n{n}k{k}_{ta}_{tb}_{tc}"
    return (f"__device__ inline void {name}({ctype}* d, const unsigned* a, const unsigned* b) {{\n"
            f"  const unsigned long long da = a[0] | static_cast<unsigned long long>(a[1]) << 32;\n"
            f"  const unsigned long long db = b[0] | static_cast<unsigned long long>(b[1]) << 32;\n"
            f'  asm volatile("{{\\n .reg .pred p;\\n setp.ne.b32 p, 1, 0;\\n"\n'
            f'               " wgmma.mma_async.sync.aligned.m64n{n}k{k}.{tc}.{ta}.{tb} "\n'
            f'               "{{{outs}}}, %{regs}, %{regs + 1}, p{immediates};\\n}}"\n'
            f"               : {bindings}\n"
            f'               : "l"(da), "l"(db) : "memory");\n'
            f"}}\n")


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
