// Host emulation of the Hopper family (intrinsics/cuda_wgmma.yaml, targets/cuda/wgmma.py):
// warpgroup wgmma.mma_async on shared-memory matrix descriptors, TMA tensor copies
// (cp.async.bulk.tensor, from tensor maps) and the mbarriers whose transaction counts they
// complete. Included by mma.h, whose thread model it extends.
//
// Shared addresses. A descriptor holds an 18-bit shared-memory address. Here the shared
// window starts at the lowest shared array the running kernel declared, and an address is
// the offset from it (a kernel whose shared arrays lie further apart than the window is
// reported).
//
// mbarriers. An mbarrier counts the arrivals its phase still expects and its transaction
// bytes (arrive.expect_tx adds, a bulk copy's completion subtracts); the phase completes when
// both reach zero, and the next begins. try_wait.parity(P) is true once the phase of parity P
// has completed, i.e. while the current phase's parity is not P. A poll that finds its phase
// incomplete, and an arrival, are scheduling points (the thread steps aside until the next
// round): the threads interleave at every wait and every release, so a producer whose wait
// a release satisfies runs before the releasing threads go on.
//
// Tensor copies are in flight from issue until they complete: at once with copies_at_issue,
// else at the latest moment a correct kernel allows, when a thread polls for the phase they
// belong to while it is incomplete. A poll for an older phase (a wrong parity) lands nothing.
//
// wgmma. The 128 threads of a warpgroup each issue the instruction; each computes its own
// accumulator registers (the PTX ISA's layout, targets/cuda/wgmma.py) from the tiles its
// descriptors name, in k order (integers exactly, wrapping in 32 bits; floats in float).
// The tiles' bytes are being read from the issue until the thread's wgmma.wait_group
// retires the group holding it.
//
// Tensor copies (cp.async.bulk.tensor.2d, "TMA"). A CUtensorMap is 128 opaque bytes that the
// host encodes; the driver's byte layout is its own and undocumented, so this emulation
// encodes the same fields (global address, the two extents, the row stride, the box, the
// element size, the swizzle mode) in a layout of its own (TensorMapFields), which only its
// copy reads. The copy follows the PTX ISA's description ("Tensor Copy", "Bounding Box"): the
// box of box[0] x box[1] elements at coordinates (x, y) lands row-major and densely in
// shared memory (no swizzle: box row r at r * box[0] elements), elements outside the
// tensor's extents are zero-filled, and the full box's bytes count against the mbarrier's
// transactions. A copy completing more bytes than the phase expects is reported.
//
// Races, reported by name: a wgmma reading bytes a bulk copy has in flight (a consumer
// reading a stage before its mbarrier phase completes); a bulk copy into bytes a thread's
// wgmma still reads (a producer overwriting a stage still being read); two bulk copies in
// flight into one byte. A thread ending with wgmma groups it never waited for, and a block
// ending with bulk copies in flight, are reported too.
#pragma once
#include <map>

#define __grid_constant__

// 128 bytes as the driver's, but only 8-byte aligned: a 64-byte aligned argument would
// realign each emulated thread's frame by its stack's own offset, and the warp-collective
// checks compare the lanes' fragment offsets within their stacks.
struct CUtensorMap {
  unsigned long long opaque[16];
};

namespace tz {
// The emulation's own encoding of a 2-d tiled tensor map (see the comment above).
struct TensorMapFields {
  unsigned long long magic;
  const char* address;
  unsigned long long dims[2], stride;
  unsigned box[2], element, swizzle;
};
static_assert(sizeof(TensorMapFields) <= sizeof(CUtensorMap), "a tensor map is 128 bytes");
const unsigned long long TENSOR_MAP_MAGIC = 0x747a746d61703264ull;

struct Mbarrier {
  unsigned count = 0, pending = 0, phase = 0;
  long long tx = 0;
};

// A tensor copy in flight: the box of `map` at (x, y), `bytes` of it, gathered when it lands.
struct BulkCopy {
  char* dst;
  size_t bytes;
  unsigned long long* bar;
  unsigned issuer;
  const TensorMapFields* map;
  long long x, y;
};

struct ByteRange {
  const char* begin;
  size_t bytes;
  bool overlaps(const char* p, size_t n) const { return p < begin + bytes && begin < p + n; }
};

// A bulk copy that has landed: its bytes, and the phase of its mbarrier it completed in.
struct Landed {
  ByteRange range;
  unsigned long long* bar;
  unsigned phase, issuer;
};

// One thread's wgmma reads: issued since its last commit, and committed groups in order.
struct WgmmaReads {
  std::vector<ByteRange> open;
  std::vector<std::vector<ByteRange>> groups;
};

inline std::map<const void*, Mbarrier> mbarriers;
inline std::vector<BulkCopy> bulk_in_flight;
inline std::vector<Landed> landed;
inline std::vector<WgmmaReads> wgmma_reads;
// Per thread and mbarrier, the phases it has seen complete (by a successful try_wait).
inline std::vector<std::map<const void*, unsigned>> phases_seen;

inline const char* shared_window() {
  const char* low = nullptr;
  for (const char* base : declared_bases)
    if (!low || base < low) low = base;
  return low;
}

inline void describe_shared(const void* p, char* text, size_t size) {
  SharedArray* array = shared_array(p);
  if (!array) {
    snprintf(text, size, "%p", p);
    return;
  }
  snprintf(text, size, "%s[%zu]", array->name,
           size_t(static_cast<const char*>(p) - array->base) / array->element);
}

inline Mbarrier* mbarrier(unsigned long long* bar, const char* what) {
  auto found = mbarriers.find(bar);
  if (found != mbarriers.end()) return &found->second;
  fail("%s on an mbarrier at %p that no thread initialised", what, static_cast<void*>(bar));
  return nullptr;
}

inline void complete_phase_if_done(Mbarrier& b) {
  if (b.pending == 0 && b.tx == 0) {
    ++b.phase;
    b.pending = b.count;
  }
}

// The box of `map` at (x, y) into `dst`, row-major, zero outside the tensor's extents.
inline void gather_box(char* dst, const TensorMapFields& map, long long x, long long y) {
  for (unsigned r = 0; r < map.box[1]; ++r)
    for (unsigned e = 0; e < map.box[0]; ++e) {
      long long gx = x + e, gy = y + r;
      char* to = dst + (size_t(r) * map.box[0] + e) * map.element;
      bool inside = gx >= 0 && gy >= 0 && gx < (long long)map.dims[0] &&
                    gy < (long long)map.dims[1];
      if (inside) std::memcpy(to, map.address + gy * map.stride + gx * map.element, map.element);
      else std::memset(to, 0, map.element);
    }
}

inline void land_bulk(const BulkCopy& copy) {
  gather_box(copy.dst, *copy.map, copy.x, copy.y);
  Mbarrier& b = mbarriers[copy.bar];
  landed.push_back({{copy.dst, copy.bytes}, copy.bar, b.phase, copy.issuer});
  b.tx -= static_cast<long long>(copy.bytes);
  complete_phase_if_done(b);
}

// Lands the in-flight copies counted against `bar`.
inline void land_bulk_for(unsigned long long* bar) {
  std::vector<BulkCopy> still;
  for (auto& copy : bulk_in_flight) {
    if (copy.bar == bar) land_bulk(copy);
    else still.push_back(copy);
  }
  bulk_in_flight.swap(still);
}

inline void hopper_block_start(unsigned threads) {
  mbarriers.clear();
  bulk_in_flight.clear();
  landed.clear();
  wgmma_reads.assign(threads, WgmmaReads{});
  phases_seen.assign(threads, {});
}

// (A race already reported explains copies left in flight.)
inline void hopper_block_end() {
  if (!bulk_in_flight.empty() && !race_text[0])
    fail("%zu bulk copies still in flight at the end of the block (their mbarrier phase "
         "was never waited for)", bulk_in_flight.size());
}

inline void hopper_thread_end() {
  WgmmaReads& reads = wgmma_reads[linear_id(current->index)];
  if (!reads.open.empty() || !reads.groups.empty())
    fail("wgmma operations never retired by wgmma.wait_group at the thread's end");
}

inline const bool hopper_hooks = [] {
  block_start_hooks.push_back(hopper_block_start);
  block_end_hooks.push_back(hopper_block_end);
  thread_end_hooks.push_back(hopper_thread_end);
  return true;
}();

inline unsigned thread_id() { return linear_id(current->index); }

// A scheduling point: the thread runs again in the scheduler's next round.
inline void step_aside() {
  current->state = AT_POLL;
  swapcontext(&current->context, &scheduler);
}

inline void describe_thread(unsigned id, char* text, size_t size) {
  snprintf(text, size, "thread (%u, %u, %u)", id % block_dim.x, (id / block_dim.x) % block_dim.y,
           id / (block_dim.x * block_dim.y));
}

inline void early_read(const char* at, const char* how, unsigned issuer) {
  char where[96], who[64], whom[64];
  describe_shared(at, where, sizeof where);
  describe_thread(thread_id(), who, sizeof who);
  describe_thread(issuer, whom, sizeof whom);
  note(race_text, sizeof race_text,
       "race on shared %s: the wgmma of %s reads a stage before its mbarrier phase completes "
       "(a bulk copy that %s issued into it %s)", where, who, whom, how);
}

// A wgmma's read of `bytes` at `p`: inside shared memory, no bulk copy in flight into it,
// and the phase the last copy into it completed seen by this thread.
inline void wgmma_read(const char* p, size_t bytes) {
  if (!shared_array(p)) {
    fail("wgmma: a descriptor names %p, outside every shared array", static_cast<const void*>(p));
    return;
  }
  check_bounds(p, bytes, "read");
  for (auto& copy : bulk_in_flight) {
    ByteRange range{copy.dst, copy.bytes};
    if (!range.overlaps(p, bytes)) continue;
    early_read(std::max<const char*>(p, copy.dst), "is in flight", copy.issuer);
    return;
  }
  for (auto at = landed.rbegin(); at != landed.rend(); ++at) {
    if (!at->range.overlaps(p, bytes)) continue;
    if (phases_seen[thread_id()][at->bar] <= at->phase)
      early_read(std::max<const char*>(p, at->range.begin),
                 "completes a phase this thread has not waited for", at->issuer);
    break;
  }
  wgmma_reads[thread_id()].open.push_back({p, bytes});
}

// Element (row, kbyte) of a K-major tile of 8 x 16-byte core matrices (no swizzle).
inline const char* core_element(const char* start, unsigned leading, unsigned stride,
                                int row, int kbyte) {
  return start + (row / 8) * stride + (kbyte / 16) * leading + (row % 8) * 16 + kbyte % 16;
}

struct Descriptor {
  const char* start;
  unsigned leading, stride, swizzle;
};

inline Descriptor decode(const unsigned* d) {
  unsigned long long desc = d[0] | static_cast<unsigned long long>(d[1]) << 32;
  return Descriptor{shared_window() + ((desc & 0x3FFFu) << 4),
                    unsigned((desc >> 16 & 0x3FFFu) << 4), unsigned((desc >> 32 & 0x3FFFu) << 4),
                    unsigned(desc >> 62)};
}

// The rows x 32-byte K-major tile a descriptor names, recorded as read; false on a failure.
inline bool read_tile(const Descriptor& d, int rows) {
  if (d.swizzle != 0) {
    fail("wgmma: swizzle mode %u is not emulated (only 0, no swizzle)", d.swizzle);
    return false;
  }
  for (int group = 0; group < rows / 8; ++group)
    for (int core = 0; core < 2; ++core)
      wgmma_read(core_element(d.start, d.leading, d.stride, group * 8, core * 16), 128);
  return !error_text[0];
}

// wgmma.mma_async m64nNkK: D += A x B on the thread's N / 2 registers of the warpgroup's
// 64 x N tile (register r: row 16 w + l / 4 + 8 ((r / 2) % 2), column 8 (r / 4) + 2 (l % 4)
// + r % 2), A 64 x K and B N x K (K-major) read through their descriptors.
template <class TA, class TB, int N, int K, class TC>
inline void wgmma(TC* acc, const unsigned* a, const unsigned* b, const char* kind) {
  collective(kind, nullptr, 0, 1, acc);
  Descriptor da = decode(a), db = decode(b);
  if (!read_tile(da, 64) || !read_tile(db, N)) return;
  unsigned t = thread_id() % 128, w = t / 32, l = t % 32;
  using Wide = typename std::conditional<std::is_integral<TC>::value, long long, float>::type;
  for (int r = 0; r < N / 2; ++r) {
    int row = int(16 * w + l / 4 + 8 * (r / 2 % 2)), col = 8 * (r / 4) + int(2 * (l % 4)) + r % 2;
    Wide sum = static_cast<Wide>(acc[r]);
    for (int k = 0; k < K; ++k) {
      TA x;
      TB y;
      std::memcpy(&x, core_element(da.start, da.leading, da.stride, row, k * sizeof(TA)),
                  sizeof x);
      std::memcpy(&y, core_element(db.start, db.leading, db.stride, col, k * sizeof(TB)),
                  sizeof y);
      sum += static_cast<Wide>(static_cast<float>(x)) * static_cast<Wide>(static_cast<float>(y));
    }
    acc[r] = std::is_integral<TC>::value ? static_cast<TC>(static_cast<uint32_t>(sum))
                                         : static_cast<TC>(sum);
  }
}
}  // namespace tz

namespace tz {
// A bulk copy's destination: no thread's wgmma still reads it, no other copy is in flight
// into it (each race noted; the copy goes ahead, as on a GPU).
inline void check_bulk_target(const char* d, size_t bytes) {
  char where[96], who[64], whom[64];
  for (unsigned t = 0; t < wgmma_reads.size(); ++t) {
    auto& reads = wgmma_reads[t];
    std::vector<const std::vector<ByteRange>*> pending{&reads.open};
    for (auto& group : reads.groups) pending.push_back(&group);
    for (auto* ranges : pending)
      for (auto& range : *ranges) {
        if (!range.overlaps(d, bytes)) continue;
        describe_shared(std::max<const char*>(d, range.begin), where, sizeof where);
        describe_thread(thread_id(), who, sizeof who);
        describe_thread(t, whom, sizeof whom);
        note(race_text, sizeof race_text,
             "race on shared %s: the bulk copy that %s issues overwrites a stage still being "
             "read (by a wgmma of %s not yet retired by wgmma.wait_group)", where, who, whom);
        return;
      }
  }
  for (auto& copy : bulk_in_flight)
    if (ByteRange{copy.dst, copy.bytes}.overlaps(d, bytes)) {
      describe_shared(std::max<const char*>(d, copy.dst), where, sizeof where);
      note(race_text, sizeof race_text, "race on shared %s: two bulk copies in flight into it",
           where);
      return;
    }
}

// The copy's bytes were announced: the phase's transaction bytes not yet claimed by copies in
// flight cover them (the emulation requires each copy's arrive.expect_tx before its issue).
inline void check_announced(const Mbarrier& b, unsigned long long* bar, size_t bytes) {
  long long open = b.tx;
  for (auto& copy : bulk_in_flight)
    if (copy.bar == bar) open -= static_cast<long long>(copy.bytes);
  if (open >= static_cast<long long>(bytes)) return;
  char who[64];
  describe_thread(thread_id(), who, sizeof who);
  fail("mbarrier transaction count: the tensor copy of %zu bytes that %s issues exceeds the "
       "%lld bytes its phase's arrive.expect_tx still announces (the count is short of the "
       "boxes' bytes, or a box is larger than counted)", bytes, who, open);
}
}  // namespace tz

inline unsigned tz_shared_address(const void* p) {
  const char* window = tz::shared_window();
  const char* q = static_cast<const char*>(p);
  if (!window || q < window || q - window >= (1 << 18)) {
    tz::fail("shared address of %p: outside the 256 KiB shared window", p);
    return 0;
  }
  return unsigned(q - window);
}

inline void tz_wgmma_fence() {}
inline void tz_wgmma_commit_group() {
  tz::WgmmaReads& reads = tz::wgmma_reads[tz::thread_id()];
  reads.groups.push_back(reads.open);
  reads.open.clear();
}
// The oldest groups retire until at most N are pending: their tiles are no longer read.
template <int N> inline void tz_wgmma_wait_group() {
  auto& groups = tz::wgmma_reads[tz::thread_id()].groups;
  while (groups.size() > size_t(N)) groups.erase(groups.begin());
}

inline void tz_mbarrier_init(unsigned long long* bar, unsigned count) {
  if (!tz::shared_array(bar)) {
    tz::fail("mbarrier.init at %p: not in shared memory", static_cast<void*>(bar));
    return;
  }
  tz::mbarriers[bar] = tz::Mbarrier{count, count, 0, 0};
}

inline void tz_mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  tz::Mbarrier* b = tz::mbarrier(bar, "mbarrier.arrive.expect_tx");
  if (!b) return;
  b->tx += bytes;
  --b->pending;
  tz::complete_phase_if_done(*b);
}

inline void tz_mbarrier_arrive(unsigned long long* bar) {
  tz::Mbarrier* b = tz::mbarrier(bar, "mbarrier.arrive");
  if (!b) return;
  --b->pending;
  tz::complete_phase_if_done(*b);
  tz::step_aside();
}

inline bool tz_mbarrier_try_wait(unsigned long long* bar, unsigned parity) {
  tz::Mbarrier* b = tz::mbarrier(bar, "mbarrier.try_wait");
  if (!b) return true;
  if (b->phase % 2 == parity % 2 && !tz::copies_at_issue) tz::land_bulk_for(bar);
  if (b->phase % 2 == parity % 2) {
    tz::idle_poll = true;
    tz::step_aside();
    return false;
  }
  unsigned& seen = tz::phases_seen[tz::thread_id()][bar];
  seen = std::max(seen, b->phase);
  return true;
}

namespace tz {
// A host-side failure (no block or thread is running): the first one is kept.
inline void map_fail(const char* format, ...) {
  if (error_text[0]) return;
  va_list args;
  va_start(args, format);
  vsnprintf(error_text, sizeof error_text, format, args);
  va_end(args);
}
}  // namespace tz

// The emulation's cuTensorMapEncodeTiled for a 2-d tensor, run on the host before the
// launch: its fields, checked as the driver checks them (16-byte aligned address and row
// stride, box extents 1 to 256, a box row a multiple of 16 bytes without interleave); a
// failure is reported.
inline void tz_tensor_map_encode_tiled(CUtensorMap* map, unsigned element, const void* address,
                                       unsigned long long dim0, unsigned long long dim1,
                                       unsigned long long stride, unsigned box0, unsigned box1,
                                       unsigned swizzle) {
  std::memset(map, 0, sizeof *map);
  if (reinterpret_cast<uintptr_t>(address) % 16 || stride % 16)
    tz::map_fail("tensor map: the global address %p and the row stride %llu must be multiples of "
             "16 bytes", address, stride);
  if (box0 < 1 || box0 > 256 || box1 < 1 || box1 > 256 || box0 * element % 16)
    tz::map_fail("tensor map: box %u x %u of %u-byte elements: extents must be 1 to 256 and a "
             "box row a multiple of 16 bytes", box0, box1, element);
  if (swizzle != 0) tz::map_fail("tensor map: swizzle mode %u is not emulated (only 0)", swizzle);
  tz::TensorMapFields fields{tz::TENSOR_MAP_MAGIC, static_cast<const char*>(address),
                             {dim0, dim1}, stride, {box0, box1}, element, swizzle};
  std::memcpy(map, &fields, sizeof fields);
}

// cp.async.bulk.tensor.2d: the box of `map` at (x, y) into `dst`, counted against `bar`.
inline void tz_tensor_copy_2d(void* dst, const CUtensorMap* map, int x, int y,
                              unsigned long long* bar) {
  const tz::TensorMapFields* fields = reinterpret_cast<const tz::TensorMapFields*>(map);
  if (fields->magic != tz::TENSOR_MAP_MAGIC) {
    tz::fail("cp.async.bulk.tensor at %p: the tensor map was never encoded",
             static_cast<const void*>(map));
    return;
  }
  char* d = static_cast<char*>(dst);
  size_t bytes = size_t(fields->box[0]) * fields->box[1] * fields->element;
  if (reinterpret_cast<uintptr_t>(dst) % 128)
    tz::fail("cp.async.bulk.tensor to %p: the shared destination must be 128-byte aligned", dst);
  if (!tz::shared_array(dst)) tz::fail("cp.async.bulk.tensor to %p: not in shared memory", dst);
  tz::check_bounds(dst, bytes, "written");
  tz::Mbarrier* b = tz::mbarrier(bar, "cp.async.bulk.tensor");
  if (!b || tz::error_text[0]) return;
  tz::check_announced(*b, bar, bytes);
  tz::check_bulk_target(d, bytes);
  tz::BulkCopy copy{d, bytes, bar, tz::thread_id(), fields, x, y};
  if (tz::copies_at_issue) tz::land_bulk(copy);
  else tz::bulk_in_flight.push_back(copy);
}

#define TZ_WGMMA(N, K, T, TYPE, ACC, ACC_TYPE)                                              \
  inline void tz_wgmma_m64n##N##k##K##_##T##_##T##_##ACC(ACC_TYPE* d, const unsigned* a,      \
                                                         const unsigned* b) {                 \
    tz::wgmma<TYPE, TYPE, N, K>(d, a, b, "wgmma.m64n" #N "k" #K "." #T);                       \
  }
TZ_WGMMA(64, 16, f16, half, f32, float)
TZ_WGMMA(128, 16, f16, half, f32, float)
TZ_WGMMA(64, 16, bf16, __nv_bfloat16, f32, float)
TZ_WGMMA(128, 16, bf16, __nv_bfloat16, f32, float)
TZ_WGMMA(64, 32, s8, signed char, s32, int)
TZ_WGMMA(128, 32, s8, signed char, s32, int)
TZ_WGMMA(64, 32, e4m3, __nv_fp8_e4m3, f32, float)
TZ_WGMMA(128, 32, e4m3, __nv_fp8_e4m3, f32, float)
TZ_WGMMA(64, 32, e5m2, __nv_fp8_e5m2, f32, float)
TZ_WGMMA(128, 32, e5m2, __nv_fp8_e5m2, f32, float)
#undef TZ_WGMMA
