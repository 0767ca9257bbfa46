// Host emulation of <mma.h> (nvcuda::wmma) and of the CUDA thread model, for tensorize's
// CUDA backend: the emitted kernel source compiles unchanged with g++ against this header.
//
// Threads. The blocks of a launch run one after another. In a block, every thread is a
// coroutine (ucontext) with its own stack; the scheduler runs each runnable thread until it
// reaches __syncthreads() (or __syncwarp(), or its end), in increasing or decreasing thread
// order, and releases a barrier once every thread of the block (of the warp) waits at it.
// A thread that finishes while others wait at a barrier is reported as barrier divergence.
// Asynchronous copies (cp.async) are performed when their thread waits for them, not when
// issued; a thread ending with copies it never waited for is reported.
// __shared__ variables are function statics: one copy, shared by the block's threads.
//
// Fragments. Every lane holds the whole tile, row-major, and every lane performs each wmma
// operation on its own copy; the hardware's distribution of elements over lanes is not
// modelled. Each operation checks that the memory pointer is 32-byte aligned and ldm a
// multiple of 16 bytes, and that the 32 lanes of a warp issue the same operations with the
// same pointer, ldm and fragment (its offset in the lane's stack).
#pragma once
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <functional>
#include <type_traits>
#include <vector>
#include <ucontext.h>

// Emitted sources define their device-only helpers (tz_copy16...) unless this is set.
#define TZ_EMULATION 1
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(n)

struct tz_dim3 {
  unsigned x, y, z;
};

namespace tz {
enum State { RUNNING, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };
const size_t STACK_BYTES = 256 * 1024;

struct AsyncCopy {
  void* dst;
  const void* src;
};

struct Thread {
  ucontext_t context;
  tz_dim3 index;
  State state;
  size_t collectives;
  char* stack;
  std::vector<AsyncCopy> issued, committed;  // cp.async copies not yet performed
};

struct Collective {
  uintptr_t kind, pointer, ldm, fragment;
};

inline Thread* current = nullptr;
inline ucontext_t scheduler;
inline tz_dim3 grid_dim, block_dim, block_index;
inline const std::function<void()>* kernel_body = nullptr;
inline std::vector<std::vector<Collective>> warp_logs;
inline char error_text[1024] = "";

inline void fail(const char* format, ...) {
  if (error_text[0]) return;
  int n = snprintf(error_text, sizeof error_text, "block (%u, %u, %u) thread (%u, %u, %u): ",
                   block_index.x, block_index.y, block_index.z, current ? current->index.x : 0,
                   current ? current->index.y : 0, current ? current->index.z : 0);
  va_list args;
  va_start(args, format);
  vsnprintf(error_text + n, sizeof error_text - n, format, args);
  va_end(args);
}

inline void wait(State state) {
  current->state = state;
  swapcontext(&current->context, &scheduler);
}

inline unsigned linear_id(const tz_dim3& i) {
  return i.x + block_dim.x * (i.y + block_dim.y * i.z);
}

// One warp-collective operation of the current lane: checked against the warp's log.
inline void collective(const char* kind, const void* pointer, unsigned ldm, size_t elem,
                       const void* fragment) {
  if (pointer && reinterpret_cast<uintptr_t>(pointer) % 32 != 0)
    fail("%s: pointer %p is not 32-byte aligned", kind, pointer);
  if (pointer && (ldm * elem) % 16 != 0)
    fail("%s: ldm %u elements is not a multiple of 16 bytes", kind, ldm);
  uintptr_t offset = reinterpret_cast<uintptr_t>(fragment) -
                     reinterpret_cast<uintptr_t>(current->stack);
  Collective entry{reinterpret_cast<uintptr_t>(kind), reinterpret_cast<uintptr_t>(pointer),
                   ldm, offset};
  auto& log = warp_logs[linear_id(current->index) / 32];
  size_t n = current->collectives++;
  if (n == log.size()) {
    log.push_back(entry);
  } else if (log[n].kind != entry.kind || log[n].pointer != entry.pointer ||
             log[n].ldm != entry.ldm || log[n].fragment != entry.fragment) {
    fail("%s: the lanes of a warp disagree at its warp-collective operation #%zu", kind, n);
  }
}

inline void entry() {
  (*kernel_body)();
  size_t pending = current->issued.size() + current->committed.size();
  if (pending) fail("%zu asynchronous copies were never waited for", pending);
  current->state = DONE;
}

// Runs one launch; returns 0, or 1 with error_text set.
inline int launch(const std::function<void()>& body, tz_dim3 grid, tz_dim3 block, int reverse) {
  grid_dim = grid;
  block_dim = block;
  kernel_body = &body;
  error_text[0] = 0;
  unsigned count = block.x * block.y * block.z;
  std::vector<Thread> threads(count);
  std::vector<std::vector<char>> stacks(count, std::vector<char>(STACK_BYTES));
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        block_index = {bx, by, bz};
        warp_logs.assign((count + 31) / 32, {});
        for (unsigned t = 0; t < count; ++t) {
          Thread& th = threads[t];
          th.index = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
          th.state = RUNNING;
          th.collectives = 0;
          th.issued.clear();
          th.committed.clear();
          th.stack = stacks[t].data();
          getcontext(&th.context);
          th.context.uc_stack.ss_sp = th.stack;
          th.context.uc_stack.ss_size = STACK_BYTES;
          th.context.uc_link = &scheduler;
          makecontext(&th.context, entry, 0);
        }
        for (;;) {
          for (unsigned k = 0; k < count; ++k) {
            Thread& th = threads[reverse ? count - 1 - k : k];
            if (th.state != RUNNING) continue;
            current = &th;
            swapcontext(&scheduler, &th.context);
          }
          current = nullptr;
          unsigned done = 0, at_block = 0;
          bool released = false;
          for (unsigned w = 0; w * 32 < count; ++w) {
            unsigned lanes = 0, waiting = 0;
            for (unsigned t = w * 32; t < count && t < w * 32 + 32; ++t, ++lanes)
              waiting += threads[t].state == AT_WARP_BARRIER;
            if (waiting && waiting == lanes) {
              for (unsigned t = w * 32; t < w * 32 + lanes; ++t) threads[t].state = RUNNING;
              released = true;
            }
          }
          for (auto& th : threads) {
            done += th.state == DONE;
            at_block += th.state == AT_BLOCK_BARRIER;
          }
          if (released) continue;
          if (done == count) break;
          if (at_block == count) {
            for (auto& th : threads) th.state = RUNNING;
            continue;
          }
          fail("barrier divergence: %u of %u threads wait at __syncthreads(), %u finished",
               at_block, count, done);
          return 1;
        }
        if (error_text[0]) return 1;
      }
  return 0;
}
}  // namespace tz

#define threadIdx (tz::current->index)
#define blockIdx (tz::block_index)
#define blockDim (tz::block_dim)
#define gridDim (tz::grid_dim)

inline void __syncthreads() { tz::wait(tz::AT_BLOCK_BARRIER); }

// A 16-byte vector copy: both addresses must be 16-byte aligned, as uint4 accesses require.
inline void tz_copy16(void* dst, const void* src) {
  if (reinterpret_cast<uintptr_t>(dst) % 16 || reinterpret_cast<uintptr_t>(src) % 16)
    tz::fail("16-byte copy from %p to %p: an address is not 16-byte aligned", src, dst);
  std::memcpy(dst, src, 16);
}

// cp.async: a copy lands only when its thread waits for its committed group, so code that
// reads a stage before the wait (or without a barrier after it) reads stale data here.
inline void tz_cp_async16(void* dst, const void* src) {
  if (reinterpret_cast<uintptr_t>(dst) % 16 || reinterpret_cast<uintptr_t>(src) % 16)
    tz::fail("cp.async from %p to %p: an address is not 16-byte aligned", src, dst);
  tz::current->issued.push_back({dst, src});
}
inline void tz_cp_async_commit() {
  auto& t = *tz::current;
  t.committed.insert(t.committed.end(), t.issued.begin(), t.issued.end());
  t.issued.clear();
}
inline void tz_cp_async_wait_all() {
  for (auto& copy : tz::current->committed) std::memcpy(copy.dst, copy.src, 16);
  tz::current->committed.clear();
}
inline void __syncwarp(unsigned = 0xffffffffu) { tz::wait(tz::AT_WARP_BARRIER); }

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}

template <class T> struct storage { using type = T; };
template <> struct storage<precision::tf32> { using type = float; };

template <class Use, int M, int N, int K> struct dims;
template <int M, int N, int K> struct dims<matrix_a, M, N, K> {
  static const int rows = M, cols = K;
};
template <int M, int N, int K> struct dims<matrix_b, M, N, K> {
  static const int rows = K, cols = N;
};
template <int M, int N, int K> struct dims<accumulator, M, N, K> {
  static const int rows = M, cols = N;
};

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  using element_type = typename storage<T>::type;
  static const int rows = dims<Use, M, N, K>::rows;
  static const int cols = dims<Use, M, N, K>::cols;
  static const int num_elements = rows * cols;
  element_type x[rows * cols];
};

template <class Use, int M, int N, int K, class T, class Layout, class P>
inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const P* p, unsigned ldm) {
  tz::collective("load_matrix_sync", p, ldm, sizeof(P), &f);
  using F = fragment<Use, M, N, K, T, Layout>;
  for (int i = 0; i < F::rows; ++i)
    for (int j = 0; j < F::cols; ++j)
      f.x[i * F::cols + j] = std::is_same<Layout, col_major>::value ? p[i + j * ldm]
                                                                    : p[i * ldm + j];
}

template <int M, int N, int K, class T, class P>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const P* p, unsigned ldm,
                             layout_t layout) {
  tz::collective("load_matrix_sync", p, ldm, sizeof(P), &f);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      f.x[i * N + j] = layout == mem_col_major ? p[i + j * ldm] : p[i * ldm + j];
}

template <int M, int N, int K, class T, class P>
inline void store_matrix_sync(P* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm,
                              layout_t layout) {
  tz::collective("store_matrix_sync", p, ldm, sizeof(P), &f);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      (layout == mem_col_major ? p[i + j * ldm] : p[i * ldm + j]) = f.x[i * N + j];
}

template <class Use, int M, int N, int K, class T, class Layout, class V>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, const V& v) {
  tz::collective("fill_fragment", nullptr, 0, 1, &f);
  for (auto& e : f.x) e = static_cast<typename storage<T>::type>(v);
}

template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC>
inline void mma_sync(fragment<accumulator, M, N, K, TC>& d,
                     const fragment<matrix_a, M, N, K, TA, LA>& a,
                     const fragment<matrix_b, M, N, K, TB, LB>& b,
                     const fragment<accumulator, M, N, K, TC>& c) {
  tz::collective("mma_sync", nullptr, 0, 1, &d);
  // Integer tiles accumulate exactly, wrapping in 32 bits; float tiles in float.
  using Wide = typename std::conditional<std::is_integral<TC>::value, long long, float>::type;
  TC result[M * N];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      Wide sum = static_cast<Wide>(c.x[i * N + j]);
      for (int k = 0; k < K; ++k)
        sum += static_cast<Wide>(a.x[i * K + k]) * static_cast<Wide>(b.x[k * N + j]);
      result[i * N + j] = std::is_integral<TC>::value
                              ? static_cast<TC>(static_cast<uint32_t>(sum))
                              : static_cast<TC>(sum);
    }
  std::memcpy(d.x, result, sizeof result);
}
}  // namespace wmma
}  // namespace nvcuda
