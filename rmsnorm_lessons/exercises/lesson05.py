"""Lesson 05 (bf16, 128-bit): rounding float32 to bf16 by hand, and bf16's spacing."""
from __future__ import annotations

import numpy as np

from ..bf16 import bfloat16, bits, to_bf16
from . import Verdict, call_answer, failed, passed, read_number


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


# --- the kernel exercise: v4's 128-bit loads and stores, the bf16 round trip, the planar staging
# ----------

#: staged() left as the interleaved slot (c): right results, an 8-way bank conflict on every shared
#: atomic
INTERLEAVED_SLOT = r"int\s+staged\s*\([^)]*\)\s*\{\s*return\s+c\s*;\s*\}"
#: when dweight alone is wrong: the slots are where to look
SLOT_HINT = ("where dinp is right, look at the staging: staged() must give each channel 0..C-1 a "
             "slot of its own in 0..C-1 (channel 8q + k at k * (C / 8) + q, with C / 8 chunks, not "
             "32), and the last loop reads channel c back from staged(c, C)")


def only_wide_row_accesses(kernel: str):
    """Every LDG of ``kernel`` is 128 bits wide but one 32-bit load (``rstd[row]``), and every STG
    is 128 bits wide: a row tensor read or written narrower anywhere is NOT YET (counting the
    128-bit loads alone lets one narrowed load through the unrolled loops)."""
    from . import kernel_static as ks

    def test(c):
        ins = c.instructions(kernel)
        narrow_loads = [i.opcode for i in ks._matching(ins, "LDG") if ".128" not in i.opcode]
        narrow_stores = [i.opcode for i in ks._matching(ins, "STG") if ".128" not in i.opcode]
        if len(narrow_loads) <= 1 and not narrow_stores:
            return None
        found = ", ".join(sorted(set(narrow_loads[1:] + narrow_stores)))
        return (f"a row of dout, inp, weight or dinp is read or written narrower than 128 bits "
                f"({len(narrow_loads) - 1 + len(narrow_stores)} x {found} besides rstd's one "
                f"32-bit load): every row access goes through load128 / store128 (Packed128)")

    return ks.Static("no row access narrower than 128 bits (rstd's one 32-bit load aside)", test)


def check_v4_kernel(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 05's kernel exercise: the learner's ``rmsnorm_backward_v4`` and ``add_dweight_v4``
    (bf16 storage, Packed128, channel-planar staging), checked as the rung ``yours_v4`` with
    v4_vec_bf16's plan, and timed beside v4_vec_bf16.
    compute-sanitizer's race check runs by default; ``sanitize=False`` skips it, for speed."""
    from . import kernel_check as kc

    kernel = "rmsnorm_backward_v4"
    return kc.check_kernel(
        source, name="yours_v4", like="v4_vec_bf16", sanitize_it=sanitize,
                           hints={"dweight wrong": SLOT_HINT},
        static=(kc.sass_has("LDG.128", "128-bit loads (LDG.E.128) of dout, inp, weight and dinp",
                            "load 8 bf16 values at once with load128 / load128cs (Packed128)",
                            kernel=kernel,
                            at_least=7),
                kc.sass_has("STG.128", "a 128-bit store (STG.E.128) of dinp",
                            "store the 8 new dinp values with one 128-bit store (store128cg), not "
                            "one by one",
                            kernel=kernel),
                kc.source_lacks(INTERLEAVED_SLOT, "staged() is not the interleaved slot c",
                                "staged() returns c, the interleaved slot: for one k the 32 lanes "
                                "then hit banks (8 * lane + k) % 32, 4 banks with 8 lanes each, an "
                                "8-way conflict on every shared atomic; return the planar slot of "
                                "channel c = 8q + k, k * (C / 8) + q"),
                only_wide_row_accesses(kernel),
                kc.no_local_memory(kernel)))
