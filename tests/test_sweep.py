"""Every version against the float64 reference over a fixed-seed sample of shapes (GPU).

For each version about twelve shapes: N from 1 to 70 000, C any multiple of 8 up to 16384 (and odd C
for the fp32 versions), always including 1600 and 5120 (not powers of two), 16384 and the smallest
C. Outputs start non-zero (the kernels must add), and every case gets fresh random data. The host
reference costs most of the time, so N*C is capped (harder for v1_naive, which is slow on wide
rows). ``pytest -s`` shows ||err||/||ref|| and the largest error of every case.
"""
import zlib

import numpy as np
import pytest
from _gpu_support import compare_both, reference_of

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import reference

MAX_N, MAX_C = 70_000, 16_384
CAP = {"v1_naive": 1 << 21}  # N*C at most this much
DEFAULT_CAP = 1 << 23
PER_VERSION = 12


def _shapes(version: str) -> list[tuple[int, int]]:
    spec = rl.ladder.get(version)
    rng = np.random.default_rng(zlib.crc32(version.encode()))
    cap = CAP.get(version, DEFAULT_CAP)
    m = spec.c_multiple
    step = 8 if m == 1 else m * ((8 + m - 1) // m)
    fixed_C = [1600, 5120, MAX_C, step]
    Cs = fixed_C + [int(c) * step for c in rng.integers(1, MAX_C // step + 1,
                                                        PER_VERSION - len(fixed_C) - 2)]
    if spec.c_multiple == 1:
        Cs += [int(rng.integers(1, 64)) * 2 + 1, int(rng.integers(100, 3000)) * 2 + 1]  # odd C
    else:
        Cs += [int(c) * step for c in rng.integers(1, MAX_C // step + 1, 2)]
    Ns = [1, MAX_N] + [int(np.exp(rng.uniform(0, np.log(MAX_N)))) for _ in Cs[2:]]
    shapes = []
    for N, C in zip(Ns, Cs):
        if N * C > cap:
            N = max(1, cap // C - int(rng.integers(0, 7)))  # keep N odd-ish and not a round number
        shapes.append((N, C))
    shapes.append((MAX_N, max(step, cap // MAX_N // step * step)))  # the tallest that fits the cap
    return sorted(set(shapes))


CASES = [(v, N, C) for v in rl.ladder.VERSIONS for N, C in _shapes(v)]


@pytest.mark.gpu
@pytest.mark.parametrize("version,N,C", CASES, ids=[f"{v}-{N}x{C}" for v, N, C in CASES])
def test_sweep_against_float64_reference(version, N, C):
    spec = rl.ladder.get(version)
    p = reference.random_problem(N, C, spec.dtype, seed=zlib.crc32(f"{version}/{N}/{C}".encode()),
                                 accumulate=True)
    got = rl.run(version, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])
    a, b = compare_both(version, N, got, reference_of(p), label=f"N={N} C={C}")
    assert a.ok, str(a)
    assert b.ok, str(b)


def test_the_sample_covers_what_it_promises():  # (CPU)
    for v in rl.ladder.VERSIONS:
        spec = rl.ladder.get(v)
        shapes = _shapes(v)
        Ns = [N for N, _ in shapes]
        Cs = [C for _, C in shapes]
        assert 10 <= len(shapes) <= 14
        assert min(Ns) == 1 and max(Ns) == MAX_N
        assert {1600, 5120, MAX_C} <= set(Cs)
        assert all(C % spec.c_multiple == 0 for C in Cs)
        assert all(N * C <= CAP.get(v, DEFAULT_CAP) or N == 1 for N, C in shapes)
