"""Lesson 09's kernel exercise: ``scale_wide``, ``y = a * x`` with each thread's four 16-byte loads
issued before it stores any.

It is not a rung: :func:`check_scale_kernel` compiles the learner's text alone, checks its SASS
without a GPU (128-bit loads and stores, the loads ahead of the first store, no local memory), and
on a GPU runs it in the check's child process against NumPy (its output poisoned, a guard past the
end, sizes that leave a partial last block), then times it against copy and lesson 00's ``scale``.
"""
from __future__ import annotations

import re

import numpy as np

from ...core import gpu
from ...course.checking import cpu
from ...course.checking import kernel as kc
from ...course.checking.diagnosis import found
from ...course.verdict import Verdict, failed, passed
from . import inflight


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


#: the contract's owner of each chunk touches it once more after the learner's kernel: it reads
#: y[i] and writes x[i] back. The twin sees every access, so a chunk that another thread of the
#: block loaded or stored is a race with its owner's (no barrier between them): exact, for every
#: chunk of the probe's launch, whatever the learner's code looks like in the SASS
OWNER_PROBE = """
#undef scale_wide
#line 1 "the contract's owner"
extern "C" __global__ void scale_wide(float4* y, const float4* x, float a, int n4) {{
    scale_wide_yours(y, x, a, n4);
    for (int k = 0; k < {unroll}; k++) {{
        const int i = blockIdx.x * blockDim.x * {unroll} + threadIdx.x + k * blockDim.x;
        if (i < n4) {{ const float4 v = y[i]; const_cast<float4*>(x)[i] = v; }}
    }}
}}
"""
PROBE_N4 = 2 * BLOCK * UNROLL + 333  # three blocks, the last partly past the end
_RACE = re.compile(r"on (?P<buf>[xy])\[(?P<at>\d+)\]: block (?P<b1>\d+) thread (?P<t1>\d+)'s "
                   r"(?P<op1>read|write) at (?P<w1>.+?) and block (?P<b2>\d+) thread "
                   r"(?P<t2>\d+)'s (?P<op2>read|write) at (?P<w2>.+?), no(?:thing)? ")


def _owner_sentence(hazard) -> str | None:
    """What a race between the learner's access and the owner's probe says, or None where the
    hazard is something else (the run reports it)."""
    m = _RACE.search(hazard.text)
    if m is None or "the contract" not in hazard.text:
        return None
    probe_first = "the contract" in m.group("w1")
    mine = "2" if probe_first else "1"
    owner = "1" if probe_first else "2"
    chunk = int(m.group("at")) // 4
    verb = {"x": "loaded", "y": "stored"}[m.group("buf")]
    if m.group("b" + owner) != m.group("b" + mine):  # a chunk of another block's range
        b = int(m.group("b" + owner))
        return (f"chunk {chunk} ({m.group('buf')}[{chunk}]) belongs to thread "
                f"{m.group('t' + owner)} of block {b} (base + k * blockDim.x), but thread "
                f"{m.group('t' + mine)} of block {m.group('b' + mine)} {verb} it at "
                f"{m.group('w' + mine)}: the exercise gives each block its own {BLOCK} x "
                f"{UNROLL} chunks (block {b}: {b * BLOCK * UNROLL} .. "
                f"{(b + 1) * BLOCK * UNROLL - 1}), and each thread its {UNROLL} of them")
    return (f"chunk {chunk} ({m.group('buf')}[{chunk}]) belongs to thread "
            f"{m.group('t' + owner)} of block {m.group('b' + owner)} (base + k * blockDim.x), but "
            f"thread {m.group('t' + mine)} {verb} it at {m.group('w' + mine)}: with its chunks "
            f"at base + k * blockDim.x, a warp's 32 threads touch 32 neighbouring chunks at every "
            f"k, 512 contiguous bytes; {UNROLL} neighbouring chunks a thread spread a warp's "
            f"accesses over {32 * UNROLL * 16} bytes at each step")


def owners_checked(text: str) -> tuple[str | None, str | None]:
    """``(problem, not_checked)``: the first chunk a thread loads or stores that the contract gives
    another thread (on the CPU twin, :data:`OWNER_PROBE`), or None; ``not_checked`` says why the
    twin could not look (None where it did)."""
    from ... import twin

    reason = twin.available()
    if reason is not None:
        return None, reason
    probe = ("#define scale_wide scale_wide_yours\n" + text + OWNER_PROBE.format(unroll=UNROLL))
    rng = np.random.default_rng(9)
    x = rng.standard_normal((PROBE_N4, 4)).astype(np.float32)
    y = np.full((PROBE_N4 + GUARD, 4), np.nan, np.float32)
    try:
        ran = twin.run_kernel(probe, KERNEL, grid=-(-PROBE_N4 // (BLOCK * UNROLL)), block=BLOCK,
                              name="yours_scale", args=[("y", y), ("x", x), -1.75, PROBE_N4])
    except (twin.NeedsGPU, twin.TwinCompileError) as exc:
        return None, str(exc).split("\n")[0][:300]
    for hazard in ran.hazards:
        sentence = _owner_sentence(hazard)
        if sentence is not None:
            return sentence, None
    return None, None


def _run_scale_on_cpu(text: str) -> "object":
    """The check's run on the CPU twin where there is no GPU: the first three of
    :data:`CHECK_SIZES` (the largest, a million float4, is left to the GPU), the same poisoned
    output and guard, any race or out-of-bounds access the twin finds; not timed."""
    from ... import twin

    problem, _ = owners_checked(text)
    if problem is not None:
        return kc.Outcome(False, problem, ("layout",))
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
                            "float4), writing nothing past the end, each thread touching only "
                            "its own chunks (base + k * blockDim.x) (not timed: no GPU)")


def check_scale_kernel(source: str) -> Verdict:
    """Lesson 09's kernel exercise: ``scale_wide(float4* y, const float4* x, float a, int n4)``
    computes
    ``y = a * x`` with each thread loading its :data:`UNROLL` float4 chunks (``base + k *
    blockDim.x``) before it stores any. Checked in the SASS without a GPU (128-bit loads and stores,
    the loads ahead of the first store, no local memory), against NumPy on one (poisoned output, a
    guard past the end, sizes that leave a partial last block), then timed against copy and lesson
    00's scale."""
    verdict = kc.check_plain_kernel(source, name="yours_scale", kernels=(KERNEL,),
                                    static=_static_checks(),
                                    run=lambda module: _run_scale(module.get_function),
                                    cpu_run=_run_scale_on_cpu)
    if not verdict.passed or verdict.message.startswith("on the CPU twin"):
        return verdict  # the twin's run looked at every chunk's owner first
    problem, not_checked = owners_checked(f'#line 1 "yours_scale"\n' + source)
    if problem is not None:
        out = failed(f"the numbers were right on the GPU, but {problem}. {verdict.message}")
        out.kinds = ("layout",)
        return out
    if not_checked is not None:
        return passed(f"{verdict.message} Which thread touched which chunk was not checked "
                      f"({not_checked}).")
    return passed(f"{verdict.message} The CPU twin saw each thread touch only its own chunks "
                  "(base + k * blockDim.x).")
