"""v7_fast beside another stream's kernel that holds most of the GPU's SMs: does it finish, and when?

    python lab/v7_cotenant.py [--hog-s 2] [--free-sms 12] [--shape 16384x4096] [--json F]

A "hog" kernel on stream A takes all but ``--free-sms`` SMs for ``--hog-s`` seconds (one block per SM:
each asks for all the shared memory a block may have). Then v7_fast runs on stream B with GPUArrays.
Printed: the host's wall time of the call (until stream B is done), whether the hog was still running
when v7 finished, and the check against float64.

History: on 2026-12-03 (results/h200-2026-12-03/cotenant.log) this script also ran v7's former in-kernel
final sum (Config(reduce="fused"): the last blocks to arrive waited for the rest). It took 1900 ms beside
a 2 s hog instead of 1.5 ms, and beside a 12 s hog it trapped after 10.6 s. That path is gone from v7;
tests/test_cotenant.py now checks the shipped v7 beside a hog in the suite.
"""
from __future__ import annotations

import argparse
import sys
import time

import manifest
import numpy as np

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import compare, gpu, ladder, reference

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
TENSORS = ("dout", "inp", "weight", "rstd", "dinp", "dweight")


def hog_function():
    from pycuda.compiler import SourceModule
    drv = gpu.driver()
    f = SourceModule(HOG, no_extern_c=True, options=["-O3"]).get_function("hog")
    smem = gpu.facts().shared_memory_per_block_optin
    f.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
    return f, smem


def beside_hog(N: int, C: int, hog_s: float, free_sms: int) -> dict:
    from pycuda import gpuarray
    drv = gpu.driver()
    spec = ladder.get("v7_fast")
    p = reference.random_problem(N, C, spec.dtype, seed=N + C, accumulate=True)
    want = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    dev = {k: gpuarray.to_gpu(np.ascontiguousarray(p[k])) for k in TENSORS}
    warm = {k: gpuarray.to_gpu(np.ascontiguousarray(p[k])) for k in ("dinp", "dweight")}
    stream_a, stream_b = drv.Stream(), drv.Stream()
    rl.run("v7_fast", *[dev[k] for k in TENSORS[:4]], warm["dinp"], warm["dweight"],
                stream=stream_b)  # compiled, planned, scratch allocated: outside the measurement
    stream_b.synchronize()
    hog, smem = hog_function()
    done = gpuarray.zeros(1, np.int32)
    blocks = gpu.facts().multiprocessors - free_sms
    hog(np.uint64(int(hog_s * 1e9)), done.gpudata, block=(32, 1, 1), grid=(blocks, 1, 1), shared=smem,
        stream=stream_a)
    hog_end = drv.Event()
    hog_end.record(stream_a)
    time.sleep(0.1)  # the hog's blocks are resident
    t0 = time.perf_counter()
    error = None
    try:
        rl.run("v7_fast", *[dev[k] for k in TENSORS], stream=stream_b)
        stream_b.synchronize()
    except Exception as exc:  # reported, not raised: the point is how it ends
        error = f"{type(exc).__name__}: {exc}"
    wall = time.perf_counter() - t0
    row = {"N": N, "C": C, "hog_s": hog_s, "hog_blocks": blocks,
           "wall_ms": 1e3 * wall, "error": error}
    if error is None:
        row["hog_still_running"] = not hog_end.query()
        stream_a.synchronize()
        row["hog_blocks_done"] = int(done.get()[0])
        report = compare.compare_outputs(spec, N, (dev["dinp"].get(), dev["dweight"].get()), want,
                                       name="v7_fast beside the hog")
        row["ok"] = report.ok
    try:
        for a in (*dev.values(), *warm.values(), done):
            a.gpudata.free()
    except Exception:  # a context the failed launch destroyed: nothing left to free
        pass
    return row


def line(r: dict) -> str:
    if r["error"]:
        return f"{r['N']}x{r['C']}: {r['wall_ms']:.0f} ms, then {r['error']}"
    return (f"v7_fast {r['N']}x{r['C']} beside a {r['hog_s']} s hog on {r['hog_blocks']} SMs: "
            f"{r['wall_ms']:.1f} ms, hog still running when v7 finished: {r['hog_still_running']}, "
            f"{'right' if r['ok'] else 'WRONG'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hog-s", type=float, default=2.0)
    parser.add_argument("--free-sms", type=int, default=12)
    parser.add_argument("--shape", default="16384x4096")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    N, C = (int(x) for x in args.shape.split("x"))
    gpu.require()
    rows = [beside_hog(N, C, args.hog_s, args.free_sms)]
    print(line(rows[0]), flush=True)
    if args.json:
        manifest.save(args.json, {"rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
