"""The device helpers of the mma.sync family (``intrinsics/cuda_mma.yaml``): each wraps one
inline PTX instruction, so a YAML template calls a name and passes checked placeholders,
never PTX text.

Two layers. The **instructions** (``tz_ptx_*`` and the ``tz_mma_*`` multiply-accumulates)
are inline PTX on the GPU; the host emulation (``emulation/mma.h``) defines its own, which
model the warp: every lane holds only its registers, and a warp-collective instruction
exchanges them through a per-warp mailbox. The **helpers** the templates call
(``tz_ldmatrix_*``, ``tz_mma_store_m16n8``, ``tz_mma_fill_m16n8``) are plain C++ shared by
both: they compute each lane's own row address or element pair from its lane index, so the
emulation runs the same address arithmetic the GPU does, and a wrong one gives wrong numbers.

Fragment layouts, from the PTX ISA ("Matrix fragments for mma.m16n8k16" and ``m16n8k32``;
the 8-bit floats e4m3 and e5m2 are laid out as the 8-bit integers):
lane ``l`` is in row group ``g = l / 4`` and column pair ``t = l % 4``.

- A (16 x 16 of 16-bit, or 16 x 32 of 8-bit): four registers, four 8 x 16-byte matrices
  (rows 0-7 and 8-15, times the first and second 16 bytes of k); ``ldmatrix.x4`` reads
  them with lane ``l`` giving row ``l % 16`` at byte ``(l / 16) * 16``.
- B (k x 8): two registers, each 16 bytes of k of column ``g``; read by ``ldmatrix.x2.trans``
  from k rows of 8 16-bit values, or by ``ldmatrix.x2`` from 8 columns of 8-bit k values.
- C/D (16 x 8, 32-bit): four registers, rows ``g`` and ``g + 8``, columns ``2t`` and
  ``2t + 1``.
- 4-bit A (16 x 64) and B (64 x 8) of ``m16n8k64``: the 8-bit layouts with 8 values to a
  register instead of 4 (so each byte of the 8-bit picture holds two k values, the lower in
  the low nibble). Memory holds one 4-bit value per byte, so these fragments are loaded by
  each lane (``tz_lds_*_4bit``: 8-byte loads of A, byte loads down B's rows) and packed.
"""

from __future__ import annotations

__all__ = ["MMA_PRELUDE"]

MMA_PRELUDE = """\
#ifndef TZ_EMULATION
// One shared-memory row address per lane; each lane receives one 32-bit word of every
// 8 x 16-byte matrix (the PTX ISA's ldmatrix).
__device__ inline unsigned tz_shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ inline void tz_ptx_ldmatrix_x4(unsigned* d, const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(tz_shared_address(row)));
}
__device__ inline void tz_ptx_ldmatrix_x2(unsigned* d, const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
               : "=r"(d[0]), "=r"(d[1]) : "r"(tz_shared_address(row)));
}
__device__ inline void tz_ptx_ldmatrix_x2_trans(unsigned* d, const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
               : "=r"(d[0]), "=r"(d[1]) : "r"(tz_shared_address(row)));
}
// A lane's pair of accumulator values, in one 8-byte store.
__device__ inline void tz_ptx_store2(float* p, float x, float y) {
  *reinterpret_cast<float2*>(p) = make_float2(x, y);
}
__device__ inline void tz_ptx_store2(int* p, int x, int y) {
  *reinterpret_cast<int2*>(p) = make_int2(x, y);
}
// D = A x B + C, in place on C. sm_75 has no f16 m16n8k16: two m16n8k8 (the first and the
// second 8 of k: A registers 0-1 and 2-3, B register 0 and 1).
__device__ inline void tz_mma_m16n8k16_f16_f16_f32(float* c, const unsigned* a,
                                                   const unsigned* b) {
#if __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  for (int half = 0; half < 2; ++half)
    asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[2 * half]), "r"(a[2 * half + 1]), "r"(b[half]));
#endif
}
__device__ inline void tz_mma_m16n8k16_bf16_bf16_f32(float* c, const unsigned* a,
                                                     const unsigned* b) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// 8-bit inputs, 32-bit accumulators that wrap (no .satfinite), as the reference does.
#define TZ_MMA_INT8(A, B)                                                                    \\
  __device__ inline void tz_mma_m16n8k32_##A##_##B##_s32(int* c, const unsigned* a,          \\
                                                         const unsigned* b) {                \\
    asm("mma.sync.aligned.m16n8k32.row.col.s32." #A "." #B ".s32 {%0, %1, %2, %3}, "         \\
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                                      \\
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])                                     \\
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                 \\
  }
TZ_MMA_INT8(s8, s8)
TZ_MMA_INT8(u8, u8)
TZ_MMA_INT8(u8, s8)
TZ_MMA_INT8(s8, u8)
#undef TZ_MMA_INT8
// 8-bit floats (e4m3, e5m2, either on each side), f32 accumulators; sm_89 and later only:
// for an older architecture the helpers are not defined, so a kernel calling one fails to
// compile there instead of running something else.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890
#define TZ_MMA_FP8(A, B)                                                                     \
  __device__ inline void tz_mma_m16n8k32_##A##_##B##_f32(float* c, const unsigned* a,        \
                                                         const unsigned* b) {                \
    asm("mma.sync.aligned.m16n8k32.row.col.f32." #A "." #B ".f32 {%0, %1, %2, %3}, "         \
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                                      \
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                     \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                 \
  }
TZ_MMA_FP8(e4m3, e4m3)
TZ_MMA_FP8(e5m2, e5m2)
TZ_MMA_FP8(e4m3, e5m2)
TZ_MMA_FP8(e5m2, e4m3)
#undef TZ_MMA_FP8
#endif
// 4-bit integers (s4, u4, either on each side), 32-bit accumulators that wrap.
#define TZ_MMA_INT4(A, B)                                                                    \
  __device__ inline void tz_mma_m16n8k64_##A##_##B##_s32(int* c, const unsigned* a,          \
                                                         const unsigned* b) {                \
    asm("mma.sync.aligned.m16n8k64.row.col.s32." #A "." #B ".s32 {%0, %1, %2, %3}, "         \
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                                      \
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])                                     \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                 \
  }
TZ_MMA_INT4(s4, s4)
TZ_MMA_INT4(u4, u4)
TZ_MMA_INT4(s4, u4)
TZ_MMA_INT4(u4, s4)
#undef TZ_MMA_INT4
// 8 bytes of shared memory in one load (8-byte aligned).
__device__ inline unsigned long long tz_ptx_lds8(const void* p) {
  return *static_cast<const unsigned long long*>(p);
}
#endif
// The helpers the cuda_mma templates call; `tile` is the tile's first element, `ld_bytes`
// the bytes from one row (column, for an 8-bit B) of the tile to the next.
__device__ inline void tz_ldmatrix_x4(unsigned* d, const void* tile, int ld_bytes) {
  const unsigned lane = threadIdx.x % 32;
  tz_ptx_ldmatrix_x4(d, static_cast<const char*>(tile) + lane % 16 * ld_bytes + lane / 16 * 16);
}
// Lanes 0-7 give the 8 columns' first 16 bytes of k, lanes 8-15 the next 16; the addresses
// of lanes 16-31 are not read, and repeat those.
__device__ inline void tz_ldmatrix_x2(unsigned* d, const void* tile, int ld_bytes) {
  const unsigned lane = threadIdx.x % 32;
  tz_ptx_ldmatrix_x2(d, static_cast<const char*>(tile) + lane % 8 * ld_bytes +
                            lane / 8 % 2 * 16);
}
__device__ inline void tz_ldmatrix_x2_trans(unsigned* d, const void* tile, int ld_bytes) {
  const unsigned lane = threadIdx.x % 32;
  tz_ptx_ldmatrix_x2_trans(d, static_cast<const char*>(tile) + lane % 16 * ld_bytes);
}
// 4-bit fragments (m16n8k64). Memory holds one 4-bit value per byte (cexpr.device_numpy);
// a register holds 8 of them, the lower k in the lower nibble. tz_pack_nibbles packs the
// low nibbles of 8 bytes (`lo` bytes 0-3, then `hi`) into one register.
__device__ inline unsigned tz_pack_nibbles(unsigned lo, unsigned hi) {
  lo &= 0x0f0f0f0fu;
  hi &= 0x0f0f0f0fu;
  lo |= lo >> 4;  // byte 0: values 0 and 1, byte 2: values 2 and 3
  hi |= hi >> 4;
  return (lo & 0xffu) | (lo >> 8 & 0xff00u) | (hi & 0xffu) << 16 | (hi >> 8 & 0xff00u) << 16;
}
// A (16 x 64, row-major, a byte per value): lane l's register r holds row l / 4 + 8 (r % 2),
// k from (l % 4) * 8 + 32 (r / 2), 8 consecutive bytes read in one 8-byte load.
__device__ inline void tz_lds_a_m16k64_4bit(unsigned* d, const void* tile, int ld_bytes) {
  const unsigned lane = threadIdx.x % 32;
  const char* row = static_cast<const char*>(tile) + lane / 4 * ld_bytes + lane % 4 * 8;
  for (int r = 0; r < 4; ++r) {
    unsigned long long bytes = tz_ptx_lds8(row + r % 2 * 8 * ld_bytes + r / 2 * 32);
    d[r] = tz_pack_nibbles(unsigned(bytes), unsigned(bytes >> 32));
  }
}
// B (64 x 8, row-major: k rows of 8 bytes): lane l's register r holds column l / 4, k from
// (l % 4) * 8 + 32 r, one byte of each of 8 rows.
__device__ inline void tz_lds_b_k64n8_4bit(unsigned* d, const void* tile, int ld_bytes) {
  const unsigned lane = threadIdx.x % 32;
  const unsigned char* column = static_cast<const unsigned char*>(tile) +
                                lane % 4 * 8 * ld_bytes + lane / 4;
  for (int r = 0; r < 2; ++r) {
    unsigned packed = 0;
    for (int s = 0; s < 8; ++s)
      packed |= (tz_shared_load(column, (32 * r + s) * ld_bytes) & 0xfu) << 4 * s;
    d[r] = packed;
  }
}
template <class T> __device__ inline void tz_mma_store_m16n8(T* dst, const T* c, int ld) {
  const unsigned lane = threadIdx.x % 32;
  T* row = dst + lane / 4 * ld + lane % 4 * 2;
  tz_ptx_store2(row, c[0], c[1]);
  tz_ptx_store2(row + 8 * ld, c[2], c[3]);
}
template <class T> __device__ inline void tz_mma_fill_m16n8(T* c) {
  for (int r = 0; r < 4; ++r) c[r] = T(0);
}
"""
