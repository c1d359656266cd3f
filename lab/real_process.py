"""Figures for "safe in a real process" (GPU): device memory after many distinct N, threads, streams.

    python lab/real_process.py [--calls 300] [--json out.json]

Prints, per version: device memory growth after ``--calls`` calls with distinct N (beyond the first
call at the largest N), and whether 4 threads calling run() at once got right answers; then a PyTorch
stream test (when torch is installed). Every result is checked against the float64 reference.
"""
from __future__ import annotations

import argparse
import threading

import manifest
import numpy as np

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import compare, gpu, launch, reference


def shape_for(version: str) -> int:
    return 1024 if rl.ladder.get(version).dtype == np.float32 else 4096


def memory_growth(version: str, calls: int) -> dict:
    drv = gpu.driver()
    C = shape_for(version)
    dtype = rl.ladder.get(version).dtype
    ns = [1000 + 37 * i for i in range(calls)]
    big = reference.random_problem(max(ns), C, dtype, seed=1)
    rl.run(version, big["dout"], big["inp"], big["weight"], big["rstd"])  # the largest call's own need
    drv.Context.synchronize()
    free_before = drv.mem_get_info()[0]
    for n in ns:
        rl.run(version, big["dout"][:n], big["inp"][:n], big["weight"], big["rstd"][:n])
    drv.Context.synchronize()
    free_after = drv.mem_get_info()[0]
    return {"version": version, "C": C, "calls": calls, "growth_mib": (free_before - free_after) / 2**20}


def threads(version: str, workers: int = 4, calls: int = 10) -> dict:
    C = shape_for(version)
    dtype = rl.ladder.get(version).dtype
    failures = []

    def work(k):
        for i in range(calls):
            p = reference.random_problem(3000 + k, C, dtype, seed=100 * k + i)
            got = rl.run(version, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
            ref = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
            report = compare.compare_outputs(dtype, 3000 + k, got, ref, name=version)
            if not report.ok:
                failures.append(str(report))

    pool = [threading.Thread(target=work, args=(k,)) for k in range(workers)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return {"version": version, "threads": workers, "calls_each": calls, "failures": len(failures),
            "first_failure": failures[0] if failures else None}


def torch_stream() -> dict:
    try:
        import torch
    except ImportError:
        return {"torch": "not installed"}
    from pycuda import gpuarray

    N, C = 8192, 4096
    p = reference.random_problem(N, C, rl.ladder.get("v7_fast").dtype, seed=5)
    s = torch.cuda.Stream()
    dev = torch.device("cuda")

    def tensor(a):
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16 if a.dtype.itemsize == 2 else np.float32)).to(dev)

    t = {k: tensor(p[k]) for k in ("dout", "inp", "weight", "rstd", "dinp", "dweight")}
    torch.cuda.synchronize()
    garr = {k: gpuarray.GPUArray(p[k].shape, p[k].dtype, gpudata=int(v.data_ptr())) for k, v in t.items()}
    with torch.cuda.stream(s):
        # a long op on the same stream first: run() must queue behind it
        big = torch.randn(4096, 4096, device=dev)
        for _ in range(20):
            big = big @ big / 64.0
        t["dinp"].copy_(tensor(p["dinp"]))
    rl.run("v7_fast", garr["dout"], garr["inp"], garr["weight"], garr["rstd"], garr["dinp"],
                   garr["dweight"], stream=s)
    queued_done = s.query()
    s.synchronize()
    got = (t["dinp"].cpu().numpy().view(p["dinp"].dtype), t["dweight"].cpu().numpy().view(p["dweight"].dtype))
    ref = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    report = compare.compare_outputs(p["dinp"].dtype, N, got, ref, name="v7_fast on a torch stream")
    return {"torch": torch.__version__, "returned_before_stream_done": not queued_done, "ok": report.ok,
            "report": str(report)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    out = {"device": gpu.facts().name, "memory": [], "threads": []}
    for v in rl.ladder.VERSIONS:
        m = memory_growth(v, args.calls)
        out["memory"].append(m)
        print(f"memory  {v:<14} C={m['C']:<5} {m['calls']} distinct N: device memory grew {m['growth_mib']:.1f} MiB",
              flush=True)
        launch.release()
    for v in rl.ladder.VERSIONS:
        t = threads(v)
        out["threads"].append(t)
        print(f"threads {v:<14} {t['threads']} threads x {t['calls_each']} calls: {t['failures']} wrong", flush=True)
    out["torch_stream"] = torch_stream()
    print("torch stream:", {k: v for k, v in out["torch_stream"].items() if k != "report"})
    if args.json:
        manifest.save(args.json, out)


if __name__ == "__main__":
    main()
