"""bf16 on the host (CPU): round trips, round-to-nearest-even on ties, raw bits."""
import numpy as np
import pytest

from rmsnorm_lessons.core import bf16


def _from_bits(b):
    return np.asarray(b, np.uint16).view(bf16.bfloat16)


def _f32_from_bits(b):
    return np.asarray(b, np.uint32).view(np.float32)


ALL = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
FINITE = ALL[(ALL & 0x7F80) != 0x7F80]  # exponent not all ones: neither Inf nor NaN


def test_every_bf16_survives_a_round_trip_through_float32():
    x = _from_bits(ALL)
    wide = bf16.from_bf16(x)
    assert wide.dtype == np.float32
    # widening is exact: the float32 bits are the bf16 bits followed by 16 zeros
    nan = np.isnan(wide)
    assert np.array_equal(wide.view(np.uint32)[~nan], ALL.astype(np.uint32)[~nan] << 16)
    with np.errstate(invalid="ignore"):
        back = bf16.bits(bf16.to_bf16(wide))
    assert np.array_equal(back[~nan], ALL[~nan])
    assert np.isnan(bf16.from_bf16(_from_bits(back[nan]))).all()


def test_float32_values_that_fit_are_kept():
    values = np.array([0.0, -0.0, 1.0, -2.5, 0.15625, 2.0**127, -(2.0**127 + 2.0**120), 2.0**-126,
                       2.0**-133, np.inf, -np.inf], np.float32)
    assert np.array_equal(bf16.from_bf16(bf16.to_bf16(values)), values)
    assert bf16.bits(bf16.to_bf16(np.float32(-0.0)))[()] == 0x8000


def test_ties_round_to_even():
    # float32 bits (b << 16) | 0x8000 lie exactly halfway between bf16 b and b + 1
    # skip the largest finite (its tie overflows)
    b = FINITE[(FINITE & 0x7FFF) != 0x7F7F].astype(np.uint32)
    ties = _f32_from_bits((b << 16) | 0x8000)
    got = bf16.bits(bf16.to_bf16(ties)).astype(np.uint32)
    # to the even neighbour (same magnitude step for negatives)
    want = np.where(b % 2 == 0, b, b + 1)
    assert np.array_equal(got, want)


def test_crafted_ties_by_value():
    ulp = 2.0**-7  # spacing of bf16 in [1, 2)
    cases = {
        1.0 + ulp / 2: 1.0,                # between 1 (even) and 1+ulp (odd): down
        1.0 + 3 * ulp / 2: 1.0 + 2 * ulp,  # between 1+ulp (odd) and 1+2ulp (even): up
        -(1.0 + ulp / 2): -1.0,
        -(1.0 + 3 * ulp / 2): -(1.0 + 2 * ulp),
        256.0 + 1.0: 256.0,                # bf16 spacing at 256 is 2
        256.0 + 3.0: 260.0,
    }
    for x, want in cases.items():
        assert float(bf16.from_bf16(bf16.to_bf16(np.float32(x)))) == want, x


def test_just_off_a_tie_rounds_to_nearest():
    b = np.array([0x3F80, 0x3F81, 0xBF80, 0x4000], np.uint32)
    above = _f32_from_bits((b << 16) | 0x8001)
    below = _f32_from_bits((b << 16) | 0x7FFF)
    assert np.array_equal(bf16.bits(bf16.to_bf16(above)), (b + 1).astype(np.uint16))
    assert np.array_equal(bf16.bits(bf16.to_bf16(below)), b.astype(np.uint16))


def test_largest_finite_tie_overflows_to_inf():
    largest = np.uint32(0x7F7F)  # odd: its tie rounds up to 0x7F80, which is Inf
    tie = _f32_from_bits(np.array([(largest << 16) | 0x8000], np.uint32))
    assert np.isinf(bf16.from_bf16(bf16.to_bf16(tie)))[0]


@pytest.mark.parametrize("value,pattern",
                         [(1.0, 0x3F80), (-2.0, 0xC000), (0.0, 0x0000), (-0.0, 0x8000),
                                           (np.inf, 0x7F80), (-np.inf, 0xFF80), (0.5, 0x3F00)])
def test_bits(value, pattern):
    got = bf16.bits(bf16.to_bf16(np.array([value], np.float32)))
    assert got.dtype == np.uint16
    assert got[0] == pattern


def test_bits_of_a_strided_view_and_of_floats():
    x = bf16.to_bf16(np.arange(12, dtype=np.float32).reshape(3, 4))
    view = x[:, ::2]
    assert np.array_equal(bf16.bits(view),
                          bf16.bits(bf16.to_bf16(np.array([[0, 2], [4, 6], [8, 10]], np.float32))))
    # bits() of a float array rounds it to bf16 first
    assert bf16.bits(np.array([1.0 + 2.0**-9]))[0] == 0x3F80


def test_constants_and_helpers():
    assert bf16.EPSILON == 2.0**-7
    assert bf16.bfloat16.itemsize == 2
    assert bf16.is_bf16(bf16.bfloat16) and not bf16.is_bf16(np.float32)
    assert bf16.to_bf16([0.25, 1.5]).dtype == bf16.bfloat16
    # to_bf16 of float64 goes through float32 first (as the device's float -> bf16 casts do)
    # just above a tie in float64, exactly the tie in float32
    x = np.array([1.0 + 2.0**-8 + 2.0**-30])
    assert bf16.bits(bf16.to_bf16(x))[0] == 0x3F80
