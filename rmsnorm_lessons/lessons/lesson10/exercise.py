"""Lesson 10's kernel exercise: two steps of v7's register path, ``load_row`` (a row's dout and
inp into registers, every load issued before any use) and ``row_pass`` (the row's dot product and
dweight's sums, with no barrier), written by the learner and spliced into kernels/v7_fast.cu in
place of v7's own (:func:`splice`), then checked as the rung ``yours_v7`` with v7_fast's plan on
its register path, and timed beside that path.
"""
from __future__ import annotations

import re

from ...course.verdict import Verdict, failed


#: the two steps the learner writes: where each starts in kernels/v7_fast.cu (template and
#: signature), in the file's order
STEPS = {"load_row": "template <int K>\n__device__ __forceinline__ void load_row(",
         "row_pass": "template <int K, bool WEIGHT_IN_REGISTERS>\n__device__ __forceinline__ float "
                     "row_pass("}
V7_FILE = "v7_fast.cu"


def v7_around_steps() -> list[tuple[str, int]]:
    """kernels/v7_fast.cu without its two steps: the three pieces around them (before load_row,
    between load_row and row_pass, after row_pass), each with the line of v7_fast.cu it starts
    at."""
    from ...core import build

    source = build.kernel_source("v7_fast")
    pieces, at, line = [], 0, 1
    for start_text in STEPS.values():
        start = source.index(start_text)
        end = source.index("\n}\n", start) + len("\n}\n")
        pieces.append((source[at:start], line))
        at, line = end, source[:end].count("\n") + 1
    pieces.append((source[at:], line))
    return pieces


def splice(text: str) -> str:
    """v7_fast.cu with ``text`` (the learner's load_row and row_pass, ``#line 1`` in front) in
    place of its own two steps: the text where load_row was, v7's load_dinp after it, and no
    row_pass of v7's own. ``#line`` directives keep nvcc's line numbers those of v7_fast.cu around
    the text."""
    (before, _), (between, line_between), (after, line_after) = v7_around_steps()
    return (f'#line 1 "{V7_FILE}"\n{before}{text}\n#line {line_between} "{V7_FILE}"\n{between}'
            f'#line {line_after} "{V7_FILE}"\n{after}')


def _count(instructions, prefix) -> int:
    """Instructions of ``prefix`` (:func:`~rmsnorm_lessons.course.checking.static._matching`);
    ``"LDG.EF.128"``: the 128-bit loads with the evict-first hint (``LDG.E.EF.128``)."""
    from ...course.checking import kernel as kc

    if prefix == "LDG.EF.128":
        return sum(1 for i in instructions if i.opcode.startswith("LDG.")
                   and ".EF" in i.opcode and ".128" in i.opcode)
    return len(kc._matching(instructions, prefix))


def _v7_count(kernel: str, prefix, arch: str) -> int:
    from ...inspection import sass

    return _count(sass.listing("v7_fast", arch).functions[kernel].instructions, prefix)


def _at_most_v7(prefix: str, what: str, hint: str, kernel: str = "rmsnorm_backward_v7"):
    """A static check: the learner's v7 has no more ``prefix`` instructions than v7_fast itself
    (the two steps need none of them: v7's own come from the other steps)."""
    from ...course.checking import kernel as kc

    def test(c):
        mine = _count(c.instructions(kernel), prefix)
        theirs = _v7_count(kernel, prefix, c.listing.arch)
        if mine <= theirs:
            return None
        return f"{hint} (the SASS of {kernel} has {mine} {kc._name(prefix)}, v7_fast's {theirs})"

    return kc.Static(what, test)


def _at_least_v7(prefix: str, what: str, hint: str, kernel: str = "rmsnorm_backward_v7"):
    """A static check: the learner's v7 has at least as many ``prefix`` instructions as v7_fast
    (a 128-bit load narrowed, or a streaming load made plain, shows as fewer)."""
    from ...course.checking import kernel as kc

    def test(c):
        mine = _count(c.instructions(kernel), prefix)
        theirs = _v7_count(kernel, prefix, c.listing.arch)
        if mine >= theirs:
            return None
        if prefix == "LDG.128" and _narrow_loads(c.instructions(kernel)) <= _narrow_loads(
                sass.listing("v7_fast", c.listing.arch).functions[kernel].instructions):
            # fewer 128-bit loads and no narrower ones: nvcc dropped loads whose values are never
            # used (weight's, where the dot product leaves it out): the run says what is wrong
            return None
        return f"{hint} (the SASS of {kernel} has {mine} {kc._name(prefix)}, v7_fast's {theirs})"

    from ...inspection import sass

    return kc.Static(what, test)


def _narrow_loads(instructions) -> int:
    """Global loads narrower than 128 bits."""
    return sum(1 for i in instructions if i.opcode.startswith("LDG") and ".128" not in i.opcode)


def _reads_weight4():
    """A source check: the body uses ``weight4`` (the signature names it once). Where the plan
    prefetches, WEIGHT_IN_REGISTERS is false and w[j] holds zeros: weight must come from memory. On
    the GPU the slip is hard to see, since the dot product's term in dinp is small beside bf16's
    tolerance at random data."""
    from ...course.checking import kernel as kc

    def test(c):
        text = c.text[c.text.find("row_pass("):]
        if len(re.findall(r"\bweight4\b", text)) >= 2:
            return None
        return ("weight is in w[j] only when WEIGHT_IN_REGISTERS is true; where the plan "
                "prefetches (accumulate mode, C = 1024..8192) w[j] holds zeros and row_pass loads "
                "weight's chunk itself, from weight4 (your row_pass uses weight4 only in its "
                "signature)")

    return kc.Static("weight loaded from weight4 where it is not in registers", test, sass=False)


def _local_array_bytes(rung, kernel: str, arch: str) -> int:
    """Bytes of local arrays in ``kernel``'s PTX (``__local_depot``): what the code itself puts in
    local memory before ptxas allocates registers (an array indexed at run time), as opposed to
    ptxas's spills."""
    from ...inspection import sass

    text = sass.ptx(rung, arch)
    at = text.find(f".entry {kernel}(")
    if at < 0:
        return 0
    end = text.find(".entry ", at + 1)
    body = text[at:end if end > 0 else len(text)]
    return sum(int(n) for n in re.findall(r"__local_depot\w*\[(\d+)\]", body))


def _unguarded_sums_write(text: str) -> str:
    """The first ``sums(...) = ...`` in ``text`` with no ``p.chunks`` on its line or the line
    before it, in row_pass (from its definition on), where the text has no early exit on ``chunk
    >= p.chunks`` either; "" if none."""
    at = re.search(r"\bfloat\s+row_pass\s*\(", text)
    text = text[at.start():] if at else text
    if re.search(r">=\s*p\.chunks\s*\)\s*(continue|break|return)", text):
        return ""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        found = re.search(r"\bsums\s*\([^;]*?\)\s*=(?!=)", line)
        before = next((ln for ln in reversed(lines[:i]) if ln.strip()), "")
        if found and "p.chunks" not in line and "p.chunks" not in before:
            return found.group(0).rstrip("= ").strip()
    return ""


def _no_local_memory(kernel: str = "rmsnorm_backward_v7"):
    """No local memory, and where there is some, what the compiler's report shows: a local array in
    the PTX (indexed at run time), or ptxas's spills at the register cap (too many values live at
    once)."""
    from ...core.ladder import v7_fast
    from ...course.checking import kernel as kc

    cap = 65536 // v7_fast.MAX_BLOCK  # registers a thread at one block of MAX_BLOCK an SM

    def test(c):
        r = c.compiled.resources.get(kernel)
        local = len(kc._matching(c.instructions(kernel), ("LDL", "STL")))
        if r is None or not (r.spills or r.stack_bytes or local):
            return None
        report = (f"nvcc's report for {kernel}: {r.registers} registers a thread, a stack frame "
                  f"of {r.stack_bytes} B, {r.spill_stores} B of spill stores and {r.spill_loads} "
                  f"B of spill loads ({local} LDL/STL in the SASS)")
        unguarded = _unguarded_sums_write(c.text)
        if unguarded:
            return (f"row_pass writes the sums back with no chunk < p.chunks guard ({unguarded}): "
                    "a chunk past the row's end (chunk >= p.chunks) belongs to no row, and "
                    "sums(p, half, chunk) there is a slot of another thread's shared memory, "
                    "which this write overwrites (on the CPU twin, a race: two threads write the "
                    "same float). Write them back only where chunk < p.chunks; the spills in "
                    f"{report} come with that write")
        array = _local_array_bytes(c.rung, kernel, c.compiled.arch)
        if array:
            return (f"{report}; its PTX, before ptxas allocates registers, already keeps a local "
                    f"array of {array} B: an array indexed by a value known only at run time "
                    "lives in local memory. Index a per-thread array only with the counter of a "
                    "loop over constant bounds under #pragma unroll")
        return (f"{report}: {r.registers} is the most __launch_bounds__({v7_fast.MAX_BLOCK}, 1) "
                f"leaves (65536 / {v7_fast.MAX_BLOCK} = {cap}), and more values are live at once "
                f"than that, so ptxas spills some. In row_pass keep one set of 8 fp32 a chunk "
                "live: add each channel's norm * dout into the sums as you compute it (eight "
                "floats started from a and b), not into products kept beside a and b until the "
                "chunk's end")

    return kc.Static("no local memory (no LDL/STL, no spills, no stack)", test, sass=False)


HINTS = {
    "dweight unchanged": "Your row pass leaves the sums as it read them: add norm * dout of each "
                         "of the chunk's 8 channels into a (channels 0..3) and b (4..7), then "
                         "write them back to sums(p, 0, chunk) and sums(p, 1, chunk) where the "
                         "chunk is part of the row",
    "dweight wrong": "dweight comes from the sums alone (the rest of v7 is given): each row adds "
                     "into what a and b already hold, norm = inp * r; and in load_row, chunk j of "
                     "this thread is p.chunk(j) of the row (16 bytes, 8 bf16)",
    "dweight nonfinite": "a chunk past the row's end (chunk >= p.chunks) belongs to no row: "
                         "load_row must leave it zeros, not load it",
    "dinp wrong": "in dinp your parts are load_row (this thread's chunks of dout and inp, and "
                  "the row's rstd) and the dot product: dot sums weight * dout * inp over this "
                  "thread's 8 K channels; weight is w[j] when WEIGHT_IN_REGISTERS, else its chunk "
                  "from weight4 (the prefetching shapes, accumulate mode at C = 1024..8192)",
    "dinp nonfinite": "load_row read past the row's end, or left a chunk past it unset: a chunk "
                      "with chunk >= p.chunks is all zeros",
}


def check_v7_kernel(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 10's kernel exercise: the learner's ``load_row`` (this thread's K chunks of a row's
    dout and inp, and its rstd, into registers) and ``row_pass`` (pass 1 over the row: this
    thread's part of the dot product, and dweight's sums in its own slice of shared memory),
    spliced into kernels/v7_fast.cu in place of v7's own (:func:`splice`), checked as the rung
    ``yours_v7`` with v7_fast's plan and defines on its register path (the staged rows would run
    neither step), and timed beside that path. compute-sanitizer's race check runs by default;
    ``sanitize=False`` skips it, for speed."""
    from ...core import ladder
    from ...course.checking import kernel as kc
    from .. import probe
    from . import on_cpu

    if isinstance(source, str):
        missing = [name for name in STEPS if not re.search(rf"\b{name}\s*\(",
                                                           kc.strip_comments(source))]
        if missing:
            return failed(f"keep the functions load_row and row_pass (their template lines and "
                          f"signatures, as given): the rest of v7 calls them; your text has no "
                          f"{' and no '.join(missing)}")
    kernel = "rmsnorm_backward_v7"
    v7 = ladder.v7_fast

    # where the two steps run, at every C
    def register_path(N, C, device, *, block, overwrite=False, config=None):
        return v7.plan(N, C, device, block=block, overwrite=overwrite, config=config
                       or v7.Config(staged=False))

    verdict = kc.check_kernel(
        source, name="yours_v7", like="v7_fast", kernels=(kernel, "reduce_dweight_v7"),
        plan=register_path, compare_config=v7.Config(staged=False),
        compare_label="v7_fast's register path",
        rows_per_block=1,  # v7 deals rows round-robin: row % grid is the block that took it
        sanitize_it=sanitize, embed=splice, hints=HINTS, on_cpu=on_cpu.ON_CPU,
        static=(_reads_weight4(),
                _no_local_memory(kernel),
                _at_least_v7("LDG.128", "128-bit loads (as many LDG.E.128 as v7_fast)",
                             "a chunk is 16 bytes: load it as one uint4 (dout and inp viewed as "
                             "uint4 rows), not in narrower pieces"),
                _at_least_v7("LDG.EF.128", "streaming loads of dout and inp (LDG.E.EF.128)",
                             "dout and inp are read once: load them with the streaming hint "
                             "(__ldcs, lesson 06), so they do not push reused lines out of L2"),
                _at_most_v7("BAR", "no barrier of its own (as many BAR as v7_fast)",
                            "a barrier in the two steps: the sums are this thread's alone, so "
                            "nothing needs __syncthreads here, and a barrier in the row loop waits "
                            "for row groups that have fewer rows (a hang)"),
                _at_most_v7("SHFL", "no shuffle of its own (as many SHFL as v7_fast)",
                            "row_pass returns this thread's part of the dot product only: "
                            "exchange() sums the lanes and the warps; a warp_reduce_sum here "
                            "counts every part 32 times"),
                kc.sass_lacks("ATOMS", "no shared-memory atomic (no ATOMS)",
                              "no atomicAdd on the sums: no other thread touches this thread's "
                              "slice",
                              kernel=kernel)))
    # a chunk past the row's end loaded reads the next row (the last row: past dout's end), and
    # w[j] = 0 there keeps the numbers right: only the twin sees it (probe.bounds_after_gpu)
    return probe.bounds_after_gpu(verdict, "yours_v7", on_cpu.ON_CPU.rung)
