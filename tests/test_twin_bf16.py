"""The CPU twin's __nv_bfloat16 (rmsnorm_lessons/twin/runtime/include/twin_bf16.h), bit for bit.

float -> bf16 is compared with ml_dtypes (round to nearest, ties to even) on every class of float32
bit pattern: normals, subnormals, zeros, infinities, values that round up to infinity, exact ties
with an even and an odd last kept bit, just above and below a tie, and a million random patterns;
NaN becomes the GPU's canonical 0x7FFF (ml_dtypes keeps sign and payload: both are NaN). bf16 ->
float is checked on all 65536 patterns. The conversions run inside a kernel on the twin.
"""
import ml_dtypes
import numpy as np
import pytest

from rmsnorm_lessons import twin

pytestmark = pytest.mark.skipif(twin.available() is not None, reason=str(twin.available()))

KERNEL = '''#line 1 "bf16_check"
#include "common.cuh"
extern "C" __global__ void convert(const float* x, __nv_bfloat16* y, const __nv_bfloat16* h,
                                   float* back, int n, int m) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = __float2bfloat16(x[i]);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < m; i += gridDim.x * blockDim.x)
        back[i] = (float)h[i];
}
'''


def _patterns() -> np.ndarray:
    rng = np.random.default_rng(46)
    exponents = np.arange(256, dtype=np.uint32) << 23
    low = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x10000, 0x17FFF, 0x18000, 0x18001,
                    0x7FFFFF, 0x7F8000, 0x7F7FFF], np.uint32)
    classes = (exponents[:, None] | low[None, :]).ravel()  # every exponent, ties both ways
    special = np.array([0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x00000001, 0x007FFFFF, 0x00008000,
                        0x00018000, 0x7F800000, 0x7FC00000, 0x7F800001, 0x7FFFFFFF],
                       np.uint32)  # max finite (rounds to inf), subnormal ties, inf, NaNs
    both = np.concatenate([classes, special, rng.integers(0, 2**32, 1 << 20, dtype=np.uint32)])
    return np.concatenate([both, both | np.uint32(0x80000000)])


def test_float_to_bf16_and_back_bit_for_bit():
    bits = _patterns()
    x = bits.view(np.float32)
    h = np.arange(1 << 16, dtype=np.uint16)
    ran = twin.run_kernel(KERNEL, "convert", grid=64, block=256, name="bf16_check",
                          args=[("x", x), ("y", np.zeros(x.size, np.uint16)), ("h", h),
                                ("back", np.zeros(h.size, np.float32)), x.size, h.size])
    assert ran.hazards == [] and not ran.stopped
    got = ran.arrays["y"]
    with np.errstate(invalid="ignore"):
        want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    nan = np.isnan(x)
    assert nan.sum() > 1000 and (~nan).sum() > 1_000_000
    mismatch = np.flatnonzero((got != want) & ~nan)
    assert mismatch.size == 0, [(hex(bits[i]), hex(got[i]), hex(want[i])) for i in mismatch[:5]]
    # NaN: the GPU's canonical NaN; ml_dtypes' result is a NaN as well
    assert (got[nan] == 0x7FFF).all()
    assert np.isnan(want[nan].view(ml_dtypes.bfloat16).astype(np.float32)).all()
    # ties went to even: 1 + 2**-8 is halfway between 1 and 1 + 2**-7
    tie = np.flatnonzero(bits == 0x3F808000)[0]
    assert got[tie] == 0x3F80 and got[np.flatnonzero(bits == 0x3F818000)[0]] == 0x3F82
    # a value above the largest bf16 rounds to infinity, subnormals are kept (no flush)
    assert got[np.flatnonzero(bits == 0x7F7FFFFF)[0]] == 0x7F80
    assert got[np.flatnonzero(bits == 0x00018000)[0]] == 0x0002
    back = ran.arrays["back"].view(np.uint32)
    assert np.array_equal(back, h.astype(np.uint32) << 16)
