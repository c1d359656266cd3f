"""Lesson 07 (v5, the same bits on every run): the learner measures v4 twenty times, names what
makes its dweight change, decides what v5's order costs (its scratch bytes, the barriers of its
staging step, its shared memory and blocks per SM), writes the partials' store and the second
kernel, and measures what changed.

* :func:`opening`: v4_vec_bf16 at 16384 x 2048, time and profile, and the channels of its fp32 sums
  that differ over twenty identical calls (:func:`differing_channels`); ``after=True``: v5;
* the decisions :func:`check_scratch_bytes`, :func:`check_staging_barriers` (on
  :func:`outline`) and :func:`check_v5_occupancy`; the kernel exercise :func:`check_v5_kernel`;
* the questions: registers for a launch bound, the same bits on two GPUs, a second wave.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..core import gpu, ladder, launch, reference
from ..course.verdict import Verdict, choice_verdict, failed, passed, read_number, read_numbers
from .changed import guess_beside  # noqa: F401 (the what-changed cell's guess)
from ..inspection import occupancy

SHAPE = (16384, 2048)
BEFORE, AFTER = "v4_vec_bf16", "v5_two_pass"
THIS_LESSON = ("order_of_additions",)
RUNS = 20  # identical calls whose dweight the opening compares

_SEEN: dict = {}


def differing_channels(version: str, N: int = SHAPE[0], C: int = SHAPE[1],
                       runs: int = RUNS) -> int:
    """Over ``runs`` identical calls of ``version`` (GPU), the channels whose fp32 sums differ, bit
    for bit, from the first call's: v4's are read from its launcher's fp32 accumulator before it
    is rounded to bf16 (the rounding hides most differences); other rungs' from dweight itself."""
    spec = ladder.get(version)
    p = reference.random_problem(N, C, spec.dtype, seed=1)
    drv = gpu.driver()
    first, differ = None, np.zeros(C, bool)
    for _ in range(runs):
        _, dweight = ladder_run(version, p)
        sums = dweight
        if version == BEFORE:
            sums = np.empty(C, np.float32)
            drv.memcpy_dtoh(sums, launch.launcher(version, C).scratch("dweight_accum"))
        bits = np.ascontiguousarray(sums).view(np.uint16 if sums.dtype.itemsize == 2
                                               else np.uint32)
        if first is None:
            first = bits.copy()
        differ |= bits != first
    return int(differ.sum())


def ladder_run(version: str, p: dict):
    from ..core.run import run

    return run(version, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"], p["dweight"])


def measured_call(version: str):
    """``version`` (v4_vec_bf16 or v5_two_pass) at 16384 x 2048 as lessons 06, 07 and 08 measure
    it (:func:`rmsnorm_lessons.course.investigate.opening`): time, an Nsight Compute profile (v5's
    second kernel, ``reduce_dweight_v5``, profiled too), and the channels whose fp32 sums differ
    over 20 identical calls (on a GPU only). One call, whichever lesson makes it: the saved run
    keeps one entry per call and shape, so lesson 06's closing v4 and lesson 07's opening v4 (and
    lesson 07's closing v5 and lesson 08's opening v5) must measure the same figures."""
    from ..course import investigate

    kernels = ("reduce_dweight_v5",) if version == AFTER else ()
    return investigate.opening(version, *SHAPE, kernels=kernels, figures={
        "differing_channels": lambda: differing_channels(version)})  # measured on a GPU only


def opening(after: bool = False):
    """v4_vec_bf16 at 16384 x 2048, measured on this GPU (time, an Nsight Compute profile, and the
    channels whose fp32 sums differ over 20 identical calls; without a GPU or ncu, the saved run's),
    printed without a reading; ``after=True``: v5_two_pass, the same figures and its second
    kernel (:func:`measured_call`)."""
    found = measured_call(AFTER if after else BEFORE)
    _SEEN[bool(after)] = found
    return found


def measured(after: bool = False):
    """The opening this process measured (or loaded) last, else :func:`opening`'s: what the
    diagnosis is judged against, and where a solution reads a figure from."""
    return _SEEN.get(bool(after)) or opening(after)


def check_diagnosis(bound=None, cause=None, metric=None, value=None,
                    against=None) -> Verdict:
    """The learner's reading of v4's opening (see :func:`rmsnorm_lessons.lessons.lesson05.
    check_diagnosis` for the arguments)."""
    from .diagnosis import judge

    seen = against if against is not None else measured()
    return judge(seen, bound=bound, cause=cause, metric=metric, value=value,
                 this_lesson=THIS_LESSON, rung="v5_two_pass")


# --- the decisions --------------------------------------------------------------------------------

def this_gpu():
    """This GPU's facts, else the saved ones of the course's card, and the label that says which."""
    return gpu.facts_or_fallback()


def check_scratch_bytes(answer, N: int = SHAPE[0], C: int = SHAPE[1]) -> Verdict:
    """Decision (a): the bytes of v5's ``partials`` at N x C on this GPU (one fp32 sum per block of
    the plan's grid and channel)."""
    value, verdict = read_number(answer, "with a number of bytes", whole=True)
    if verdict is not None:
        return verdict
    device, label = this_gpu()
    blocks = ladder.plan(AFTER, N, C, device)[0].grid
    want = blocks * C * 4
    if value == want:
        return passed(f"{blocks} blocks ({ladder.v5_two_pass.BLOCKS_PER_SM} an SM on {label}) x "
                      f"{C} channels x 4 bytes = {want:,} bytes ({want / 2**20:.2f} MiB): the "
                      "row pass writes them once, the second kernel reads them once")
    if value == blocks * C * 2:
        return failed("the partials are fp32 sums (4 bytes), though dweight itself is bf16")
    if value == blocks * C:
        return failed("that counts floats, not bytes")
    if value == N * C * 4:
        return failed("one row of partials per block, not per row of the tensor: the grid is "
                      f"{ladder.v5_two_pass.BLOCKS_PER_SM} blocks an SM")
    return failed(f"not {value:,}: one fp32 sum per block of the plan and channel; the plan "
                  f"launches {ladder.v5_two_pass.BLOCKS_PER_SM} blocks on each of this GPU's SMs")


#: the staging step of v5's row loop, one half of a lane's 8 channels (None: an empty slot)
OUTLINE = ("warps 1, 2, ... each store their lanes' 4 sums into the staging area (a slot a lane)",
           None,
           "warp 0 adds the staged sums of warps 1, 2, ..., in warp order, into dweight_shared",
           None,
           "the next half (or step): warps 1, 2, ... store into the staging area again")


def outline() -> None:
    """Print the staging step of v5's row loop with its empty slots numbered."""
    print("one staging step of v5's row loop (each of a lane's 8 channels is added in two halves "
          "of 4):")
    for i, line in enumerate(OUTLINE, 1):
        print(f"  {i}  {line or '(empty)'}")
    print("Which empty slots need a __syncthreads()? barriers = {...}")


def check_staging_barriers(barriers) -> Verdict:
    """Decision (b): the slots of :func:`outline` that need a ``__syncthreads()``."""
    empty = {i for i, line in enumerate(OUTLINE, 1) if line is None}
    if barriers is None or barriers is Ellipsis:
        return failed("replace the ... with a set of slot numbers, e.g. {2}")
    try:
        chosen = {int(b) for b in barriers}
    except (TypeError, ValueError):
        return failed(f"give a set of slot numbers, e.g. {{2}}, got {barriers!r}")
    if not chosen <= empty:
        return failed(f"slots {sorted(chosen - empty)} hold a step already; the empty ones are "
                      f"{sorted(empty)}")
    if 2 not in chosen:
        return failed("without a barrier at 2, warp 0 may read a warp's staging slot before that "
                      "warp has stored this half's sums, and adds what was there before: "
                      "compute-sanitizer's racecheck reports a write (a warp's store128 into "
                      "staging) and a read (warp 0's load128) of one address with no barrier "
                      "between them. Lesson 13 runs it on exactly this kernel (bug_race_v5)")
    if 4 not in chosen:
        return failed("without a barrier at 4, warp 1 may finish its next half and store into "
                      "its staging slot while warp 0 is still reading this half's value from it: "
                      "warp 0 adds the new sums in place of the old")
    return passed("a barrier at 2: every warp's store lands before warp 0 reads; a barrier at 4: "
                  "warp 0 has read every slot before any warp overwrites it. Two __syncthreads() "
                  "per half of every step: v4's shared atomics become barriers, and a fixed "
                  "order")


def check_v5_occupancy(smem_bytes, blocks_per_sm, C: int = SHAPE[1]) -> Verdict:
    """Decision (c): at C channels, the dynamic shared memory one v5 block asks for, in bytes, and
    how many blocks of v5 fit on one SM of this GPU."""
    values, verdict = read_numbers(((smem_bytes, "smem_bytes"), (blocks_per_sm, "blocks_per_sm")),
                                   "of {name} with a whole number", whole=True)
    if verdict is not None:
        return verdict
    smem, blocks = values
    rung = ladder.get(AFTER)
    device, label = this_gpu()
    arch = device.arch if device.arch.rstrip("a") in occupancy.LIMITS else "sm_90"
    want_smem = rung.shared_memory(C, rung.block_size)
    found = occupancy.occupancy(AFTER, C, arch)
    L = occupancy.limits(arch)
    if smem != want_smem:
        if smem == want_smem + L.reserved_shared_per_block:
            return failed(f"{smem} counts the {L.reserved_shared_per_block} B the driver keeps per "
                          "block; the launch asks for the rest: the block's dweight and the "
                          "staging area")
        if smem == -(-C // 256) * 256 * 4:
            return failed(f"{smem} B is the block's dweight alone; warps 1 .. 15 also stage 4 "
                          "floats a lane")
        return failed(f"not {smem}: the block's dweight (C floats, C rounded up to 256) and the "
                      "staging area (4 floats for each lane of warps 1, 2, ...), 4 bytes each")
    if blocks != found.blocks_per_sm:
        by = {"registers": "registers", "shared memory": "shared memory"}
        return failed(f"{blocks} is not it: work out each limit (warp slots, block slots, "
                      "registers at 64 a thread, shared memory with the driver's "
                      f"{L.reserved_shared_per_block} B a block) and take the smallest"
                      + (f"; {by.get(found.limiter, found.limiter)} decide here"
                         if blocks > found.blocks_per_sm else ""))
    return passed(f"{want_smem:,} B a block (+{L.reserved_shared_per_block} B the driver keeps) "
                  f"and {blocks} blocks an SM on {arch} ({label}), limited by {found.limiter}: "
                  f"{blocks * rung.block_size // 32} of {L.max_warps_per_sm} warp slots. The plan "
                  f"launches {ladder.v5_two_pass.BLOCKS_PER_SM} an SM")



# --- the questions at the end of the lesson
# ------------------------------------------

def most_registers(block: int = 512, blocks: int = 3, arch: str = "sm_90") -> int:
    """The most registers a thread may use so that ``blocks`` blocks of ``block`` threads fit on one
    SM of ``arch`` (what ``__launch_bounds__(block, blocks)`` asks ptxas for); 0 if none do."""
    for registers in range(occupancy.limits(arch).max_registers_per_thread, 0, -1):
        if occupancy.from_resources(registers, 0, block, 0, arch).blocks_per_sm >= blocks:
            return registers
    return 0


def check_launch_bound_registers(answer, block: int = 512, blocks: int = 3,
                                 arch: str = "sm_90") -> Verdict:
    """``__launch_bounds__(block, blocks)`` on ``arch``: the most registers a thread may use so that
    ``blocks`` blocks of ``block`` threads fit on one SM (registers alone; a warp's registers are
    allocated in units of 256, from one of the SM's four quarters)."""
    value, verdict = read_number(answer, "with a number of registers a thread", whole=True)
    if verdict is not None:
        return verdict
    want = most_registers(block, blocks, arch)
    L = occupancy.limits(arch)
    even = L.registers_per_sm // (block * blocks)
    warps = block // 32 * blocks
    if value == want:
        return passed(f"{want} registers x 32 = {want * 32} a warp; {L.registers_per_sm // 4} a "
                      f"quarter hold {L.registers_per_sm // 4 // (want * 32)} warps, 4 quarters "
                      f"hold the {warps} warps of {blocks} blocks")
    if value == even and even != want:
        return failed(f"{L.registers_per_sm} / {block * blocks} threads is the even split, but a "
                      "warp's registers are taken in units of 256 from one quarter of the SM: do "
                      f"{warps // 4} warps a quarter fit at {value} registers a thread?")
    if value == most_registers(block, blocks - 1, arch):
        return failed(f"that lets {blocks - 1} blocks fit (v5's own bound); the question asks for "
                      f"{blocks}")
    if value > want:
        return failed(f"at {value} registers a thread fewer than {blocks} blocks fit: count the "
                      f"warps one quarter of the SM holds")
    return failed(f"{blocks} blocks fit at {value}, but they also fit with more registers a "
                  "thread: find the most")


def check_same_bits(answer) -> Verdict:
    """v5 at N = 64, C = 768, the same inputs, on two GPUs of one architecture (the same compiled
    kernels), one of 132 SMs and one of 114. Their dweight:

    a) the same bits on both;
    b) bits that may differ between the two GPUs, each repeatable on its own;
    c) bits that may change from run to run.
    """
    grids = [ladder.plan("v5_two_pass", 64, 768,
                         dataclasses.replace(gpu.H200, multiprocessors=sms))[0].grid
             for sms in (132, 114)]
    same = grids[0] == grids[1]
    wrong_pick = ("the SM count changes the bits only through the grid: count the blocks each "
                  "GPU's plan launches at N = 64")
    return choice_verdict(
        answer, "a" if same else "b",
        why=(f"both plans launch {grids[0]} blocks (64 rows, 16 warps a block): the same grid, "
             "the same block size, so the same order of every addition") if same else
            f"{grids[0]} blocks against {grids[1]}: another grid, another order",
        why_not={"b" if same else "a": wrong_pick,
                 "c": "v5 has no atomics: every addition has one place in a fixed order, on "
                      "every run"})


def check_second_wave(answer, N: int = 1600, C: int = 16384, sms: int = 58,
                      arch: str = "sm_89") -> Verdict:
    """v5_two_pass at (N, C) on a GPU of ``arch`` with ``sms`` SMs: how many of the plan's blocks
    can start only once an earlier block has finished (v5 at most 64 registers a thread, its launch
    bounds; shared memory from its plan)?"""
    value, verdict = read_number(answer, "with a number of blocks (an integer)", whole=True)
    if verdict is not None:
        return verdict
    rung = ladder.get("v5_two_pass")
    grid = ladder.plan(rung, N, C, dataclasses.replace(gpu.H200, multiprocessors=sms))[0].grid
    fit = occupancy.from_resources(64, 0, rung.block_size,
                                   rung.shared_memory(C, rung.block_size), arch).blocks_per_sm
    want = max(0, grid - fit * sms)
    if value == want:
        return passed(f"the plan launches {grid} blocks; {fit} per SM fit at C = {C}, so "
                      f"{fit * sms} start at once and {want} wait")
    if value == grid:
        return failed("that is every block of the plan; some of them start at once")
    upper = ladder.v5_two_pass.BLOCKS_PER_SM * sms
    if value in (fit * sms, upper - fit * sms):
        return failed(f"{fit * sms} blocks start at once, but how many does the plan launch? "
                      f"With {N} rows and 16 warps a block, persistent_grid launches fewer than "
                      f"its {upper}")
    if value == 0:
        return failed(f"at C = {C}, how many blocks of v5 fit on an SM of {arch}? Section 4's "
                      "table says")
    return failed(f"not {value}: the plan's blocks, less those that fit on the SMs at once")


# --- the kernel exercise: v5's per-block partials and the second kernel
# ------------------------------

#: the partials of one probe: per channel, terms whose float32 sum depends on the order they are
#: added in (1e8 swallows a 1 that -1e8 would have left), then ordinary ones
ORDER_TERMS = np.array([1e8, 1.0, -1e8, 1.0, 1.0], np.float32)
#: the probe's channels (one block of the learner's reduce_dweight_v5) and rows of partials
ORDER_C, ORDER_BLOCKS = 256, 5


def _order_partials() -> np.ndarray:
    """The probe's partials: every fourth channel :data:`ORDER_TERMS` (scaled), the rest random."""
    rng = np.random.default_rng(7)
    partials = rng.uniform(-1, 1, (ORDER_BLOCKS, ORDER_C)).astype(np.float32)
    partials[:, ::4] = ORDER_TERMS[:, None] * (1 + np.arange(ORDER_C // 4, dtype=np.float32))
    return partials


def order_probe(text: str):
    """``(got, want, None)``: dweight (as float) after the learner's ``reduce_dweight_v5`` on
    :data:`ORDER_BLOCKS` rows of partials whose sums depend on the order of their terms, from a
    zero dweight, and what block order in float32, rounded once, gives; or ``(None, None, why)``
    where the CPU twin cannot run it."""
    from ..core import bf16
    from . import probe

    partials = _order_partials()
    dweight = bf16.to_bf16(np.zeros(ORDER_C, np.float32))
    arrays, why = probe.run(text, "reduce_dweight_v5", grid=1, block=ORDER_C,
                            args=[("dweight", dweight), ("partials", partials), ORDER_BLOCKS,
                                  ORDER_C], name="yours_v5")
    if arrays is None:
        return None, None, why
    want = bf16.from_bf16(bf16.to_bf16(probe.float32_in_order(partials)))
    return bf16.from_bf16(arrays["dweight"]).astype(np.float32), want, None


def _in_double(got: np.ndarray) -> bool:
    """Whether ``got`` is the probe's partials summed in block order in float64 (not float32)."""
    from ..core import bf16

    partials = _order_partials()
    wide = np.cumsum(partials.astype(np.float64), axis=0)[-1].astype(np.float32)
    return bool(np.array_equal(got, bf16.from_bf16(bf16.to_bf16(wide))))


def _block_order(c) -> str | None:
    """reduce_dweight_v5 adds the blocks' partials in block order, in float32, rounded once."""
    from .. import twin
    from ..core import bf16
    from . import probe

    if twin.available() is not None:  # no twin here: the kernel check's verdict says so
        return None
    got, want, why = order_probe(c.rung.source or c.text)
    if got is None:
        return f"reduce_dweight_v5 could not be run on the CPU twin: {why}"
    wrong = np.flatnonzero(got != want)
    if wrong.size == 0:
        return None
    ch = int(wrong[0])
    terms = ", ".join(f"{t:g}" for t in ORDER_TERMS * (1 + ch // 4)) if ch % 4 == 0 else None
    said = (f"with partials ({terms}) of blocks 0 .. {ORDER_BLOCKS - 1} for channel {ch}, "
            f"adding block 0 first, then block 1, ..., in float32 gives {want[ch]:g}; yours gives "
            f"{got[ch]:g}" if terms else
            f"channel {ch} of dweight is {got[ch]:g} where block order gives {want[ch]:g}")
    partials = _order_partials()
    for b in range(ORDER_BLOCKS):  # one block's row left out: say so, not "the order"
        if np.array_equal(got, bf16.from_bf16(bf16.to_bf16(probe.float32_in_order(
                np.delete(partials, b, axis=0))))):
            which = "the last" if b == ORDER_BLOCKS - 1 else "the first" if b == 0 else "one"
            return (f"reduce_dweight_v5 leaves out the partials of block {b}, {which} of blocks 0 "
                    f".. {ORDER_BLOCKS - 1}: its row is missing from every channel's sum. Add the "
                    "rows of partials of blocks 0 to blocks - 1, each once, in that order")
    if _in_double(got):
        return (f"reduce_dweight_v5 adds in double, not float32: {said}. v5's sum is one float32 "
                "sum per channel in block order, rounded to bf16 once")
    return (f"reduce_dweight_v5 does not add the partials in block order: {said}. The order is "
            "what makes v5's bits the same on every run and every GPU of one grid: one float32 "
            "sum per channel, b = 0, 1, ..., blocks - 1, rounded to bf16 once at the end")


def _wide_partials(c) -> str | None:
    """The partials leave rmsnorm_backward_v5 16 bytes a store: no STG narrower than 128 bits."""
    from ..course.checking import static as ks

    narrow = [i.opcode for i in ks._matching(c.instructions("rmsnorm_backward_v5"), "STG")
              if ".128" not in i.opcode]
    if not narrow:
        return None
    return (f"rmsnorm_backward_v5 stores narrower than 128 bits ({len(narrow)} x "
            f"{', '.join(sorted(set(narrow)))}): the partials go 16 bytes a store, an f128 of "
            "four sums from dweight_shared (load128 / store128), as the comment asks")


def check_v5_kernel(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 07's kernel exercise: the learner's ``rmsnorm_backward_v5`` (partials written per
    block) and ``reduce_dweight_v5`` (written from its signature: summed in block order), checked
    as the rung ``yours_v5`` (deterministic: two runs must agree bit for bit) with v5_two_pass's
    plan, and timed beside v5_two_pass.
    compute-sanitizer's race check runs by default; ``sanitize=False`` skips it, for speed."""
    from ..course.checking import kernel as kc
    from ..course.checking import static as ks

    atomics = kc.GLOBAL_ATOMICS + ("ATOMS",)
    return kc.check_kernel(
        source, name="yours_v5", like="v5_two_pass", rows_per_block=16, sanitize_it=sanitize,
        hints={"dweight unchanged": "Does reduce_dweight_v5 add its sum into dweight[c]?",
               "dweight blocks": "reduce_dweight_v5 adds the rows of partials of blocks 0 to "
                                 "blocks - 1, each once",
               "dweight wrong": "In reduce_dweight_v5 thread c reads column c of every block's "
                                "row (row b starts at partials + b * C); in the first kernel each "
                                "block writes its own row"},
        static=(kc.sass_lacks(atomics, "no atomics in either kernel (the sums keep one order)",
                              "an atomic adds in whatever order the hardware serves it, so the "
                              "result changes from run to run: write partials, then sum them in "
                              "block order"),
                kc.no_local_memory(),
                ks.Static("the partials stored 16 bytes at a time (no STG narrower than 128 bits "
                          "in rmsnorm_backward_v5)", _wide_partials),
                ks.Static("reduce_dweight_v5 adds the blocks in block order, in float32 (run on "
                          "the CPU twin on partials whose sum depends on their order)",
                          _block_order, sass=False)))
