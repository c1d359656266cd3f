"""Lesson 05, bf16 on the host: rounding float32 to bf16 by hand and bf16's spacing (the Explore
exercises), the end-of-lesson questions on what bf16 keeps, and the error histogram lesson 06's
tolerance section draws too."""
from __future__ import annotations

import numpy as np

from ...core.bf16 import bfloat16, bits, to_bf16
from ...course.plots import COPY_COLOR, _outside_pyplot
from ...course.verdict import Verdict, call_answer, choice_verdict, failed, passed, read_number


def _test_values() -> np.ndarray:
    rng = np.random.default_rng(5)
    parts = [rng.standard_normal(4000) * 10.0 ** rng.integers(-30, 30, 4000),
             rng.uniform(-1, 1, 4000)]
    # exact ties: the low 16 bits are 0x8000, with the kept part even and odd
    hi = rng.integers(0x0080, 0x7F00, 2000, dtype=np.uint32) << 16
    parts.append((hi | 0x8000).view(np.float32))
    parts.append(((hi | 0x10000) | 0x8000).view(np.float32))
    # just below and just above a tie, and values that carry into the exponent
    parts.append((hi | 0x7FFF).view(np.float32))
    parts.append((hi | 0x8001).view(np.float32))
    parts.append((hi | 0xFFFF).view(np.float32))
    parts.append(np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 3.0e38, 1e-40], np.float32))
    x = np.concatenate([np.asarray(p, np.float32) for p in parts])
    return x[~np.isnan(x)]


def check_bf16_round(fn) -> Verdict:
    """``fn(x)`` takes a float32 array and returns the bf16 bit patterns as uint16 (round to nearest
    even)."""
    x = _test_values()
    got, verdict = call_answer(fn, x.copy())
    if verdict is not None:
        return verdict
    got = np.asarray(got)
    if got.dtype == bfloat16:
        got = bits(got)
    if got.shape != x.shape:
        return failed(f"expected one value per input, shape {x.shape}; got shape {got.shape}")
    if got.dtype != np.uint16:
        if np.issubdtype(got.dtype, np.integer) and got.min() >= 0 and got.max() <= 0xFFFF:
            got = got.astype(np.uint16)
        else:
            return failed("return the 16-bit patterns as np.uint16 (e.g. .astype(np.uint16)); got "
                          f"{got.dtype}")
    want = bits(to_bf16(x))
    bad = got != want
    if not bad.any():
        return passed(f"all {x.size} values round exactly as ml_dtypes (and __float2bfloat16) do")
    u = x.view(np.uint32)
    truncated = (u >> 16).astype(np.uint16)
    i = int(np.flatnonzero(bad)[0])
    if np.array_equal(got, truncated):
        return failed("that truncates (drops the low 16 bits); bf16 conversion rounds to the "
                      "nearest value")
    tie = (u & 0xFFFF) == 0x8000
    if bad[~tie].sum() == 0:
        return failed(f"right except on exact ties ({int(bad.sum())} values): a tie goes to the "
                      f"even neighbour (add 0x7FFF plus the lowest kept bit)")
    return failed(f"{int(bad.sum())} of {x.size} values differ; e.g. x = {float(x[i])!r} (bits "
                  f"{int(u[i]):#010x}): you gave {int(got[i]):#06x}, it is {int(want[i]):#06x}")


def _half_spacing(lo: float) -> float:
    e = np.floor(np.log2(lo))
    return float(2.0 ** (e - 7) / 2)


def check_half_ulp(answer, lo: float = 32.0) -> Verdict:
    """The largest |bf16(x) - x| over x in [lo, 2*lo) (lo a power of two), in absolute terms."""
    value, verdict = read_number(answer, "with a number")
    if verdict is not None:
        return verdict
    want = _half_spacing(lo)
    if abs(value - want) <= 1e-3 * want:  # 0.000244 for 2**-12 is the same answer
        value = want
    if value == want:
        return passed(f"bf16 numbers in [{lo:g}, {2 * lo:g}) are {2 * want:g} apart, so rounding "
                      f"moves a value by at most {want:g}")
    if value == 2 * want:
        return failed("that is the spacing (one ulp); rounding to the nearest moves a value at "
                      "most half of it")
    if value in (want / 2 ** 16, 2 * want / 2 ** 16):  # float32's half spacing or spacing
        return failed("that is float32's rounding; bf16 keeps 8 significant bits, float32 24")
    return failed(f"not {value:g}: bf16 keeps 8 significant bits (7 stored), so between {lo:g} and "
                  f"{2 * lo:g} there are 2**7 evenly spaced values")


# --- the questions at the lesson's end -----------------------------------------------------------

def check_sum_stalls(answer) -> Verdict:
    """A bf16 accumulator starts at 0; 1.0 is added to it 1000 times, the sum rounded to bf16 after
    every addition (to the nearest, ties to even). What does it hold at the end?"""
    value, verdict = read_number(answer, "with a number")
    if verdict is not None:
        return verdict
    if value == 256:
        return passed("every whole number up to 256 is a bf16 value; from 256 on they are 2 "
                      "apart, so 256 + 1 is a tie, and it goes to 256, whose last kept bit is 0: "
                      "every further addition is lost. Hence v4's fp32 accumulator for dweight, "
                      "rounded once")
    if value == 1000:
        return failed("that is the exact sum; the sum is rounded to bf16 after every addition. "
                      "Up to which whole number are all whole numbers bf16 values (8 significant "
                      "bits)?")
    if value in (255, 257, 258, 512, 1024):
        return failed("find the first whole number n where n + 1 is no longer a bf16 value, "
                      "then where n + 1 rounds to (a tie goes to the neighbour whose last kept bit "
                      "is 0)")
    return failed(f"not {value:g}: bf16 keeps 8 significant bits; find where the spacing of bf16 "
                  "numbers reaches 2, and what adding 1.0 does there")


def check_range(answer) -> Verdict:
    """A gradient of 70000 is stored in 16 bits. fp16 has 5 exponent bits and 10 stored mantissa
    bits (its largest finite value is 65504); bf16 has 8 exponent bits and 7 stored mantissa bits.
    Which format holds a finite value near 70000? (a) both; (b) bf16 only; (c) fp16 only."""
    return choice_verdict(
        answer, "b", why="bf16 keeps float32's 8 exponent bits, so its range is float32's (up to "
                         "about 3.4e38); 70000 rounds to a nearby bf16 value. fp16 overflows to "
                         "inf above 65504: its extra mantissa bits buy precision, not range",
        why_not={"a": "compare 70000 with fp16's largest finite value: what happens to a value "
                      "above it?",
                 "c": "which of the two has more exponent bits? The exponent, not the mantissa, "
                      "sets how large a value can be"})


def bf16_error_histogram(samples: dict, limit: float | None = None, xlabel: str = "error",
                         title: str = "", bins: int = 60):
    """Histograms (log x) of non-negative errors, one per label, with an optional limit line.

    ``samples``: ``{label: array}``. Each histogram shows fractions of its own values, so arrays of
    different sizes compare; zeros are counted in the legend, not drawn (log axis).
    """
    fig, ax = _outside_pyplot()
    arrays = {k: np.abs(np.asarray(v, dtype=np.float64)).ravel() for k, v in samples.items()}
    positive = np.concatenate([a[a > 0] for a in arrays.values()] or [np.array([1.0])])
    positive = positive[np.isfinite(positive)]
    lo = positive.min() if positive.size else 1e-8
    hi = max(positive.max() if positive.size else 1.0, limit or 0)
    edges = np.geomspace(lo, hi * 1.05, bins)
    for label, a in arrays.items():
        zeros = int((a == 0).sum())
        text = f"{label} ({a.size} values" + (f", {zeros} exact" if zeros else "") + ")"
        ax.hist(a[a > 0], bins=edges, histtype="step", lw=1.3, label=text,
                weights=np.full(int((a > 0).sum()), 1.0 / max(a.size, 1)))
    if limit is not None:
        ax.axvline(limit, color=COPY_COLOR, ls="--", lw=1.2, label=f"limit {limit:.3g}")
    ax.set_xscale("log")
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel("fraction of values", fontsize=8)
    ax.tick_params(labelsize=7)
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return fig
