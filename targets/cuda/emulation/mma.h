// Host emulation of <mma.h> (nvcuda::wmma) and of the CUDA thread model, for tensorize's
// CUDA backend: the emitted kernel source compiles unchanged with g++ against this header.
//
// Threads. The blocks of a launch run one after another. In a block, every thread is a
// coroutine (ucontext) with its own stack; the scheduler runs each runnable thread until it
// reaches __syncthreads() (or __syncwarp(), or its end), in increasing or decreasing thread
// order, and releases a barrier once every thread of the block (of the warp) waits at it.
// A thread that finishes while others wait at a barrier is reported as barrier divergence.
// Asynchronous copies (cp.async) land when their thread waits for their committed group
// (tz_cp_async_wait_group<N> lands the oldest groups until N are left in flight), or, in the
// other mode a run can choose (copies_at_issue), when issued: a stage overwritten early or
// late shows in one of the two. A thread ending with copies it never waited for is reported.
// __shared__ variables are function statics: one copy, shared by the block's threads.
//
// Shared memory is checked. The emitted source declares each shared array
// (tz_shared_declare) and reads and writes its elements through tz_shared_load and
// tz_shared_store; copies and wmma operations check the shared bytes they touch. Every byte
// keeps its last write and its last two reads by different agents (a thread, or a warp for
// its collective wmma operations), each with the barrier epochs it happened in. Two accesses
// by different agents, one a write, are ordered only by a __syncthreads() between them, or by
// a __syncwarp() when both are in one warp; unordered, they are a race, reported by buffer,
// element and agents ("A_shared[37] written by thread (3, 0, 1) after thread (5, 1, 0) read
// it, without a barrier between"). A byte an asynchronous copy will write is in flight from
// the copy's issue until its thread's wait: any access to it then is a race. A read of a byte
// no agent of the block has written is an uninitialised read (a block's shared memory starts
// undefined). Other failures are reported first, then the first race, then the first
// uninitialised read.
//
// Bounds. The launcher declares the global buffers (tz_global_declare); an access through
// tz_shared_load/tz_shared_store outside its array, and a copy or wmma operation whose bytes
// run past the end of the buffer they start in (or start in none), is reported with the
// buffer, the element and the thread. Plain global loads and stores are not checked.
//
// Banks. A run can ask for the trace of its first block's shared accesses (tz_bank_trace),
// which targets/cuda/banks.py models for bank conflicts.
//
// Fragments. Every lane holds the whole tile, row-major, and every lane performs each wmma
// operation on its own copy; the hardware's distribution of elements over lanes is not
// modelled. Each operation checks that the memory pointer is 32-byte aligned and ldm a
// multiple of 16 bytes, and that the 32 lanes of a warp issue the same operations with the
// same pointer, ldm and fragment (its offset in the lane's stack).
//
// mma.sync and ldmatrix (the cuda_mma family, targets/cuda/ptx.py). Here the distribution
// is modelled: each lane holds only its own registers, in the PTX ISA's fragment layout.
// The instructions are warp-collective: a lane posts what it brings (its row address, its
// A and B registers) to its warp's mailbox and waits at an implicit warp exchange; once
// every lane of the warp waits there, each takes from the mailbox what the instruction
// gives it (ldmatrix: one word of each 8 x 16-byte matrix, from the rows the other lanes
// named; mma.sync: its four elements of D, from every lane's A and B). An exchange orders
// no memory accesses (a missing __syncwarp is still a race), and lanes of one warp that
// reach different barriers or exchanges are reported as divergence. A wrong row address,
// ldm or lane mapping in the code gives wrong numbers, as it would on the GPU.
//
// Polling. A thread polling an mbarrier phase that has not completed, or arriving on one
// (wgmma.h), steps aside (AT_POLL) and runs again in the next round; a round in which every
// thread that ran only polled again, with nothing else done, is a deadlock, reported as such
// (after the hooks of other headers had their say: wgmma.h names a barrier whose transaction
// bytes can never arrive). Headers with per-block or per-thread state of their own (wgmma.h)
// register hooks for a block's start and end and a thread's end.
//
// Clusters. A launch with thread-block clusters (of `cluster` blocks along x) runs the blocks
// of each cluster together: their threads are scheduled as one group (a thread's slot is its
// block's rank times the block's threads plus its index), blockIdx is the running thread's
// own, and __syncthreads() waits for every thread of the cluster (a cluster barrier; a
// kernel whose blocks synchronise differently is not emulated). Shared memory a cluster's
// blocks reach one another's of is the per-block dynamic memory wgmma.h gives out; a static
// __shared__ array, one copy here, is refused in a cluster launch.
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

#include "cuda_bf16.h"
#include "cuda_fp8.h"
#include "cuda_fp16.h"

// Emitted sources define their device-only helpers (tz_copy16...) unless this is set.
#define TZ_EMULATION 1
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

struct tz_dim3 {
  unsigned x, y, z;
};

namespace tz {
enum State { RUNNING, AT_BLOCK_BARRIER, AT_WARP_BARRIER, AT_EXCHANGE, AT_POLL, DONE };
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
  size_t exchanges;  // warp-collective exchanges passed (mma.sync, ldmatrix)
  unsigned barriers, accesses;  // barriers passed; shared accesses since the last one
  unsigned cta;                 // its block's rank in the cluster (0 without clusters)
  char* stack;
  std::vector<AsyncCopy> issued;                 // cp.async copies not yet committed
  std::vector<std::vector<AsyncCopy>> groups;    // committed groups not yet waited for
};

struct Collective {
  uintptr_t kind, pointer, ldm, fragment;
};

inline Thread* current = nullptr;
inline ucontext_t scheduler;
inline tz_dim3 grid_dim, block_dim, block_index;
inline const std::function<void()>* kernel_body = nullptr;
inline std::vector<std::vector<Collective>> warp_logs;
// What the lanes of a warp bring to a warp-collective instruction; two per warp, used in
// turn, so a lane may post to the next before a slower lane has read this one.
struct Mailbox {
  const char* row[32];
  uint32_t a[32][4], b[32][2];
};
inline std::vector<Mailbox> mailboxes;
inline char error_text[1024] = "";
inline char race_text[1024] = "";
inline char uninitialised_text[1024] = "";
inline bool copies_at_issue = false;
// Hooks of other headers: a block starts (the threads per block given), a block ends, a
// thread ends (each may report a failure with fail()).
inline std::vector<void (*)(unsigned)> block_start_hooks;
inline std::vector<void (*)()> block_end_hooks;
inline std::vector<void (*)()> thread_end_hooks;
// Hooks that may explain a deadlock by a failure of their own (fail()) before it is reported.
inline std::vector<void (*)()> deadlock_hooks;
// The blocks of a cluster and the threads of a block, of the running launch.
inline unsigned cluster_size = 1, block_threads = 0;
// Set by a poll that found its phase incomplete (wgmma.h): a thread that steps aside to poll
// again having done nothing else made no progress.
inline bool idle_poll = false;

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

// Keeps the first of a kind of finding in `text`, prefixed by the block.
inline void note(char* text, size_t size, const char* format, ...) {
  if (text[0]) return;
  int n = snprintf(text, size, "block (%u, %u, %u): ", block_index.x, block_index.y,
                   block_index.z);
  va_list args;
  va_start(args, format);
  vsnprintf(text + n, size - n, format, args);
  va_end(args);
}

// ---- shared-memory checking (see the header comment) -----------------------------------------

// Who touched a byte, and when: agent -1 is nobody; a thread's agent is its linear id, a
// warp's (for its collective operations) the thread count plus the warp's index.
struct Access {
  long agent = -1;
  unsigned warp = 0, block_epoch = 0, warp_epoch = 0;
};

struct ByteState {
  Access write, read, other_read;  // other_read: the last read by another agent than read's
  long in_flight = -1;             // the agent whose asynchronous copy will write the byte
};

struct SharedArray {
  const char* base;
  size_t bytes, element;
  const char* name;
  std::vector<ByteState> state;
};

inline std::vector<SharedArray> shared_arrays;
// The shared arrays the running kernel declared: shared_arrays also holds those of every
// kernel run before (and, the symbols being shared, of other emulation libraries).
inline std::vector<const char*> declared_bases;
inline unsigned block_epoch = 0;
inline std::vector<unsigned> warp_epochs;

inline unsigned linear_id(const tz_dim3& i);
// The running thread's slot in its cluster (its index in the block without clusters).
inline unsigned thread_slot();

inline Access now(bool collective) {
  unsigned id = thread_slot(), warp = id / 32;
  long agent = collective ? long(block_threads * cluster_size + warp) : long(id);
  return Access{agent, warp, block_epoch, warp_epochs[warp]};
}

inline bool ordered(const Access& before, const Access& after) {
  return before.agent == after.agent || after.block_epoch > before.block_epoch ||
         (before.warp == after.warp && after.warp_epoch > before.warp_epoch);
}

// "thread (x, y, z)" or "the wmma operation of warp w".
inline const char* describe(const Access& a, char* text, size_t size) {
  long count = long(block_threads * cluster_size);
  if (a.agent >= count) {
    snprintf(text, size, "the wmma operation of warp %ld", a.agent - count);
  } else {
    unsigned id = unsigned(a.agent) % block_threads, rank = unsigned(a.agent) / block_threads;
    int n = snprintf(text, size, "thread (%u, %u, %u)", id % block_dim.x,
                     (id / block_dim.x) % block_dim.y, id / (block_dim.x * block_dim.y));
    if (cluster_size > 1) snprintf(text + n, size - n, " of the cluster's block %u", rank);
  }
  return text;
}

inline void race(const SharedArray& array, size_t byte, const char* happened, const Access& by,
                 const char* earlier, const Access& other) {
  char who[64], whom[64];
  note(race_text, sizeof race_text,
       "race on shared %s[%zu]: %s by %s after %s %s it, without a barrier between",
       array.name, byte / array.element, happened, describe(by, who, sizeof who),
       describe(other, whom, sizeof whom), earlier);
}

inline void in_flight_race(const SharedArray& array, size_t byte, const char* happened,
                           const Access& by, long copier) {
  char who[64], whom[64];
  Access issuer;
  issuer.agent = copier;
  note(race_text, sizeof race_text,
       "race on shared %s[%zu]: %s by %s while an asynchronous copy that %s issued into it "
       "is in flight (not yet waited for)", array.name, byte / array.element, happened,
       describe(by, who, sizeof who), describe(issuer, whom, sizeof whom));
}

// A global buffer of the launch, by name, for the bounds checks.
struct GlobalBuffer {
  const char* base;
  size_t bytes, element;
  const char* name;
};
inline std::vector<GlobalBuffer> global_buffers;

inline SharedArray* shared_array(const void* pointer) {
  const char* p = static_cast<const char*>(pointer);
  for (auto& array : shared_arrays)
    if (p >= array.base && p < array.base + array.bytes) return &array;
  return nullptr;
}

enum Mode { READ, WRITE, ISSUE, LAND };

// Fails unless the `bytes` bytes at `pointer` lie in one shared array or global buffer: the
// one holding the first byte, else (a pointer past an end) the one starting closest below
// it ("what" says how: "read", "written").
inline void check_bounds(const void* pointer, size_t bytes, const char* what) {
  struct Region {
    const char *base = nullptr, *name = nullptr, *space = nullptr;
    size_t bytes = 0, element = 1;
  };
  const char* p = static_cast<const char*>(pointer);
  Region found, below;
  auto consider = [&](const Region& r) {
    if (r.base <= p && p < r.base + r.bytes) found = r;
    if (r.base <= p && (!below.base || r.base > below.base)) below = r;
  };
  for (auto& a : shared_arrays) consider({a.base, a.name, "shared", a.bytes, a.element});
  for (auto& g : global_buffers) consider({g.base, g.name, "global", g.bytes, g.element});
  const Region& r = found.base ? found : below;
  if (!r.base) {
    fail("%zu bytes %s at %p: below every shared array and global buffer", bytes, what, p);
  } else if (p + bytes > r.base + r.bytes) {
    size_t first = size_t(p - r.base) / r.element;
    size_t last = (size_t(p - r.base) + bytes - 1) / r.element;
    fail("%s %s[%zu..%zu] out of bounds: %s outside its %zu elements", r.space, r.name, first,
         last, what, r.bytes / r.element);
  }
}

// Checks and records an access of `bytes` bytes at `pointer` (nothing when it is not shared
// memory): a READ or WRITE by the current thread (or its warp, when `collective`), the ISSUE
// of an asynchronous copy into them, or its LANDing at the wait (a write).
inline void touch(const void* pointer, size_t bytes, Mode mode, bool collective = false) {
  SharedArray* array = shared_array(pointer);
  if (!array) return;
  Access a = now(collective);
  size_t first = static_cast<const char*>(pointer) - array->base;
  for (size_t byte = first; byte < first + bytes && byte < array->bytes; ++byte) {
    ByteState& s = array->state[byte];
    if (mode == LAND) {
      s.in_flight = -1;
    } else if (s.in_flight >= 0) {
      in_flight_race(*array, byte, mode == READ ? "read" : "written", a, s.in_flight);
    }
    if (mode == READ) {
      if (s.write.agent < 0) {
        char who[64];
        note(uninitialised_text, sizeof uninitialised_text,
             "uninitialised read of shared %s[%zu] by %s: no thread of the block wrote it",
             array->name, byte / array->element, describe(a, who, sizeof who));
      } else if (!ordered(s.write, a)) {
        race(*array, byte, "read", a, "wrote", s.write);
      }
      if (s.read.agent != a.agent) s.other_read = s.read;
      s.read = a;
      continue;
    }
    for (const Access* r : {&s.read, &s.other_read})
      if (r->agent >= 0 && !ordered(*r, a)) race(*array, byte, "written", a, "read", *r);
    if (s.write.agent >= 0 && !ordered(s.write, a))
      race(*array, byte, "written", a, "wrote", s.write);
    if (mode == ISSUE) {
      s.in_flight = a.agent;
    } else {
      s.write = a;
    }
  }
}

// The bank trace: when a run asks for it, the shared accesses of the launch's first block,
// for the bank model of targets/cuda/banks.py. One record per access of a thread (per warp
// for a fragment load, by lane 0), keyed by the warp, the barriers its thread passed and
// the access's rank since the last one: the lanes' records with one key are one instruction.
struct BankRecord {
  uint64_t kind, warp, barriers, rank, lane, address, bytes, lines, pitch;
};
enum BankKind { SCALAR_ACCESS = 0, COPY_ACCESS = 1, FRAGMENT_LOAD = 2 };
inline bool trace_banks = false;
inline std::vector<BankRecord> bank_records;
inline void record_bank(BankKind kind, const void* pointer, size_t bytes, size_t lines = 1,
                        size_t pitch = 0) {
  if (!trace_banks || block_index.x || block_index.y || block_index.z) return;
  if (!shared_array(pointer)) return;
  unsigned id = thread_slot();
  unsigned rank = current->accesses++;
  if (kind == FRAGMENT_LOAD && id % 32) return;
  bank_records.push_back({uint64_t(kind), id / 32, current->barriers, rank, id % 32,
                          reinterpret_cast<uintptr_t>(pointer), bytes, lines, pitch});
}

// A new block: its shared memory is undefined, and no barrier has passed.
inline void reset_shared(unsigned warps) {
  for (auto& array : shared_arrays) array.state.assign(array.bytes, ByteState{});
  declared_bases.clear();
  block_epoch = 0;
  warp_epochs.assign(warps, 0);
}

inline void wait(State state) {
  current->state = state;
  ++current->barriers;
  current->accesses = 0;
  swapcontext(&current->context, &scheduler);
}

inline unsigned linear_id(const tz_dim3& i) {
  return i.x + block_dim.x * (i.y + block_dim.y * i.z);
}

inline unsigned thread_slot() {
  return current->cta * block_threads + linear_id(current->index);
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
  auto& log = warp_logs[thread_slot() / 32];
  size_t n = current->collectives++;
  if (n == log.size()) {
    log.push_back(entry);
  } else if (log[n].kind != entry.kind || log[n].pointer != entry.pointer ||
             log[n].ldm != entry.ldm || log[n].fragment != entry.fragment) {
    fail("%s: the lanes of a warp disagree at its warp-collective operation #%zu", kind, n);
  }
}

// Applies one asynchronous copy: at its issue or at its thread's wait, as the run chose.
// A copy without a source (a zero fill) lands 16 zeros.
inline void land(const AsyncCopy& copy) {
  if (copy.src) std::memcpy(copy.dst, copy.src, 16);
  else std::memset(copy.dst, 0, 16);
}

inline void entry() {
  (*kernel_body)();
  size_t pending = current->issued.size();
  for (auto& group : current->groups) pending += group.size();
  if (pending) fail("%zu asynchronous copies were never waited for", pending);
  for (auto hook : thread_end_hooks) hook();
  current->state = DONE;
}

// Runs one launch, its blocks in clusters of `cluster` along x; returns 0, or 1 with
// error_text set.
inline int launch(const std::function<void()>& body, tz_dim3 grid, tz_dim3 block, int reverse,
                  int at_issue, unsigned cluster = 1) {
  copies_at_issue = at_issue;
  grid_dim = grid;
  block_dim = block;
  kernel_body = &body;
  error_text[0] = race_text[0] = uninitialised_text[0] = 0;
  block_threads = block.x * block.y * block.z;
  cluster_size = cluster;
  if (cluster > 1 && (grid.x % cluster || block_threads % 32)) {
    fail("a cluster of %u blocks along x requires gridDim.x a multiple of it and whole warps "
         "per block, got gridDim.x %u and %u threads per block", cluster, grid.x, block_threads);
    return 1;
  }
  unsigned count = block_threads * cluster;
  std::vector<Thread> threads(count);
  std::vector<std::vector<char>> stacks(count, std::vector<char>(STACK_BYTES));
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; bx += cluster) {
        block_index = {bx, by, bz};
        warp_logs.assign((count + 31) / 32, {});
        reset_shared((count + 31) / 32);
        mailboxes.assign(2 * ((count + 31) / 32), Mailbox{});
        for (auto hook : block_start_hooks) hook(count);
        for (unsigned t = 0; t < count; ++t) {
          Thread& th = threads[t];
          unsigned local = t % block_threads;
          th.cta = t / block_threads;
          th.index = {local % block.x, (local / block.x) % block.y, local / (block.x * block.y)};
          th.state = RUNNING;
          th.collectives = 0;
          th.exchanges = 0;
          th.barriers = th.accesses = 0;
          th.issued.clear();
          th.groups.clear();
          th.stack = stacks[t].data();
          getcontext(&th.context);
          th.context.uc_stack.ss_sp = th.stack;
          th.context.uc_stack.ss_size = STACK_BYTES;
          th.context.uc_link = &scheduler;
          makecontext(&th.context, entry, 0);
        }
        for (;;) {
          bool progressed = false;  // a thread did more than poll again
          for (unsigned k = 0; k < count; ++k) {
            Thread& th = threads[reverse ? count - 1 - k : k];
            bool polling = th.state == AT_POLL;
            if (polling) th.state = RUNNING;
            if (th.state != RUNNING) continue;
            current = &th;
            block_index = {bx + th.cta, by, bz};
            idle_poll = false;
            swapcontext(&scheduler, &th.context);
            progressed = progressed || !polling || th.state != AT_POLL || !idle_poll;
          }
          current = nullptr;
          block_index = {bx, by, bz};
          unsigned done = 0, at_block = 0, at_exchange = 0, at_poll = 0;
          bool released = false;
          for (unsigned w = 0; w * 32 < count; ++w) {
            unsigned lanes = 0, waiting = 0, exchanging = 0;
            for (unsigned t = w * 32; t < count && t < w * 32 + 32; ++t, ++lanes) {
              waiting += threads[t].state == AT_WARP_BARRIER;
              exchanging += threads[t].state == AT_EXCHANGE;
            }
            if (waiting && waiting == lanes) {
              for (unsigned t = w * 32; t < w * 32 + lanes; ++t) threads[t].state = RUNNING;
              ++warp_epochs[w];
              released = true;
            }
            // An exchange is no barrier: it passes no epoch, so it orders no accesses.
            if (exchanging && exchanging == lanes) {
              for (unsigned t = w * 32; t < w * 32 + lanes; ++t) threads[t].state = RUNNING;
              released = true;
            }
          }
          for (auto& th : threads) {
            done += th.state == DONE;
            at_block += th.state == AT_BLOCK_BARRIER;
            at_exchange += th.state == AT_EXCHANGE;
            at_poll += th.state == AT_POLL;
          }
          if (released) continue;
          if (done == count) break;
          if (at_block == count) {
            for (auto& th : threads) th.state = RUNNING;
            ++block_epoch;
            continue;
          }
          if (at_poll && progressed) continue;
          // A race already found (a wait skipped, a stage overwritten) explains a deadlock.
          if (at_poll && race_text[0]) {
            snprintf(error_text, sizeof error_text, "%s", race_text);
            return 1;
          }
          if (at_poll) {
            for (auto hook : deadlock_hooks) hook();
            if (error_text[0]) return 1;
            fail("deadlock: %u of %u threads poll an mbarrier phase that never completes, "
                 "%u wait at __syncthreads(), %u finished", at_poll, count, at_block, done);
            return 1;
          }
          fail("barrier divergence: %u of %u threads wait at __syncthreads(), %u at a "
               "warp-collective mma.sync or ldmatrix, %u finished", at_block, count,
               at_exchange, done);
          return 1;
        }
        for (auto hook : block_end_hooks) hook();
        if (!error_text[0])
          snprintf(error_text, sizeof error_text, "%s", race_text[0] ? race_text
                                                                     : uninitialised_text);
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

namespace tz {
inline void note_declared(const char* base) {
  for (const char* known : declared_bases)
    if (known == base) return;
  declared_bases.push_back(base);
}
}  // namespace tz
// A shared array of the kernel, by name, for the reports.
template <class T, size_t N> inline void tz_shared_declare(T (&array)[N], const char* name) {
  const char* base = reinterpret_cast<const char*>(array);
  if (tz::cluster_size > 1)
    tz::fail("shared %s: a static __shared__ array in a cluster launch (one copy here, one per "
             "block on a GPU)", name);
  tz::note_declared(base);
  if (tz::shared_array(base)) return;
  tz::shared_arrays.push_back({base, sizeof array, sizeof(T), name,
                               std::vector<tz::ByteState>(sizeof array)});
}
// A region of the dynamic shared array, as an array of `count` elements.
template <class T> inline void tz_shared_declare(T* base, size_t count, const char* name) {
  const char* start = reinterpret_cast<const char*>(base);
  tz::note_declared(start);
  if (tz::shared_array(start)) return;
  tz::shared_arrays.push_back({start, count * sizeof(T), sizeof(T), name,
                               std::vector<tz::ByteState>(count * sizeof(T))});
}
// Dynamic shared memory (extern __shared__ on a GPU): a function static here, like the others.
#define TZ_DYNAMIC_SHARED(name, bytes) static __attribute__((aligned(128))) unsigned char name[bytes]
// A global buffer of the launch, by name, for the bounds checks.
inline void tz_global_declare(const void* base, size_t bytes, size_t element, const char* name) {
  tz::global_buffers.push_back({static_cast<const char*>(base), bytes, element, name});
}
namespace tz {
// Element i of the shared array at a, or, when i is outside it, a reported failure and a
// scratch element (so the run goes on without touching other memory).
template <class T> inline T* shared_element(T* a, int i, const char* what) {
  static T scratch;
  SharedArray* array = shared_array(a);
  size_t count = array ? (array->base + array->bytes - reinterpret_cast<const char*>(a)) /
                         sizeof(T) : 0;
  if (array && i >= 0 && size_t(i) < count) return a + i;
  fail("shared %s[%d] out of bounds: %s outside its %zu elements",
       array ? array->name : "(undeclared)", i, what, count);
  return &scratch;
}
}  // namespace tz
template <class T> inline T tz_shared_load(const T* a, int i) {
  const T* p = tz::shared_element(const_cast<T*>(a), i, "read");
  tz::touch(p, sizeof(T), tz::READ);
  tz::record_bank(tz::SCALAR_ACCESS, p, sizeof(T));
  return *p;
}
template <class T> inline T& tz_shared_store(T* a, int i) {
  T* p = tz::shared_element(a, i, "written");
  tz::touch(p, sizeof(T), tz::WRITE);
  tz::record_bank(tz::SCALAR_ACCESS, p, sizeof(T));
  return *p;
}

// A 16-byte vector copy: both addresses must be 16-byte aligned, as uint4 accesses require.
inline void tz_copy16(void* dst, const void* src) {
  if (reinterpret_cast<uintptr_t>(dst) % 16 || reinterpret_cast<uintptr_t>(src) % 16)
    tz::fail("16-byte copy from %p to %p: an address is not 16-byte aligned", src, dst);
  tz::check_bounds(src, 16, "read");
  tz::check_bounds(dst, 16, "written");
  if (tz::error_text[0]) return;
  tz::touch(src, 16, tz::READ);
  tz::touch(dst, 16, tz::WRITE);
  tz::record_bank(tz::COPY_ACCESS, src, 16);
  tz::record_bank(tz::COPY_ACCESS, dst, 16);
  std::memcpy(dst, src, 16);
}

// A 16-byte store of values the thread computed (src is its own local array): dst must be
// 16-byte aligned and inside one buffer.
inline void tz_store16(void* dst, const void* src) {
  if (reinterpret_cast<uintptr_t>(dst) % 16)
    tz::fail("16-byte store to %p: the address is not 16-byte aligned", dst);
  tz::check_bounds(dst, 16, "written");
  if (tz::error_text[0]) return;
  tz::touch(dst, 16, tz::WRITE);
  tz::record_bank(tz::COPY_ACCESS, dst, 16);
  std::memcpy(dst, src, 16);
}

// cp.async: a copy lands when its thread waits for its committed group (code that reads a
// stage before the wait reads stale data), or, with copies_at_issue, at once (code that
// overwrites a stage other warps still read spoils their data). Either way its bytes are in
// flight until the wait.
inline void tz_cp_async16(void* dst, const void* src) {
  if (reinterpret_cast<uintptr_t>(dst) % 16 || reinterpret_cast<uintptr_t>(src) % 16)
    tz::fail("cp.async from %p to %p: an address is not 16-byte aligned", src, dst);
  tz::check_bounds(src, 16, "read");
  tz::check_bounds(dst, 16, "written");
  if (tz::error_text[0]) return;
  tz::touch(dst, 16, tz::ISSUE);
  tz::record_bank(tz::COPY_ACCESS, dst, 16);
  tz::current->issued.push_back({dst, src});
  if (tz::copies_at_issue) tz::land(tz::current->issued.back());
}
// The zero-filling forms (a convolution's halo): src's 16 bytes when full, else 16 zeros
// and nothing read, so src's bounds are checked only when full.
inline void tz_copy16_zfill(void* dst, const void* src, bool full) {
  if (full) return tz_copy16(dst, src);
  if (reinterpret_cast<uintptr_t>(dst) % 16)
    tz::fail("16-byte zero fill of %p: the address is not 16-byte aligned", dst);
  tz::check_bounds(dst, 16, "written");
  if (tz::error_text[0]) return;
  tz::touch(dst, 16, tz::WRITE);
  tz::record_bank(tz::COPY_ACCESS, dst, 16);
  std::memset(dst, 0, 16);
}
inline void tz_cp_async16_zfill(void* dst, const void* src, bool full) {
  if (full) return tz_cp_async16(dst, src);
  if (reinterpret_cast<uintptr_t>(dst) % 16)
    tz::fail("cp.async zero fill of %p: the address is not 16-byte aligned", dst);
  tz::check_bounds(dst, 16, "written");
  if (tz::error_text[0]) return;
  tz::touch(dst, 16, tz::ISSUE);
  tz::record_bank(tz::COPY_ACCESS, dst, 16);
  tz::current->issued.push_back({dst, nullptr});
  if (tz::copies_at_issue) tz::land(tz::current->issued.back());
}
// A group may be empty (a step with nothing left to prefetch commits one all the same).
inline void tz_cp_async_commit() {
  auto& t = *tz::current;
  t.groups.push_back(t.issued);
  t.issued.clear();
}
// The oldest groups land until at most N are in flight.
template <int N> inline void tz_cp_async_wait_group() {
  auto& groups = tz::current->groups;
  while (groups.size() > size_t(N)) {
    for (auto& copy : groups.front()) {
      tz::touch(copy.dst, 16, tz::LAND);
      if (!tz::copies_at_issue) tz::land(copy);
    }
    groups.erase(groups.begin());
  }
}
inline void __syncwarp(unsigned = 0xffffffffu) { tz::wait(tz::AT_WARP_BARRIER); }

extern "C" void tz_bank_trace(int on) {
  tz::trace_banks = on;
  tz::bank_records.clear();
}
extern "C" size_t tz_bank_count() { return tz::bank_records.size(); }
extern "C" const tz::BankRecord* tz_bank_data() { return tz::bank_records.data(); }

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

// The shared bytes of a tile that the current warp reads or writes collectively: `lines`
// runs (rows, or columns when column-major) of `length` elements, `ldm` elements apart.
// Returns false (the failure reported) when the tile runs outside the buffer it starts in.
template <class P>
inline bool tz_touch_tile(const P* p, unsigned ldm, int lines, int length, tz::Mode mode) {
  tz::check_bounds(p, ((lines - 1) * ldm + length) * sizeof(P),
                   mode == tz::READ ? "read" : "written");
  if (tz::error_text[0]) return false;
  for (int line = 0; line < lines; ++line)
    tz::touch(p + line * ldm, length * sizeof(P), mode, true);
  return true;
}

template <class Use, int M, int N, int K, class T, class Layout, class P>
inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const P* p, unsigned ldm) {
  tz::collective("load_matrix_sync", p, ldm, sizeof(P), &f);
  using F = fragment<Use, M, N, K, T, Layout>;
  bool columns = std::is_same<Layout, col_major>::value;
  if (!tz_touch_tile(p, ldm, columns ? F::cols : F::rows, columns ? F::rows : F::cols,
                     tz::READ))
    return;
  tz::record_bank(tz::FRAGMENT_LOAD, p, (columns ? F::rows : F::cols) * sizeof(P),
                  columns ? F::cols : F::rows, ldm * sizeof(P));
  for (int i = 0; i < F::rows; ++i)
    for (int j = 0; j < F::cols; ++j)
      f.x[i * F::cols + j] = std::is_same<Layout, col_major>::value ? p[i + j * ldm]
                                                                    : p[i * ldm + j];
}

template <int M, int N, int K, class T, class P>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const P* p, unsigned ldm,
                             layout_t layout) {
  tz::collective("load_matrix_sync", p, ldm, sizeof(P), &f);
  bool columns = layout == mem_col_major;
  if (!tz_touch_tile(p, ldm, columns ? N : M, columns ? M : N, tz::READ)) return;
  tz::record_bank(tz::FRAGMENT_LOAD, p, (columns ? M : N) * sizeof(P), columns ? N : M,
                  ldm * sizeof(P));
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      f.x[i * N + j] = layout == mem_col_major ? p[i + j * ldm] : p[i * ldm + j];
}

template <int M, int N, int K, class T, class P>
inline void store_matrix_sync(P* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm,
                              layout_t layout) {
  tz::collective("store_matrix_sync", p, ldm, sizeof(P), &f);
  bool columns = layout == mem_col_major;
  if (!tz_touch_tile(p, ldm, columns ? N : M, columns ? M : N, tz::WRITE)) return;
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

// ---- mma.sync and ldmatrix: per-lane registers, exchanged through the warp's mailbox ---------
namespace tz {
inline unsigned lane_id() { return thread_slot() % 32; }

// This lane's mailbox for its next exchange.
inline Mailbox& mailbox() {
  return mailboxes[2 * (thread_slot() / 32) + current->exchanges % 2];
}

// Waits until every lane of the warp has posted to the mailbox.
inline void exchange() {
  current->state = AT_EXCHANGE;
  swapcontext(&current->context, &scheduler);
  ++current->exchanges;
}

// ldmatrix.m8n8.x{Count}[.trans].b16: lanes 8m to 8m + 7 give the rows of matrix m (16
// bytes each, 16-byte aligned, in shared memory); lane l receives, of each matrix, the word
// at row l / 4, bytes (l % 4) * 4, or with Trans the 16-bit elements (2 (l % 4), l / 4)
// and (2 (l % 4) + 1, l / 4).
template <int Count, bool Trans>
inline void ldmatrix(unsigned* d, const void* row, const char* kind) {
  collective(kind, nullptr, 0, 1, d);
  unsigned lane = lane_id();
  const char* p = static_cast<const char*>(row);
  if (lane < 8 * Count) {
    if (reinterpret_cast<uintptr_t>(p) % 16)
      fail("%s: lane %u's row address %p is not 16-byte aligned", kind, lane, row);
    else if (!shared_array(p))
      fail("%s: lane %u's row address %p is not in a shared array", kind, lane, row);
    else
      check_bounds(p, 16, "read");
    if (!error_text[0]) {
      touch(p, 16, READ, true);
      record_bank(COPY_ACCESS, p, 16);
    }
  }
  Mailbox& box = mailbox();
  box.row[lane] = p;
  exchange();
  for (int m = 0; m < Count; ++m) {
    if (error_text[0]) {
      d[m] = 0;
      continue;
    }
    if (!Trans) {
      std::memcpy(&d[m], box.row[8 * m + lane / 4] + lane % 4 * 4, 4);
      continue;
    }
    uint16_t low, high;
    std::memcpy(&low, box.row[8 * m + 2 * (lane % 4)] + lane / 4 * 2, 2);
    std::memcpy(&high, box.row[8 * m + 2 * (lane % 4) + 1] + lane / 4 * 2, 2);
    d[m] = uint32_t(low) | uint32_t(high) << 16;
  }
}

// Slot `sub` of register `reg` of a lane's packed words (4 / sizeof(T) values of T each).
template <class T> inline T unpack(const uint32_t* words, int reg, int sub) {
  T value;
  std::memcpy(&value, reinterpret_cast<const char*>(&words[reg]) + sub * sizeof(T),
              sizeof(T));
  return value;
}

// The 4-bit integers of m16n8k64: 8 to a register, the lower slot in the lower nibble.
struct s4 {
  int value;
  operator float() const { return float(value); }
};
struct u4 {
  int value;
  operator float() const { return float(value); }
};
template <class T> struct slots_per_word { static constexpr int value = 4 / int(sizeof(T)); };
template <> struct slots_per_word<s4> { static constexpr int value = 8; };
template <> struct slots_per_word<u4> { static constexpr int value = 8; };
template <> inline s4 unpack<s4>(const uint32_t* words, int reg, int sub) {
  int nibble = int(words[reg] >> (4 * sub) & 0xfu);
  return s4{nibble - 2 * (nibble & 8)};
}
template <> inline u4 unpack<u4>(const uint32_t* words, int reg, int sub) {
  return u4{int(words[reg] >> (4 * sub) & 0xfu)};
}

// mma.sync.m16n8kK.row.col: D = A x B + C in place on the lane's c. Of A (16 x K), element
// (r, k) is in lane (r % 8) * 4 + (k % 4E) / E, register r / 8 + 2 (k / 4E), slot k % E;
// of B (K x 8), element (k, n) in lane n * 4 + (k % 4E) / E, register k / 4E, slot k % E;
// the lane's D element q is (l / 4 + 8 (q / 2), (l % 4) * 2 + q % 2). E is 2 for 16-bit
// inputs, 4 for 8-bit (integers and the 8-bit floats alike), 8 for 4-bit. Integer tiles accumulate
// exactly, wrapping in 32 bits; float tiles in float, in k order (each product is exact in
// float for 16-bit and 8-bit float inputs, so only the additions round).
template <class TA, class TB, int K, class TC>
inline void mma(TC* c, const unsigned* a, const unsigned* b, const char* kind) {
  static_assert(slots_per_word<TA>::value == slots_per_word<TB>::value,
                "mma.sync inputs share one width");
  collective(kind, nullptr, 0, 1, c);
  unsigned lane = lane_id();
  Mailbox& box = mailbox();
  std::memcpy(box.a[lane], a, sizeof box.a[lane]);
  std::memcpy(box.b[lane], b, sizeof box.b[lane]);
  exchange();
  const int E = slots_per_word<TA>::value, piece = 4 * E;
  using Wide = typename std::conditional<std::is_integral<TC>::value, long long, float>::type;
  for (int q = 0; q < 4; ++q) {
    int r = int(lane / 4) + 8 * (q / 2), n = int(lane % 4) * 2 + q % 2;
    Wide sum = static_cast<Wide>(c[q]);
    for (int k = 0; k < K; ++k) {
      TA x = unpack<TA>(box.a[(r % 8) * 4 + k % piece / E], r / 8 + 2 * (k / piece), k % E);
      TB y = unpack<TB>(box.b[n * 4 + k % piece / E], k / piece, k % E);
      sum += static_cast<Wide>(static_cast<float>(x)) * static_cast<Wide>(static_cast<float>(y));
    }
    c[q] = std::is_integral<TC>::value ? static_cast<TC>(static_cast<uint32_t>(sum))
                                       : static_cast<TC>(sum);
  }
}
}  // namespace tz

inline void tz_ptx_ldmatrix_x4(unsigned* d, const void* row) {
  tz::ldmatrix<4, false>(d, row, "ldmatrix.x4");
}
inline void tz_ptx_ldmatrix_x2(unsigned* d, const void* row) {
  tz::ldmatrix<2, false>(d, row, "ldmatrix.x2");
}
inline void tz_ptx_ldmatrix_x2_trans(unsigned* d, const void* row) {
  tz::ldmatrix<2, true>(d, row, "ldmatrix.x2.trans");
}
// A lane's 8-byte store of two accumulator values (st.v2): 8-byte aligned, in one buffer.
template <class T> inline void tz_ptx_store2(T* p, T x, T y) {
  if (reinterpret_cast<uintptr_t>(p) % 8)
    tz::fail("8-byte store to %p: the address is not 8-byte aligned", static_cast<void*>(p));
  tz::check_bounds(p, 2 * sizeof(T), "written");
  if (tz::error_text[0]) return;
  tz::touch(p, 2 * sizeof(T), tz::WRITE);
  p[0] = x;
  p[1] = y;
}
inline void tz_mma_m16n8k16_f16_f16_f32(float* c, const unsigned* a, const unsigned* b) {
  tz::mma<half, half, 16>(c, a, b, "mma.sync.m16n8k16.f16");
}
inline void tz_mma_m16n8k16_bf16_bf16_f32(float* c, const unsigned* a, const unsigned* b) {
  tz::mma<__nv_bfloat16, __nv_bfloat16, 16>(c, a, b, "mma.sync.m16n8k16.bf16");
}
inline void tz_mma_m16n8k32_s8_s8_s32(int* c, const unsigned* a, const unsigned* b) {
  tz::mma<signed char, signed char, 32>(c, a, b, "mma.sync.m16n8k32.s8.s8");
}
inline void tz_mma_m16n8k32_u8_u8_s32(int* c, const unsigned* a, const unsigned* b) {
  tz::mma<unsigned char, unsigned char, 32>(c, a, b, "mma.sync.m16n8k32.u8.u8");
}
inline void tz_mma_m16n8k32_u8_s8_s32(int* c, const unsigned* a, const unsigned* b) {
  tz::mma<unsigned char, signed char, 32>(c, a, b, "mma.sync.m16n8k32.u8.s8");
}
inline void tz_mma_m16n8k32_s8_u8_s32(int* c, const unsigned* a, const unsigned* b) {
  tz::mma<signed char, unsigned char, 32>(c, a, b, "mma.sync.m16n8k32.s8.u8");
}
#define TZ_MMA_FP8(A, B)                                                                     \
  inline void tz_mma_m16n8k32_##A##_##B##_f32(float* c, const unsigned* a,                   \
                                              const unsigned* b) {                           \
    tz::mma<__nv_fp8_##A, __nv_fp8_##B, 32>(c, a, b, "mma.sync.m16n8k32." #A "." #B);        \
  }
TZ_MMA_FP8(e4m3, e4m3)
TZ_MMA_FP8(e5m2, e5m2)
TZ_MMA_FP8(e4m3, e5m2)
TZ_MMA_FP8(e5m2, e4m3)
#undef TZ_MMA_FP8
#define TZ_MMA_INT4(A, B)                                                                    \
  inline void tz_mma_m16n8k64_##A##_##B##_s32(int* c, const unsigned* a, const unsigned* b) { \
    tz::mma<tz::A, tz::B, 64>(c, a, b, "mma.sync.m16n8k64." #A "." #B);                      \
  }
TZ_MMA_INT4(s4, s4)
TZ_MMA_INT4(u4, u4)
TZ_MMA_INT4(s4, u4)
TZ_MMA_INT4(u4, s4)
#undef TZ_MMA_INT4
// An 8-byte shared load of a lane (a 4-bit fragment's 8 values): 8-byte aligned, inside a
// shared array, its bytes recorded as the thread's read.
inline unsigned long long tz_ptx_lds8(const void* p) {
  if (reinterpret_cast<uintptr_t>(p) % 8)
    tz::fail("8-byte shared load from %p: the address is not 8-byte aligned", p);
  else if (!tz::shared_array(p))
    tz::fail("8-byte shared load from %p: the address is not in a shared array", p);
  else
    tz::check_bounds(p, 8, "read");
  if (tz::error_text[0]) return 0;
  tz::touch(p, 8, tz::READ);
  tz::record_bank(tz::SCALAR_ACCESS, p, 8);
  unsigned long long value;
  std::memcpy(&value, p, 8);
  return value;
}

#include "wgmma.h"
