// twin_sync.cpp: atomics (one at a time by construction; the shadow sees them as atomic and as
// synchronisation between blocks), and the time limit and crash handler, which say where each
// fiber was before the process ends.
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <type_traits>

#include "twin_internal.h"

using namespace twin;

static int limit_fd = 2;

// --- atomics: one at a time by construction; the shadow sees them as atomic ------------------

template <class T>
static T apply(int op, T old, T v, T cmp) {
    switch (op) {
        case TWIN_ADD: return old + v;
        case TWIN_SUB: return old - v;
        case TWIN_EXCH: return v;
        case TWIN_MIN: return v < old ? v : old;
        case TWIN_MAX: return v > old ? v : old;
        case TWIN_CAS: return old == cmp ? v : old;
        default: return old;
    }
}
template <class T>
static T apply_bits(int op, T old, T v, T cmp) {
    switch (op) {
        case TWIN_AND: return old & v;
        case TWIN_OR: return old | v;
        case TWIN_XOR: return old ^ v;
        case TWIN_INC: return old >= v ? 0 : old + 1;
        case TWIN_DEC: return (old == 0 || old > v) ? v : old - 1;
        default: return apply<T>(op, old, v, cmp);
    }
}
template <class T>
static uint64_t run_atomic(int op, void* p, uint64_t a, uint64_t c, bool bits) {
    T old, v, cmp;
    memcpy(&old, p, sizeof(T));
    memcpy(&v, &a, sizeof(T));
    memcpy(&cmp, &c, sizeof(T));
    T now;
    if constexpr (std::is_integral_v<T>)
        now = bits ? apply_bits<T>(op, old, v, cmp) : apply<T>(op, old, v, cmp);
    else now = apply<T>(op, old, v, cmp);
    memcpy(p, &now, sizeof(T));
    uint64_t out = 0;
    memcpy(&out, &old, sizeof(T));
    return out;
}
template <>
uint64_t run_atomic<float>(int op, void* p, uint64_t a, uint64_t c, bool) {
    float old, v, cmp;
    memcpy(&old, p, 4); memcpy(&v, &a, 4); memcpy(&cmp, &c, 4);
    float now = op == TWIN_CAS ? (memcmp(&old, &cmp, 4) == 0 ? v : old)
                               : apply<float>(op, old, v, cmp);
    memcpy(p, &now, 4);
    uint64_t out = 0;
    memcpy(&out, &old, 4);
    return out;
}

extern "C" uint64_t twin_atomic(int op_and_type, void* p, int bytes, uint64_t a, uint64_t c) {
    Fiber* f = current;
    uint32_t pc = f->last_pc = pc_offset(__builtin_return_address(0));
    int op = op_and_type & 0xff, type = op_and_type >> 8;
    if (tracking) {
        shadow_access(p, bytes, ATOMIC, pc);
        shadow_atomic_sync(p, *f);
    }
    if (type == 2) return bytes == 4 ? run_atomic<float>(op, p, a, c, false)
                                     : run_atomic<double>(op, p, a, c, false);
    if (type == 1) return bytes == 4 ? run_atomic<int32_t>(op, p, a, c, true)
                                     : run_atomic<int64_t>(op, p, a, c, true);
    return bytes == 4 ? run_atomic<uint32_t>(op, p, a, c, true)
                      : run_atomic<uint64_t>(op, p, a, c, true);
}

// --- the time limit and crashes: say where each fiber was, then end the process ---------------

static void say(const char* text) {
    ssize_t ignored = write(limit_fd, text, strlen(text));
    (void)ignored;
}

static void on_signal(int sig, siginfo_t* info, void* uc) {
    uintptr_t ip = 0;
#if defined(__x86_64__)
    ip = (uintptr_t)((ucontext_t*)uc)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    ip = (uintptr_t)((ucontext_t*)uc)->uc_mcontext.pc;
#endif
    char line[256];
    Fiber* f = current;
    snprintf(line, sizeof line, "%s\tblock %u thread %u\t", sig == SIGALRM ? "TWIN-TIMEOUT"
             : "TWIN-CRASH", block_now.index, f ? f->tid : 0u);
    say(line);
    if (f) {
        // not async-signal-safe (it allocates); the process ends here in any case, and the
        // parent's own time limit catches the rare hang
        say(where(pc_offset((void*)ip), f->stack).c_str());
        say("\t");
        say(where(f->last_pc, f->stack).c_str());
    }
    snprintf(line, sizeof line, "\t%d\t%p\n", sig, sig == SIGALRM ? nullptr : info->si_addr);
    say(line);
    _exit(sig == SIGALRM ? 124 : 128 + sig);
}

extern "C" void twin_set_limit(double seconds, int fd) {
    limit_fd = fd;
    static char altstack[64 * 1024];
    stack_t ss = {};
    ss.ss_sp = altstack;
    ss.ss_size = sizeof altstack;
    sigaltstack(&ss, nullptr);
    struct sigaction sa = {};
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    for (int sig : {SIGALRM, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) sigaction(sig, &sa, nullptr);
    itimerval t = {};
    t.it_value.tv_sec = (time_t)seconds;
    t.it_value.tv_usec = (suseconds_t)((seconds - (double)(time_t)seconds) * 1e6);
    setitimer(ITIMER_REAL, &t, nullptr);
}

