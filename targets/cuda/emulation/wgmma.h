// Host emulation of the Hopper family (intrinsics/cuda_wgmma.yaml, targets/cuda/wgmma.py):
// warpgroup wgmma.mma_async on shared-memory matrix descriptors, TMA tensor copies
// (cp.async.bulk.tensor, from tensor maps) and the mbarriers whose transaction counts they
// complete. Included by mma.h, whose thread model it extends.
//
// Shared addresses. A descriptor holds an 18-bit shared-memory address. Here the shared
// window is the running thread's block's TZ_CTA_SHARED buffer (below, Clusters) where it has
// one, else it starts at the lowest shared array the running kernel declared; an address is
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
// operands name, in k order (integers exactly, wrapping in 32 bits; floats in float),
// through the descriptor's swizzle mode as the copies apply theirs (below); bytes read
// through one mode that a copy landed with another are reported as a swizzle mismatch.
// An operand is the descriptor's two words and the instruction's imm-trans flag (its third
// word): K-major tiles (flag 0) are rows of the tile's m or n with k along them, MN-major
// ones (flag 1, B of the 16-bit types) rows of k with n along them, read as the PTX ISA's
// canonical MN-major layouts (panels of the span's bytes of n `leading` apart, groups of 8
// k rows `stride` apart; without swizzle 8 x 16-byte core matrices, the k groups `leading`
// apart and the 16-byte panels `stride` apart). Each product must pair A's and B's elements
// of one k: where the copies that landed them read them at k coordinates that differ (other
// than by whole multiples of A's extent along k, a batch's stacked rows), the tile was
// landed in another layout than its operand reads (a transpose flag or a descriptor not the
// copies'), reported as a layout mismatch. The tiles' bytes are being read from the issue
// until the thread's wgmma.wait_group retires the group holding it.
//
// Tensor copies (cp.async.bulk.tensor.2d, "TMA"). A CUtensorMap is 128 opaque bytes that the
// host encodes; the driver's byte layout is its own and undocumented, so this emulation
// encodes the same fields (global address, the two extents, the row stride, the box, the
// element size, the swizzle mode) in a layout of its own (TensorMapFields), which only its
// copy reads. The copy follows the PTX ISA's description ("Tensor Copy", "Bounding Box"): the
// box of box[0] x box[1] elements at coordinates (x, y) lands row-major and densely in
// shared memory (box row r at r * box[0] elements), then swizzled by the map's mode: the
// 16-byte chunk index within a span of 32, 64 or 128 bytes XORed with the index of its
// 128-byte line (both from the shared address, so a swizzled box must start at a multiple
// of the pattern's repeat, 8 spans). Elements outside the tensor's extents are zero-filled,
// and the full box's bytes count against the mbarrier's transactions. A copy completing
// more bytes than the phase expects is reported.
//
// Clusters (mma.h runs a cluster's blocks together). Each block of a cluster has its own
// dynamic shared memory (TZ_CTA_SHARED: one 1024-byte aligned buffer per block rank, reused by
// every launch as a static array is), and its shared addresses are offsets into it. A
// multicast tensor copy lands its box at the same offset in every block its mask names, each
// counted against the mbarrier at the same offset there; a remote arrival (mapa, then
// mbarrier.arrive.shared::cluster) arrives on the mbarrier at an offset in another block.
// A block's transaction bytes may arrive before its own arrive.expect_tx announces them (a
// multicast from another block): only a copy into the issuing block is checked against the
// bytes announced. A deadlock whose phase awaits bytes no copy in flight will bring, or has
// received more than announced, is reported as such, naming the mbarrier and its block.
//
// setmaxnreg (.dec and .inc, sm_90a) changes no value here; its rules are checked, each
// violation reported by name: the count a multiple of 8 in [24, 256], the block whole
// warpgroups, every thread of a warpgroup executing each of its warpgroup's setmaxnreg with the
// same kind and count (.sync.aligned: checked in order, and at the block's end that none
// skipped one).
//
// Races, reported by name: a wgmma reading bytes a bulk copy has in flight (a consumer
// reading a stage before its mbarrier phase completes); a bulk copy into bytes a thread's
// wgmma still reads (a producer overwriting a stage still being read); two bulk copies in
// flight into one byte. A thread ending with wgmma groups it never waited for, and a block
// ending with bulk copies in flight, are reported too.
#pragma once
#include <algorithm>
#include <map>
#include <memory>

#define __grid_constant__
#define __cluster_dims__(x, y, z)

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

// A bulk copy that has landed: its bytes, the phase of its mbarrier it completed in, the
// swizzle span it landed with (16: none), and its map's box at tensor coordinates (x, y).
struct Landed {
  ByteRange range;
  unsigned long long* bar;
  unsigned phase, issuer, span;
  const TensorMapFields* map;
  long long x, y;
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

// The 18-bit shared window: one block's shared memory.
const size_t CTA_SHARED_BYTES = 256 * 1024;
const size_t CTA_SHARED_ALIGNMENT = 1024;
inline std::vector<std::unique_ptr<char[]>> cta_storage;
// Per block rank, its buffer (aligned within cta_storage), and whether a block of the running
// cluster has taken it (its window).
inline std::vector<char*> cta_buffers;
inline std::vector<const char*> cta_windows;

// The dynamic shared memory of the running thread's block (TZ_CTA_SHARED).
inline unsigned char* cta_shared(size_t bytes) {
  unsigned rank = current->cta;
  if (bytes > CTA_SHARED_BYTES)
    fail("dynamic shared memory of %zu bytes: more than the %zu of a block's shared window",
         bytes, CTA_SHARED_BYTES);
  while (cta_buffers.size() <= rank) {
    cta_storage.emplace_back(new char[CTA_SHARED_BYTES + CTA_SHARED_ALIGNMENT]);
    char* raw = cta_storage.back().get();
    cta_buffers.push_back(raw + (CTA_SHARED_ALIGNMENT - reinterpret_cast<uintptr_t>(raw) %
                                 CTA_SHARED_ALIGNMENT) % CTA_SHARED_ALIGNMENT);
  }
  if (cta_windows.size() <= rank) cta_windows.resize(rank + 1, nullptr);
  if (!cta_windows[rank]) {
    // The buffer's first use in this cluster: the arrays an earlier kernel declared in it
    // (of other sizes) are forgotten, so that this kernel's declarations take their place.
    const char* begin = cta_buffers[rank];
    shared_arrays.erase(std::remove_if(shared_arrays.begin(), shared_arrays.end(),
                                       [&](const SharedArray& array) {
                                         return array.base >= begin &&
                                                array.base < begin + CTA_SHARED_BYTES;
                                       }),
                        shared_arrays.end());
    cta_windows[rank] = begin;
  }
  return reinterpret_cast<unsigned char*>(cta_buffers[rank]);
}

inline const char* shared_window() {
  if (current && current->cta < cta_windows.size() && cta_windows[current->cta])
    return cta_windows[current->cta];
  const char* low = nullptr;
  for (const char* base : declared_bases)
    if (!low || base < low) low = base;
  return low;
}

// The rank of the block whose shared window holds `p` (the running thread's when none does).
inline unsigned block_of(const void* p) {
  const char* q = static_cast<const char*>(p);
  for (unsigned rank = 0; rank < cta_windows.size(); ++rank)
    if (cta_windows[rank] && q >= cta_windows[rank] && q < cta_windows[rank] + CTA_SHARED_BYTES)
      return rank;
  return current ? current->cta : 0;
}

inline const char* window_of(const void* p) {
  unsigned rank = block_of(p);
  return rank < cta_windows.size() && cta_windows[rank] ? cta_windows[rank] : shared_window();
}

inline void describe_shared(const void* p, char* text, size_t size) {
  SharedArray* array = shared_array(p);
  if (!array) {
    snprintf(text, size, "%p", p);
    return;
  }
  int n = snprintf(text, size, "%s[%zu]", array->name,
                   size_t(static_cast<const char*>(p) - array->base) / array->element);
  if (cluster_size > 1)
    snprintf(text + n, size - n, " of the cluster's block %u", block_of(p));
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

// Swizzle spans (bytes of a row of the pattern; 16: none) by a tensor map's mode
// (CU_TENSOR_MAP_SWIZZLE_*) and by a descriptor's (bits 62-63): they number them differently.
inline unsigned map_span(unsigned mode) { return 16u << mode; }
inline unsigned descriptor_span(unsigned mode) { return mode == 0 ? 16u : 256u >> mode; }

// Where the byte at `p` lies under the swizzle of `span` bytes: its 16-byte chunk index
// within the span XORed with the index of its 128-byte line (both from the shared address,
// as the hardware computes them; Swizzle<log2(span / 16), 4, 3> in CUTLASS's terms).
inline char* swizzled(const char* p, unsigned span) {
  const char* window = window_of(p);
  size_t a = size_t(p - window);
  a ^= ((a >> 7) & (span / 16 - 1)) << 4;
  return const_cast<char*>(window) + a;
}

// The box of `map` at (x, y) into `dst`, row-major under the map's swizzle, zero outside the
// tensor's extents.
inline void gather_box(char* dst, const TensorMapFields& map, long long x, long long y) {
  unsigned span = map_span(map.swizzle);
  for (unsigned r = 0; r < map.box[1]; ++r)
    for (unsigned e = 0; e < map.box[0]; ++e) {
      long long gx = x + e, gy = y + r;
      char* to = swizzled(dst + (size_t(r) * map.box[0] + e) * map.element, span);
      bool inside = gx >= 0 && gy >= 0 && gx < (long long)map.dims[0] &&
                    gy < (long long)map.dims[1];
      if (inside) std::memcpy(to, map.address + gy * map.stride + gx * map.element, map.element);
      else std::memset(to, 0, map.element);
    }
}

inline void land_bulk(const BulkCopy& copy) {
  gather_box(copy.dst, *copy.map, copy.x, copy.y);
  Mbarrier& b = mbarriers[copy.bar];
  landed.push_back({{copy.dst, copy.bytes}, copy.bar, b.phase, copy.issuer,
                    map_span(copy.map->swizzle), copy.map, copy.x, copy.y});
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

// One setmaxnreg of a warpgroup: its kind and count, as its first thread executed it.
struct RegisterRequest {
  bool inc;
  unsigned count;
};
// Per warpgroup (of the running block or cluster), its setmaxnreg in order; per thread, how
// many of them it has executed.
inline std::vector<std::vector<RegisterRequest>> warpgroup_requests;
inline std::vector<size_t> requests_made;

inline void hopper_block_start(unsigned threads) {
  warpgroup_requests.assign((threads + 127) / 128, {});
  requests_made.assign(threads, 0);
  mbarriers.clear();
  bulk_in_flight.clear();
  landed.clear();
  wgmma_reads.assign(threads, WgmmaReads{});
  phases_seen.assign(threads, {});
  cta_windows.clear();
}

inline void describe_thread(unsigned slot, char* text, size_t size);

// Each thread executed every setmaxnreg of its warpgroup (the first that skipped one named).
inline void check_register_requests() {
  for (unsigned t = 0; t < requests_made.size(); ++t) {
    size_t expected = warpgroup_requests[t / 128].size();
    if (requests_made[t] == expected) continue;
    char who[64];
    describe_thread(t, who, sizeof who);
    fail("setmaxnreg: %s executed %zu of the %zu setmaxnreg of its warpgroup %u (.sync.aligned: "
         "the whole warpgroup executes each)", who, requests_made[t], expected, t / 128);
    return;
  }
}

// (A race already reported explains copies left in flight.)
inline void hopper_block_end() {
  check_register_requests();
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

inline unsigned thread_id() { return thread_slot(); }

// setmaxnreg.{dec,inc}.sync.aligned.u32 `count` by the running thread (the rules above).
inline void setmaxnreg(bool inc, unsigned count) {
  const char* kind = inc ? "setmaxnreg.inc" : "setmaxnreg.dec";
  if (count % 8 || count < 24 || count > 256) {
    fail("%s.sync.aligned.u32 %u: the register count must be a multiple of 8 in [24, 256]",
         kind, count);
    return;
  }
  if (block_threads % 128) {
    fail("%s in a block of %u threads: a warpgroup executes it, and the block is not whole "
         "warpgroups of 128", kind, block_threads);
    return;
  }
  unsigned slot = thread_id();
  auto& log = warpgroup_requests[slot / 128];
  size_t n = requests_made[slot]++;
  if (n == log.size()) {
    log.push_back({inc, count});
    return;
  }
  if (log[n].inc == inc && log[n].count == count) return;
  fail("%s.sync.aligned.u32 %u: the threads of warpgroup %u disagree at its setmaxnreg #%zu, "
       "which another thread executed as %s %u", kind, count, slot / 128, n,
       log[n].inc ? "setmaxnreg.inc" : "setmaxnreg.dec", log[n].count);
}

// A scheduling point: the thread runs again in the scheduler's next round.
inline void step_aside() {
  current->state = AT_POLL;
  swapcontext(&current->context, &scheduler);
}

inline void describe_thread(unsigned slot, char* text, size_t size) {
  unsigned id = slot % block_threads;
  int n = snprintf(text, size, "thread (%u, %u, %u)", id % block_dim.x,
                   (id / block_dim.x) % block_dim.y, id / (block_dim.x * block_dim.y));
  if (cluster_size > 1)
    snprintf(text + n, size - n, " of the cluster's block %u", slot / block_threads);
}

// A descriptor's swizzle is not the one its bytes landed with: the wgmma would read
// another element than the one the copy put there.
inline void swizzle_mismatch(const char* at, unsigned span, unsigned landed_span,
                             unsigned issuer) {
  char where[96], who[64], whom[64];
  describe_shared(at, where, sizeof where);
  describe_thread(thread_id(), who, sizeof who);
  describe_thread(issuer, whom, sizeof whom);
  fail("swizzle mismatch on shared %s: the wgmma of %s reads it through a descriptor of the "
       "%u-byte swizzle span, but the tensor copy that %s issued landed it with a %u-byte span "
       "(16: no swizzle)", where, who, span, whom, landed_span);
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

// A wgmma's read of `bytes` at `p` through a descriptor of swizzle span `span`: inside shared
// memory, no bulk copy in flight into it, the phase the last copy into it completed seen by
// this thread, and that copy landed with the same swizzle.
inline void wgmma_read(const char* p, size_t bytes, unsigned span) {
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
    else if (at->span != span)
      swizzle_mismatch(std::max<const char*>(p, at->range.begin), span, at->span, at->issuer);
    break;
  }
  wgmma_reads[thread_id()].open.push_back({p, bytes});
}

// An operand: its descriptor's fields, and the instruction's imm-trans flag for it.
struct Descriptor {
  const char* start;
  unsigned leading, stride, span, transpose;
};

inline Descriptor decode(const unsigned* d) {
  unsigned long long desc = d[0] | static_cast<unsigned long long>(d[1]) << 32;
  return Descriptor{shared_window() + ((desc & 0x3FFFu) << 4),
                    unsigned((desc >> 16 & 0x3FFFu) << 4), unsigned((desc >> 32 & 0x3FFFu) << 4),
                    descriptor_span(unsigned(desc >> 62)), d[2]};
}

// Element (row, kbyte) of a K-major tile (kbyte < 32: one wgmma step). Without swizzle, 8 x
// 16-byte core matrices: rows 16 bytes apart, the two along k `leading` apart, 8-row groups
// `stride` apart. Swizzled, rows a span apart with k along the row from the start address,
// 8-row groups `stride` apart, and the swizzle applied to the address.
inline const char* tile_element(const Descriptor& d, int row, int kbyte) {
  if (d.span == 16)
    return d.start + (row / 8) * d.stride + (kbyte / 16) * d.leading + (row % 8) * 16 +
           kbyte % 16;
  return swizzled(d.start + (row / 8) * d.stride + (row % 8) * d.span + kbyte, d.span);
}

// Byte `nbyte` of k row `krow` of an MN-major tile (krow < the step's k). Without swizzle, 8 x
// 16-byte core matrices: k rows 16 bytes apart, 8-row groups `leading` apart, 16-byte panels
// of n `stride` apart. Swizzled, k rows a span apart with n along the row, 8-row groups
// `stride` apart, panels of the span's bytes `leading` apart, the swizzle applied.
inline const char* mn_element(const Descriptor& d, int krow, int nbyte) {
  if (d.span == 16)
    return d.start + (nbyte / 16) * d.stride + (krow / 8) * d.leading + (krow % 8) * 16 +
           nbyte % 16;
  return swizzled(d.start + (nbyte / d.span) * d.leading + (krow / 8) * d.stride +
                  (krow % 8) * d.span + nbyte % d.span, d.span);
}

// Element (index, k) of an operand's tile of `elem`-byte elements: index its row (of m or n)
// K-major, its byte along a row MN-major.
inline const char* operand_element(const Descriptor& d, int index, int k, unsigned elem) {
  return d.transpose ? mn_element(d, k, index * int(elem)) : tile_element(d, index, k * int(elem));
}

// The operand's tile of `rows` (m or n) by 32 bytes of k (`k` elements) recorded as read: K-major
// per 8-row group its two core matrices, or swizzled the group's 8 rows of the span, which
// hold the step's bytes; MN-major per panel and group of 8 k rows, its 8 rows. False on a
// failure.
inline bool read_tile(const Descriptor& d, int rows, int k) {
  if (d.transpose) {
    int panels = rows * (32 / k) / int(d.span);
    for (int panel = 0; panel < panels; ++panel)
      for (int group = 0; group < k / 8; ++group)
        wgmma_read(d.start + panel * (d.span == 16 ? d.stride : d.leading) +
                       group * (d.span == 16 ? d.leading : d.stride),
                   8 * d.span, d.span);
    return !error_text[0];
  }
  for (int group = 0; group < rows / 8; ++group) {
    if (d.span == 16) {
      for (int core = 0; core < 2; ++core)
        wgmma_read(tile_element(d, group * 8, core * 16), 128, d.span);
      continue;
    }
    const char* row_start = d.start - size_t(d.start - shared_window()) % d.span;
    wgmma_read(row_start + group * d.stride, 8 * d.span, d.span);
  }
  return !error_text[0];
}

// The landed copy that put the byte at `p` there, and the tensor coordinates (inner, outer)
// it read it from (its box at (x, y), unswizzled: the swizzle is its own inverse); nullptr
// where no copy landed it.
inline const Landed* landed_at(const char* p, long long* inner, long long* outer) {
  for (auto at = landed.rbegin(); at != landed.rend(); ++at) {
    if (!at->range.overlaps(p, 1)) continue;
    size_t offset = size_t(swizzled(p, at->span) - at->range.begin);
    size_t row = size_t(at->map->box[0]) * at->map->element;
    *inner = at->x + static_cast<long long>(offset % row / at->map->element);
    *outer = at->y + static_cast<long long>(offset / row);
    return &*at;
  }
  return nullptr;
}

// Each product of the thread's first register pairs A's and B's elements of one k (module
// comment): the k coordinates their copies read them at, along A's K-major map and along
// B's as its flag reads it, agree modulo A's extent along k. Reported as a layout mismatch
// otherwise (nothing to compare where a copy did not land them, or A is MN-major).
inline void check_k_pairing(const Descriptor& da, const Descriptor& db, int row, int col, int k,
                            unsigned ea, unsigned eb) {
  if (da.transpose) return;
  for (int kk = 0; kk < k; ++kk) {
    long long ax, ay, bx, by;
    const char* at_b = operand_element(db, col, kk, eb);
    const Landed* la = landed_at(operand_element(da, row, kk, ea), &ax, &ay);
    const Landed* lb = landed_at(at_b, &bx, &by);
    if (!la || !lb) return;
    long long ka = ax, kb = db.transpose ? by : bx;
    if ((kb - ka) % static_cast<long long>(la->map->dims[0]) == 0) continue;
    char where[96], who[64], whom[64];
    describe_shared(at_b, where, sizeof where);
    describe_thread(thread_id(), who, sizeof who);
    describe_thread(lb->issuer, whom, sizeof whom);
    fail("wgmma layout mismatch on shared %s: the wgmma of %s multiplies A's element of k = %lld "
         "by B's of k = %lld, B's operand reading its tile %s (imm-trans-b %u): the tensor copy "
         "that %s issued landed it in another layout", where, who, ka, kb,
         db.transpose ? "MN-major" : "K-major", db.transpose, whom);
    return;
  }
}

// wgmma.mma_async m64nNkK: D += A x B on the thread's N / 2 registers of the warpgroup's
// 64 x N tile (register r: row 16 w + l / 4 + 8 ((r / 2) % 2), column 8 (r / 4) + 2 (l % 4)
// + r % 2), A 64 x K and B K x N read through their operands (K-major or MN-major).
template <class TA, class TB, int N, int K, class TC>
inline void wgmma(TC* acc, const unsigned* a, const unsigned* b, const char* kind) {
  collective(kind, nullptr, 0, 1, acc);
  Descriptor da = decode(a), db = decode(b);
  if (!read_tile(da, 64, K) || !read_tile(db, N, K)) return;
  unsigned t = linear_id(current->index) % 128, w = t / 32, l = t % 32;
  check_k_pairing(da, db, int(16 * w + l / 4), int(2 * (l % 4)), K, sizeof(TA), sizeof(TB));
  if (error_text[0]) return;
  using Wide = typename std::conditional<std::is_integral<TC>::value, long long, float>::type;
  for (int r = 0; r < N / 2; ++r) {
    int row = int(16 * w + l / 4 + 8 * (r / 2 % 2)), col = 8 * (r / 4) + int(2 * (l % 4)) + r % 2;
    Wide sum = static_cast<Wide>(acc[r]);
    for (int k = 0; k < K; ++k) {
      TA x;
      TB y;
      std::memcpy(&x, operand_element(da, row, k, sizeof(TA)), sizeof x);
      std::memcpy(&y, operand_element(db, col, k, sizeof(TB)), sizeof y);
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
// stride, box extents 1 to 256, a box row a multiple of 16 bytes without interleave and at
// most the swizzle's span with one); a failure is reported.
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
  if (swizzle > 3)
    tz::map_fail("tensor map: swizzle mode %u is none of 0 (none), 1, 2, 3 (32, 64, 128 bytes)",
                 swizzle);
  else if (swizzle && box0 * element > tz::map_span(swizzle))
    tz::map_fail("tensor map: a box row of %u bytes exceeds the %u-byte span of swizzle mode %u",
                 box0 * element, tz::map_span(swizzle), swizzle);
  tz::TensorMapFields fields{tz::TENSOR_MAP_MAGIC, static_cast<const char*>(address),
                             {dim0, dim1}, stride, {box0, box1}, element, swizzle};
  std::memcpy(map, &fields, sizeof fields);
}

namespace tz {
// The encoded fields of `map`, or nullptr after reporting a map never encoded.
inline const TensorMapFields* encoded(const CUtensorMap* map) {
  const TensorMapFields* fields = reinterpret_cast<const TensorMapFields*>(map);
  if (fields->magic == TENSOR_MAP_MAGIC) return fields;
  fail("cp.async.bulk.tensor at %p: the tensor map was never encoded",
       static_cast<const void*>(map));
  return nullptr;
}

// The issuing block's destination `dst` checked: shared, aligned, the box in bounds.
inline bool check_destination(void* dst, const TensorMapFields& fields, size_t bytes) {
  if (reinterpret_cast<uintptr_t>(dst) % 128)
    fail("cp.async.bulk.tensor to %p: the shared destination must be 128-byte aligned", dst);
  // The pattern is computed from the address bits: a box starts where it starts.
  unsigned repeat = 8 * map_span(fields.swizzle);
  if (fields.swizzle && shared_array(dst) && tz_shared_address(dst) % repeat)
    fail("cp.async.bulk.tensor to %p: a box of swizzle mode %u must land at a multiple of "
         "%u bytes (its pattern's repeat), got shared address %u", dst, fields.swizzle,
         repeat, tz_shared_address(dst));
  if (!shared_array(dst)) fail("cp.async.bulk.tensor to %p: not in shared memory", dst);
  check_bounds(dst, bytes, "written");
  return !error_text[0];
}

// The box of `fields` at (x, y), `bytes` of it, into `d` counted against `bar` (of some block
// of the cluster); checked against the phase's announced bytes when `announced` (a copy
// into the issuing block), then landed or put in flight.
inline void issue_copy(char* d, const TensorMapFields* fields, long long x, long long y,
                       unsigned long long* bar, size_t bytes, bool announced) {
  Mbarrier* b = mbarrier(bar, "cp.async.bulk.tensor");
  if (!b || error_text[0]) return;
  if (announced) check_announced(*b, bar, bytes);
  check_bulk_target(d, bytes);
  BulkCopy copy{d, bytes, bar, thread_id(), fields, x, y};
  if (copies_at_issue) land_bulk(copy);
  else bulk_in_flight.push_back(copy);
}

// The address at `p`'s offset in the shared window of the cluster's block `rank` (mapa), or
// nullptr after reporting a rank outside the cluster or a block without shared memory yet.
inline char* in_block(const void* p, unsigned rank, const char* what) {
  if (rank >= cluster_size) {
    fail("%s: block rank %u outside the cluster of %u", what, rank, cluster_size);
    return nullptr;
  }
  if (rank >= cta_windows.size() || !cta_windows[rank]) {
    fail("%s: the cluster's block %u has no shared memory yet (a cluster barrier missing "
         "after the blocks' set-up)", what, rank);
    return nullptr;
  }
  return const_cast<char*>(cta_windows[rank]) + (static_cast<const char*>(p) - shared_window());
}

// A deadlock explained: a phase whose arrivals are all in and whose transaction bytes no copy
// in flight will settle.
inline void explain_stuck_barriers() {
  for (auto& [address, b] : mbarriers) {
    if (b.pending != 0 || b.tx == 0) continue;
    bool coming = false;
    for (auto& copy : bulk_in_flight) coming = coming || copy.bar == address;
    if (coming) continue;
    char where[128];
    describe_shared(address, where, sizeof where);
    if (b.tx > 0)
      fail("deadlock on mbarrier %s: its phase awaits %lld transaction bytes that no tensor "
           "copy in flight will bring (a multicast mask missing the block, or an "
           "arrive.expect_tx announcing more than its copies)", where, b.tx);
    else
      fail("deadlock on mbarrier %s: its phase received %lld transaction bytes more than its "
           "arrive.expect_tx announced (a count short of the copies, a multicast among them)",
           where, -b.tx);
    return;
  }
}

inline const bool cluster_hooks = [] {
  deadlock_hooks.push_back(explain_stuck_barriers);
  return true;
}();
}  // namespace tz

#define TZ_CTA_SHARED(name, bytes) unsigned char* name = tz::cta_shared(bytes)

inline unsigned tz_cluster_rank() { return tz::current->cta; }
// The thread's warpgroup (lane 0's on a GPU: the same in every lane).
inline int tz_warpgroup_index() { return int(threadIdx.x / 128); }

// setmaxnreg: no value changes, its rules checked (tz::setmaxnreg).
template <unsigned N> inline void tz_setmaxnreg_dec() { tz::setmaxnreg(false, N); }
template <unsigned N> inline void tz_setmaxnreg_inc() { tz::setmaxnreg(true, N); }

// barrier.cluster.arrive and wait: here __syncthreads(), which waits for the whole cluster.
inline void tz_cluster_sync() { __syncthreads(); }

// One arrival on the mbarrier at `bar`'s offset in the cluster's block `rank`.
inline void tz_mbarrier_arrive_cluster(unsigned long long* bar, unsigned rank) {
  char* remote = tz::in_block(bar, rank, "mbarrier.arrive.shared::cluster");
  if (remote) tz_mbarrier_arrive(reinterpret_cast<unsigned long long*>(remote));
}

// cp.async.bulk.tensor.2d: the box of `map` at (x, y) into `dst`, counted against `bar`.
inline void tz_tensor_copy_2d(void* dst, const CUtensorMap* map, int x, int y,
                              unsigned long long* bar) {
  const tz::TensorMapFields* fields = tz::encoded(map);
  if (!fields) return;
  size_t bytes = size_t(fields->box[0]) * fields->box[1] * fields->element;
  if (tz::check_destination(dst, *fields, bytes))
    tz::issue_copy(static_cast<char*>(dst), fields, x, y, bar, bytes, true);
}

// The same with .multicast::cluster: the box lands at `dst`'s offset in each block of the
// cluster whose bit `mask` sets, counted against the mbarrier at `bar`'s offset there.
inline void tz_tensor_copy_2d_multicast(void* dst, const CUtensorMap* map, int x, int y,
                                        unsigned long long* bar, unsigned short mask) {
  const tz::TensorMapFields* fields = tz::encoded(map);
  if (!fields) return;
  size_t bytes = size_t(fields->box[0]) * fields->box[1] * fields->element;
  if (!mask) tz::fail("cp.async.bulk.tensor.multicast::cluster: an empty mask");
  if (!tz::check_destination(dst, *fields, bytes)) return;
  for (unsigned rank = 0; rank < 16; ++rank) {
    if (!(mask >> rank & 1u)) continue;
    const char* what = "cp.async.bulk.tensor.multicast::cluster";
    char* d = tz::in_block(dst, rank, what);
    char* b = tz::in_block(bar, rank, what);
    if (!d || !b) return;
    tz::issue_copy(d, fields, x, y, reinterpret_cast<unsigned long long*>(b), bytes,
                   rank == tz_cluster_rank());
  }
}

// Two adjacent elements at `dst` by one store (a fused epilogue's pair): the address aligned
// to both, the pair inside one global buffer.
template <class T> inline void tz_wgmma_store_pair(T* dst, T x, T y) {
  if (reinterpret_cast<uintptr_t>(dst) % (2 * sizeof(T)))
    tz::fail("%zu-byte store to %p: the address is not %zu-byte aligned", 2 * sizeof(T),
             static_cast<void*>(dst), 2 * sizeof(T));
  tz::check_bounds(dst, 2 * sizeof(T), "written");
  if (tz::error_text[0]) return;
  tz::touch(dst, 2 * sizeof(T), tz::WRITE);
  dst[0] = x;
  dst[1] = y;
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
