// twin_trace.cpp: the accesses of a launch to chosen global buffers, each thread's in its program
// order, for checks that ask which addresses a warp's lanes touch together (a coalesced load: the
// 32 lanes' k-th loads of a buffer fall in the fewest 32-byte sectors).
//
// A buffer is traced once twin_trace_buffer names it (by its address and a small number); from
// then on shadow_access hands each in-bounds access of it to trace_access. A record is seven
// 32-bit words: the launch (counted from 0 over the process), the block, the thread, the buffer's
// number, the kind (1 read, 2 write, 3 atomic), the bytes and the byte offset in the buffer. The
// log holds at most TRACE_MAX records; past that it counts what it dropped.
#include "twin_internal.h"

namespace twin {

struct TraceRec {
    uint32_t launch, block, thread, buffer, kind, bytes, offset;
};
static std::vector<TraceRec> trace_log;
static uint32_t launches_begun = 0;
static size_t trace_dropped = 0;
static const size_t TRACE_MAX = size_t(1) << 22;

void trace_begin_launch() { launches_begun++; }

void trace_access(const Region& r, uintptr_t offset, size_t bytes, Kind kind) {
    if (trace_log.size() >= TRACE_MAX) {
        trace_dropped++;
        return;
    }
    trace_log.push_back({launches_begun - 1, block_now.index, current->tid, (uint32_t)r.trace_id,
                         (uint32_t)kind, (uint32_t)bytes, (uint32_t)offset});
}

}  // namespace twin

using namespace twin;

// Trace the buffer that twin_alloc returned as `base`, under the number `id` (0..255). Returns 0,
// or 1 where no buffer starts there.
extern "C" int twin_trace_buffer(void* base, uint32_t id) {
    for (Region* r : globals) {
        if (r->lo == (uintptr_t)base) {
            r->trace_id = (int)(id & 255);
            return 0;
        }
    }
    return 1;
}

extern "C" size_t twin_trace_count(void) { return trace_log.size(); }
extern "C" const void* twin_trace_data(void) { return trace_log.data(); }
extern "C" size_t twin_trace_dropped(void) { return trace_dropped; }
