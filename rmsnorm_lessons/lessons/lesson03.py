"""Lesson 03: write the warp reduction yourself.

The learner writes the body of ``__device__ float warp_sum(float value)``: every lane passes its own
number and every lane must get back the sum of all 32. :func:`check_warp_sum` always compiles it
with nvcc (no GPU needed, errors point at the learner's lines). Without a GPU it reads the SASS
(:func:`static_check`: five ``SHFL.BFLY``, or one-way shuffles followed by a broadcast) and says NOT
YET or NOT VERIFIED, never PASS. Where a GPU works a child process (:func:`child_warp_sum`, through
:func:`rmsnorm_lessons.core.child.run_job`) runs the compiled kernel on two inputs and sends every
lane's result back, which is compared with NumPy here; a kernel that crashes the child is NOT YET,
saying what happened (and memcheck's line where compute-sanitizer is installed), and the notebook's
own process never launches the learner's code. The two inputs:

* one-hot warps (warp ``w`` holds 1 in lane ``w``, 0 elsewhere), which show whose values reach each
  lane: that is how "only 4 steps" or "only lane 0 holds the sum" are told apart and named;
* random numbers, compared with the float64 sum.
"""
from __future__ import annotations

import re

import matplotlib
import numpy as np
from matplotlib.collections import LineCollection

from ..core import build, child, gpu
from ..course.plots import FIGSIZE, _outside_pyplot
from ..course.verdict import Verdict, choice_verdict, failed, not_verified, passed, read_number
from ..inspection import access

WARP = access.WARP  # lanes in a warp

STARTER = """\
    // value is this lane's number; return the sum of all 32 lanes' numbers, in every lane.
    // __shfl_xor_sync(0xffffffff, v, offset) returns v as held by lane (this lane ^ offset).
    return value;
"""

SOLUTION = """\
    for (int offset = 16; offset > 0; offset /= 2) {
        value += __shfl_xor_sync(0xffffffff, value, offset);
    }
    return value;
"""

NAME = "your_warp_sum"  # what nvcc and memcheck call the file of the learner's lines
_HEADER = ("#define WARP_SIZE 32\n\n__device__ float warp_sum(float value) {\n"
           f'#line 1 "{NAME}"\n')
_FOOTER = """}
#line 1 "lesson03_harness"
extern "C" __global__ void run_warp_sum(float* out, const float* in) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = warp_sum(in[i]);
}
"""
BLOCK = 128  # four warps per block, as in v2: a solution that mixes up warps of one block fails
ACTION = "rmsnorm_lessons.lessons.lesson03:child_warp_sum"
LAUNCHING = "lesson03: launching"  # the child's line before it launches the learner's kernel


def source(body: str) -> str:
    """The whole .cu file the check compiles: ``warp_sum`` with ``body`` inside, and a test kernel.

    Blank lines before the body are dropped, so nvcc's line 1 is the body's first line of text.
    """
    return _HEADER + "\n".join(_body_lines(body)) + "\n" + _FOOTER


def _body_lines(body: str) -> list[str]:
    lines = body.rstrip().splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    return lines


def _strip_comments(code: str) -> str:
    code = re.sub(r"/\*.*?\*/", " ", code, flags=re.S)
    return re.sub(r"//[^\n]*", " ", code)


def compile_body(body: str, arch: str | None = None):
    """Compile the learner's body with nvcc; return ``(Compiled, None)`` or ``(None, Verdict)``."""
    try:
        return build.compile_source(source(body), arch or build.DEFAULT_ARCH, name="warp_sum"), None
    except build.CompileError as exc:
        return None, failed("nvcc does not accept it (line 1 is the first line of text of your "
                            "body):\n  "
                            + exc.summary(keep=6))


def one_hot_input(warps: int = WARP) -> np.ndarray:
    """``warps`` warps of 32 lanes; warp ``w`` holds 1.0 in lane ``w % 32`` and 0 elsewhere."""
    x = np.zeros((warps, WARP), np.float32)
    x[np.arange(warps), np.arange(warps) % WARP] = 1.0
    return x.reshape(-1)


def random_input(warps: int = 64, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, warps * WARP).astype(np.float32)


def _lanes(lanes) -> str:
    lanes = [int(v) for v in lanes]
    if len(lanes) > 6:
        return ", ".join(map(str, lanes[:5])) + f", ... ({len(lanes)} lanes)"
    return ", ".join(map(str, lanes))


def judge(one_hot_out, random_in, random_out) -> Verdict:
    """Judge a reduction from what it returned on :func:`one_hot_input` (32 warps) and on random
    data.

    ``M[w, l]`` = lane ``l``'s result when only lane ``w`` holds 1: how often lane ``w``'s value is
    counted in lane ``l``'s sum. A right reduction gives all ones.
    """
    M = np.asarray(one_hot_out, np.float64).reshape(-1, WARP)[:WARP]
    if M.shape != (WARP, WARP):
        raise ValueError("one_hot_out must hold at least 32 warps of 32 lanes, got "
                         f"{np.size(one_hot_out)} values")
    if not np.all(np.isfinite(M)):
        bad = np.flatnonzero(~np.all(np.isfinite(M), axis=0))
        return failed(f"lanes {_lanes(bad)} returned NaN or inf: read only values that every lane "
                      "has set")
    if not np.allclose(M, 1.0, atol=1e-6):
        right = np.all(np.abs(M - 1.0) <= 1e-6, axis=0)  # lanes holding the whole sum
        if np.allclose(M, np.eye(WARP), atol=1e-6):
            return failed("every lane returned its own value: the lanes never exchanged anything. "
                          "Add value += __shfl_xor_sync(0xffffffff, value, offset) for offset = "
                          "16, 8, 4, 2, 1")
        if right[0] and not right.all():
            wrong = np.flatnonzero(~right)
            return failed(f"lane 0 holds the sum of all 32 lanes, but lanes {_lanes(wrong)} do "
                          "not. In v2 every lane uses the row's sum for its own columns, so every "
                          f"lane must hold it: use __shfl_xor_sync (the butterfly), or finish with "
                          f"value = __shfl_sync(0xffffffff, value, 0) to broadcast lane 0's sum")
        if M.max() > 1.0 + 1e-6:
            w, l = np.unravel_index(np.argmax(M), M.shape)
            return failed(f"some values are counted more than once: lane {w}'s value is in lane "
                          f"{l}'s result {M[w, l]:g} times. Each step must add the partner's "
                          f"current value once, with offsets 16, 8, 4, 2, 1 (each exactly once)")
        binary = np.all((np.abs(M) <= 1e-6) | (np.abs(M - 1.0) <= 1e-6))
        counts = np.rint(M.sum(axis=0)).astype(int)
        if binary and len(set(counts)) == 1 and counts[0] in (2, 4, 8, 16):
            k = int(counts[0])
            return failed(f"every lane's result holds the values of {k} lanes, not 32: "
                          f"{k.bit_length() - 1} exchange step(s) reach {k} lanes, the butterfly "
                          f"needs log2(32) = 5 (offsets 16, 8, 4, 2, 1)")
        wrong = np.flatnonzero(~right)
        l = int(wrong[0])
        missing = np.flatnonzero(np.abs(M[:, l]) <= 1e-6)
        detail = f"it misses the values of lanes {_lanes(missing)}" if missing.size else \
            f"it counts them with weights {np.round(M[:, l], 3).tolist()[:8]}..."
        return failed(f"lanes {_lanes(wrong)} do not hold the sum of all 32; in lane {l}'s result "
                      f"{detail}")
    x = np.asarray(random_in, np.float64).reshape(-1, WARP)
    got = np.asarray(random_out, np.float64).reshape(-1, WARP)
    want = np.broadcast_to(x.sum(axis=1, keepdims=True), x.shape)
    allowed = 1e-5 * np.abs(x).sum(axis=1, keepdims=True) + 1e-6
    bad = ~(np.abs(got - want) <= allowed)
    if bad.any():
        w, l = np.argwhere(bad)[0]
        return failed(f"on random numbers warp {w}, lane {l} returned {got[w, l]:.6g} but the sum "
                      f"is {want[w, l]:.6g} ({int(bad.sum())} lanes wrong); the one-hot test "
                      f"passed, so look for something other than a plain sum")
    return passed(f"every lane of {x.shape[0]} random warps holds its warp's sum (to float32 "
                  f"rounding), and every lane's result contains every lane's value exactly once")


def static_check(body: str, arch: str):
    """What the SASS of the test kernel tells without running it: ``(problem or None, what was
    checked)``.

    Every lane needs the sum, so a reduction that shuffles one way (``SHFL.DOWN``/``UP``) must end
    with a broadcast (``SHFL.IDX``, ``__shfl_sync``); a butterfly needs five ``SHFL.BFLY``. Without
    cuobjdump only the compile is reported.
    """
    from ..core import ladder
    from ..inspection import sass

    # the test file as an unregistered rung: what rmsnorm_lessons.inspection.sass lists (the same
    # nvcc build, cached)
    rung = ladder.rung_from_source(name="warp_sum", source=source(body), plan=lambda *a, **k: [],
                                   kernels=("run_warp_sum",), dtype=ladder.FP32, register_it=False)
    try:
        functions = sass.listing(rung, arch).functions
    except sass.ToolMissing as exc:
        return None, f"the SASS was not checked ({str(exc).split('. ')[0]})"
    ops = [i.opcode for f in functions.values() for i in f.instructions
           if i.opcode.startswith("SHFL")]
    kinds = {k: sum(op.startswith(f"SHFL.{k}") for op in ops)
             for k in ("BFLY", "DOWN", "UP", "IDX")}
    seen = ", ".join(f"{n} SHFL.{k}" for k, n in kinds.items() if n) or "no shuffle"
    if kinds["DOWN"] + kinds["UP"] and not kinds["IDX"] and not kinds["BFLY"]:
        return (f"the SASS has {seen}: a one-way shuffle (__shfl_down_sync) leaves the sum in lane "
                "0 only, but every lane must hold it: use __shfl_xor_sync, or broadcast lane 0's "
                "sum with __shfl_sync"), seen
    if kinds["BFLY"] and not (kinds["DOWN"] or kinds["UP"] or kinds["IDX"]) and kinds["BFLY"] < 5:
        return (f"the SASS has {seen}: {kinds['BFLY']} exchange step(s) reach {2 ** kinds['BFLY']} "
                f"lanes; the butterfly needs log2(32) = 5 (offsets 16, 8, 4, 2, 1)"), seen
    if len(ops) < 5:
        return (f"the SASS has {seen}: summing 32 lanes by shuffles takes at least 5 exchanges "
                f"(offsets 16, 8, 4, 2, 1)"), seen
    return None, f"checked in the SASS: {seen}"


def _launch(binary: bytes):
    """Load the compiled test kernel on this GPU and run it on both inputs."""
    from pycuda import (
        gpuarray,  # lazy: PyCUDA loads libcuda, present only where a GPU is
    )

    fn = gpu.driver().module_from_buffer(binary).get_function("run_warp_sum")
    results = []
    for x in (one_hot_input(), random_input()):
        x_gpu = gpuarray.to_gpu(x)
        out_gpu = gpuarray.empty_like(x_gpu)
        fn(out_gpu, x_gpu, block=(BLOCK, 1, 1), grid=(x.size // BLOCK, 1))
        results.append(out_gpu.get())
    return results


def child_warp_sum(binary: bytes) -> dict:
    """The child's side of :func:`check_warp_sum` (a job's action): run the parent's build of the
    test kernel on both inputs; every lane's results as JSON, or how running it failed."""
    gpu.require()
    print(LAUNCHING, flush=True)
    try:
        one_hot_out, random_out = _launch(binary)
    except Exception as exc:  # a CUDA error from the learner's kernel, reported as one line
        return {"ok": False, "kinds": ["error"],
                "message": f"running it failed: {type(exc).__name__}: {str(exc).strip()[:300]}"}
    return {"ok": True, "one_hot": one_hot_out.tolist(), "random": random_out.tolist()}


def _run_in_child(body: str, binary: bytes, built: str) -> Verdict:
    """Run the learner's kernel in a child process and judge what it sends back; a crash there is
    NOT YET, saying how (with memcheck's line where it can), and leaves this process untouched."""
    from ..course.checking import child as kernel_child

    runner = child.run_job  # looked up now, so that a test can put a fake child in its place
    timeout = kernel_child.CHECK_TIMEOUT
    kwargs = dict(binary=binary)
    done, result = runner(ACTION, kwargs, timeout=timeout)
    if result is not None and result.get("ok"):
        verdict = judge(result["one_hot"], random_input(), result["random"])
        return Verdict(verdict.passed, f"{built} and ran it on the GPU: {verdict.message}")
    happened = kernel_child.what_happened(done, result, timeout)
    if LAUNCHING not in done.stdout:  # it never reached the kernel: not the learner's doing
        return failed(f"{built}, but the check's child process stopped before it ran your "
                      f"warp_sum: {happened}")
    message = (f"{built}, but running it crashed the check's child process (this notebook's own "
               f"GPU context is untouched): {happened}.")
    if not done.timed_out:
        text = f'#line 1 "{NAME}"\n' + "\n".join(_body_lines(body))
        message += " " + kernel_child.memcheck_sentence(kwargs, NAME, text, runner, ACTION)
    return failed(message)


def check_warp_sum(body: str) -> Verdict:
    """Compile the learner's body of ``warp_sum`` (always) and, where a GPU works, run it in a
    child process and judge what it returns."""
    if not isinstance(body, str):
        return failed(f"pass the body as a string (r'''...'''), not {type(body).__name__}")
    code = _strip_comments(body)
    if "__device__" in code or "__global__" in code:
        return failed("write only the body of warp_sum (the lines between its braces), not a whole "
                      "function")
    if not code.strip():
        return failed("the body is empty: it must at least return a float")
    if "__shfl" not in code and "__shared__" not in code:
        return failed("the lanes never exchange values (no __shfl_*_sync in your code), so no lane "
                      "can know the others' numbers: use value += __shfl_xor_sync(0xffffffff, "
                      "value, offset)")
    reason = gpu.why_unavailable()
    arch = gpu.facts().arch if reason is None else build.DEFAULT_ARCH
    compiled, verdict = compile_body(body, arch)
    if verdict is not None:
        return verdict
    regs = compiled.resources.get("run_warp_sum")
    built = f"nvcc compiled it for {arch}" + (f" ({regs.registers} registers)" if regs else "")
    if reason is not None:  # no GPU: what the SASS shows decides between NOT YET and NOT VERIFIED
        static, checked = static_check(body, arch)
        if static is not None:
            return failed(f"{built}; {static}")
        return not_verified(f"no GPU here, so it was compiled and inspected but not run. {built}; "
                            f"{checked}. On a GPU this check also runs it and compares every lane "
                            "with NumPy.")
    return _run_in_child(body, compiled.binary, built)


# --- the kernel exercise: v2's coalesced loops and the butterfly
# ------------------------------------

def check_v2_kernel(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 03's kernel exercise: the learner's ``rmsnorm_backward_v2`` (one warp per row),
    checked as the rung ``yours_v2`` with v2_warp's plan, and timed beside v2_warp.
    compute-sanitizer's race check runs by default; ``sanitize=False`` skips it, for speed."""
    from ..course.checking import kernel as kc

    kernel = "rmsnorm_backward_v2"
    return kc.check_kernel(
        source, name="yours_v2", like="v2_warp", sanitize_it=sanitize,
        static=(kc.sass_lacks(("SHFL.DOWN", "SHFL.UP"), "no one-way shuffle (SHFL.DOWN/UP)",
                              "__shfl_down_sync leaves the row's sum in lane 0 only, but every "
                              "lane needs it for its own columns: use __shfl_xor_sync (the "
                              "butterfly)", kernel=kernel),
                kc.sass_has("SHFL.BFLY", "five butterfly shuffles (SHFL.BFLY)",
                            "the butterfly needs log2(32) = 5 __shfl_xor_sync steps, offsets 16, "
                            "8, 4, 2, 1",
                            kernel=kernel, at_least=5),
                kc.sass_has(kc.GLOBAL_ATOMICS, "a global atomic adds to dweight",
                            "dweight[c] takes one addition per row: use atomicAdd", kernel=kernel),
                kc.no_local_memory(kernel)))


# --- the end-of-lesson questions (no cell prints their answers)


def check_lane_columns(C: int, lane: int, columns) -> Verdict:
    """``columns``: how many columns lane ``lane`` handles in v2's loops (``c = lane; c < C; c +=
    32``)."""
    got, verdict = read_number(columns, "of columns with your answer (a number or an expression)",
                               whole=True)
    if verdict is not None:
        return verdict
    C, lane = int(C), int(lane)
    want = len(range(lane, C, WARP))
    if got == want:
        return passed(f"{want}: columns {lane}, {lane + WARP}, ... up to {lane + WARP * (want - 1)}"
                      f"; when C is no multiple of 32, the low lanes take one column more")
    if got == C // WARP + 1 or got == -(-C // WARP):
        return failed(f"that is the count of lane 0; lane {lane} starts later: is its last "
                      f"column still below C = {C}?")
    if got == C / WARP:
        return failed("a lane takes whole columns: count them")
    return failed(f"list them: {lane}, {lane + WARP}, {lane + 2 * WARP}, ... while below C")


def check_small_n(answer) -> Verdict:
    """v2 at N = 64 rows, 8 rows per block, on a 132-SM H200: a) every SM gets a block; b) most
    SMs stay idle; c) each SM gets 8 blocks."""
    return choice_verdict(
        answer, "b", why="64 rows are 8 blocks for 132 SMs: a small N cannot fill the GPU however "
                         "coalesced the loads (the small shapes of the bench are latency-bound)",
        why_not={"a": "count the blocks: 64 rows at 8 rows per block",
                 "c": "8 is the rows per block; how many blocks are there?"})


def check_v2_atomic_share(answer) -> Verdict:
    """v2 issues as many atomicAdds on dweight as v1 (N x C). What changed: a) nothing, they cost
    the same; b) the 32 lanes of a warp now add to 32 different addresses at once; c) v2 issues
    them from shared memory."""
    return choice_verdict(
        answer, "b", why="neighbouring lanes add to neighbouring dweight[c]: one atomic "
                         "instruction no longer queues 32 adds on one address, but there are "
                         "still N x C adds",
        why_not={"a": "look at which addresses the 32 lanes of one warp add to at one step, in "
                      "v1 and in v2",
                 "c": "v2 has no shared memory: that is lesson 04's step"})


def butterfly(offsets=(16, 8, 4, 2, 1), highlight: int | None = 0):
    """The shuffle butterfly: 32 lanes (x) by steps (y, top to bottom), one line per value received.

    At a step with offset ``o`` lane ``i`` receives the value of lane ``i ^ o`` and adds it to its
    own. Lanes of one colour hold the same partial sum; the label at the right says how many lanes'
    inputs that sum contains. ``highlight`` draws in black the lines that feed lane ``highlight``'s
    result.
    """
    offsets = tuple(int(o) for o in offsets)
    fig, ax = _outside_pyplot((FIGSIZE[0], 1.0 + 0.55 * (len(offsets) + 1)))
    lanes = np.arange(access.WARP)
    # which inputs each lane's value holds, step by step
    contains = access.butterfly_contents(offsets)
    needed = (access.butterfly_feeders(offsets, highlight) if highlight is not None
              # lanes whose value reaches the highlight
              else np.zeros((len(offsets) + 1, access.WARP), bool))
    faint, strong = [], []
    for k, o in enumerate(offsets, start=1):
        for i in lanes:
            on = highlight is not None and needed[k, i]
            (strong if on else faint).append([(i ^ o, k - 1), (i, k)])  # the value received
            if on:
                strong.append([(i, k - 1), (i, k)])  # the lane's own value, kept
        ax.text(access.WARP - 0.2, k - 0.5, f"xor {o}", fontsize=7, va="center", color="#08519c")
    # plain (not antialiased) faint lines keep the PNG small
    ax.add_collection(LineCollection(faint, colors="#9ecae1", linewidths=0.6, antialiaseds=False,
                                     zorder=1))
    ax.add_collection(LineCollection(strong, colors="black", linewidths=1.1, zorder=2))
    cmap = matplotlib.colormaps["tab20"]
    for k, m in enumerate(contains):
        groups = {}
        colour_of = [groups.setdefault(tuple(m[:, i]), len(groups)) for i in lanes]
        ax.scatter(lanes, np.full(access.WARP, k), c=[cmap(g % 20) for g in colour_of], s=18,
                   zorder=3,
                   edgecolors="black", linewidths=0.3)
        counts = sorted({int(m[:, i].sum()) for i in lanes})
        label = "/".join(str(c) for c in counts)
        ax.text(access.WARP + 2.6, k, f"{label} lane{'s' if counts != [1] else ''}", fontsize=7,
                va="center")
    ax.set_yticks(range(len(offsets) + 1), ["input"] + [f"step {k}" for k in range(1,
            len(offsets) + 1)],
                  fontsize=7)
    ax.set_xticks(range(0, access.WARP, 4))
    ax.tick_params(axis="x", labelsize=7)
    ax.set_xlim(-0.8, access.WARP + 6.5)
    ax.set_ylim(len(offsets) + 0.4, -0.4)
    ax.set_xlabel("lane", fontsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    title = "__shfl_xor_sync butterfly: offsets " + ", ".join(map(str, offsets))
    if highlight is not None:
        title += f" (black: what reaches lane {highlight})"
    ax.set_title(title, fontsize=9)
    return fig


def speedup_bars(results, baseline: str = "v1_naive", title: str | None = None):
    """Bars of the speedup of each version over ``baseline`` at each shape (time ratio).

    ``results``: :class:`rmsnorm_lessons.speed.bench.Timing` records or dicts with name, N, C, ms.
    """
    rows = [r if isinstance(r, dict) else r.as_dict() for r in results]
    base = {(r["N"], r["C"]): r["ms"] for r in rows if r["name"] == baseline}
    if not base:
        raise ValueError(f"no result of the baseline {baseline!r} among the results")
    names = list(dict.fromkeys(r["name"] for r in rows))
    shapes = [s for s in dict.fromkeys((r["N"], r["C"]) for r in rows) if s in base]
    fig, ax = _outside_pyplot((max(3.6, 1.0 + 1.2 * len(shapes)), 2.8))
    width = 0.8 / len(names)
    x = np.arange(len(shapes))
    for i, name in enumerate(names):
        vals = [next((base[s] / r["ms"] for r in rows if r["name"] == name and (r["N"],
                r["C"]) == s), np.nan)
                for s in shapes]
        bars = ax.bar(x + (i - (len(names) - 1) / 2) * width, vals, width, label=name)
        ax.bar_label(bars, [f"{v:.1f}x" if np.isfinite(v) else "" for v in vals], fontsize=7)
    ax.set_xticks(x, [f"{n}x{c}" for n, c in shapes], fontsize=8)
    ax.set_ylabel(f"speedup over {baseline}", fontsize=8)
    ax.set_yscale("log")
    ax.margins(y=0.25)
    ax.set_title(title or f"time of {baseline} / time of each version", fontsize=9)
    ax.legend(fontsize=7)
    return fig
