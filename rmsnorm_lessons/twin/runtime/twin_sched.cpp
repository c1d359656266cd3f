// twin_sched.cpp: a block's threads as fibers (ucontext), blocks in a seeded order, the warp
// collectives in lockstep, the block barrier, atomics, fences, and the time limit.
// A fiber runs until it reaches something other threads must reach too (a barrier, a shuffle, a
// vote, __syncwarp); it then switches straight to the next thread that can run. When none can,
// the block's barrier is released (or a divergence is reported). Blocks run one at a time: CUDA
// promises no order and no concurrency between blocks, so one after another in any order is a
// schedule a GPU may choose; ordering between blocks is judged by the shadow's happens-before
// model (twin_shadow.cpp), not by luck.
#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "twin_internal.h"

TwinCtx twin_ctx = {};

namespace twin {

Fiber* current = nullptr;
Block block_now;
bool tracking = false;
static ucontext_t main_ctx, template_ctx;
static std::vector<Fiber> fibers;
static char* stacks = nullptr;
static size_t stacks_bytes = 0;
static const size_t STACK = 256 * 1024, GUARD = 4096;
static void (*entry_now)(void**) = nullptr;
static void** argv_now = nullptr;
static bool aborted = false;
static uint64_t switches = 0;  // fiber switches so far (the benchmark's count)
static void* shared_now = nullptr;
static std::vector<uint32_t> warp_wsync;
static uintptr_t module_base = 0;

uint32_t pc_offset(const void* pc) {
    if (!module_base) {
        Dl_info info;
        if (dladdr((void*)&pc_offset, &info)) module_base = (uintptr_t)info.dli_fbase;
    }
    return (uint32_t)((uintptr_t)pc - module_base);
}

bool in_stacks(const void* p) {
    return (const char*)p >= stacks && (const char*)p < stacks + stacks_bytes;
}

[[noreturn]] void abort_launch() {
    aborted = true;
    swapcontext(&current->ctx, &main_ctx);
    __builtin_unreachable();
}

static void enter(Fiber* f) {
    current = f;
    const dim3& d = twin_ctx.block_dim;
    twin_ctx.thread_idx = uint3{f->tid % d.x, f->tid / d.x % d.y, f->tid / (d.x * d.y)};
}

static Fiber* next_ready(uint32_t after) {
    for (size_t k = after + 1; k < fibers.size(); k++)
        if (fibers[k].state == READY) return &fibers[k];
    return nullptr;
}

static void fiber_main() {
    entry_now(argv_now);
    current->state = DONE;
    Fiber* next = next_ready(current->tid);
    if (next) {
        enter(next);
        setcontext(&next->ctx);
    }
    setcontext(&main_ctx);
}

// Leave the current fiber (its state already says why) for the next one that can run.
static void switch_away() {
    Fiber* me = current;
    Fiber* next = next_ready(me->tid);
    switches++;
    if (next) {
        enter(next);
        swapcontext(&me->ctx, &next->ctx);
    } else {
        swapcontext(&me->ctx, &main_ctx);
    }
    enter(me);
}

static std::string lanes_text(const std::vector<uint32_t>& tids) {
    std::string s;
    for (size_t i = 0; i < tids.size() && i < 4; i++)
        s += (i ? ", " : "") + std::to_string(tids[i]);
    if (tids.size() > 4) s += ", ... (" + std::to_string(tids.size()) + " threads)";
    return s;
}

static std::string fiber_place(const Fiber& f) {
    if (f.state == DONE) return "returned (last seen at " + where(f.last_pc, f.stack) + ")";
    if (f.state == AT_BARRIER) return "waits at the __syncthreads at " + where(f.bar_pc, f.stack);
    return "waits at the warp operation at " + where(f.coll_pc, f.stack);
}

// Nothing can run: release the barrier, or say why the block cannot go on.
static void resolve_stall() {
    std::vector<uint32_t> done, waiting;
    Fiber* stuck = nullptr;
    for (auto& f : fibers) {
        if (f.state == DONE) done.push_back(f.tid);
        if (f.state == AT_BARRIER) waiting.push_back(f.tid);
        if (f.state == AT_WARP && !stuck) stuck = &f;
    }
    const std::string blk = "block " + std::to_string(block_now.index);
    if (stuck) {
        uint32_t base = stuck->tid - stuck->tid % 32;
        for (int l = 0; l < 32; l++) {
            if (!(stuck->cmask >> l & 1u) || base + l >= fibers.size()) continue;
            Fiber& o = fibers[base + l];
            if (o.state != AT_WARP) {
                report("divergence\t" + blk + ": thread " + std::to_string(stuck->tid) +
                       " waits at the warp operation at " + where(stuck->coll_pc, stuck->stack) +
                       " for lane " + std::to_string(l) + " of its mask, which " + fiber_place(o) +
                       ": on a GPU the warp hangs or reads garbage");
                aborted = true;
                return;
            }
        }
    }
    if (waiting.empty()) return;  // every thread has returned
    Fiber& first = fibers[waiting[0]];
    if (!done.empty()) {
        report("divergence\t" + blk + ": the __syncthreads at " + where(first.bar_pc, first.stack) +
               " is reached by threads " + lanes_text(waiting) + " but not by threads " +
               lanes_text(done) + ", which returned before it (thread " +
               std::to_string(done[0]) + " last seen at " +
               where(fibers[done[0]].last_pc, fibers[done[0]].stack) +
               "): every thread of a block must reach every __syncthreads");
    }
    // barrier calls at different places: one source barrier may be several calls in the machine
    // code (g++ duplicates a call into both arms of a branch), so Python drops the report where
    // every place is the same line
    std::vector<uint32_t> places;
    std::string at;
    for (uint32_t t : waiting) {
        Fiber& f = fibers[t];
        if (std::find(places.begin(), places.end(), f.bar_pc) != places.end() || places.size() > 3)
            continue;
        places.push_back(f.bar_pc);
        at += (at.empty() ? "thread " : ", thread ") + std::to_string(t) + " at " +
              where(f.bar_pc, f.stack);
    }
    if (places.size() > 1)
        report("divergence\t" + blk + ": threads wait at different barriers: " + at +
               ": a __syncthreads inside a branch not every thread takes");
    int count = 0, all = 1, any = 0;
    VC joined;
    for (uint32_t t : waiting) {
        count += fibers[t].bar_pred != 0;
        all &= fibers[t].bar_pred != 0;
        any |= fibers[t].bar_pred != 0;
        if (fibers[t].vc != joined) joined = join(joined, fibers[t].vc);
    }
    block_now.epoch++;
    for (uint32_t t : waiting) {
        Fiber& f = fibers[t];
        f.bar_pred = f.bar_op == 0 ? count : f.bar_op == 1 ? all : any;
        f.vc = joined;
        f.state = READY;
    }
}

// --- warp collectives -------------------------------------------------------------------------

static const char* COLLECTIVE[] = {"__shfl_sync", "__shfl_xor_sync", "__shfl_up_sync",
                                   "__shfl_down_sync", "__all_sync", "__any_sync", "__ballot_sync",
                                   "__reduce_add_sync", "__reduce_and_sync", "__reduce_or_sync",
                                   "__reduce_xor_sync", "__syncwarp"};
enum { SHFL_IDX, SHFL_XOR, SHFL_UP, SHFL_DOWN, V_ALL, V_ANY, V_BALLOT, R_ADD, R_AND, R_OR, R_XOR,
       SYNCWARP };

static int source_lane(int kind, int lane, int arg, int width) {
    int seg = lane - lane % width;
    switch (kind) {
        case SHFL_IDX: return seg + ((arg % width) + width) % width;
        case SHFL_XOR: { int s = lane ^ arg; return s / width > lane / width ? lane : s; }
        case SHFL_UP: return lane - arg < seg ? lane : lane - arg;
        default: return lane + arg >= seg + width ? lane : lane + arg;
    }
}

static void complete(uint32_t base, unsigned mask, int kind) {
    uint64_t all = 1, any = 0, ballot = 0, add = 0, band = ~0ull, bor = 0, bxor = 0;
    VC joined;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u)) continue;
        Fiber& o = fibers[base + l];
        uint64_t v = o.cvalue;
        all &= v != 0; any |= v != 0; ballot |= (uint64_t)(v != 0) << l;
        add += (uint32_t)v; band &= (uint32_t)v; bor |= (uint32_t)v; bxor ^= (uint32_t)v;
        if (o.vc != joined) joined = join(joined, o.vc);
    }
    uint32_t w = base / 32;
    if (kind == SYNCWARP) warp_wsync[w]++;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u)) continue;
        Fiber& o = fibers[base + l];
        if (kind <= SHFL_DOWN) {
            int s = source_lane(kind, l, o.carg, o.cwidth);
            if (!(mask >> s & 1u)) {
                report("divergence\tblock " + std::to_string(block_now.index) + ": thread " +
                       std::to_string(o.tid) + "'s " + COLLECTIVE[kind] + " at " +
                       where(o.coll_pc, o.stack) + " reads lane " + std::to_string(s) +
                       ", which its mask leaves out: the value is undefined on a GPU");
                s = l;
            }
            o.cresult = fibers[base + s].cvalue;
        } else {
            const uint64_t r[] = {all, any, ballot, (uint32_t)add, (uint32_t)band, bor, bxor, 0};
            o.cresult = r[kind - V_ALL];
        }
        if (kind == SYNCWARP) {
            o.wsync = warp_wsync[w];
            o.vc = joined;
        }
        if (&o != current) o.state = READY;
    }
    current->state = READY;
}

static uint64_t collective(int kind, unsigned mask, uint64_t value, int arg, int width, void* pc) {
    Fiber* f = current;
    f->coll_pc = f->last_pc = pc_offset(pc);
    if (width <= 0 || width > 32 || (width & (width - 1))) {
        report("error\t" + std::string(COLLECTIVE[kind]) + " at " + where(f->coll_pc, f->stack) +
               ": width " + std::to_string(width) + " is not a power of two up to 32");
        abort_launch();
    }
    uint32_t lane = f->tid % 32, base = f->tid - lane;
    if (!(mask >> lane & 1u)) {
        report("divergence\tblock " + std::to_string(block_now.index) + ": thread " +
               std::to_string(f->tid) + " calls " + COLLECTIVE[kind] + " at " +
               where(f->coll_pc, f->stack) + " with a mask that leaves itself out");
        mask |= 1u << lane;
    }
    f->ckind = kind; f->cmask = mask; f->cvalue = value; f->carg = arg; f->cwidth = width;
    f->state = AT_WARP;
    bool arrived = true;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1u)) continue;
        if (base + l >= fibers.size() || fibers[base + l].state == DONE) {
            std::string who = base + l >= fibers.size() ? "does not exist (the block has " +
                std::to_string(fibers.size()) + " threads)" : fiber_place(fibers[base + l]);
            report("divergence\tblock " + std::to_string(block_now.index) + ": thread " +
                   std::to_string(f->tid) + "'s " + COLLECTIVE[kind] + " at " +
                   where(f->coll_pc, f->stack) + " waits for lane " + std::to_string(l) +
                   " of its mask, which " + who + ": on a GPU the warp hangs or reads garbage");
            abort_launch();
        }
        Fiber& o = fibers[base + l];
        if (o.state == AT_WARP && (o.ckind != kind || o.cmask != mask)) {
            report("divergence\tblock " + std::to_string(block_now.index) + ": lanes of warp " +
                   std::to_string(base / 32) + " meet at different warp operations: " +
                   COLLECTIVE[o.ckind] + " at " + where(o.coll_pc, o.stack) + " and " +
                   COLLECTIVE[kind] + " at " + where(f->coll_pc, f->stack));
            abort_launch();
        }
        arrived &= o.state == AT_WARP;
    }
    if (arrived) complete(base, mask, kind);
    else switch_away();
    return f->cresult;
}

}  // namespace twin

using namespace twin;

extern "C" uint64_t twin_shfl(int kind, unsigned mask, uint64_t value, int arg, int width) {
    return collective(kind, mask, value, arg, width, __builtin_return_address(0));
}
extern "C" unsigned twin_vote(int kind, unsigned mask, unsigned value) {
    return (unsigned)collective(V_ALL + kind, mask, value, 0, 32, __builtin_return_address(0));
}
extern "C" void twin_syncwarp(unsigned mask) {
    collective(SYNCWARP, mask, 0, 0, 32, __builtin_return_address(0));
}

static int barrier(int op, int pred, void* pc) {
    Fiber* f = current;
    f->bar_pc = f->last_pc = pc_offset(pc);
    f->bar_op = op;
    f->bar_pred = pred;
    f->state = AT_BARRIER;
    switch_away();
    return f->bar_pred;
}
extern "C" void twin_syncthreads(void) { barrier(-1, 0, __builtin_return_address(0)); }
extern "C" int twin_syncthreads_op(int op, int pred) {
    return barrier(op, pred, __builtin_return_address(0));
}

extern "C" void twin_threadfence(void) {
    Fiber* f = current;
    f->last_pc = pc_offset(__builtin_return_address(0));
    f->fence_epochs.push_back(block_now.epoch);
    f->fences++;
    block_now.fences++;
    if (f->pending && f->pending != f->vc) f->vc = join(f->vc, f->pending);
}
extern "C" void twin_threadfence_block(void) {
    current->last_pc = pc_offset(__builtin_return_address(0));
}

// --- a launch ----------------------------------------------------------------------------------

static void make_stacks(size_t threads) {
    size_t need = threads * (STACK + GUARD);
    if (need <= stacks_bytes) return;
    if (stacks) munmap(stacks, stacks_bytes);
    stacks = (char*)mmap(nullptr, need, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stacks == MAP_FAILED) { stacks = nullptr; stacks_bytes = 0; return; }
    stacks_bytes = need;
    for (size_t t = 0; t < threads; t++) mprotect(stacks + t * (STACK + GUARD), GUARD, PROT_NONE);
}

static std::vector<uint32_t> block_order(uint32_t grid, uint64_t seed) {
    std::vector<uint32_t> order(grid);
    for (uint32_t b = 0; b < grid; b++) order[b] = b;
    uint64_t s = seed;
    for (uint32_t b = grid; seed && b > 1; b--) {  // Fisher-Yates on splitmix64; seed 0: in order
        s += 0x9e3779b97f4a7c15ull;
        uint64_t z = s;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        std::swap(order[b - 1], order[z % b]);
    }
    return order;
}

// Runs entry(argv) on grid x block threads; blocks in the seeded order. Returns 0, or 1 where the
// launch was stopped (a report says why). `order_out` receives the blocks' order.
extern "C" int twin_launch(void (*entry)(void**), void** argv, uint32_t grid, uint32_t block,
                           void* shared, size_t shared_bytes, uint64_t seed, int track,
                           uint32_t* order_out) {
    if (grid == 0 || block == 0 || block > 1024) return 2;
    make_stacks(block);
    if (!stacks) return 3;
    entry_now = entry;
    argv_now = argv;
    tracking = track != 0;
    aborted = false;
    twin_ctx.grid_dim = dim3(grid);
    twin_ctx.block_dim = dim3(block);
    shared_now = shared;
    shared_region(shared, shared_bytes);
    shadow_begin_launch(grid);
#if defined(__x86_64__)
    unsigned int mxcsr = _mm_getcsr();
    _mm_setcsr(mxcsr | 0x8040);  // flush-to-zero and denormals-are-zero, as --use_fast_math
#endif
    getcontext(&template_ctx);
    fibers.assign(block, Fiber());
    warp_wsync.assign((block + 31) / 32, 0);
    std::vector<uint32_t> order = block_order(grid, seed);
    for (uint32_t k = 0; k < grid && !aborted; k++) {
        uint32_t b = order[k];
        if (order_out) order_out[k] = b;
        block_now.index = b;
        block_now.epoch = 0;
        block_now.fences = 0;
        twin_ctx.block_idx = uint3{b, 0, 0};
        shadow_begin_block(b);
        for (uint32_t t = 0; t < block; t++) {
            Fiber& f = fibers[t];
            f = Fiber();
            f.tid = t;
            f.ctx = template_ctx;
            f.ctx.uc_stack.ss_sp = stacks + t * (STACK + GUARD) + GUARD;
            f.ctx.uc_stack.ss_size = STACK;
            f.ctx.uc_link = &main_ctx;
            makecontext(&f.ctx, fiber_main, 0);
        }
        std::fill(warp_wsync.begin(), warp_wsync.end(), 0);
        while (!aborted) {
            Fiber* next = next_ready(UINT32_MAX);  // from thread 0
            if (next) {
                enter(next);
                swapcontext(&main_ctx, &next->ctx);
                continue;
            }
            bool all_done = true;
            for (auto& f : fibers) all_done &= f.state == DONE;
            if (all_done) break;
            resolve_stall();
        }
        current = nullptr;
        shadow_end_block(b, fibers, block_now.epoch);
    }
#if defined(__x86_64__)
    _mm_setcsr(mxcsr);
#endif
    return aborted ? 1 : 0;
}

extern "C" void* twin_dynamic_shared(void) { return shared_now; }
extern "C" uint64_t twin_switches(void) { return switches; }
