// twin_shadow.cpp: the buffers a launch may touch, shadow memory for each of their elements, and
// the happens-before model that says whether two accesses are ordered.
//
// Every load and store of the kernel reaches shadow_access (g++'s -fsanitize=thread calls
// __tsan_readN / __tsan_writeN before it; the hooks are defined here, libtsan is not linked).
// An address outside every buffer is out of bounds: reported, and the launch stops before the
// access happens. Inside one, its element's cell holds the last write and up to two reads since;
// an access by another thread that is not ordered after them, at least one of the two a plain
// write, is a race. Ordered means:
//  * same block: a __syncthreads between them (the block's barrier epoch grew), or a __syncwarp
//    of their warp;
//  * different blocks (global memory only): a release point of the earlier block that the later
//    thread has acquired covers the earlier access. A release point is an atomic by a thread
//    after a __threadfence that follows the access (by the same thread, or across a
//    __syncthreads); acquiring is an atomic that reads what it released, then a __threadfence by
//    the reading thread (spread to the block by the next __syncthreads). Atomics never race with
//    atomics. Kernel launches are ordered: the shadow starts empty at each launch.
#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <unordered_map>

#include "twin_internal.h"

extern "C" char __start_twin_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_twin_shared[] __attribute__((weak, visibility("hidden")));

namespace twin {

std::vector<Region*> globals;
uintptr_t shared_map_lo = 0, shared_map_hi = 0;  // the last twin_alloc_shared mapping
static Region dyn_shared, static_shared;
static uintptr_t module_lo = 0, module_hi = 0;
std::vector<std::string> reports;
std::set<std::string> seen;
size_t reports_dropped = 0;
static const size_t MAX_REPORTS = 40;
std::vector<std::pair<uint32_t, uint32_t>> nodes(1, {0, 0});  // (parent, return pc)
std::unordered_map<uint64_t, uint32_t> node_index;
static std::vector<FenceRecord> fence_records;
static std::unordered_map<uintptr_t, VC> sync_clocks;

bool FenceRecord::any_between(uint32_t lo, uint32_t hi) const {
    if (hi <= lo + 1 || per_epoch.empty()) return false;
    uint32_t top = std::min<uint32_t>(hi, (uint32_t)per_epoch.size() - 1);
    return top > lo + 1 && per_epoch[top] > per_epoch[lo + 1];
}

static bool dominates(const Point& a, const Point& b) {
    return a.epoch > b.epoch || (a.tid == b.tid && a.fences >= b.fences && a.epoch >= b.epoch);
}

static void add_point(std::vector<Point>& list, const Point& p) {
    for (const Point& q : list)
        if (dominates(q, p)) return;
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const Point& q) { return dominates(p, q); }), list.end());
    list.push_back(p);
}

VC join(const VC& a, const VC& b) {
    if (!a || a == b) return b;
    if (!b) return a;
    auto out = std::make_shared<VCMap>(*a);
    for (const auto& [block, points] : *b)
        for (const Point& p : points) add_point((*out)[block], p);
    return out;
}

VC with_point(const VC& a, uint32_t block, Point p) {
    auto out = a ? std::make_shared<VCMap>(*a) : std::make_shared<VCMap>();
    add_point((*out)[block], p);
    return out;
}

// one report per kind of place: the same text but for its numbers (blocks, threads, elements)
static std::string shape(const std::string& line) {
    std::string key;
    bool token = false, symbol = false;
    for (size_t i = 0; i < line.size(); i++) {
        if (line.compare(i, 2, "{{") == 0) token = true;
        if (line.compare(i, 2, "}}") == 0) token = false;
        if (line.compare(i, 2, "[[") == 0) symbol = true;
        if (line.compare(i, 2, "]]") == 0) symbol = false;
        if (!symbol && (token || !isdigit((unsigned char)line[i]))) key += line[i];
    }
    return key;
}

void report(const std::string& line) {
    if (!seen.insert(shape(line)).second) return;
    if (reports.size() >= MAX_REPORTS) { reports_dropped++; return; }
    reports.push_back(line);
}

static std::string hex(uint32_t v) {
    char b[16];
    snprintf(b, sizeof b, "%x", v);
    return b;
}

// {{pc,caller,caller's caller,...}}: offsets in the library, read back to lines by Python
std::string where(uint32_t pc, uint32_t stack) {
    std::string s = "{{" + hex(pc);
    for (int depth = 0; stack && depth < 32; depth++, stack = nodes[stack].first)
        s += "," + hex(nodes[stack].second);
    return s + "}}";
}

// the buffer holding a, else the buffer whose guard gap holds it (out of bounds), else none
static Region* find(uintptr_t a) {
    if (a >= dyn_shared.lo && a < dyn_shared.hi) return &dyn_shared;
    if (a >= static_shared.lo && a < static_shared.hi) return &static_shared;
    for (Region* r : globals)
        if (a >= r->lo && a < r->hi) return r;
    if (a >= dyn_shared.map_lo && a < dyn_shared.map_hi) return &dyn_shared;
    for (Region* r : globals)
        if (a >= r->map_lo && a < r->map_hi) return r;
    return nullptr;
}

bool shadow_ignores(const void* p) {
    uintptr_t a = (uintptr_t)p;
    return (a >= (uintptr_t)&twin_ctx && a < (uintptr_t)(&twin_ctx + 1)) || in_stacks(p);
}

// an element of a buffer; in static shared memory [[offset]], named by Python from the symbols
static std::string element(const Region& r, long long index) {
    if (&r == &static_shared)
        return "[[" + hex(pc_offset((void*)(r.lo + index * r.elem))) + "]]";
    return r.name + "[" + std::to_string(index) + "]";
}

std::string region_name(const void* p, size_t bytes) {
    Region* r = find((uintptr_t)p);
    if (!r) return "an address outside every buffer";
    long long off = (long long)((uintptr_t)p - r->lo);
    long long index = off >= 0 ? off / r->elem : -((-off + r->elem - 1) / r->elem);
    std::string s = element(*r, index);
    if (bytes > r->elem && r != &static_shared)
        s += " .. [" + std::to_string(index + (bytes - 1) / r->elem) + "]";
    return s;
}

static const char* KIND[] = {"", "read", "write", "atomic"};

static std::string who(const Rec& r) {
    return "block " + std::to_string(r.block) + " thread " + std::to_string(r.tid) + "'s " +
           KIND[r.kind] + " at " + where(r.pc, r.stack);
}

static bool covered(const Rec& a, const Point& p) {
    if (a.block >= fence_records.size()) return false;
    const FenceRecord& F = fence_records[a.block];
    if (F.by_thread.empty()) return false;
    if (a.tid == p.tid) return p.fences > a.fences;
    const auto& fa = F.by_thread[a.tid];
    if (a.fences < fa.size() && fa[a.fences] < p.epoch) return true;
    const auto& fp = F.by_thread[p.tid];
    if (p.fences > 0 && p.fences <= fp.size() && fp[p.fences - 1] > a.epoch) return true;
    return F.any_between(a.epoch, p.epoch);
}

static bool ordered(const Rec& p, const Fiber& f) {
    if (p.block == block_now.index) {
        return p.tid == f.tid || p.epoch < block_now.epoch ||
               (p.tid / 32 == f.tid / 32 && p.wsync < f.wsync);
    }
    if (!f.vc) return false;
    auto it = f.vc->find(p.block);
    if (it == f.vc->end()) return false;
    for (const Point& q : it->second)
        if (covered(p, q)) return true;
    return false;
}

static bool same_thread(const Rec& p, const Fiber& f) {
    return p.block == block_now.index && p.tid == f.tid;
}

static void race(const Region& r, size_t index, const Rec& before, const Rec& now) {
    const char* kind = now.kind == READ ? "read-after-write"
                       : before.kind == READ ? "write-after-read" : "write-after-write";
    std::string order = r.shared ? "no __syncthreads between them"
                        : before.block == now.block ? "no __syncthreads between them (same block)"
                        : "nothing orders them (blocks are ordered only by a __threadfence and "
                          "an atomic on each side)";
    std::string text = std::string("race\t") + kind + " on " + element(r, (long long)index) +
                       ": " + who(before) + " and " + who(now) + ", " + order;
    report(text);
}

static bool unordered(const Rec& p, const Fiber& f) {
    return p.kind != EMPTY && !same_thread(p, f) && !ordered(p, f);
}

// A plain read conflicts with the write and the atomic; a plain write with all; an atomic with
// the write and the reads, never with another atomic.
static void update(Region& r, size_t i, const Rec& cur, const Fiber& f) {
    Cell& c = r.cells[i];
    if (unordered(c.w, f)) race(r, i, c.w, cur);
    if (cur.kind != ATOMIC && unordered(c.a, f)) race(r, i, c.a, cur);
    if (cur.kind == READ) {
        for (int k = 0; k < 2; k++) {
            Rec& s = c.r[k];
            if (s.kind == EMPTY || same_thread(s, f) || ordered(s, f)) { s = cur; return; }
        }
        c.r[1] = cur;
        return;
    }
    for (Rec& s : c.r) {
        if (unordered(s, f)) race(r, i, s, cur);
        s.kind = EMPTY;
    }
    if (cur.kind == ATOMIC) {
        c.a = cur;
    } else {
        c.w = cur;
        c.a.kind = EMPTY;
    }
}

void shadow_access(const void* address, size_t bytes, Kind kind, uint32_t pc) {
    if (!current) return;
    Fiber& f = *current;
    f.last_pc = pc;
    if (shadow_ignores(address)) return;
    uintptr_t a = (uintptr_t)address;
    Region* r = find(a);
    if (!r || a < r->lo || a + bytes > r->hi) {
        if (!r && a >= module_lo && a < module_hi) return;  // the library's own constants
        std::string what = r ? region_name(address, bytes) + ", outside " + r->name + "[0] .. [" +
                                   std::to_string((r->hi - r->lo) / r->elem - 1) + "]"
                             : "address " + std::to_string(a) + ", outside every buffer";
        report("out of bounds\tblock " + std::to_string(block_now.index) + " thread " +
               std::to_string(f.tid) + ": a " + KIND[kind] + " of " + std::to_string(bytes) +
               " bytes at " + where(pc, f.stack) + " touches " + what);
        abort_launch();
    }
    Rec cur{block_now.index, (uint16_t)f.tid, (uint8_t)kind, (uint8_t)std::min(f.fences, 255u),
            block_now.epoch, f.wsync, pc, f.stack};
    if (r->trace_id >= 0) trace_access(*r, a - r->lo, bytes, kind);
    size_t first = (a - r->lo) / r->elem, last = (a + bytes - 1 - r->lo) / r->elem;
    for (size_t i = first; i <= last; i++) update(*r, i, cur, f);
}

void shadow_atomic_sync(const void* address, Fiber& f) {
    uintptr_t a = (uintptr_t)address;
    Region* r = find(a);
    if (!r || r->shared) return;
    auto it = sync_clocks.find(a);
    if (it != sync_clocks.end()) f.pending = join(f.pending, it->second);
    if (block_now.fences == 0 && !f.vc) return;  // nothing of this block can be released yet
    VC& s = sync_clocks[a];
    s = with_point(join(s, f.vc), block_now.index,
                   Point{f.tid, block_now.epoch, f.fences});
}

static void clear_cells(Region& r) {
    std::fill(r.cells.begin(), r.cells.end(), Cell{});
}

void shared_region(void* base, size_t bytes) {
    dyn_shared.shared = true;
    dyn_shared.name = "shared memory (extern __shared__, in floats)";
    dyn_shared.elem = 4;
    dyn_shared.lo = (uintptr_t)base;
    dyn_shared.hi = dyn_shared.lo + bytes;
    dyn_shared.map_lo = shared_map_lo;
    dyn_shared.map_hi = shared_map_hi;
    dyn_shared.cells.assign(tracking ? (bytes + 3) / 4 : 0, Cell{});
    static_shared.shared = true;
    static_shared.name = "static __shared__ memory (bytes)";
    static_shared.elem = 1;
    static_shared.lo = static_shared.map_lo = (uintptr_t)__start_twin_shared;
    static_shared.hi = static_shared.map_hi = (uintptr_t)__stop_twin_shared;
    static_shared.cells.assign(tracking ? static_shared.hi - static_shared.lo : 0, Cell{});
}

void shadow_begin_launch(uint32_t grid) {
    if (!module_lo) {
        Dl_info info;
        if (dladdr((void*)&shadow_begin_launch, &info)) {
            uintptr_t base = (uintptr_t)info.dli_fbase;
            dl_iterate_phdr([](dl_phdr_info* i, size_t, void* data) -> int {
                uintptr_t b = *(uintptr_t*)data;
                if (i->dlpi_addr != b) return 0;
                for (int k = 0; k < i->dlpi_phnum; k++) {
                    if (i->dlpi_phdr[k].p_type != PT_LOAD) continue;
                    uintptr_t lo = b + i->dlpi_phdr[k].p_vaddr;
                    uintptr_t hi = lo + i->dlpi_phdr[k].p_memsz;
                    if (!module_lo || lo < module_lo) module_lo = lo;
                    if (hi > module_hi) module_hi = hi;
                }
                return 1;
            }, &base);
        }
    }
    for (Region* r : globals) {
        if (tracking) r->cells.assign((r->hi - r->lo + r->elem - 1) / r->elem, Cell{});
        else r->cells.clear();
    }
    fence_records.assign(grid, FenceRecord());
    sync_clocks.clear();
    trace_begin_launch();
}

void shadow_begin_block(uint32_t) {
    // shared memory holds garbage when a block starts: all bits set (NaN as float and bf16)
    if (dyn_shared.hi > dyn_shared.lo)
        memset((void*)dyn_shared.lo, 0xff, dyn_shared.hi - dyn_shared.lo);
    if (static_shared.hi > static_shared.lo)
        memset((void*)static_shared.lo, 0xff, static_shared.hi - static_shared.lo);
    clear_cells(dyn_shared);
    clear_cells(static_shared);
}

void shadow_end_block(uint32_t block, const std::vector<Fiber>& fibers, uint32_t epochs) {
    bool any = false;
    for (const Fiber& f : fibers) any |= f.fences > 0;
    if (!any || block >= fence_records.size()) return;
    FenceRecord& F = fence_records[block];
    F.by_thread.resize(fibers.size());
    std::vector<uint32_t> count(epochs + 2, 0);
    for (const Fiber& f : fibers) {
        F.by_thread[f.tid] = f.fence_epochs;
        for (uint32_t e : f.fence_epochs) count[std::min(e, epochs + 1)]++;
    }
    F.per_epoch.assign(epochs + 3, 0);
    for (uint32_t e = 0; e < epochs + 2; e++) F.per_epoch[e + 1] = F.per_epoch[e] + count[e];
}

}  // namespace twin

