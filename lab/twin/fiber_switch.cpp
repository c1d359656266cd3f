// fiber_switch.cpp: what one switch between a block's threads costs with each way the CPU twin
// could run them (issue 46: ucontext, boost.context or C++20 coroutines, chosen by measurement).
// 512 threads (a block of v5/v6), each reaching ROUNDS barriers; at each barrier a thread hands
// over to the scheduler, which resumes the next one (two switches per step for all three, the
// pattern every mechanism supports), and for ucontext also straight to the next thread (one
// switch per step, what rmsnorm_lessons/twin/runtime/twin_sched.cpp does).
// Build and run: lab/twin/fiber_switch.sh
#include <ucontext.h>

#include <algorithm>
#include <chrono>
#include <coroutine>
#include <cstdio>
#include <vector>
#ifdef WITH_BOOST
#include <boost/context/fiber.hpp>
#endif

static const int THREADS = 512, ROUNDS = 200;
static const size_t STACK = 64 * 1024;
static volatile long sink;

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// --- ucontext ---
static ucontext_t main_ctx, ctxs[THREADS];
static int cur;
static bool direct;
static void body() {
    for (int r = 0; r < ROUNDS; r++) {
        sink = sink + cur;
        int me = cur;
        if (direct && me + 1 < THREADS) { cur = me + 1; swapcontext(&ctxs[me], &ctxs[me + 1]); }
        else swapcontext(&ctxs[me], &main_ctx);
    }
    swapcontext(&ctxs[cur], &main_ctx);
}
static double run_ucontext(bool straight) {
    direct = straight;
    std::vector<char> stacks((size_t)THREADS * STACK);
    for (int t = 0; t < THREADS; t++) {
        getcontext(&ctxs[t]);
        ctxs[t].uc_stack.ss_sp = &stacks[(size_t)t * STACK];
        ctxs[t].uc_stack.ss_size = STACK;
        makecontext(&ctxs[t], body, 0);
    }
    double t0 = now();
    for (int r = 0; r <= ROUNDS; r++) {
        if (straight) { cur = 0; swapcontext(&main_ctx, &ctxs[0]); }
        else for (int t = 0; t < THREADS; t++) { cur = t; swapcontext(&main_ctx, &ctxs[t]); }
    }
    return now() - t0;
}

// --- C++20 coroutines (stackless: a suspension only in the coroutine's own body) ---
struct Task {
    struct promise_type {
        Task get_return_object() {
            return Task{std::coroutine_handle<promise_type>::from_promise(*this)};
        }
        std::suspend_always initial_suspend() { return {}; }
        std::suspend_always final_suspend() noexcept { return {}; }
        void return_void() {}
        void unhandled_exception() {}
    };
    std::coroutine_handle<promise_type> h;
};
static Task coro(int me) {
    for (int r = 0; r < ROUNDS; r++) {
        sink = sink + me;
        co_await std::suspend_always{};
    }
}
static double run_coroutines() {
    std::vector<Task> tasks;
    for (int t = 0; t < THREADS; t++) tasks.push_back(coro(t));
    double t0 = now();
    for (int r = 0; r <= ROUNDS; r++)
        for (auto& task : tasks) if (!task.h.done()) task.h.resume();
    double dt = now() - t0;
    for (auto& task : tasks) task.h.destroy();
    return dt;
}

#ifdef WITH_BOOST
namespace ctx = boost::context;
static double run_boost() {
    std::vector<ctx::fiber> fibers;
    for (int t = 0; t < THREADS; t++) {
        fibers.emplace_back([t](ctx::fiber&& back) {
            for (int r = 0; r < ROUNDS; r++) {
                sink = sink + t;
                back = std::move(back).resume();
            }
            return std::move(back);
        });
    }
    double t0 = now();
    for (int r = 0; r <= ROUNDS; r++)
        for (auto& f : fibers) if (f) f = std::move(f).resume();
    return now() - t0;
}
#endif

int main() {
    const double steps = (double)THREADS * ROUNDS;
    printf("%d threads x %d barriers; ns per thread per barrier (best of 5)\n", THREADS, ROUNDS);
    auto best = [](double (*f)()) {
        double b = 1e9;
        for (int k = 0; k < 5; k++) b = std::min(b, f());
        return b;
    };
    double via = best([] { return run_ucontext(false); }), straight = best([] {
        return run_ucontext(true);
    });
    printf("ucontext, via the scheduler (2 switches): %7.1f\n", via / steps * 1e9);
    printf("ucontext, thread to thread (1 switch):    %7.1f\n", straight / steps * 1e9);
#ifdef WITH_BOOST
    printf("boost.context fiber (2 switches):         %7.1f\n", best(run_boost) / steps * 1e9);
#else
    printf("boost.context fiber (2 switches):         not built (no boost/context/fiber.hpp)\n");
#endif
    printf("C++20 coroutine (resume + suspend):       %7.1f\n", best(run_coroutines) / steps * 1e9);
}
