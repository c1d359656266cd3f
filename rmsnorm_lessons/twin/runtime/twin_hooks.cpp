// twin_hooks.cpp: the C interface the Python side calls through ctypes (buffers, reports), and
// the hooks g++'s -fsanitize=thread instrumentation calls on every load and store of a kernel.
#include <sys/mman.h>

#include <algorithm>
#include <set>
#include <unordered_map>

#include "twin_internal.h"

using namespace twin;

// --- the C interface (ctypes) -----------------------------------------------------------------

// A buffer with unmapped gaps on both sides, its end as close to a page end as 256-byte alignment
// allows: an access past it faults even where no hooks run.
extern "C" void* twin_alloc(size_t bytes, const char* name, uint32_t elem) {
    size_t page = 4096, body = (bytes + page - 1) / page * page + page;
    size_t gap = std::max<size_t>(65536, body);
    char* map = (char*)mmap(nullptr, gap + body + gap, PROT_NONE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) return nullptr;
    mprotect(map + gap, body, PROT_READ | PROT_WRITE);
    Region* r = new Region();
    r->hi = (uintptr_t)(map + gap + body);
    r->lo = (r->hi - bytes) & ~(uintptr_t)255;
    r->hi = r->lo + bytes;
    r->map_lo = (uintptr_t)map;
    r->map_hi = (uintptr_t)(map + gap + body + gap);
    r->name = name;
    r->elem = elem ? elem : 1;
    globals.push_back(r);
    return (void*)r->lo;
}

// dynamic shared memory: gaps on both sides, not a global buffer
extern "C" void* twin_alloc_shared(size_t bytes) {
    size_t body = (bytes + 4095) / 4096 * 4096 + 4096, gap = 65536;
    char* map = (char*)mmap(nullptr, gap + body + gap, PROT_NONE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) return nullptr;
    mprotect(map + gap, body, PROT_READ | PROT_WRITE);
    shared_map_lo = (uintptr_t)map;
    shared_map_hi = (uintptr_t)(map + gap + body + gap);
    return (void*)((uintptr_t)(map + gap + body - bytes) & ~(uintptr_t)255);
}

extern "C" void twin_free_all(void) {
    for (Region* r : globals) {
        munmap((void*)r->map_lo, r->map_hi - r->map_lo);
        delete r;
    }
    globals.clear();
}

extern "C" const char* twin_reports(void) {
    static std::string all;
    all.clear();
    for (const std::string& line : reports) all += line + "\n";
    if (reports_dropped) all += "dropped\t" + std::to_string(reports_dropped) + " more\n";
    return all.c_str();
}

extern "C" void twin_clear_reports(void) {
    reports.clear();
    seen.clear();
    reports_dropped = 0;
}

// the chain of return addresses of a stack node, for the watchdog's report
extern "C" const char* twin_where(uint32_t pc, uint32_t stack) {
    static std::string s;
    s = where(pc, stack);
    return s.c_str();
}

// --- the hooks g++'s -fsanitize=thread calls --------------------------------------------------

#define HOOK_PC pc_offset(__builtin_return_address(0))
#define HOOKS(N)                                                                              \
    extern "C" void __tsan_read##N(void* p) {                                                 \
        if (tracking) shadow_access(p, N, READ, HOOK_PC);                                     \
    }                                                                                         \
    extern "C" void __tsan_write##N(void* p) {                                                \
        if (tracking) shadow_access(p, N, WRITE, HOOK_PC);                                    \
    }                                                                                         \
    extern "C" void __tsan_unaligned_read##N(void* p) {                                       \
        if (tracking) shadow_access(p, N, READ, HOOK_PC);                                     \
    }                                                                                         \
    extern "C" void __tsan_unaligned_write##N(void* p) {                                      \
        if (tracking) shadow_access(p, N, WRITE, HOOK_PC);                                    \
    }                                                                                         \
    extern "C" void __tsan_volatile_read##N(void* p) {                                        \
        if (tracking) shadow_access(p, N, READ, HOOK_PC);                                     \
    }                                                                                         \
    extern "C" void __tsan_volatile_write##N(void* p) {                                       \
        if (tracking) shadow_access(p, N, WRITE, HOOK_PC);                                    \
    }
HOOKS(1)
HOOKS(2)
HOOKS(4)
HOOKS(8)
HOOKS(16)
extern "C" void __tsan_read_range(void* p, size_t n) {
    if (tracking && n) shadow_access(p, n, READ, HOOK_PC);
}
extern "C" void __tsan_write_range(void* p, size_t n) {
    if (tracking && n) shadow_access(p, n, WRITE, HOOK_PC);
}
extern "C" void __tsan_init(void) {}
extern "C" void __tsan_vptr_update(void*, void*) {}
extern "C" void __tsan_vptr_read(void*) {}
extern "C" void __tsan_func_entry(void* caller) {
    if (!current) return;
    uint32_t pc = pc_offset(caller);
    uint64_t key = (uint64_t)current->stack << 32 | pc;
    auto it = node_index.find(key);
    if (it == node_index.end()) {
        nodes.push_back({current->stack, pc});
        it = node_index.emplace(key, (uint32_t)(nodes.size() - 1)).first;
    }
    current->stack = it->second;
}
extern "C" void __tsan_func_exit(void) {
    if (current) current->stack = nodes[current->stack].first;
}
