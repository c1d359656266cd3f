"""Lesson 02: v1_naive, what it asks of the memory system, and its first profile.

The decisions, no GPU needed: :func:`check_atomics` (how many ``atomicAdd`` v1 issues on
``dweight`` and how many land on each address) and :func:`check_sectors` (how many 32-byte sectors
one warp's load of ``inp`` touches at one loop step, in v1 and in v2). The kernel exercise,
:func:`check_v1_kernel` (v1 whole, from its signature). The first diagnosis:
:func:`opening` measures v1 (time and Nsight Compute profile, no reading) and
:func:`check_diagnosis` judges the learner's reading of it by the course's one rule
(:func:`rmsnorm_lessons.inspection.nsight.rule`).
"""
from __future__ import annotations

from ..course.verdict import Verdict, choice_verdict, failed, passed, read_numbers
from ..inspection.access import warp_sectors

ANSWER = "of {name} with your answer (a number or an expression)"
#: the seed's shape, which the lesson's first cells bind to N and C: an answer computed from them
#: instead of the exercise's own shape is named as such
SEED_N, SEED_C = 8192, 1024
STALE = ("{name} = {value} uses the seed's shape (N = 8192, C = 1024 from the top of the lesson); "
         "this question is about {shape}")


def _problem(value, want, known, otherwise: str) -> str | None:
    """None if ``value`` is ``want``; else the message of the first (wrong value, message) pair in
    ``known`` that ``value`` equals, else ``otherwise``."""
    if value == want:
        return None
    return next((message for wrong, message in known if value == wrong), otherwise)


def check_atomics(N: int, C: int, total, per_address) -> Verdict:
    """``total``: atomicAdds v1 issues on dweight for an (N, C) problem; ``per_address``: how many
    hit one
    ``dweight[c]``."""
    answers, verdict = read_numbers(((total, "total"), (per_address, "per_address")), ANSWER,
                                    whole=True)
    if verdict is not None:
        return verdict
    total, per_address = answers
    N, C = int(N), int(C)
    shape = f"{N} rows of {C} channels"
    if (N, C) != (SEED_N, SEED_C):
        for name, value, seed in (("total", total, SEED_N * SEED_C),
                                  ("per_address", per_address, SEED_N)):
            if value == seed:
                return failed(STALE.format(name=name, value=value, shape=shape))
    problems = [
        _problem(total, N * C, (
            (N, f"total = {total} is one atomic per row, but each row adds to every one of its C "
                "channels: one atomicAdd per element"),
            (C, f"total = {total} is one per channel; every row adds its own contribution to "
                "each channel"),
            (N * C // 32, f"total = {total} counts warp instructions; count the atomic "
                          "operations, one per thread and element")),
            f"total = {total} is not right: look at where atomicAdd sits (inside the loop over C, "
            "run by each of the N threads)"),
        _problem(per_address, N, (
            (C, f"per_address = {per_address}: dweight[c] receives one add from each row, so count "
                "rows, not channels"),
            (N * C, f"per_address = {per_address} is the total; the total is spread over the C "
                    "addresses")),
            f"per_address = {per_address} is not right: which threads add to dweight[0]?")]
    problems = [p for p in problems if p]
    if problems:
        return failed("; ".join(problems))
    return passed(f"v1 issues N*C = {N * C:,} atomicAdds onto C = {C:,} addresses: {N:,} on each "
                  f"dweight[c], done one after another by the L2 cache that owns that address")


def _expected_sectors(C: int):
    return warp_sectors("thread_per_row", C), warp_sectors("warp_per_row", C)


def check_sectors(v1, v2, C: int = 1024) -> Verdict:
    """``v1``/``v2``: 32-byte sectors touched by one warp's load of ``inp`` at one loop step (fp32,
    row C)."""
    answers, verdict = read_numbers(((v1, "v1"), (v2, "v2")), ANSWER, whole=True)
    if verdict is not None:
        return verdict
    v1, v2 = answers
    want1, want2 = _expected_sectors(int(C))
    problems = [
        _problem(v1, want1, (
            (1, "v1 = 1: the 32 threads of a warp read 32 different rows, C floats apart"),
            (4, "v1 = 4 would be 32 neighbouring floats; in v1 the lanes are a whole row apart")),
            f"v1 = {v1} is not right: lane t reads inp[t*C + c]; with C={C} floats ({4 * C} "
            "bytes) between lanes, how many share a 32-byte sector?"),
        _problem(v2, want2, (
            (32, "v2 = 32: in v2 the lanes read neighbouring floats, which share sectors"),
            (1, "v2 = 1: 32 floats are 128 bytes, more than one 32-byte sector")),
            f"v2 = {v2} is not right: 32 lanes x 4 bytes = 128 contiguous bytes, in sectors of "
            "32 B")]
    problems = [p for p in problems if p]
    if problems:
        return failed("; ".join(problems))
    return passed(f"v1's warp needs {want1} sectors for 32 useful floats (4 useful bytes in each "
                  f"32), v2's needs {want2} (every byte used): {want1 // want2}x fewer sectors per "
                  "load instruction")


# --- the kernel exercise: v1's loops, written by the learner
# ----------------------------------------

def check_v1_kernel(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 02's kernel exercise: the learner's ``rmsnorm_backward_v1`` (one thread per row),
    checked as the rung ``yours_v1`` with v1_naive's plan, and timed beside v1_naive.
    compute-sanitizer's race check runs by default; ``sanitize=False`` skips it, for speed."""
    from ..course.checking import kernel as kc

    kernel = "rmsnorm_backward_v1"
    return kc.check_kernel(
        source, name="yours_v1", like="v1_naive", rows_per_block=256, sanitize_it=sanitize,
        static=(kc.sass_has(kc.GLOBAL_ATOMICS, "a global atomic adds to dweight (REDG/ATOMG)",
                            "dweight[c] is added to by every thread at once: use "
                            "atomicAdd(&dweight[c], ...), a plain += loses most of the additions",
                            kernel=kernel),
                kc.no_local_memory(kernel)))


# --- the first profile: v1 measured, then read by the learner
# -----------------------------------------

_OPENINGS: dict = {}


def opening():
    """v1_naive at the seed's shape, measured on this GPU (its time and its Nsight Compute profile,
    without the reading), else the saved run's
    (:func:`rmsnorm_lessons.course.investigate.opening`). Measured once per process, so the
    diagnosis is judged against the figures the cell above it showed."""
    if "v1_naive" not in _OPENINGS:
        from ..course import investigate

        _OPENINGS["v1_naive"] = investigate.opening("v1_naive", SEED_N, SEED_C)
    return _OPENINGS["v1_naive"]


def check_diagnosis(bound, metric, value) -> Verdict:
    """Lesson 02's diagnosis of v1's profile (:func:`opening`), the first and a light one:
    ``bound``, ``"memory"`` or ``"latency"`` by the course's rule; ``metric``, the name of the
    figure that decides it (a name :func:`rmsnorm_lessons.course.diagnose.causes` prints);
    ``value``, that figure as the profile shows it. No cause yet: lesson 03 asks for it. Judged by
    :func:`rmsnorm_lessons.course.diagnose.check` against the profile's own figures, whichever GPU
    made them."""
    from ..course import diagnose

    return diagnose.check(opening(), bound=bound, cause=diagnose.NOT_ASKED, metric=metric,
                          value=value, this_lesson=(), rung="v1_naive")


# --- the end-of-lesson questions (no cell prints their answers)


def check_idle_sms(N: int, block_size: int, sms: int, idle) -> Verdict:
    """``idle``: SMs that get no block at all when v1 (one thread per row) runs N rows in blocks
    of ``block_size`` on a GPU of ``sms`` SMs."""
    answers, verdict = read_numbers(((idle, "idle"),), ANSWER, whole=True)
    if verdict is not None:
        return verdict
    (got,) = answers
    blocks = -(-int(N) // int(block_size))
    want = max(0, int(sms) - blocks)
    if int(N) != SEED_N and got != want and got == max(0, int(sms) - -(-SEED_N // int(block_size))):
        return failed(STALE.format(name="idle", value=got, shape=f"N = {N} rows"))
    if got == want:
        return passed(f"{want} of {sms} SMs idle: {blocks} blocks, one SM each at most at the "
                      f"start; more threads per row (lesson 03) gives the GPU more blocks")
    if got == int(sms) - int(N):
        return failed("count blocks, not threads: a block runs on one SM")
    if got == blocks:
        return failed(f"{blocks} is the number of blocks, so of busy SMs; how many SMs are left?")
    return failed("one thread per row: how many blocks does the grid have, and how many SMs?")


def check_coalesce_v1(answer) -> Verdict:
    """Which change alone makes v1's loads of ``inp`` coalesced: a) blocks of 32 threads instead of
    256; b) ``inp`` stored transposed (C x N: column c of all rows contiguous); c) more rows N."""
    return choice_verdict(
        answer, "b", why="transposed, thread t reads inp[c*N + t] at step c: the 32 lanes read 32 "
                         "neighbouring floats, 4 sectors (but the rows no longer are contiguous)",
        why_not={"a": "a warp is 32 threads whatever the block size: its lanes' addresses are "
                      "still a row apart",
                 "c": "more rows give more threads, but each lane still reads its own row, C "
                      "floats from its neighbour's"})


def check_free_atomics(answer) -> Verdict:
    """If the atomics on dweight cost nothing, v1 would: a) reach about the copy bandwidth; b)
    stay far below it."""
    return choice_verdict(
        answer, "b", why="far below: a sector per lane for every load and too few threads to keep "
                         "bytes in flight remain; lesson 03 fixes those first",
        why_not={"a": "the atomics are one of three costs this lesson counts: which two "
                      "remain?"})
