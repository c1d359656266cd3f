"""Launch one version a few times at one shape, for Nsight Compute to profile one launch.

    ncu --clock-control none --kernel-name rmsnorm_backward_v7 --launch-skip 3 --launch-count 1 \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \\
        --section Occupancy python lab/profile_v7.py v7_fast 16384 4096 > ncu_16384x4096.txt

ncu prints the report; record where it went with lab/manifest.py (see lab/README.md).
"""
import argparse

from rmsnorm_lessons.core import gpu, ladder, launch
from rmsnorm_lessons.speed import bench


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("version", nargs="?", default="v7_fast")
    parser.add_argument("N", nargs="?", type=int, default=16384)
    parser.add_argument("C", nargs="?", type=int, default=4096)
    parser.add_argument("launches", nargs="?", type=int, default=5)
    parser.add_argument("--overwrite", action="store_true", help="dinp = instead of +=")
    args = parser.parse_args(argv)
    rung = ladder.get(args.version)
    problem = bench.DeviceProblem(args.N, args.C, rung.dtype, sets=1)
    try:
        L = launch.launcher(rung.name, args.C, overwrite=args.overwrite)
        for _ in range(args.launches):
            L(args.N, problem.buffers[0])
        gpu.synchronize()
    finally:
        problem.free()
    mode = " (dinp=)" if args.overwrite else ""
    print(f"{rung.name}{mode} {args.N}x{args.C}: {args.launches} launches done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
