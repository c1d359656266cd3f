// twin_internal.h: what the two halves of the runtime share (twin_sched.cpp: fibers, blocks,
// collectives, atomics, the time limit; twin_shadow.cpp: allocations, shadow memory, the
// happens-before model, reports). Not included by kernels.
#pragma once
#include <ucontext.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "include/twin_abi.h"

namespace twin {

enum Kind : uint8_t { EMPTY = 0, READ = 1, WRITE = 2, ATOMIC = 3 };

// One access as the shadow keeps it: who (block, thread), when (the block's barrier epoch, the
// warp's __syncwarp count, the thread's fences so far) and where (pc: offset in the library;
// stack: the interned chain of callers).
struct Rec {
    uint32_t block;
    uint16_t tid;
    uint8_t kind;
    uint8_t fences;
    uint32_t epoch;
    uint32_t wsync;
    uint32_t pc;
    uint32_t stack;
};
// the last plain write, the last atomic, and up to two plain reads since the write
struct Cell { Rec w, a, r[2]; };

// A release point: thread tid of some block at its barrier epoch, after `fences` fences.
struct Point { uint32_t tid, epoch, fences; };
// What a thread has acquired: per block, the release points it is ordered after.
using VCMap = std::map<uint32_t, std::vector<Point>>;
using VC = std::shared_ptr<const VCMap>;
VC join(const VC& a, const VC& b);
VC with_point(const VC& a, uint32_t block, Point p);

enum State : uint8_t { READY, AT_BARRIER, AT_WARP, DONE };

struct Fiber {
    ucontext_t ctx;
    uint32_t tid = 0;
    State state = READY;
    // a warp collective in flight: kind, mask, argument, width, value in and out
    int ckind = 0, carg = 0, cwidth = 32;
    unsigned cmask = 0;
    uint64_t cvalue = 0, cresult = 0;
    int bar_op = -1, bar_pred = 0;
    uint32_t bar_pc = 0, coll_pc = 0;
    uint32_t last_pc = 0;   // the last place this thread was seen (an access or a runtime call)
    uint32_t stack = 0;     // interned call chain (func_entry / func_exit)
    uint32_t fences = 0;    // __threadfence() calls so far
    uint32_t wsync = 0;     // its warp's __syncwarp count when it last passed one
    std::vector<uint32_t> fence_epochs;  // the epoch of each fence
    VC vc, pending;         // acquired (through fences), and seen by atomics but not yet fenced
};

struct Block {
    uint32_t index = 0;
    uint32_t epoch = 0;
    uint32_t fences = 0;  // fences by any of its threads so far
};

// a block's fences, kept for the rest of the launch (release points refer to them)
struct FenceRecord {
    std::vector<std::vector<uint32_t>> by_thread;  // epochs of each thread's fences
    std::vector<uint32_t> per_epoch;               // prefix count of fences before epoch e
    bool any_between(uint32_t lo, uint32_t hi) const;  // a fence in an epoch e, lo < e < hi
};

// --- twin_sched.cpp ---
extern Fiber* current;
extern Block block_now;
extern bool tracking;  // built with the hooks, and the launch asked for hazards
[[noreturn]] void abort_launch();
uint32_t pc_offset(const void* pc);
bool in_stacks(const void* p);

// a buffer the kernel may touch: [lo, hi), with guard gaps to map_lo / map_hi
struct Region {
    uintptr_t lo = 0, hi = 0, map_lo = 0, map_hi = 0;
    bool shared = false;
    std::string name;
    uint32_t elem = 1;
    int trace_id = -1;  // >= 0: its accesses are logged (twin_trace.cpp)
    std::vector<Cell> cells;
};

// --- twin_shadow.cpp ---
extern std::vector<Region*> globals;
extern uintptr_t shared_map_lo, shared_map_hi;
extern std::vector<std::string> reports;
extern std::set<std::string> seen;
extern std::vector<std::pair<uint32_t, uint32_t>> nodes;
extern std::unordered_map<uint64_t, uint32_t> node_index;
void shadow_begin_launch(uint32_t grid);
void shadow_begin_block(uint32_t block);
void shadow_end_block(uint32_t block, const std::vector<Fiber>& fibers, uint32_t epochs);
void shadow_access(const void* address, size_t bytes, Kind kind, uint32_t pc);
void shadow_atomic_sync(const void* address, Fiber& f);
bool shadow_ignores(const void* address);
void report(const std::string& line);
std::string where(uint32_t pc, uint32_t stack);
std::string region_name(const void* address, size_t bytes);
void shared_region(void* base, size_t bytes);
extern size_t reports_dropped;

// --- twin_trace.cpp ---
void trace_begin_launch();
void trace_access(const Region& r, uintptr_t offset, size_t bytes, Kind kind);

}  // namespace twin
