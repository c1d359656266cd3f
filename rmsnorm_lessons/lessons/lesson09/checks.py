"""Lesson 09's checks besides the kernel exercise: the decision (the bytes in flight an SM needs,
by Little's law and by the scale table) and the questions at the lesson's end.

The decision and question 2 read the lesson's own run (:func:`.inflight.measured`): the copy
bandwidth, the SMs, the pointer chase and the scale table measured in this process, else the saved
run of the same cells. A check never holds a measured figure of its own.
"""
from __future__ import annotations

from ...course.verdict import Verdict, failed, passed, read_number
from . import inflight

#: a row of the scale table within this fraction of the fastest row's time is on its flat part
FLAT_WITHIN = 0.03


def _close(got: float, want: float, rel: float = 0.01) -> bool:
    return abs(got - want) <= rel * abs(want)


# --- the decision: bytes in flight per SM
# --------------------------------------------------------------


def in_flight_for_copy(copy_gbps: float, latency_ns: float, sms: int) -> float:
    """Bytes of loads each SM must keep outstanding for ``y = a * x`` to run at the copy bandwidth:
    it reads half of the bytes it moves, so its loads must bring copy / 2 (Little's law), shared by
    ``sms``."""
    return inflight.needed_in_flight(copy_gbps / 2, latency_ns) / sms


def flat_row(run: inflight.Run) -> inflight.ScaleTiming:
    """The row of ``run``'s scale table with the fewest KiB of loads per SM among those whose time
    is within :data:`FLAT_WITHIN` of the fastest row's (ties: the faster)."""
    fastest = min(p.ms for p in run.points)
    near = [p for p in run.points if p.ms <= (1 + FLAT_WITHIN) * fastest]
    return min(near, key=lambda p: (p.in_flight_per_sm, p.ms))


def _flat_hint(got: float, run: inflight.Run, want: float, need: float) -> str:
    """Why ``got`` KiB is not where the table flattens."""
    fastest = min(run.points, key=lambda p: p.ms)
    at = [p for p in run.points if abs(p.in_flight_per_sm / 1024 - got) < 1e-9]
    if _close(got, want * 1024):
        return "flat_kib is in KiB (1024 bytes), not bytes"
    if _close(got, need / 1024, 0.05):
        return ("that is Little's law with the latency of a load alone; flat_kib is read from "
                "the table: where do more KiB stop buying time?")
    if not at:
        return (f"no row of the table has {got:g} KiB per SM: read the KiB/SM column of the rows "
                "whose time is close to the fastest")
    if got > want and any(p.ms <= (1 + FLAT_WITHIN) * fastest.ms for p in at):
        return (f"rows at {got:g} KiB are within {100 * FLAT_WITHIN:g} % of the fastest time, "
                "but so is a row with fewer KiB per SM: where does the flat part start?")
    slowest = max(p.ms for p in at)
    return (f"the row(s) at {got:g} KiB take up to {100 * (slowest / fastest.ms - 1):.0f} % longer "
            f"than the fastest row: more than {100 * FLAT_WITHIN:g} %, not yet on the flat part")


def _need_hint(got: float, want: float, run: inflight.Run) -> str | None:
    """Why ``got`` bytes is not Little's law's need per SM, where a likely slip explains it."""
    chase = run.chase
    for wrong, hint in (
        (2 * want,
         "the copy bandwidth counts bytes read plus written; y = a * x reads only half of what it "
                   "moves, so its loads must bring copy / 2"),
        (want * run.sms, "that is for the whole GPU: divide by the SMs"),
        (want / 1024, "that is KiB: need_per_sm is in bytes"),
        (want * chase.l2_ns / chase.dram_ns,
         "that uses L2's latency: the loads of a kernel streaming 256 MiB come from DRAM"),
        (want * 1e3, "ns are 1e-9 s: GB/s x 1e9 x ns x 1e-9"),
        (want * 1e-3, "ns are 1e-9 s: GB/s x 1e9 x ns x 1e-9"),
    ):
        if _close(got, wrong, 0.02):
            return hint
    return None


def check_in_flight(need_per_sm, flat_kib, run: inflight.Run | None = None) -> Verdict:
    """The lesson's decision: ``need_per_sm``, the bytes of loads each SM must keep in flight for
    ``y = a * x`` to run at the copy bandwidth by Little's law with the DRAM latency the chase
    measured (within 2 %); ``flat_kib``, the fewest KiB per SM whose row in the scale table runs
    within 3 % of the fastest row (:func:`flat_row`). ``run``: the lesson's run (default
    :func:`.inflight.measured`: this process's, else the saved one)."""
    need_got, verdict = read_number(need_per_sm, "with a number of bytes per SM (need_per_sm)")
    if verdict is not None:
        return verdict
    flat_got, verdict = read_number(flat_kib, "with a number of KiB per SM (flat_kib)")
    if verdict is not None:
        return verdict
    run = run if run is not None else inflight.measured()
    need = in_flight_for_copy(run.copy_gbps, run.chase.dram_ns, run.sms)
    flat = flat_row(run)
    want_flat = flat.in_flight_per_sm / 1024
    problems = []
    if not _close(need_got, need, 0.02):
        hint = _need_hint(need_got, need, run) or (
            f"off by {100 * (need_got / need - 1):+.0f} %: bytes in flight = bandwidth x latency "
            "(GB/s x 1e9 x ns x 1e-9), with bandwidth = copy / 2 (the loads' share), per SM")
        problems.append(f"need_per_sm {need_got:g} is not it: {hint}")
    if abs(flat_got - want_flat) > 1e-9:
        problems.append(f"flat_kib {flat_got:g} is not it: "
                        f"{_flat_hint(flat_got, run, want_flat, need)}")
    if problems:
        return failed("; ".join(problems) + f" ({run.source})")
    slower = flat.in_flight_per_sm / need
    where = (f"{flat.variant} at {flat.blocks_per_sm} block(s) per SM" if flat.blocks_per_sm
             else f"{flat.variant}, one thread per element")
    return passed(f"Little's law asks {need / 1024:.1f} KiB per SM ({run.copy_gbps / 2:.0f} GB/s "
                  f"of loads x {run.chase.dram_ns:.0f} ns / {run.sms} SMs); the table flattens "
                  f"at {want_flat:g} KiB ({where}, {100 * flat.fraction_of_copy:.1f} % of copy). "
                  f"So under load a load takes about {slower:.1f} times as long as alone, "
                  f"{slower * run.chase.dram_ns:.0f} ns: plan for the table's KiB, not the "
                  f"unloaded latency's ({run.source})")


# --- the questions at the lesson's end
# ----------------------------------------------------------------


def check_in_flight_kib(answer, variant: str = "scale_f32_x4", threads: int = 3 * 256) -> Verdict:
    """KiB of loads in flight per SM for ``variant`` with ``threads`` resident per SM."""
    got, verdict = read_number(answer, "with a number of KiB per SM")
    if verdict is not None:
        return verdict
    width, loads = inflight.width_and_loads(variant)
    want = inflight.in_flight_per_sm(variant, threads) / 1024
    if _close(got, want):
        return passed(f"{want:g} KiB: {threads} threads x {width} B x {loads} loads before use")
    for wrong, hint in ((want / loads, "each thread issues several loads before it uses the first"),
                        (want * 4, f"{variant} loads {width} bytes at a time"),
                        (want * 1024, "that is bytes: the answer is in KiB"),
                        (want / 3, "count every block resident on the SM")):
        if _close(got, wrong):
            return failed(f"{got:g} is not it: {hint}")
    return failed(f"{got:g} is not it: threads per SM x bytes per load x loads before use")


def threads_for(gbps: float, latency_ns: float, load_bytes: int = 4) -> float:
    """Threads, each with one ``load_bytes`` load in flight, that read ``gbps`` at ``latency_ns``
    per load (Little's law)."""
    return inflight.needed_in_flight(gbps, latency_ns) / load_bytes


def check_threads_for_bandwidth(answer, gbps: float = 1000.0,
                                run: inflight.Run | None = None) -> Verdict:
    """Q2: with the DRAM latency the chase measured, how many threads, each with one 4-byte load in
    flight, read at ``gbps`` (1 TB/s)? Within 2 %; ``run`` as :func:`check_in_flight`'s."""
    got, verdict = read_number(answer, "with a number of threads")
    if verdict is not None:
        return verdict
    run = run if run is not None else inflight.measured()
    latency = run.chase.dram_ns
    want = threads_for(gbps, latency)
    if _close(got, want, 0.02):
        return passed(f"{want:,.0f} threads: {gbps:g} GB/s x {latency:.0f} ns = "
                      f"{want * 4 / 1024:,.0f} KiB in flight, 4 bytes each: "
                      f"{want / run.sms:,.0f} per SM, where an SM holds at most 2048 threads "
                      f"({run.source})")
    for wrong, hint in (
        (want * 1e3, "ns are 1e-9 s and GB/s is 1e9 bytes a second: check the powers of ten"),
        (want * 1e-3, "ns are 1e-9 s and GB/s is 1e9 bytes a second: check the powers of ten"),
        (want * 4, "that counts bytes in flight: each thread holds 4 of them"),
        (want / run.sms, "that is per SM: the question asks for the whole GPU's threads"),
        (threads_for(gbps, run.chase.l2_ns),
         "that uses L2's latency: the question asks for a load from DRAM"),
    ):
        if _close(got, wrong, 0.02):
            return failed(f"{got:g} is not it: {hint}")
    return failed(f"{got:g} is not it: Little's law, bytes in flight = bandwidth x latency; one "
                  "thread keeps 4 of them")
