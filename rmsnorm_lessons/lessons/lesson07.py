"""Lesson 07 (two passes, determinism): summing partials in block order, the scratch size, and the
end-of-lesson questions (registers for a launch bound, the same bits on two GPUs, a second wave)."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..core import gpu, ladder
from ..course.verdict import Verdict, call_answer, choice_verdict, failed, passed, read_number
from ..inspection import occupancy


def _partials(blocks: int = 264, C: int = 64, seed: int = 6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.uniform(-3, 3, (blocks, 1))
    return (rng.standard_normal((blocks, C)) * scale).astype(np.float32)


def block_order_sum(partials: np.ndarray) -> np.ndarray:
    """What reduce_dweight_v5 computes: for each channel, a float32 sum from block 0 to the last
    block."""
    p = np.asarray(partials, np.float32)
    total = np.zeros(p.shape[1], np.float32)
    for row in p:
        total = total + row  # float32 + float32, rounded after every step, like the kernel
    return total


def check_block_order_sum(fn) -> Verdict:
    """``fn(partials)`` (float32, shape (blocks, C)) -> float32 (C,) bit-identical to the kernel's
    sum."""
    p = _partials()
    got, verdict = call_answer(fn, p.copy())
    if verdict is not None:
        return verdict
    got = np.asarray(got)
    if got.shape != (p.shape[1],):
        return failed(f"expected one sum per channel, shape ({p.shape[1]},); got shape {got.shape}")
    want = block_order_sum(p)
    got32 = got.astype(np.float32)
    same = got32.view(np.uint32) == want.view(np.uint32)
    if same.all() and got.dtype == np.float32:
        return passed(f"bit-identical in all {p.shape[1]} channels: same order, same float32 "
                      "roundings")
    if same.all():
        return failed(f"the values match but come back as {got.dtype}; return float32 like the "
                      "kernel")
    in64 = p.astype(np.float64).sum(axis=0).astype(np.float32)
    hint = ""
    if np.array_equal(got32.view(np.uint32), in64.view(np.uint32)):
        hint = (": you summed in float64; the kernel adds float32 numbers, rounding after each "
                "addition")
    elif np.array_equal(got32.view(np.uint32), block_order_sum(p[::-1]).view(np.uint32)):
        hint = ": you went from the last block to the first; the kernel starts at block 0"
    diff = np.abs(got32.astype(np.float64) - want.astype(np.float64))
    return failed(f"{int((~same).sum())} of {p.shape[1]} channels differ in their bits (largest "
                  f"difference {diff.max():.3g}){hint}")


def check_scratch_bytes(answer, blocks: int = 264, C: int = 4096) -> Verdict:
    """Bytes of v5's partials buffer for a grid of ``blocks`` blocks at C channels (fp32
    partials)."""
    value, verdict = read_number(answer, "with a number of bytes", whole=True)
    if verdict is not None:
        return verdict
    want = blocks * C * 4
    if value == want:
        return passed(f"{blocks} blocks x {C} channels x 4 bytes = {want} bytes "
                      f"({want / 2**20:.1f} MiB)")
    if value == blocks * C * 2:
        return failed("the partials are float32 (4 bytes), even though dweight itself is bf16")
    if value == blocks * C:
        return failed("that counts floats, not bytes")
    return failed(f"not {value}: one float32 per block and channel")


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

def check_v5_kernel(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 07's kernel exercise: the learner's ``rmsnorm_backward_v5`` (partials written per
    block) and ``reduce_dweight_v5`` (written from its signature: summed in block order), checked
    as the rung ``yours_v5`` (deterministic: two runs must agree bit for bit) with v5_two_pass's
    plan, and timed beside v5_two_pass.
    compute-sanitizer's race check runs by default; ``sanitize=False`` skips it, for speed."""
    from ..course.checking import kernel as kc

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
                kc.no_local_memory()))
