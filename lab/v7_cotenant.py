"""v7_fast beside another stream's kernel that holds most of the GPU's SMs: does it finish, and when?

    python lab/v7_cotenant.py [--hog-s 2] [--free-sms 12] [--shape 16384x4096] [--trap] [--json F]

A "hog" kernel on stream A takes all but ``--free-sms`` SMs for ``--hog-s`` seconds (one block per SM:
each asks for all the shared memory a block may have). Then v7_fast runs on stream B with GPUArrays, once
with each way of summing the partials (Config(reduce="fused"): the last blocks to arrive wait for the
rest; reduce="kernel": a second kernel, nobody waits). Printed for each: the host's wall time of the call
(until stream B is done), whether the hog was still running when v7 finished, and the check against
float64. ``--trap`` then runs the fused variant in a child process beside a hog of 12 s, longer than the
fused wait's 10 s limit, and prints how that ends (the child's CUDA context is lost; ours is not).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

import manifest

from rmsnorm_lessons import check, gpu, kernels, ladder, reference
from rmsnorm_lessons.ladder.v7_fast import Config

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


def beside_hog(N: int, C: int, config: Config, hog_s: float, free_sms: int) -> dict:
    from pycuda import gpuarray
    drv = gpu.driver()
    spec = ladder.get("v7_fast")
    p = reference.random_problem(N, C, spec.dtype, seed=N + C, accumulate=True)
    want = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    dev = {k: gpuarray.to_gpu(np.ascontiguousarray(p[k])) for k in TENSORS}
    warm = {k: gpuarray.to_gpu(np.ascontiguousarray(p[k])) for k in ("dinp", "dweight")}
    stream_a, stream_b = drv.Stream(), drv.Stream()
    kernels.run("v7_fast", *[dev[k] for k in TENSORS[:4]], warm["dinp"], warm["dweight"], config=config,
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
        kernels.run("v7_fast", *[dev[k] for k in TENSORS], config=config, stream=stream_b)
        stream_b.synchronize()
    except Exception as exc:  # reported, not raised: the point is how it ends
        error = f"{type(exc).__name__}: {exc}"
    wall = time.perf_counter() - t0
    row = {"N": N, "C": C, "reduce": config.reduce, "hog_s": hog_s, "hog_blocks": blocks,
           "wall_ms": 1e3 * wall, "error": error}
    if error is None:
        row["hog_still_running"] = not hog_end.query()
        stream_a.synchronize()
        row["hog_blocks_done"] = int(done.get()[0])
        report = check.compare_outputs(spec, N, (dev["dinp"].get(), dev["dweight"].get()), want,
                                       name=f"v7_fast reduce={config.reduce} beside the hog")
        row["ok"] = report.ok
    try:
        for a in (*dev.values(), *warm.values(), done):
            a.gpudata.free()
    except Exception:  # a context the failed launch destroyed: nothing left to free
        pass
    return row


def line(r: dict) -> str:
    if r["error"]:
        return f"reduce={r['reduce']:<7} {r['N']}x{r['C']}: {r['wall_ms']:.0f} ms, then {r['error']}"
    return (f"reduce={r['reduce']:<7} {r['N']}x{r['C']} beside a {r['hog_s']} s hog on {r['hog_blocks']} SMs: "
            f"{r['wall_ms']:.1f} ms, hog still running when v7 finished: {r['hog_still_running']}, "
            f"{'right' if r['ok'] else 'WRONG'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hog-s", type=float, default=2.0)
    parser.add_argument("--free-sms", type=int, default=12)
    parser.add_argument("--shape", default="16384x4096")
    parser.add_argument("--trap", action="store_true", help="also the fused variant beside a 12 s hog, in a child")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    N, C = (int(x) for x in args.shape.split("x"))
    gpu.require()
    if args.child:
        print(json.dumps(beside_hog(N, C, Config(reduce="fused"), args.hog_s, args.free_sms)))
        return 0
    rows = []
    for reduce in ("kernel", "fused"):
        rows.append(beside_hog(N, C, Config(reduce=reduce), args.hog_s, args.free_sms))
        print(line(rows[-1]), flush=True)
    if args.trap:
        child = subprocess.run([sys.executable, __file__, "--child", "--hog-s", "12", "--free-sms",
                                str(args.free_sms), "--shape", args.shape], capture_output=True, text=True,
                               timeout=120)
        last = (child.stdout.strip().splitlines() or ["{}"])[-1]
        try:
            row = json.loads(last)
        except json.JSONDecodeError:
            row = {"N": N, "C": C, "reduce": "fused", "hog_s": 12, "wall_ms": float("nan"),
                   "error": f"child exit {child.returncode}: {child.stderr.strip()[-300:]}"}
        row["child_exit"] = child.returncode
        rows.append(row)
        print(line(row) if "reduce" in row else row, flush=True)
    if args.json:
        manifest.save(args.json, {"rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
