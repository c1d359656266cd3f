"""Is the same-bytes ceiling a ceiling? Time spellings of the elementwise kernel with the same bytes
(lab/kernels/ceiling_variants.cu: grid-stride, what kernels/stream_ceiling.cu had until 2026-12-03; 2 or 4
chunks a thread; one chunk a thread) at the bench's shapes in both modes, and the copy spellings beside
cuMemcpyDtoD, all interleaved (bench.time_interleaved). (The run of 2026-12-03 named the grid-stride ones
stream_elementwise / stream_copy and timed single launches behind a sleep, as the bench did then.)

    python lab/ceiling_probe.py [--json F]     # needs a GPU

The bench reports v7 as a % of the ceiling; if another spelling moves the same bytes faster, the ceiling
was too low and every % of it too high.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from rmsnorm_lessons.core import build, gpu, ladder
from rmsnorm_lessons.speed import bench

SOURCE = Path(__file__).resolve().parent / "kernels" / "ceiling_variants.cu"
THREADS = {"gridstride_elementwise": 512, "elementwise_u2": 256, "elementwise_u4": 256, "elementwise_flat": 256,
           "gridstride_copy": 512, "copy_u4": 256, "copy_flat": 256}


def module():
    from pycuda.compiler import SourceModule
    return SourceModule(SOURCE.read_text(), nvcc=build.require_nvcc(), options=list(build.NVCC_FLAGS),
                        no_extern_c=True, include_dirs=[str(build.kernel_dir())])


def grid_for(name: str, n16: int, blocks_per_sm: int) -> int:
    if name.endswith("_flat"):
        return -(-n16 // THREADS[name])
    return gpu.facts().multiprocessors * blocks_per_sm


def launcher(mod, name, n16, blocks_per_sm, accumulate=None):
    f = mod.get_function(name)
    grid = grid_for(name, n16, blocks_per_sm)
    extra = () if accumulate is None else (np.int32(accumulate),)

    def launch(ptrs):
        f(*(np.uintp(int(p)) for p in ptrs), np.int64(n16), *extra, block=(THREADS[name], 1, 1), grid=(grid, 1, 1))
    return launch


def elementwise_shape(mod, N, C, overwrite, repeats, copy_gbps):
    drv = gpu.driver()
    n16 = N * C // 8
    nbytes = ladder.get("v7_fast").bytes_moved(N, C, overwrite=overwrite)
    sets = bench.sets_for(3 * N * C * 2, gpu.facts().l2_bytes, drv.mem_get_info()[0])
    rng = np.random.default_rng(N + C)
    host = [np.ascontiguousarray(rng.integers(0, 1 << 16, N * C, dtype=np.uint16) & 0x3f7f) for _ in range(3)]
    buffers = [[drv.to_device(h) for h in host] for _ in range(sets)]
    try:
        variants = {f"{name} x{bps}": launcher(mod, name, n16, bps, accumulate=not overwrite)
                    for name, bps in (("gridstride_elementwise", 4), ("elementwise_u2", 8), ("elementwise_u4", 4),
                                      ("elementwise_u4", 8), ("elementwise_flat", 0))}
        launches = {k: (lambda i, L=L: L(buffers[i])) for k, L in variants.items()}
        times = bench.time_interleaved(launches, sets=sets, repeats=repeats)
    finally:
        for trio in buffers:
            for b in trio:
                b.free()
    return [dict(kernel=k, N=N, C=C, overwrite=overwrite, ms=statistics.median(t),
                 spread=float(np.ptp(np.percentile(t, [10, 90])) / statistics.median(t)),
                 pct_copy=100 * nbytes / (statistics.median(t) * 1e-3) / 1e9 / copy_gbps) for k, t in times.items()]


def copies(mod, repeats, nbytes=1 << 30):
    drv = gpu.driver()
    n16 = nbytes // 16
    src, dst = drv.mem_alloc(nbytes), drv.mem_alloc(nbytes)
    drv.memset_d8(src, 1, nbytes)
    try:
        launches = {f"{name} x{bps}": (lambda i, L=launcher(mod, name, n16, bps): L((dst, src)))
                    for name, bps in (("gridstride_copy", 4), ("copy_u4", 4), ("copy_u4", 8), ("copy_flat", 0))}
        launches["cuMemcpyDtoD"] = lambda i: drv.memcpy_dtod(dst, src, nbytes)
        times = bench.time_interleaved(launches, sets=1, repeats=repeats)
    finally:
        src.free()
        dst.free()
    return {k: 2 * nbytes / (statistics.median(t) * 1e-3) / 1e9 for k, t in times.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default="")
    p.add_argument("--repeats", type=int, default=50)
    args = p.parse_args(argv)
    gpu.require()
    mod = module()
    copy = copies(mod, args.repeats)
    for k, v in copy.items():
        print(f"copy {k:24s} {v:6.0f} GB/s")
    copy_gbps = max(copy.values())
    rows = []
    for N, C in bench.SHAPES:
        for overwrite in (False, True):
            got = elementwise_shape(mod, N, C, overwrite, args.repeats, copy_gbps)
            rows += got
            best = min(got, key=lambda r: r["ms"])
            print(f"{N}x{C} {'ow ' if overwrite else 'acc'}: " + "  ".join(
                f"{r['kernel']} {r['ms']:.4f} ({r['pct_copy']:.1f}%)" for r in got) + f"  best {best['kernel']}",
                flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(copy=copy, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
