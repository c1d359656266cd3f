"""Huge tensors (GPU, slow): v6 (and v7 where it exists) right when N*C passes 2**31.

N = 263171 rows of C = 8192 bf16 channels: 4 GiB per tensor, and the elements of every row past row
262144 sit beyond index 2**31, where a 32-bit row offset (the seed's ``bt * C`` as int) would wrap.
(At N*C == 2**31 exactly the last index is still 2**31 - 1, so N is taken a little larger.)

The data is made on the GPU by a hash kernel (host generation of 4 GiB tensors would take minutes).
dinp is checked on a few hundred sampled rows, including the first and last rows and those around
the 2**31 boundary, against the float64 reference of those rows (copied back). dweight is checked
against a float64 reference summed on the host over every row, in chunks copied back and split
across threads.
"""
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import bf16, build, compare, reference

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

C = 8192
BOUNDARY_ROW = 2**31 // C  # the first row whose elements lie past index 2**31 - 1
N = BOUNDARY_ROW + 1027
SAMPLES = 300
CHUNK_ROWS = 8192  # rows copied back at a time for the dweight reference
PIECE_ROWS = 512  # rows per host thread task

SOURCE = r"""
// splitmix64 of the element index: a reproducible pseudo-random bf16 in [-1, 1) per element
extern "C" __global__ void fill_bf16_hash(unsigned short* out, unsigned long long n,
                                          unsigned long long seed) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long z = i + (seed + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        float u = (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;  // 24 random bits
        out[i] = (unsigned short)(__float_as_uint(u) >> 16);        // its top half is a bf16
    }
}

// rstd = 1/sqrt(mean(x^2) + eps) per row in fp32, one warp per row, as the forward kernel
// computes it
extern "C" __global__ void rstd_bf16(float* rstd, const unsigned short* inp, int N, int C) {
    int lane = threadIdx.x % 32;
    long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const unsigned short* x = inp + row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float v = __uint_as_float(((unsigned)x[c]) << 16);
        s += v * v;
    }
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) rstd[row] = rsqrtf(s / C + 1e-5f);
}
"""


def _widen(u16: np.ndarray) -> np.ndarray:
    """bf16 bit patterns -> float32, exactly (and faster than a dtype conversion)."""
    return (u16.astype(np.uint32) << 16).view(np.float32)


class Huge:
    """The shared inputs on the device, the sampled rows on the host, and the host's dweight
    gradient."""

    def __init__(self):
        from pycuda import gpuarray
        from pycuda.compiler import SourceModule

        self.drv = drv = rl.gpu.driver()
        free, _ = drv.mem_get_info()
        need = 3 * N * C * 2 + (1 << 30)
        if free < need:
            pytest.skip(f"needs {need / 2**30:.0f} GiB of free device memory, {free / 2**30:.0f} "
                        f"GiB free")
        module = SourceModule(SOURCE, nvcc=build.require_nvcc(), options=["-O3"], no_extern_c=True)
        self.fill = module.get_function("fill_bf16_hash")
        rstd_fn = module.get_function("rstd_bf16")
        self.sms = rl.gpu.facts().multiprocessors

        start = time.time()
        self.dout = gpuarray.empty((N, C), bf16.bfloat16)
        self.inp = gpuarray.empty((N, C), bf16.bfloat16)
        self.dinp = gpuarray.empty((N, C), bf16.bfloat16)
        self.rstd = gpuarray.empty((N,), np.float32)
        self.fill_hash(self.dout, 1)
        self.fill_hash(self.inp, 2)
        rstd_fn(self.rstd.gpudata, self.inp.gpudata, np.int32(N), np.int32(C), block=(256, 1, 1),
                grid=((N + 7) // 8, 1, 1))
        rng = np.random.default_rng(2024)
        self.weight_host = bf16.to_bf16(rng.uniform(-1, 1, C))
        self.dweight0 = bf16.to_bf16(rng.uniform(-1, 1, C))
        self.weight = gpuarray.to_gpu(self.weight_host)
        rl.gpu.synchronize()
        self.rstd_host = self.rstd.get()
        print(f"\nhuge: N={N} C={C} ({N * C * 2 / 2**30:.2f} GiB per tensor), made on the GPU in "
              f"{time.time() - start:.1f} s", flush=True)

        self.rows = self._sample_rows(rng)
        self.dout_rows = self.copy_rows(self.dout, self.rows)
        self.inp_rows = self.copy_rows(self.inp, self.rows)
        self.grad_dweight = self._dweight_gradient()

    @staticmethod
    def _sample_rows(rng):
        fixed = [0, 1, 2, BOUNDARY_ROW - 2, BOUNDARY_ROW - 1, BOUNDARY_ROW, BOUNDARY_ROW + 1]
        last = list(range(N - 64, N))
        random = rng.choice(N, SAMPLES - len(fixed) - len(last), replace=False).tolist()
        beyond = rng.integers(BOUNDARY_ROW, N, 32).tolist()
        return np.array(sorted(set(fixed + last + random + beyond)), np.int64)

    def fill_hash(self, array, seed):
        self.fill(array.gpudata, np.uint64(array.size), np.uint64(seed), block=(256, 1, 1),
                  grid=(self.sms * 8, 1, 1))

    def copy_rows(self, array, rows) -> np.ndarray:
        """Rows of a (N, C) bf16 GPUArray, as bf16 bits (uint16), through plain device-to-host
        copies."""
        out = np.empty((len(rows), C), np.uint16)
        base = int(array.gpudata)
        for i, r in enumerate(rows):
            self.drv.memcpy_dtoh(out[i], base + int(r) * C * 2)
        return out

    def _dweight_gradient(self) -> np.ndarray:
        """sum over all N rows of inp * rstd * dout, in float64, from chunks copied back."""
        start = time.time()
        workers = max(1, min(16, os.cpu_count() or 1))
        g_host = self.drv.pagelocked_empty((CHUNK_ROWS, C), np.uint16)
        x_host = self.drv.pagelocked_empty((CHUNK_ROWS, C), np.uint16)
        total = np.zeros(C, np.float64)

        def piece(a, b, first):
            prod = _widen(x_host[a:b]) * _widen(g_host[a:b])  # bf16 x bf16 is exact in float32
            return self.rstd_host[first + a:first + b].astype(np.float64) @ prod.astype(np.float64)

        with ThreadPoolExecutor(workers) as pool:
            for first in range(0, N, CHUNK_ROWS):
                rows = min(CHUNK_ROWS, N - first)
                self.drv.memcpy_dtoh(g_host[:rows], int(self.dout.gpudata) + first * C * 2)
                self.drv.memcpy_dtoh(x_host[:rows], int(self.inp.gpudata) + first * C * 2)
                parts = pool.map(lambda a: piece(a, min(a + PIECE_ROWS, rows), first),
                                 range(0, rows, PIECE_ROWS))
                for part in parts:
                    total += part
        print(f"huge: float64 dweight reference over {N} rows on {workers} threads in "
              f"{time.time() - start:.1f} s", flush=True)
        return total

    def free(self):
        for a in (self.dout, self.inp, self.dinp, self.rstd, self.weight):
            a.gpudata.free()


@pytest.fixture(scope="module")
def huge():
    h = Huge()
    yield h
    h.free()


@pytest.mark.parametrize("version", ["v6_last_block", "v7_fast"])
def test_huge_tensor_past_2_31_elements(huge, version):
    from pycuda import gpuarray

    spec = rl.ladder.get(version)
    assert spec.dtype == bf16.bfloat16
    assert (N - 1) * C >= 2**31  # the last rows start past index 2**31
    huge.fill_hash(huge.dinp, 3)  # non-zero initial dinp, the same for every version
    dweight = gpuarray.to_gpu(huge.dweight0)
    rl.gpu.synchronize()
    dinp0_rows = huge.copy_rows(huge.dinp, huge.rows)

    start = time.time()
    out = rl.run(version, huge.dout, huge.inp, huge.weight, huge.rstd, huge.dinp, dweight)
    print(f"huge: {version} ran in {1e3 * (time.time() - start):.0f} ms (with the first launch's "
          f"set-up)", flush=True)
    assert out[0] is huge.dinp and out[1] is dweight

    # dinp on the sampled rows
    rows = huge.rows
    got_rows = huge.copy_rows(huge.dinp, rows).view(bf16.bfloat16)
    want_rows, _ = reference.backward(huge.dout_rows.view(bf16.bfloat16),
                                      huge.inp_rows.view(bf16.bfloat16),
                                      huge.weight_host, huge.rstd_host[rows],
                                      dinp0_rows.view(bf16.bfloat16))
    # every row from the boundary on must have changed (a wrapped offset would have written
    # elsewhere)
    changed = np.any(got_rows.view(np.uint16) != dinp0_rows, axis=1)
    assert changed.all(), f"rows never written: {rows[~changed][:10].tolist()}"

    # dinp on the sampled rows and dweight against the host's float64 sum over every row (the
    # tolerances of N rows: dinp's does not depend on N, dweight's does)
    want_dweight = huge.dweight0.astype(np.float64) + huge.grad_dweight
    report = compare.compare_outputs(spec, N, (got_rows, dweight.get()), (want_rows, want_dweight),
                                   name=f"{version}, dinp on {len(rows)} sampled rows", C=C)
    a, b = report.dinp, report.dweight
    if not a.ok:  # name the rows, not the positions in the sample
        a.worst = [((int(rows[i]), j), g, r, e, al) for (i, j), g, r, e, al in a.worst]
    print(f"huge: {version} dinp ||err||/||ref|| {a.rel_l2_error:.2e} max {a.max_abs_error:.2e} | "
          f"dweight ||err||/||ref|| {b.rel_l2_error:.2e} max {b.max_abs_error:.2e}", flush=True)
    assert a.ok, str(a)
    assert b.ok, str(b)
    dweight.gpudata.free()
