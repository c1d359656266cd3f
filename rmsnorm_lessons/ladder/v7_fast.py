"""v7_fast (kernels/v7_fast.cu): past the seed, towards the copy bandwidth.

Each thread holds K 16-byte chunks of a row; a row group of G threads holds the whole row
(G * K * 8 >= C); a block holds several row groups; the grid is persistent. What the plan chooses (K,
prefetch, blocks per SM) can be overridden with a :class:`Config`: the
lab's experiments do that, and nothing else does.
"""
from __future__ import annotations

from dataclasses import dataclass

from .rung import BF16, Launch, Rung, Scratch, ceil_div, tensor_args

MAX_BLOCK = 512  # the kernel's __launch_bounds__(MAX_BLOCK, 1)
MAX_K = 4  # K = 4 takes the 128 registers a thread may have at 512 threads per SM
QUADS_PER_PASS = 32  # the final sum: one warp reads 32 float4 (128 columns) of a partial row per pass
REDUCE_BATCH = 9  # the final sum: loads a warp keeps in flight (16 warps x 9 cover 132 partial rows)
MAX_GROUPS = 15  # row groups of more than one warp each own a named barrier, 1..15
PREFETCH_C = (1024, 8192)  # accumulate mode prefetches the next row (K = 2) for C in this range (lab/NOTES.md)
DEFINES = {"V7_MAX_BLOCK": MAX_BLOCK, "V7_QUADS_PER_PASS": QUADS_PER_PASS, "V7_REDUCE_BATCH": REDUCE_BATCH}
MAX_C = 8 * MAX_K * MAX_BLOCK  # 16384: a row must fit in one block's registers


@dataclass(frozen=True)
class Config:
    """Overrides of the plan's choices; ``None`` leaves a choice to the plan.

    ``K``: 16-byte chunks per thread (1..4); ``prefetch``: hold the next row's dout and inp while this
    row is finished (needs K = 2); ``per_sm``: blocks per SM. (The partials are always summed by a second
    kernel: no block waits for another, so v7 finishes beside any other work on the GPU.)
    """

    K: int | None = None
    prefetch: bool | None = None
    per_sm: int | None = None

    def __post_init__(self):
        if self.K is not None and (isinstance(self.K, bool) or not isinstance(self.K, int)
                                   or not 1 <= self.K <= MAX_K):
            raise ValueError(f"Config.K (chunks per thread) must be an int 1..{MAX_K} or None, got {self.K!r}")
        if self.prefetch is not None and not isinstance(self.prefetch, bool):
            raise ValueError(f"Config.prefetch must be True, False or None, got {self.prefetch!r}")
        if self.per_sm is not None and (isinstance(self.per_sm, bool) or not isinstance(self.per_sm, int)
                                        or self.per_sm < 1):
            raise ValueError(f"Config.per_sm (blocks per SM) must be an int >= 1 or None, got {self.per_sm!r}")


@dataclass(frozen=True)
class RowLayout:
    K: int  # 16-byte chunks (8 channels) per thread
    group: int  # threads per row group, a multiple of 32
    groups: int  # row groups per block
    block: int  # threads per block = groups * group
    smem: int  # dynamic shared memory: the groups' dweight (C floats each) or the final sum's staging
    prefetch: bool = False


@dataclass(frozen=True)
class Resolved:
    layout: RowLayout
    per_sm: int  # blocks per SM
    grid: int  # blocks = partial rows
    reducers: int  # blocks of the final sum, one slice of the columns each


def row_layout(C: int, block: int = MAX_BLOCK, K: int | None = None, overwrite: bool = False,
               prefetch: bool | None = None) -> RowLayout:
    """The row group v7_fast uses at this C and mode, in blocks of at most ``block`` threads.

    By default accumulate mode prefetches for C in :data:`PREFETCH_C` (K = 2); otherwise a row is one
    warp while 4 chunks a lane cover it, else 4 chunks a thread.
    """
    chunks = C // 8
    if prefetch is None:  # measured (lab/NOTES.md): helps accumulate mode at these C, not overwrite mode
        prefetch = K is None and not overwrite and PREFETCH_C[0] <= C <= PREFETCH_C[1]
    if K is None:
        K = 2 if prefetch else min(MAX_K, max(1, ceil_div(chunks, 32)))
    if prefetch and K != 2:
        raise ValueError(f"v7_fast: prefetch needs K = 2 (two rows in 128 registers), got K={K}")
    group = 32 * max(1, ceil_div(chunks, 32 * K))
    if group > block:
        raise ValueError(f"v7_fast keeps a row in one block's registers: at C={C} a row needs {group} threads "
                         f"of {K} chunks, more than block_size={block}; the largest C at this block size is "
                         f"{8 * K * block // 32 * 32}, and {MAX_C} at block_size={MAX_BLOCK}")
    groups = block // group
    if group > 32:
        groups = min(groups, MAX_GROUPS)
    return RowLayout(K, group, groups, groups * group, max(groups * C * 4, groups * group * 16), bool(prefetch))


def resolve(N: int, C: int, device, *, block: int = MAX_BLOCK, overwrite: bool = False,
            config: Config | None = None) -> Resolved:
    """Every choice of a launch at (N, C) on ``device``: the row layout, the grid, the final sum's blocks."""
    config = config or Config()
    layout = row_layout(C, block, config.K, overwrite, config.prefetch)
    fits = max(1, MAX_BLOCK // layout.block)  # __launch_bounds__(512, 1): registers for 512 threads per SM
    per_sm = max(1, min(fits, config.per_sm or fits))
    grid = max(1, min(device.multiprocessors * per_sm, ceil_div(N, layout.groups)))
    reducers = ceil_div(C, 4 * QUADS_PER_PASS)  # one pass of a warp's 32 float4 each
    return Resolved(layout, per_sm, grid, reducers)


def shared_memory(C: int, block: int) -> int:
    # enough for either mode
    return max(row_layout(C, block, overwrite=mode).smem for mode in (False, True))


def plan(N, C, device, *, block, overwrite=False, config=None):
    r = resolve(N, C, device, block=block, overwrite=overwrite, config=config)
    s = r.layout
    partials = Scratch("partials", r.grid * C * 4)  # C fp32 per block, each written before it is read
    return [Launch("rmsnorm_backward_v7", r.grid, s.block, s.smem,
                   (*tensor_args("dinp"), ("partials", partials), *tensor_args("dout", "inp", "weight", "rstd"),
                    ("N", N), ("C", C), ("G", s.group), ("K", s.K), ("prefetch", int(s.prefetch)),
                    ("overwrite", int(bool(overwrite))))),
            # on the same stream, after the main kernel: every partial is written when it starts
            Launch("reduce_dweight_v7", r.reducers, s.block, 0,
                   (*tensor_args("dweight"), ("partials", partials), ("parts", r.grid), ("C", C),
                    ("slices", r.reducers)))]


RUNG = Rung(name="v7_fast", adds="past the seed: a row per row group in registers, no barrier per chunk, the "
            "final sum spread over many blocks, an overwrite mode", dtype=BF16, c_multiple=8, deterministic=True,
            block_size=MAX_BLOCK, max_block=MAX_BLOCK, kernels=("rmsnorm_backward_v7", "reduce_dweight_v7"),
            plan=plan, shared_memory=shared_memory, overwrite_mode=True, defines=DEFINES,
            lesson="09_v7_step_by_step")
