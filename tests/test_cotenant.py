"""v7_fast beside another stream's kernel that holds most of the GPU: it finishes, on time, right.

A "hog" kernel on stream A takes one block on every SM but FREE_SMS (each block asks for all the
shared memory a block may have, so no other block fits beside it) and sleeps for HOG_S seconds.
v7_fast then runs on stream B. Its blocks can only use the free SMs, in waves; nothing in it may
wait for a block that is not resident (a kernel that does waits here until the hog ends, or traps
after 10 s: results/NOTES.md). A row wider than one block is split over a cluster of 2,
whose blocks wait for each other: the hardware starts a cluster's blocks together (on free SMs of
one GPC), so that wait is only ever on resident blocks.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
from _gpu_support import TENSORS, compare_both, free, to_device

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import gpu, reference

HOG = r"""
extern "C" __global__ void hog(unsigned long long ns, int* done) {
    extern __shared__ int pad[];
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
    pad[threadIdx.x] = 1;  // the shared memory is the point: one block per SM
    if (threadIdx.x == 0 && pad[0]) atomicAdd(done, 1);
}
"""
HOG_S = 3.0
FREE_SMS = 12


@pytest.mark.gpu
# a row in one block; a row over a cluster of 2
@pytest.mark.parametrize("N,C", [(16384, 4096), (1024, 32768)])
@pytest.mark.parametrize("overwrite", [False, True])
def test_v7_finishes_right_while_another_kernel_holds_most_sms(N, C, overwrite):
    from pycuda import gpuarray
    from pycuda.compiler import SourceModule

    drv = gpu.driver()
    p = reference.random_problem(N, C, rl.ladder.get("v7_fast").dtype, seed=5, accumulate=True)
    dev = to_device(p)
    warm = to_device(p)
    stream_a, stream_b = drv.Stream(), drv.Stream()
    # compiled, planned and its scratch allocated before the hog starts
    rl.run("v7_fast", *[warm[k] for k in TENSORS], overwrite=overwrite, stream=stream_b)
    stream_b.synchronize()

    hog = SourceModule(HOG, no_extern_c=True, options=["-O3"]).get_function("hog")
    smem = gpu.facts().shared_memory_per_block_optin
    hog.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
    done = gpuarray.zeros(1, np.int32)
    blocks = gpu.facts().multiprocessors - FREE_SMS
    hog(np.uint64(int(HOG_S * 1e9)), done.gpudata, block=(32, 1, 1), grid=(blocks, 1, 1),
        shared=smem, stream=stream_a)
    hog_end = drv.Event()
    hog_end.record(stream_a)
    time.sleep(0.2)  # the hog's blocks are resident
    try:
        t0 = time.perf_counter()
        rl.run("v7_fast", *[dev[k] for k in TENSORS], overwrite=overwrite, stream=stream_b)
        stream_b.synchronize()
        wall_s = time.perf_counter() - t0
        hog_still_running = not hog_end.query()
        stream_a.synchronize()
        print(f"v7_fast {N}x{C} overwrite={overwrite} beside a {HOG_S} s kernel on {blocks} SMs: "
              f"{1e3 * wall_s:.1f} ms, the other kernel still running: {hog_still_running}")
        assert int(done.get()[0]) == blocks  # the hog really held those SMs to the end
        assert hog_still_running, \
            f"v7 took {wall_s:.2f} s: it finished only after the other kernel did"
        want = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"],
                                  None if overwrite else p["dinp"],
                                  p["dweight"])
        a, b = compare_both("v7_fast", N, (dev["dinp"].get(), dev["dweight"].get()), want,
                       label="beside the hog")
        assert a.ok and b.ok
    finally:
        stream_a.synchronize()
        free(dev)
        free(warm)
        done.gpudata.free()
