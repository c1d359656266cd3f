"""Lesson 13's kernel exercise: the seed's row loop made uniform. The learner rewrites the head of
``block_dweight_rows``'s row loop (kernels/bf16_row_pass.cuh), the warp's row, whether it has one,
and the three guards, so that every warp of a block goes round the loop as often as the others and
a warp without a row changes nothing. The text is spliced into v6_last_block in place of the
header's own function (:func:`splice`) and checked as the rung ``yours_seed_loop`` with v6's plan,
at shapes whose N splits a block's warps between two and one rounds (:func:`split_shapes`), and
under compute-sanitizer's synccheck and racecheck.
"""
from __future__ import annotations

from ...core import build, gpu, ladder
from ...course.verdict import Verdict, failed

HEADER = "bf16_row_pass.cuh"
RUNG = "v6_last_block"
KERNEL = "rmsnorm_backward_v6"
#: where the learner's function starts in the header (its template line and signature)
START = ("template <bool seed_rounding>\n__device__ __forceinline__ void block_dweight_rows(")
HINTS = {
    "dweight wrong": "A block whose warps take different numbers of rows meets a __syncthreads "
                     "inside the loop with some warps gone: does every warp of a block go round "
                     "the loop as often as the others (a loop over the block's first row, the "
                     "same for all its warps), with a warp whose row is past N adding zeros?",
    "dinp wrong": "a warp whose row is past N must load nothing and store nothing: its guards "
                  "(the dot product, the four loads, the dinp store) all ask whether it has a "
                  "row",
    "dinp nonfinite": "a warp whose row is past N read past the end: guard the dot product and "
                      "the loads with whether the warp has a row",
}


def _pieces() -> tuple[str, str, str, str, int]:
    """v6_last_block.cu before and after its ``#include "bf16_row_pass.cuh"``, the header before
    and after block_dweight_rows, and the header line the text after the function starts at."""
    v6 = build.kernel_source(RUNG)
    include = f'#include "{HEADER}"\n'
    at = v6.index(include)
    header = build.kernel_source(HEADER).replace("#pragma once\n", "\n", 1)
    start = header.index(START)
    end = header.index("\n}\n", start) + len("\n}\n")
    return (v6[:at], v6[at + len(include):], header[:start], header[end:],
            header[:end].count("\n") + 1)


def splice(text: str) -> str:
    """v6_last_block.cu with the header pasted in place of its ``#include`` and ``text`` (the
    learner's block_dweight_rows, ``#line 1`` in front) in place of the header's own.
    ``#line`` directives keep nvcc's line numbers those of the two files around the text."""
    v6_before, v6_after, head, tail, tail_line = _pieces()
    after_line = v6_before.count("\n") + 2
    return (f'#line 1 "v6_last_block.cu"\n{v6_before}#line 1 "{HEADER}"\n{head}{text}\n'
            f'#line {tail_line} "{HEADER}"\n{tail}#line {after_line} "v6_last_block.cu"\n'
            f"{v6_after}")


def split_shapes(device=None) -> tuple[tuple[int, int], ...]:
    """Two shapes whose N splits a block of v6's plan on ``device`` (default: this GPU as the build
    targets it, else the H200's saved facts) between warps with two rows and warps with one: the
    seed's loop then has some warps of that block leave it while the others meet its barrier. N is
    the grid's warps W plus W / 2 + 8 (the boundary mid-block), and W + 8 (in the first block)."""
    device = device or gpu.target_facts_or_fallback()[0]
    launch = ladder.plan(RUNG, 1, 768, device)[0]
    W = launch.grid * (launch.block // 32)
    return ((W + W // 2 + 8, 768), (W + 8, 1024))


def _against_v6(prefix: str, what: str, hint: str):
    """A static check: the learner's v6 has at least as many ``prefix`` instructions as
    v6_last_block (a barrier removed, or a 128-bit access narrowed, shows as fewer)."""
    from ...course.checking import kernel as kc
    from ...inspection import sass

    def test(c):
        mine = len(kc._matching(c.instructions(KERNEL), prefix))
        theirs = len(kc._matching(
            sass.listing(RUNG, c.listing.arch).functions[KERNEL].instructions, prefix))
        if mine >= theirs:
            return None
        return (f"{hint} (the SASS of {KERNEL} has {mine} {kc._name(prefix)}, v6_last_block's "
                f"{theirs})")

    return kc.Static(what, test)


def check_seed_loop(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 13's kernel exercise: the learner's ``block_dweight_rows`` (the seed's row loop made
    uniform), spliced into v6_last_block (:func:`splice`), checked as the rung ``yours_seed_loop``
    with v6's plan at the engine's shapes and :func:`split_shapes`, then under compute-sanitizer's
    racecheck and synccheck (``sanitize=False`` skips them), and timed beside v6."""
    from ...course.checking import kernel as kc
    from ...course.checking.running import SHAPES_8
    from .. import probe

    if isinstance(source, str) and "block_dweight_rows" not in kc.strip_comments(source):
        return failed("keep the function block_dweight_rows (its template line and signature, as "
                      "given): v6's kernel calls it")
    verdict = kc.check_kernel(
        source, name="yours_seed_loop", like=RUNG, embed=splice, hints=HINTS,
        shapes=SHAPES_8 + split_shapes(), sanitize_it=sanitize,
        static=(_against_v6("BAR", "as many barriers (BAR.SYNC) as v6_last_block",
                            "keep every __syncthreads of the function: the loop's two around the "
                            "staging, the one after zeroing and the one after the loop (a missing "
                            "one trades the divergent barrier for a race)"),
                _against_v6("LDG.128", "128-bit loads (as many LDG.E.128 as v6_last_block)",
                            "keep the loads 16 bytes wide (load128 / load128cs)"),
                _against_v6("STG.128", "128-bit stores (as many STG.E.128 as v6_last_block)",
                            "keep the dinp store 16 bytes wide (store128cg)")))
    # a warp past N that loads its row reads past dout's end, into memory the process owns: the
    # numbers stay right (r = 0), only the twin sees it (probe.bounds_after_gpu)
    return probe.bounds_after_gpu(verdict, "yours_seed_loop")
