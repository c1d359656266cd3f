"""Lesson 13's questions: the first row whose 32-bit offset wraps (section 4, from lesson 08), and
at the lesson's end, reading a profile: the DRAM peak behind ncu's percentage, a DRAM percentage,
the blocks a plan needs for an occupancy, the highest occupancy a plan allows."""
from __future__ import annotations

from ...core import gpu, ladder
from ...course.verdict import Verdict, failed, passed, read_number

def check_wrap_row(answer, C: int = 16384) -> Verdict:
    """The first row whose offset ``row * C``, computed in 32-bit ``int``, wraps."""
    got, verdict = read_number(answer, "with a row number", whole=True)
    if verdict is not None:
        return verdict
    want = (2**31 - 1) // C + 1
    if got == want:
        return passed(f"row {want}: {want} x {C} = {want * C} > 2**31 - 1, the largest int")
    for wrong, hint in ((want - 1, "that row's offset still fits: it is the last row that does"),
                        ((2**32 - 1) // C + 1, "an int is signed: it wraps past 2**31 - 1, not "
                                               "2**32 - 1")):
        if got == wrong:
            return failed(f"{got} is not it: {hint}")
    return failed(f"{got} is not it: find the smallest row with row * C > 2**31 - 1")


def dram_peak(profile, version: str = "v6_last_block") -> tuple[float, float, str]:
    """``(peak GB/s, bytes, where the bytes come from)``: the DRAM peak ncu's percentage is of,
    from a profile's DRAM bytes, duration and DRAM %; where the profile has no DRAM bytes, the bytes
    the rung must move (:meth:`rmsnorm_lessons.core.ladder.Rung.bytes_moved`)."""
    if not profile.duration_us or not profile.dram_pct:
        raise ValueError(f"the profile of {version} has no duration or DRAM % to read")
    if profile.dram_bytes:
        moved, where = float(profile.dram_bytes), "the DRAM bytes ncu counted"
    else:
        moved = float(ladder.get(version).bytes_moved(*profile.shape))
        where = f"the bytes {version} must move (this profile counted none)"
    return moved / (profile.duration_us * 1e-6) / (profile.dram_pct / 100) / 1e9, moved, where


def check_dram_peak(answer, opening=None) -> Verdict:
    """Q1: from v6's profile at 16384 x 2048 (its DRAM bytes, ncu duration and DRAM %), the DRAM
    peak in GB/s that ncu's percentage is of (within 2 %). ``opening``: default the ladder's
    (:func:`rmsnorm_lessons.lessons.lesson13.ladder_profile`: measured now, else saved)."""
    got, verdict = read_number(answer, "with a number of GB/s")
    if verdict is not None:
        return verdict
    if opening is None:
        from .roofline import ladder_profile

        opening = ladder_profile("v6_last_block")
    p = opening.profile
    want, moved, where = dram_peak(p)
    achieved = moved / (p.duration_us * 1e-6) / 1e9
    # the copy bandwidth of the card that measured the profile (the opening's bench time was timed
    # against it), else this GPU's or the saved one
    timing = getattr(opening, "timing", None)
    copy = timing.copy_gbps if timing is not None else gpu.copy_bandwidth_or_saved()[0]
    if abs(got - want) <= 0.02 * want:
        return passed(f"{want:,.0f} GB/s: {moved / 1e6:.1f} MB ({where}) in {p.duration_us:.1f} "
                      f"us is {achieved:,.0f} GB/s, {p.dram_pct:.1f} % of it. It is the memory's "
                      f"theoretical peak, above the copy bandwidth the course measures "
                      f"({copy:,.0f} GB/s): ncu's line of 60 % is of this one ({opening.source})")
    for wrong, hint in (
        (achieved, "that is what v6 achieved: ncu's DRAM % says what fraction of the peak it is"),
        (want * 100, "the DRAM % is a percentage: divide by 100 before dividing by it"),
        (want / 100, "the DRAM % is a percentage: 58 % is 0.58"),
        (want * 1e3, "us is 1e-6 s and GB/s is 1e9 bytes a second: check the powers of ten"),
        (want / 1e3, "us is 1e-6 s and GB/s is 1e9 bytes a second: check the powers of ten"),
        (copy, "that is the copy bandwidth: ncu's percentage is of the memory's theoretical "
               "peak, which copy does not reach"),
    ):
        if abs(got - wrong) <= 0.02 * abs(wrong):
            return failed(f"{got:g} GB/s is not it: {hint}")
    return failed(f"{got:g} GB/s is not it: bytes / duration is the rate v6 reached; ncu's DRAM % "
                  "is that rate over the peak")


def check_dram_percent(percent, moved_MB=120, took_us=40, peak_TBps=4.8) -> Verdict:
    """Q2: the DRAM throughput, in % of peak, of a launch that moves ``moved_MB`` MB (each byte
    once through DRAM) in ``took_us`` us on a GPU whose DRAM peak is ``peak_TBps`` TB/s."""
    got, verdict = read_number(percent, "with the DRAM throughput in % of the peak (a number)")
    if verdict is not None:
        return verdict
    want = 100.0 * (moved_MB * 1e6 / (took_us * 1e-6)) / (peak_TBps * 1e12)
    if abs(got - want) <= 0.5:
        return passed(f"{moved_MB} MB in {took_us} microseconds is {moved_MB / took_us:g} TB/s, "
                      f"{want:g} % of {peak_TBps:g} TB/s")
    if abs(100.0 * got - want) <= 0.5:
        return failed("that is a fraction of the peak: give it in %")
    return failed(f"{got:g} % is not it: bytes over seconds gives the throughput; check the units "
                  "(MB is 1e6 bytes, us is 1e-6 s, TB/s is 1e12 bytes a second)")


def blocks_for(target_pct: float, threads: int, slots: int = 64) -> int:
    """Blocks of ``threads`` an SM needs so that their warps fill ``target_pct`` % of its
    ``slots`` warp slots."""
    warps = threads // 32
    return -(-int(round(target_pct * slots / 100)) // warps)


def check_blocks_for_occupancy(answer, blocks: int = 2, threads: int = 192, slots: int = 64,
                               target_pct: float = 50) -> Verdict:
    """Q3: a plan runs ``blocks`` blocks of ``threads`` threads an SM (``slots`` warp slots) and
    reads latency-bound at 19 % achieved occupancy. How many such blocks per SM would let achieved
    occupancy reach ``target_pct`` %?"""
    got, verdict = read_number(answer, "with a number of blocks per SM", whole=True)
    if verdict is not None:
        return verdict
    warps = threads // 32
    want = blocks_for(target_pct, threads, slots)
    need = int(round(target_pct * slots / 100))
    if got == want:
        return passed(f"{want}: {want} x {warps} = {want * warps} warps of {slots} slots, "
                      f"{100 * want * warps / slots:.1f} % at most (the plan's {blocks} blocks: "
                      f"{100 * blocks * warps / slots:.1f} %), the first count at or above "
                      f"{target_pct:g} %; achieved occupancy stays below it (blocks end and start)")
    if got == want - 1:
        return failed(f"{got} blocks are {got * warps} warps, under the {need} that "
                      f"{target_pct:g} % of {slots} slots are")
    if got < want - 1:
        return failed(f"{got} blocks are {got * warps} warps: {100 * got * warps / slots:.1f} % "
                      "of the slots at most")
    return failed(f"{got} blocks are {got * warps} warps, more than the {need} that "
                  f"{target_pct:g} % asks: the fewest blocks that reach it (occupancy is counted "
                  "in warp slots, not scaled from the achieved figure)")


def check_occupancy_cap(percent, blocks=2, threads=384, warp_slots=64) -> Verdict:
    """Q4: the highest achieved occupancy (%) of a plan that runs ``blocks`` blocks of ``threads``
    threads on each SM, where an SM holds at most ``warp_slots`` warps."""
    got, verdict = read_number(percent, "with the occupancy in % (a number)")
    if verdict is not None:
        return verdict
    warps = blocks * threads // 32
    want = 100.0 * warps / warp_slots
    if abs(got - want) <= 0.2:
        return passed(f"{blocks} x {threads} threads are {warps} warps of {warp_slots}: "
                      f"{want:g} %; achieved occupancy, an average over the launch, can only be "
                      "lower")
    if abs(100.0 * got - want) <= 0.2:
        return failed("that is a fraction: give it in %")
    return failed(f"{got:g} % is not it: count the warps the SM holds at once (a warp is 32 "
                  "threads) and divide by the warps it could hold")
