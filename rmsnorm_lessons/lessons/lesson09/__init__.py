"""Lesson 09 (bytes in flight): the floor time of a shape, Little's law, and a kernel that keeps
more bytes in flight.

The copy bandwidth defaults to this GPU's (measured now); where there is no GPU, to the H200's saved
figure (:func:`rmsnorm_lessons.core.gpu.copy_bandwidth_or_saved`). The kernel exercise is not a
rung: it is
``y = a * x`` with 128-bit loads, several issued per thread before the first is used, checked
against NumPy on the GPU (with its output poisoned and guarded past the end), its SASS checked
without one, and timed against the copy bandwidth and lesson 00's one-float-per-thread ``scale``.
"""
from __future__ import annotations

import re

import numpy as np

from ...core import gpu, ladder
from ...course.checking import cpu
from ...course.checking import kernel as kc
from ...course.checking.diagnosis import found
from ...course.verdict import Verdict, choice_verdict, failed, passed, read_number
from . import inflight
from .plots import bytes_in_flight, fixed_cost, floor_and_fixed, memory_levels  # noqa: F401


def bytes_moved(N: int, C: int, overwrite: bool = False, version: str = "v7_fast") -> int:
    """What v7_fast must move (:meth:`rmsnorm_lessons.core.ladder.Rung.bytes_moved`): dout, inp,
    (dinp read unless overwriting), dinp written; rstd (4 bytes a row); weight read, dweight read
    and written."""
    return ladder.get(version).bytes_moved(N, C, overwrite)


def floor_us(N: int, C: int, copy_gbps: float, overwrite: bool = False) -> float:
    """The time moving those bytes takes at the copy bandwidth (GB/s = 1e9 bytes per second), in
    us."""
    return bytes_moved(N, C, overwrite) / (copy_gbps * 1e9) * 1e6


def _close(got: float, want: float, rel: float = 0.01) -> bool:
    return abs(got - want) <= rel * abs(want)


def check_floor_time(answer_us, N: int = 32768, C: int = 1024, copy_gbps: float | None = None,
                     overwrite: bool = False) -> Verdict:
    """``answer_us``: the floor time of one backward call at (N, C) in microseconds (within 1 %), at
    ``copy_gbps`` (default: measured now on this GPU, else the H200's saved figure)."""
    got, verdict = read_number(answer_us, "with a number of microseconds")
    if verdict is not None:
        return verdict
    if copy_gbps is None:
        copy_gbps, _ = gpu.copy_bandwidth_or_saved()
    want = floor_us(N, C, copy_gbps, overwrite)
    if _close(got, want):
        return passed(f"{want:.1f} us: {bytes_moved(N, C, overwrite) / 1e6:.1f} MB at "
                      f"{copy_gbps:.0f} GB/s. No kernel with these semantics runs much faster on "
                      "this GPU")
    other = floor_us(N, C, copy_gbps, not overwrite)
    # the same count with 4-byte values: what an fp32 rung (v1_naive) moves
    bf16_as_fp32 = bytes_moved(N, C, overwrite, version="v1_naive") / (copy_gbps * 1e9) * 1e6
    for wrong, hint in (
        (other,
         "you counted the tensors of the other mode: with dinp += the kernel reads dinp too (4 row "
                "tensors), with dinp = it does not (3)"),
        (want * 1e-3, "that is milliseconds: the answer is in microseconds (x 1000)"),
        (want * 1e3, "that is nanoseconds: the answer is in microseconds (/ 1000)"),
        (bf16_as_fp32, "the tensors are bf16: 2 bytes per value, not 4"),
        (want / 2,
         "count both directions: the copy bandwidth counts bytes read plus bytes written, and so "
                   "must the kernel's bytes (every tensor once, dinp once each way)"),
        (want * 1.073741824, "GB/s here means 1e9 bytes per second, not 2**30"),
        (want / 1.073741824, "GB/s here means 1e9 bytes per second, not 2**30"),
    ):
        if _close(got, wrong, 0.02):
            return failed(f"{got:g} us is not it: {hint}")
    return failed(f"{got:g} us is off by {100 * (got / want - 1):+.0f} %: bytes = (row tensors) * "
                  f"N * C * 2 + 4 * N + 3 * C * 2, time = bytes / (GB/s * 1e9)")


# --- Little's law
# ---------------------------------------------------------------------------------------


def in_flight_for_copy(copy_gbps: float, latency_ns: float, sms: int) -> float:
    """Bytes of loads each SM must keep outstanding for ``y = a * x`` to run at the copy bandwidth:
    it reads half of the bytes it moves, so its loads must bring copy / 2 (Little's law), shared by
    ``sms``."""
    return inflight.needed_in_flight(copy_gbps / 2, latency_ns) / sms


def check_in_flight(answer_bytes, copy_gbps: float | None = None, latency_ns: float = 800.0,
                    sms: int | None = None) -> Verdict:
    """``answer_bytes``: the bytes of loads per SM that ``y = a * x`` needs in flight to reach the
    copy bandwidth, at ``latency_ns`` per load (within 2 %). ``sms`` defaults to this GPU's (else
    the H200's)."""
    got, verdict = read_number(answer_bytes, "with a number of bytes per SM")
    if verdict is not None:
        return verdict
    if copy_gbps is None:
        copy_gbps, _ = gpu.copy_bandwidth_or_saved()
    if sms is None:
        sms = gpu.facts_or_fallback()[0].multiprocessors
    want = in_flight_for_copy(copy_gbps, latency_ns, sms)
    scale = 2048 * 4  # lesson 00's scale: 2048 threads per SM, one 4-byte load each
    if _close(got, want, 0.02):
        return passed(f"{want / 1024:.1f} KiB per SM ({want * sms / 2**20:.2f} MiB on {sms} SMs): "
                      f"{copy_gbps / 2:.0f} GB/s of loads x {latency_ns:g} ns. Lesson 00's scale "
                      f"asks for {scale // 1024} KiB (2048 threads x 4 B): "
                      f"{100 * scale / want:.0f} % of it")
    for wrong, hint in (
        (2 * want,
         "the copy bandwidth counts bytes read plus written; y = a * x reads only half of what it "
                   "moves, so its loads must bring copy / 2"),
        (want * sms, "that is for the whole GPU: divide by the SMs"),
        (want / 1024, "that is KiB: the answer is in bytes"),
        (want / 1e3, "that is kB: the answer is in bytes"),
        (2 * want * sms,
         "that is the whole GPU's, at the full copy rate: loads bring copy / 2, shared by the SMs"),
    ):
        if _close(got, wrong, 0.02):
            return failed(f"{got:g} is not it: {hint}")
    return failed(f"{got:g} is off by {100 * (got / want - 1):+.0f} %: bytes in flight = bandwidth "
                  "x latency (GB/s x 1e9 x ns x 1e-9), with bandwidth = copy / 2 (the loads' "
                  "share), per SM")


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


def check_chase(answer) -> Verdict:
    """Why a pointer chase measures one load's latency:
    a) each load's address is the value the previous load returned, so one load is in flight;
    b) one thread cannot issue loads faster than one per nanosecond;
    c) its random order makes every load miss every cache."""
    return choice_verdict(answer, "a", {
        "b": "a thread issues independent loads back to back, without waiting for any: "
             "section 3's unrolled scale does",
        "c": "missing the caches makes each load slow, not alone; the 8 MiB chain hits L2 and is "
             "still a latency"},
        "time / steps is one load's round trip, with nothing queued beside it")


def check_latency_under_load(answer_ns, moved_gbps: float = 3800.0, per_sm_kib: float = 16,
                             sms: int = 132) -> Verdict:
    """The latency per load Little's law gives for ``y = a * x`` moving ``moved_gbps`` (read plus
    written) with ``per_sm_kib`` of loads in flight on each of ``sms`` SMs, in ns."""
    got, verdict = read_number(answer_ns, "with a number of nanoseconds")
    if verdict is not None:
        return verdict
    want = sms * per_sm_kib * 1024 / (moved_gbps / 2)  # bytes / (1e9 B/s) = ns
    if _close(got, want):
        return passed(f"{want:.0f} ns: {sms} x {per_sm_kib:g} KiB in flight / {moved_gbps / 2:g} "
                      "GB/s of loads. Under load a load takes longer than alone")
    for wrong, hint in ((want / 2, "the loads bring only the bytes read: half of what it moves"),
                        (want / sms, "every SM has its own loads in flight: count them all"),
                        (want * 1000 / 1024, "a KiB is 1024 bytes"),
                        (want / 1000, "that is microseconds: the answer is in ns")):
        if _close(got, wrong):
            return failed(f"{got:g} is not it: {hint}")
    return failed(f"{got:g} is not it: Little's law, latency = bytes in flight / rate")


def check_l1_in_flight(answer) -> Verdict:
    """Loads that hit in L1, at the same rate as loads from HBM, need in flight:
    a) as many bytes;
    b) fewer bytes, in proportion to the shorter latency;
    c) more bytes."""
    return choice_verdict(answer, "b", {
        "a": "bytes in flight = rate x latency: the rate is the same, the latency is not",
        "c": "compare L1's bar with HBM's in the figure: which latency is shorter?"},
        "rate x latency, with L1's latency a fraction of HBM's")


# --- a part of a kernel file, to print only what a cell discusses
# ------------------------------------------------------


def _struct(text: str, name: str) -> str | None:
    """``struct name { ... };`` in CUDA source ``text`` with its leading comment lines, or None."""
    m = re.search(r"^((?:[ \t]*//.*\n)*)(?:template\s*<[^>]*>\s*\n)?struct\s+"
                  r"(?:alignas\([^)]*\)\s*)?" + re.escape(name) + r"\s*\{", text, re.M)
    if m is None:
        return None
    depth = 0
    for i in range(m.end() - 1, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[m.start():text.index(";", i) + 1]
    return None


def kernel_part(source: str, part: str) -> str:
    """The definition of function, kernel or struct ``part`` in ``source`` (a rung or a file under
    kernels/, as :func:`rmsnorm_lessons.core.build.kernel_source` takes), from its leading comment
    to its end: what a cell prints instead of the whole file. ValueError (listing the functions
    defined there) for a name the file does not define."""
    from ...core import build
    from ...course import notebook

    text = build.kernel_source(source)
    return _struct(text, part) or notebook.part_of(text, part)


# --- the kernel exercise: more bytes in flight
# ----------------------------------------------------------

KERNEL = "scale_wide"
UNROLL = 4  # the exercise's chunks per thread
BLOCK = 256
#: n4 (float4 chunks) of the GPU check: a partial last block, one chunk, whole blocks, a larger tail
CHECK_SIZES = (37 * BLOCK * UNROLL + 333, 1, 8 * BLOCK * UNROLL,
               1000 * BLOCK * UNROLL + BLOCK * UNROLL - 1)
# float4s past the end, filled with NaN: any write of the grid past n4 lands there
GUARD = BLOCK * UNROLL
TIME_FLOATS = 64 * 2**20


def _loads_before_store(kernel: str = KERNEL, at_least: int = UNROLL):
    """A static check: at least ``at_least`` 128-bit loads come before the first store in the
    SASS."""

    def test(c):
        ins = c.instructions(kernel)
        stores = kc._matching(ins, "STG")
        loads = kc._matching(ins, "LDG.128")
        first = stores[0].offset if stores else float("inf")
        before = sum(1 for i in loads if i.offset < first)
        if before >= at_least:
            return None
        return (f"only {before} LDG.E.128 before the first store: issue all {at_least} loads of a "
                "thread before the first y[...] = ... (a first loop of loads into v[k], then a "
                "loop of stores); a store between them makes each load wait for the one before, "
                "since y might be x")

    return kc.Static(f"{at_least} LDG.E.128 before the first store (all of a thread's loads in "
                     "flight at once)",
                     test)


def _static_checks():

    return (kc.sass_has("LDG.128", f"128-bit loads (at least {UNROLL} LDG.E.128)",
                        "no 128-bit loads: read x as float4, one 16-byte load per chunk (v[k] = "
                        "x[i]), not as four floats", kernel=KERNEL, at_least=UNROLL),
            kc.sass_has("STG.128", "128-bit stores (STG.E.128)",
                        "no 128-bit stores: write y[i] as one float4 (make_float4(a * v.x, ...))",
                        kernel=KERNEL),
            _loads_before_store(),
            kc.no_local_memory(KERNEL))


def _wrong_where(got: np.ndarray, want: np.ndarray) -> str:

    n4 = want.shape[0]
    never = np.flatnonzero(np.isnan(got[:n4]).any(axis=1))
    wrong = np.flatnonzero(~np.isnan(got[:n4]).any(axis=1) & (got[:n4] != want).any(axis=1))
    past = np.flatnonzero(~np.isnan(got[n4:]).all(axis=1))
    return "; ".join(found(
        (past, f"it wrote past the end: {past.size} of the {GUARD} float4 after y[n4 - 1] "
               "changed; guard every store with if (i < n4), the last block has threads past "
               "the end"),
        (never, f"{kc._ranges(never, n4, 'chunk')} never written (still NaN): does every thread "
                f"cover base + k * blockDim.x for k = 0..{UNROLL - 1}, and every k?"),
        (wrong, f"{kc._ranges(wrong, n4, 'chunk')} hold a wrong value: y[i] = a * x[i], the "
                f"chunk's own four floats (v[k] from x[base + k * blockDim.x])")))


def _run_scale(function_of) -> "object":
    """Run the learner's scale_wide at :data:`CHECK_SIZES` against NumPy, then time it (GPU). Only
    the check's child process calls it (:func:`check_scale_kernel`), never the notebook's."""
    from ...speed import bench

    drv = gpu.driver()
    fn = function_of(KERNEL)
    rng = np.random.default_rng(8)
    done = []
    for n4 in CHECK_SIZES:
        x = rng.standard_normal((n4, 4)).astype(np.float32)
        y = np.full((n4 + GUARD, 4), np.nan, np.float32)
        x_d, y_d = drv.to_device(x), drv.to_device(y)
        try:
            grid = -(-n4 // (BLOCK * UNROLL))
            fn(y_d, x_d, np.float32(-1.75), np.int32(n4), block=(BLOCK, 1, 1), grid=(grid, 1))
            drv.memcpy_dtoh(y, y_d)
        except Exception as exc:  # the learner's kernel: an illegal address, ...
            return kc.Outcome(False, f"at n4 = {n4} running it failed: {type(exc).__name__}: "
                                     f"{str(exc)[:300]}", ("error",))
        finally:
            x_d.free()
            y_d.free()
        want = np.float32(-1.75) * x
        if not (np.array_equal(y[:n4], want) and np.isnan(y[n4:]).all()):
            ok_so_far = f" (right at n4 = {', '.join(map(str, done))})" if done else ""
            return kc.Outcome(False, f"at n4 = {n4}{ok_so_far}: {_wrong_where(y, want)}",
                              ("wrong",))
        done.append(str(n4))
    copy_gbps = gpu.copy_bandwidth()
    n4 = TIME_FLOATS // 4
    host = rng.standard_normal(TIME_FLOATS).astype(np.float32)
    x_d, y_d = drv.to_device(host), drv.mem_alloc(host.nbytes)
    try:
        grid = -(-n4 // (BLOCK * UNROLL))
        ms = float(np.median(bench.time_ms(
            lambda _: fn(y_d, x_d, np.float32(2.0), np.int32(n4), block=(BLOCK, 1, 1),
                         grid=(grid, 1)), repeats=20)))
    finally:
        x_d.free()
        y_d.free()
    mine = 2 * host.nbytes / (ms * 1e-3) / 1e9
    base = inflight.time_scale("scale_f32_x1", copy_gbps)
    return kc.Outcome(True,
                      f"scale_wide matches NumPy at {len(done)} sizes ({', '.join(done)} float4), "
                            f"writing nothing past the end. At {TIME_FLOATS // 2**20} Mi floats: "
                            f"yours {ms:.3f} ms, {mine:.0f} GB/s = {100 * mine / copy_gbps:.0f} % "
                            f"of copy ({copy_gbps:.0f} GB/s); lesson 00's scale (one 4-byte load "
                            f"per thread) {base.ms:.3f} ms, {100 * base.fraction_of_copy:.0f} % of "
                            "copy")


def _run_scale_on_cpu(text: str) -> "object":
    """The check's run on the CPU twin where there is no GPU: the first three of
    :data:`CHECK_SIZES` (the largest, a million float4, is left to the GPU), the same poisoned
    output and guard, any race or out-of-bounds access the twin finds; not timed."""
    from ... import twin

    rng = np.random.default_rng(8)
    done = []
    for n4 in CHECK_SIZES[:3]:
        x = rng.standard_normal((n4, 4)).astype(np.float32)
        y = np.full((n4 + GUARD, 4), np.nan, np.float32)
        grid = -(-n4 // (BLOCK * UNROLL))
        ran = twin.run_kernel(text, KERNEL, grid=grid, block=BLOCK, name="yours_scale",
                              args=[("y", y), ("x", x), -1.75, n4])
        ok_so_far = f" (right at n4 = {', '.join(done)})" if done else ""
        if ran.hazards:
            first = ran.hazards[0]
            return kc.Outcome(False, f"at n4 = {n4}{ok_so_far} it found "
                                     f"{cpu.FOUND.get(first.kind, 'an error')}: {first.text}",
                              (first.kind,))
        got, want = ran.arrays["y"], np.float32(-1.75) * x
        if not (np.array_equal(got[:n4], want) and np.isnan(got[n4:]).all()):
            return kc.Outcome(False, f"at n4 = {n4}{ok_so_far}: {_wrong_where(got, want)}",
                              ("wrong",))
        done.append(str(n4))
    return kc.Outcome(True, f"scale_wide matches NumPy at {len(done)} sizes ({', '.join(done)} "
                            "float4), writing nothing past the end (not timed: no GPU)")


def check_scale_kernel(source: str) -> Verdict:
    """Lesson 09's kernel exercise: ``scale_wide(float4* y, const float4* x, float a, int n4)``
    computes
    ``y = a * x`` with each thread loading its :data:`UNROLL` float4 chunks (``base + k *
    blockDim.x``) before it stores any. Checked in the SASS without a GPU (128-bit loads and stores,
    the loads ahead of the first store, no local memory), against NumPy on one (poisoned output, a
    guard past the end, sizes that leave a partial last block), then timed against copy and lesson
    00's scale."""
    return kc.check_plain_kernel(source, name="yours_scale", kernels=(KERNEL,),
                                 static=_static_checks(),
                                 run=lambda module: _run_scale(module.get_function),
                                 cpu_run=_run_scale_on_cpu)
