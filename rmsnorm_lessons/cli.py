"""``python -m rmsnorm_lessons info | check | bench | inspect``."""
from __future__ import annotations

import argparse
import json
import platform
import sys


def _info(args) -> int:
    from . import build, gpu, kernels

    print(f"python     {platform.python_version()} ({sys.executable})")
    try:
        import numpy, ml_dtypes  # noqa: E401

        print(f"numpy      {numpy.__version__}, ml_dtypes {ml_dtypes.__version__}")
    except ImportError as exc:
        print(f"numpy      MISSING ({exc})")
    try:
        import pycuda

        print(f"pycuda     {pycuda.VERSION_TEXT}")
    except ImportError:
        print("pycuda     not installed (only needed to launch kernels)")
    nvcc = build.find_nvcc()
    print(f"nvcc       {build.nvcc_version() + ' at ' + nvcc if nvcc else 'NOT FOUND: compiling is impossible'}")
    for tool in ("cuobjdump", "nvdisasm"):
        print(f"{tool:<11}{build.find_tool(tool) or 'not found (SASS listings unavailable)'}")
    reason = gpu.why_unavailable()
    if reason is None:
        f = gpu.facts()
        d = f.driver_version
        print(f"GPU        {f.name}, {f.arch}, {f.multiprocessors} SMs, {f.total_memory / 2**30:.0f} GiB, "
              f"L2 {f.l2_bytes / 2**20:.0f} MiB, shared memory per block {f.shared_memory_per_block // 1024} KiB "
              f"({f.shared_memory_per_block_optin // 1024} KiB opt-in), CUDA driver {d // 1000}.{d % 1000 // 10}")
        if args.bandwidth:
            print(f"copy       {gpu.copy_bandwidth():.0f} GB/s device-to-device (read + write)")
    else:
        print(f"GPU        none usable: {reason}")
    works = ["reference math", "plots"]
    if nvcc:
        works += ["compiling every kernel", "resource reports (inspect)"]
    if reason is None and nvcc:
        works += ["launching, checking and timing kernels"]
    print("works here: " + ", ".join(works))
    if reason is not None or not nvcc:
        print("not here:   " + ", ".join((["launching kernels"] if reason else []) + ([] if nvcc else ["compiling"])))
    print(f"versions   {', '.join(kernels.VERSIONS)}")
    return 0


def _parse_shapes(text: str | None):
    if not text:
        return None
    shapes = []
    for item in text.split(","):
        n, c = item.lower().split("x")
        shapes.append((int(n), int(c)))
    return shapes


def _check(args) -> int:
    from . import check, gpu, kernels

    gpu.require()
    versions = args.versions or list(kernels.VERSIONS)
    shapes = _parse_shapes(args.shapes) or [(1, 8), (7, 776), (129, 1600), (1000, 2048), (4096, 768)]
    failed = 0
    for v in versions:
        spec = kernels.get(v)
        for N, C in shapes:
            if C % spec.c_multiple:
                continue
            report = check.check_version(v, N, C, seed=N * 31 + C)
            print(f"{'ok  ' if report.ok else 'FAIL'} {v:<15} N={N:<6} C={C:<6} dinp rel {report.dinp.rel_l2_error:.2e} "
                  f"max {report.dinp.max_abs_error:.2e} | dweight rel {report.dweight.rel_l2_error:.2e} "
                  f"max {report.dweight.max_abs_error:.2e}")
            if not report.ok:
                print(report)
                failed += 1
    print(f"{failed} failed")
    return 1 if failed else 0


def _torch_imports() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _bench(args) -> int:
    from . import bench, gpu

    gpu.require()
    shapes = _parse_shapes(args.shapes)
    want_peers = _torch_imports() if args.peers is None else args.peers  # on by default where torch imports
    overwrite = want_peers if args.overwrite is None else args.overwrite  # peers overwrite dinp: compare so
    copy_gbps = gpu.copy_bandwidth()
    results = bench.sweep(args.versions or None, shapes, repeats=args.repeats, copy_gbps=copy_gbps,
                          overwrite=overwrite)

    def write_json():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(bench.records(results, baseline="v6_last_block"), f, indent=1)

    if want_peers:
        from . import peers

        write_json()  # the versions' rows are safe on disk (and shown) before the peers run
        print(bench.table(results, baseline="v6_last_block"), flush=True)
        results += peers.sweep(shapes, repeats=args.repeats, copy_gbps=copy_gbps)
    results = bench.by_shape(results)
    print(f"copy bandwidth {copy_gbps:.0f} GB/s (bytes read + written)")
    print(bench.table(results, baseline="v6_last_block"))
    if want_peers:
        from . import peers

        mine = [r.name for r in results if r.name not in peers.PEERS]
        for name in dict.fromkeys(mine):
            lines = bench.against(results, name, peers.PEERS)
            if lines:
                print(f"{name} against the fastest peer:\n{lines}")
    if args.json:
        write_json()
        print(f"wrote {args.json}")
    if args.plot:
        from . import plots

        plots.bandwidth_bars(results, copy_gbps).savefig(args.plot, dpi=plots.DPI)
        print(f"wrote {args.plot}")
    return 0


def _inspect(args) -> int:
    from . import build, kernels
    from . import inspect as insp

    name = args.version
    try:
        build.kernel_path(name)  # a version or any other file of kernels/
    except FileNotFoundError as exc:
        print(f"inspect: {exc}; versions: {', '.join(kernels.VERSIONS)}", file=sys.stderr)
        return 2
    is_version = name in kernels.VERSIONS
    try:
        listing = insp.listing(name, args.arch)
        missing = None
    except insp.ToolMissing as exc:
        listing, missing = None, str(exc)
    for kernel, r in insp.resources(name, args.arch).items():
        print(insp.describe(r))
        if listing is not None and kernel in listing.functions:
            print("    " + insp.summary(insp.count(name, args.arch, kernel=kernel)))
    if missing:
        print(f"SASS counts unavailable: {missing}")
    if is_version:
        from . import occupancy

        spec = kernels.get(name)
        block = getattr(args, "block", None) or spec.block_size
        print(f"dynamic shared memory at C={args.C}: {spec.dynamic_smem(args.C, block)} B "
              f"(block of {block} threads)")
        try:
            occ = occupancy.occupancy(name, args.C, arch=args.arch, block_size=block)
            print(occ.explain())
        except ValueError as exc:
            print(f"occupancy: {exc}")
    if args.ptx:
        print(insp.ptx(name, args.arch))
    if args.sass:
        if missing:
            print(f"inspect: no SASS listing: {missing}", file=sys.stderr)
            return 2
        print(insp.sass(name, args.arch, marked=True))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmsnorm_lessons", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="what works here: GPU, driver, PyCUDA, nvcc (no GPU needed)")
    p.add_argument("--bandwidth", action="store_true", help="also measure the copy bandwidth (GPU)")
    p.set_defaults(func=_info)
    p = sub.add_parser("check", help="every version against the float64 reference on a shape sweep (GPU)")
    p.add_argument("versions", nargs="*")
    p.add_argument("--shapes", help="comma-separated NxC, e.g. 7x776,4096x768")
    p.set_defaults(func=_check)
    p = sub.add_parser("bench", help="time versions: ms, GB/s, %% of the copy bandwidth (GPU)")
    p.add_argument("versions", nargs="*")
    p.add_argument("--shapes", help="comma-separated NxC")
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--json", help="write every row here (name, N, C, ms, GB/s, %% of copy, speedup over v6)")
    p.add_argument("--peers", action=argparse.BooleanOptionalAction, default=None,
                   help="also PyTorch eager, torch.compile and Liger-Kernel (default: on where torch imports)")
    p.add_argument("--overwrite", action=argparse.BooleanOptionalAction, default=None,
                   help="also time versions that offer it in overwrite mode, dinp = (default: as --peers)")
    p.add_argument("--plot", metavar="PATH", help="save a picture of GB/s against the copy line here")
    p.set_defaults(func=_bench)
    p = sub.add_parser("inspect", help="registers, shared memory, spills, PTX/SASS of a version (no GPU)")
    p.add_argument("version")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--C", type=int, default=4096, help="C for the dynamic shared memory figure")
    p.add_argument("--sass", action="store_true")
    p.add_argument("--ptx", action="store_true")
    p.set_defaults(func=_inspect)
    args = parser.parse_args(argv)
    from .gpu import GpuUnavailable

    try:
        return args.func(args)
    except GpuUnavailable as exc:
        print(f"{args.command}: needs a GPU. {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"{args.command}: {exc}", file=sys.stderr)
        return 2
