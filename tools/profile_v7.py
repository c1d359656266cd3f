"""Launch one version a few times at one shape, for Nsight Compute to profile one launch.

    ncu --clock-control none --kernel-name rmsnorm_backward_v7 --launch-skip 3 --launch-count 1 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section Occupancy python3 tools/profile_v7.py v7_fast 16384 4096
"""
import sys

import rmsnorm_lessons as rl
from rmsnorm_lessons import bench, kernels


def main(version="v7_fast", N="16384", C="4096", launches="5"):
    N, C = int(N), int(C)
    spec = kernels.get(version)
    problem = bench.DeviceProblem(N, C, spec.dtype, sets=1)
    L = kernels.launcher(spec, N, C)
    for _ in range(int(launches)):
        L(problem.buffers[0])
    rl.gpu.synchronize()
    problem.free()
    print(f"{version} {N}x{C}: {launches} launches done")


if __name__ == "__main__":
    main(*sys.argv[1:])
