"""Lesson 07 (two passes, determinism): summing partials in block order, and the scratch size."""
from __future__ import annotations

import numpy as np

from . import Verdict, call_answer, failed, passed, read_number


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


# --- the kernel exercise: v5's per-block partials and the second kernel
# ------------------------------

def check_v5_kernel(source: str, sanitize: bool = True) -> Verdict:
    """Lesson 07's kernel exercise: the learner's ``rmsnorm_backward_v5`` (partials written per
    block) and ``reduce_dweight_v5`` (written from its signature: summed in block order), checked
    as the rung ``yours_v5`` (deterministic: two runs must agree bit for bit) with v5_two_pass's
    plan, and timed beside v5_two_pass.
    compute-sanitizer's race check runs by default; ``sanitize=False`` skips it, for speed."""
    from . import kernel_check as kc

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
