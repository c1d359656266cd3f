"""What the CPU twin finds in small hand-written kernels, each with the lines it names: races in
shared and global memory (both lines and the element), an atomic against a plain write, a barrier
not every thread reaches, a shuffle whose lanes do not all arrive, out of bounds (global and
shared, line and index), a kernel that never ends (stopped, with where it was), a crash, the
constructs it refuses, and an ordering bug between blocks that the seeded block order shows."""
import re

import numpy as np
import pytest

from rmsnorm_lessons import twin

pytestmark = pytest.mark.skipif(twin.available() is not None, reason=str(twin.available()))


def run(body: str, grid=1, block=64, args=(), **kw):
    text = '#line 1 "mine"\n#include "common.cuh"\n' + body
    return twin.run_kernel(text, "k", grid=grid, block=block, args=list(args), name="mine", **kw)


def kinds(ran):
    return sorted({h.kind for h in ran.hazards})


def named(ran, *words):
    """The first hazard whose text has all ``words`` (the test fails if none has)."""
    for h in ran.hazards:
        if all(w in h.text for w in words):
            return h.text
    raise AssertionError(f"no hazard names {words}: {[str(h) for h in ran.hazards]}")


def out(n=64, dtype=np.float32):
    return ("out", np.zeros(n, dtype))


SHARED_RAW = """extern "C" __global__ void k(float* out) {
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}
"""


def test_a_shared_read_after_write_without_a_barrier_names_both_lines():
    ran = run(SHARED_RAW, args=[out()])
    assert kinds(ran) == ["race"], ran.hazards
    named(ran, "read-after-write", "__shared__ s (byte 0)", "write at line 4", "read at line 5")
    fixed = run(SHARED_RAW.replace("    out[", "    __syncthreads();\n    out["), args=[out()])
    assert fixed.hazards == []
    assert np.array_equal(fixed.arrays["out"], (np.arange(64) + 1) % 64)


def test_a_write_after_read_and_a_write_after_write_in_shared_memory():
    war = run("""extern "C" __global__ void k(float* out) {
    extern __shared__ float s[];
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[63 - threadIdx.x];
    s[threadIdx.x] = 2.0f;
}
""", args=[out()], shared=256)
    assert kinds(war) == ["race"]
    named(war, "write-after-read", "read at line 6", "write at line 7", "shared memory")
    waw = run("""extern "C" __global__ void k(float* out) {
    extern __shared__ float s[];
    s[0] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[0];
}
""", args=[out()], shared=4)
    assert kinds(waw) == ["race"]
    named(waw, "write-after-write", "line 4", "shared memory")


def test_a_race_between_blocks_in_global_memory_names_the_tensor_and_index():
    ran = run("""extern "C" __global__ void k(float* out) {
    if (blockIdx.x == 0) out[threadIdx.x] = 1.0f;
    if (blockIdx.x == 1) out[threadIdx.x] += 1.0f;
}
""", grid=2, args=[out()], seed=0)
    assert kinds(ran) == ["race"]
    named(ran, "out[", "block 0 thread", "write at line 3", "block 1 thread", "line 4")


def test_an_atomic_against_a_plain_write_is_a_race_atomics_alone_are_not():
    mixed = run("""extern "C" __global__ void k(float* out) {
    if (threadIdx.x == 0) out[0] = 0.0f;
    atomicAdd(&out[0], 1.0f);
}
""", args=[out()])
    assert kinds(mixed) == ["race"]
    named(mixed, "out[0]", "write at line 3", "atomic at line 4")
    alone = run("""extern "C" __global__ void k(float* out) {
    atomicAdd(&out[threadIdx.x % 4], 1.0f);
}
""", grid=3, args=[out()])
    assert alone.hazards == [] and alone.arrays["out"][:4].tolist() == [48.0] * 4


def test_atomic_inc_wraps_as_cuda_says():
    ran = run("""extern "C" __global__ void k(unsigned* counter, unsigned* seen) {
    for (int i = 0; i < 10; i++) seen[i] = atomicInc(counter, 3u);
}
""", block=1, args=[("counter", np.zeros(1, np.uint32)), ("seen", np.zeros(10, np.uint32))])
    assert ran.arrays["seen"].tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert ran.arrays["counter"][0] == 2


def test_warp_collectives_move_values_in_lockstep():
    ran = run("""extern "C" __global__ void k(float* out, unsigned* votes) {
    int lane = threadIdx.x % 32;
    float v = (float)threadIdx.x;
    out[threadIdx.x] = warp_reduce_sum(v);
    out[64 + threadIdx.x] = __shfl_up_sync(0xffffffffu, v, 3);
    out[128 + threadIdx.x] = __shfl_down_sync(0xffffffffu, v, 3, 16);
    out[192 + threadIdx.x] = __shfl_sync(0xffffffffu, v, 5);
    votes[threadIdx.x] = __ballot_sync(0xffffffffu, lane % 3 == 0);
}
""", args=[out(256), ("votes", np.zeros(64, np.uint32))])
    assert ran.hazards == []
    t = np.arange(64)
    o = ran.arrays["out"]
    warp_sums = np.repeat([t[:32].sum(), t[32:].sum()], 32)
    assert np.array_equal(o[:64], warp_sums)
    assert np.array_equal(o[64:128], np.where(t % 32 >= 3, t - 3, t))
    assert np.array_equal(o[128:192], np.where(t % 16 < 13, t + 3, t))
    assert np.array_equal(o[192:], t - t % 32 + 5)
    assert set(ran.arrays["votes"].tolist()) == {sum(1 << l for l in range(0, 32, 3))}


def test_syncwarp_orders_a_warp_and_nothing_orders_without_it():
    body = """extern "C" __global__ void k(float* out) {
    __shared__ float s[32];
    s[threadIdx.x] = (float)threadIdx.x;
    SYNC
    out[threadIdx.x] = s[31 - threadIdx.x];
}
"""
    assert run(body.replace("SYNC", "__syncwarp();"), block=32, args=[out(32)]).hazards == []
    assert kinds(run(body.replace("SYNC", ""), block=32, args=[out(32)])) == ["race"]


def test_a_barrier_not_every_thread_reaches_is_divergence():
    ran = run("""extern "C" __global__ void k(float* out) {
    if (threadIdx.x >= 40) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}
""", args=[out()])
    assert kinds(ran) == ["divergence"]
    named(ran, "__syncthreads at line 4", "returned", "last seen at line 3")


def test_a_shuffle_whose_lanes_do_not_all_arrive_stops_the_launch():
    ran = run("""extern "C" __global__ void k(float* out) {
    float v = 1.0f;
    if (threadIdx.x % 2) v = __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}
""", args=[out()])
    assert "divergence" in kinds(ran) and ran.stopped
    assert "line 4" in ran.hazards[0].text and "__shfl_xor_sync" in ran.hazards[0].text


def test_out_of_bounds_names_the_line_and_the_index_and_stops_before_the_access():
    ran = run("""extern "C" __global__ void k(float* out) {
    out[threadIdx.x + 1] = 1.0f;
}
""", args=[out()])
    assert kinds(ran) == ["out of bounds"] and ran.stopped
    assert "line 3" in ran.hazards[0].text and "out[64]" in ran.hazards[0].text
    assert "out[0] .. [63]" in ran.hazards[0].text
    shared = run("""extern "C" __global__ void k(float* out) {
    extern __shared__ float s[];
    s[threadIdx.x + 1] = 1.0f;
}
""", args=[out()], shared=256)
    assert kinds(shared) == ["out of bounds"] and "[64]" in shared.hazards[0].text
    assert "line 4" in shared.hazards[0].text


def test_a_kernel_that_never_ends_is_stopped_and_says_where():
    ran = run("""extern "C" __global__ void k(float* out) {
    volatile float* flag = out;
    while (flag[0] == 0.0f) {
    }
}
""", args=[out()], limit=1.5)
    assert kinds(ran) == ["time limit"] and ran.stopped
    assert "line 4" in ran.hazards[0].text and "block 0 thread 0" in ran.hazards[0].text


def test_a_crash_is_reported_and_the_caller_lives_on():
    body = """extern "C" __global__ void k(float* out) {
    float* wild = (float*)(size_t)0x100;
    wild[threadIdx.x] = out[0];
}
"""
    ran = run(body, args=[out()], hazards=False)
    assert kinds(ran) == ["crash"] and "line 4" in ran.hazards[0].text
    tracked = run(body, args=[out()])
    assert kinds(tracked) == ["out of bounds"] and "outside every buffer" in tracked.hazards[0].text


@pytest.mark.parametrize("code, construct, line", [
    ('asm volatile("membar.gl;");', "inline PTX (asm)", 3),
    ("__nanosleep(100);", "__nanosleep", 3),
    ("int id = __brev(threadIdx.x); out[id % 64] = 0.0f;", "__brev", 3),
])
def test_what_the_twin_does_not_model_needs_a_gpu(code, construct, line):
    body = 'extern "C" __global__ void k(float* out) {\n    ' + code + "\n}\n"
    with pytest.raises(twin.NeedsGPU,
                       match=rf"needs a GPU: {re.escape(construct)}.* at line {line}\b"):
        run(body, args=[out()])


def test_the_seeded_block_order_shows_an_ordering_bug_between_blocks():
    body = """extern "C" __global__ void k(float* acc) {
    if (blockIdx.x == 0 && threadIdx.x == 0) acc[0] = 0.0f;  // block 0 assumed to run first
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(acc, 1.0f);
}
"""
    start = ("acc", np.full(1, 100.0, np.float32))
    runs = {seed: run(body, grid=8, block=32, args=[start], seed=seed) for seed in range(6)}
    assert runs[0].orders[0] == list(range(8)) and runs[0].arrays["acc"][0] == 8.0
    assert len({tuple(r.orders[0]) for r in runs.values()}) == 6
    assert any(r.arrays["acc"][0] != 8.0 for r in runs.values()), "no order showed the bug"
    for r in runs.values():  # the race is reported whatever the order
        named(r, "acc[0]", "write at line 3", "atomic at line 5")
