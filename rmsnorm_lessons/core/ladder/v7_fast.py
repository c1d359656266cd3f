"""v7_fast (kernels/v7_fast.cu): past the seed, towards the copy bandwidth.

Each thread holds K 16-byte chunks of a row; a row group of G threads holds the whole row
(G * K * 8 >= C); a block holds several row groups; the grid is persistent. What the plan chooses
(K, prefetch, blocks per SM, staging) can be overridden with a :class:`Config`, passed as
``run(..., config=...)``: the lab's experiments and lesson 10's register path do that.

Rows of :data:`STAGED_C` (1024 <= C <= 16384) are staged in shared memory by per-thread
asynchronous copies instead (:func:`staged_layout`; cp.async, sm_80 and newer: below, the register
path): a ring of row slots per row group, K = 2 chunks a thread, blocks of :data:`STAGED_BLOCK`
threads. A :class:`Config` that sets K, prefetch or per_sm, or
``staged=False``, or a block size other than the default, keeps such rows on the register path.

A row wider than one block holds (C > :data:`ROW_MAX_C`, up to :data:`MAX_C`) is split over a
thread-block cluster of 2 or 4 blocks (:func:`wide_layout`; sm_90 and newer): its rows come into
shared memory by bulk copies, and the row's dot product is added over the cluster.
"""
from __future__ import annotations

from dataclasses import dataclass

from .rung import BF16, Launch, Plan, Rung, Scratch, ceil_div, tensor_args

MAX_BLOCK = 512  # the kernel's __launch_bounds__(MAX_BLOCK, 1)
MAX_K = 4  # K = 4 takes the 128 registers a thread may have at 512 threads per SM
# the final sum: one warp reads 32 float4 (128 columns) of a partial row per pass
QUADS_PER_PASS = 32
# the final sum: loads a warp keeps in flight (16 warps x 9 cover 132 partial rows)
REDUCE_BATCH = 9
MAX_GROUPS = 15  # row groups of more than one warp each own a named barrier, 1..15
# accumulate mode prefetches the next row (K = 2) for C in this range (results/NOTES.md)
PREFETCH_C = (1024, 8192)
STAGED_BLOCK = 1024  # the staged kernel's __launch_bounds__(1024, 1): 64 registers a thread
STAGED_K = 2  # chunks a thread on the staged path (kernels/v7_staged.cuh: staged::K)
# C staged by cp.async (results/NOTES.md, "v9"); shorter rows keep the register path
STAGED_C = (1024, 16384)
# row slots a group's ring has at most (kernels/v7_staged.cuh: staged::MAX_STAGES)
STAGED_MAX_STAGES = 8
# kept free for the staged kernel's static shared memory (256 B) in the ring's budget
STAGED_STATIC_SHARED = 1024
# kept free for the register kernel's static shared memory (640 B) beside the groups' dweight
REGISTER_STATIC_SHARED = 1024
DEFINES = {"V7_MAX_BLOCK": MAX_BLOCK, "V7_QUADS_PER_PASS": QUADS_PER_PASS,
           "V7_REDUCE_BATCH": REDUCE_BATCH,
           "V7_STAGED_BLOCK": STAGED_BLOCK}
ROW_MAX_C = 8 * MAX_K * MAX_BLOCK  # 16384: the widest row one block holds in its registers
WIDE_CLUSTERS = (2, 4)  # blocks a wider row is split over (a thread-block cluster)
MAX_C = ROW_MAX_C * WIDE_CLUSTERS[-1]  # 65536
#: the kernels of the wide rows, built for sm_90 and newer only (clusters, bulk copies)
WIDE_KERNELS = tuple(f"rmsnorm_backward_v7_wide{cl}" for cl in WIDE_CLUSTERS)
WIDE_MAX_STAGES = 8  # row slots in a wide block's ring (kernels/v7_wide.cuh: wide::MAX_STAGES)
# kept free for the wide kernels' static shared memory (160 B) in the slots' budget
WIDE_STATIC_SHARED = 1024


@dataclass(frozen=True)
class Config:
    """Overrides of the plan's choices; ``None`` leaves a choice to the plan.

    ``K``: 16-byte chunks per thread (1..4); ``prefetch``: hold the next row's dout and inp while
    this row is finished (needs K = 2); ``per_sm``: blocks per SM; these three tune the register
    path.
    ``staged``: rows of :data:`STAGED_C` through shared memory (True), on the register path (False),
    or as the plan decides (None). (The partials are always summed by a second kernel: no block
    waits for another, so v7 finishes beside any other work on the GPU.)
    """

    K: int | None = None
    prefetch: bool | None = None
    per_sm: int | None = None
    staged: bool | None = None

    def __post_init__(self):
        if self.K is not None and (isinstance(self.K, bool) or not isinstance(self.K, int)
                                   or not 1 <= self.K <= MAX_K):
            raise ValueError(f"Config.K (chunks per thread) must be an int 1..{MAX_K} or None, got "
                             f"{self.K!r}")
        if self.prefetch is not None and not isinstance(self.prefetch, bool):
            raise ValueError(f"Config.prefetch must be True, False or None, got {self.prefetch!r}")
        if self.per_sm is not None and (isinstance(self.per_sm, bool)
                                        or not isinstance(self.per_sm, int)
                                        or self.per_sm < 1):
            raise ValueError("Config.per_sm (blocks per SM) must be an int >= 1 or None, got "
                             f"{self.per_sm!r}")
        if self.staged is not None and not isinstance(self.staged, bool):
            raise ValueError(f"Config.staged must be True, False or None, got {self.staged!r}")
        if self.staged and (self.K, self.prefetch, self.per_sm) != (None, None, None):
            raise ValueError("Config: K, prefetch and per_sm tune the register path; staged=True "
                             "takes none of them")

    @property
    def tunes_registers(self) -> bool:
        return (self.K, self.prefetch, self.per_sm) != (None, None, None) or self.staged is False


@dataclass(frozen=True)
class RowLayout:
    K: int  # 16-byte chunks (8 channels) per thread
    group: int  # threads per row group, a multiple of 32
    groups: int  # row groups per block
    block: int  # threads per block = groups * group
    # dynamic shared memory: the groups' dweight (C floats each) or the final sum's staging
    smem: int
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

    By default accumulate mode prefetches for C in :data:`PREFETCH_C` (K = 2); otherwise a row is
    one warp while 4 chunks a lane cover it, else 4 chunks a thread.
    """
    chunks = C // 8
    # measured (results/NOTES.md): helps accumulate mode at these C, not overwrite mode
    if prefetch is None:
        prefetch = K is None and not overwrite and PREFETCH_C[0] <= C <= PREFETCH_C[1]
    if K is None:
        K = 2 if prefetch else min(MAX_K, max(1, ceil_div(chunks, 32)))
    if prefetch and K != 2:
        raise ValueError(f"v7_fast: prefetch needs K = 2 (two rows in 128 registers), got K={K}")
    group = 32 * max(1, ceil_div(chunks, 32 * K))
    if C > ROW_MAX_C:
        raise ValueError(f"v7_fast: a row of C={C} is wider than one block holds (C <= "
                         f"{ROW_MAX_C}): it is split over a cluster (wide_layout), where K, "
                         "prefetch and per_sm do not apply")
    if group > block:
        raise ValueError(f"v7_fast keeps a row in one block's registers: at C={C} a row needs "
                         f"{group} threads of {K} chunks, more than block_size={block}; the "
                         f"largest C at this block size is {8 * K * block // 32 * 32}, and "
                         f"{ROW_MAX_C} at block_size={MAX_BLOCK} (wider rows, C > {ROW_MAX_C}, are "
                         "split over a cluster whatever the block size)")
    groups = block // group
    if group > 32:
        groups = min(groups, MAX_GROUPS)
    return RowLayout(K, group, groups, groups * group, max(groups * C * 4, groups * group * 16),
                     bool(prefetch))


def resolve(N: int, C: int, device, *, block: int = MAX_BLOCK, overwrite: bool = False,
            config: Config | None = None) -> Resolved:
    """Every choice of a launch at (N, C) on ``device``: the row layout, the grid, the final sum's
    blocks."""
    config = config or Config()
    layout = fit_shared(row_layout(C, block, config.K, overwrite, config.prefetch), C, device,
                        overwrite, config)
    # __launch_bounds__(512, 1): registers for 512 threads per SM
    fits = max(1, MAX_BLOCK // layout.block)
    per_sm = max(1, min(fits, config.per_sm or fits))
    grid = max(1, min(device.multiprocessors * per_sm, ceil_div(N, layout.groups)))
    reducers = ceil_div(C, 4 * QUADS_PER_PASS)  # one pass of a warp's 32 float4 each
    return Resolved(layout, per_sm, grid, reducers)


def fit_shared(layout: RowLayout, C: int, device, overwrite: bool = False,
               config: Config | None = None) -> RowLayout:
    """``layout`` with fewer row groups where their dweight does not fit in the shared memory
    ``device`` gives a block (sm_75: 64 KiB); a ValueError where one group does not."""
    config = config or Config()
    room = device.shared_memory_per_block_optin - REGISTER_STATIC_SHARED
    while layout.groups > 1 and layout.smem > room:
        layout = row_layout(C, layout.block - layout.group, config.K, overwrite, config.prefetch)
    if layout.smem > room:
        raise ValueError(f"v7_fast at C={C}: a row group's dweight ({layout.smem} B) and the "
                         f"kernel's static shared memory do not fit in the "
                         f"{device.shared_memory_per_block_optin} B a block may have on "
                         f"{device.arch}; there C <= {room // 4 // 8 * 8}")
    return layout


@dataclass(frozen=True)
class StagedLayout:
    K: int  # 16-byte chunks a thread (STAGED_K)
    group: int  # threads a row group, a multiple of 32
    groups: int  # row groups a block
    # bytes of one row slot: the group's dout, inp (and dinp when accumulating) for one row
    slot: int
    stages: int  # row slots in each group's ring
    sums: int  # bytes the groups' dweight sums take at the end, where the rings were

    @property
    def block(self) -> int:
        return self.groups * self.group

    @property
    def shared(self) -> int:
        return max(self.groups * self.stages * self.slot, self.sums)


def staged_layout(C: int, overwrite: bool = False,
                  shared_per_block: int | None = None) -> StagedLayout:
    """How rows of 1024 <= C <= 16384 are staged: row groups of STAGED_K chunks a thread in a block
    of at most
    :data:`STAGED_BLOCK` threads, and as many row slots a group as ``shared_per_block`` bytes hold
    (at most
    :data:`STAGED_MAX_STAGES`; without it, the 2 the kernel needs at least). Raises ValueError where
    C is outside :data:`STAGED_C` or two slots a group do not fit."""
    if not STAGED_C[0] <= C <= STAGED_C[1]:
        raise ValueError(f"v7_fast stages rows of {STAGED_C[0]} <= C <= {STAGED_C[1]} in shared "
                         f"memory, got C={C}")
    chunks = C // 8
    group = 32 * ceil_div(chunks, 32 * STAGED_K)
    groups = STAGED_BLOCK // group
    if group > 32:
        groups = min(groups, MAX_GROUPS)
    slot = (2 if overwrite else 3) * group * STAGED_K * 16
    if shared_per_block is None:
        stages = 2
    else:
        budget = shared_per_block - STAGED_STATIC_SHARED
        while groups > 1 and budget // (groups * slot) < 2:
            groups -= 1
        stages = min(STAGED_MAX_STAGES, budget // (groups * slot))
        if stages < 2:
            raise ValueError(f"v7_fast at C={C}: two row slots of {slot} bytes do not fit in "
                             f"{shared_per_block} bytes of shared memory a block")
    return StagedLayout(STAGED_K, group, groups, slot, stages, groups * C * 4)


def staged_here(C: int, device, block: int, overwrite: bool,
                config: Config | None) -> StagedLayout | None:
    """The staged layout when the plan takes that path at this C, else None (the register path)."""
    config = config or Config()
    asked = config.staged is True
    if config.tunes_registers or (block != MAX_BLOCK and not asked):
        return None
    if not STAGED_C[0] <= C <= STAGED_C[1] or tuple(device.compute_capability) < (8, 0):
        if asked:
            raise ValueError(f"v7_fast: Config(staged=True) needs {STAGED_C[0]} <= C <= "
                             f"{STAGED_C[1]} and sm_80 or newer (cp.async); got C={C} on "
                             f"{device.arch}")
        return None
    try:
        return staged_layout(C, overwrite, device.shared_memory_per_block_optin)
    except ValueError:
        if asked:
            raise
        # a device with less shared memory: the register path, which needs at most 64 KiB
        return None


def _with_final_sum(kernel: str, grid: int, block: int, shared: int, parts: int, C: int,
                    reduce_block: int,
                    row_args: tuple) -> list:
    """A main kernel that writes ``parts`` partial rows of dweight (C fp32 each), then
    reduce_dweight_v7 on the same stream, which sums them in a fixed order (its ``reduce_block``
    threads fix that order)."""
    # each written by the main kernel before it is read
    partials = Scratch("partials", parts * C * 4)
    reducers = ceil_div(C, 4 * QUADS_PER_PASS)  # one pass of a warp's 32 float4 each
    return [Launch(kernel, grid, block, shared,
                   (*tensor_args("dinp"), ("partials", partials),
                    *tensor_args("dout", "inp", "weight", "rstd"),
                    *row_args)),
            Launch("reduce_dweight_v7", reducers, reduce_block, 0,
                   (*tensor_args("dweight"), ("partials", partials), ("parts", parts), ("C", C),
                    ("slices", reducers)))]


def staged_plan(N, C, device, layout: StagedLayout, overwrite: bool):
    grid = max(1, min(device.multiprocessors, ceil_div(N, layout.groups)))
    return _with_final_sum("rmsnorm_backward_v7_staged", grid, layout.block, layout.shared, grid, C,
                           MAX_BLOCK,
                           (("N", N), ("C", C), ("G", layout.group), ("stages", layout.stages),
                            ("overwrite", int(bool(overwrite)))))


@dataclass(frozen=True)
class WideLayout:
    cluster: int  # blocks a row is split over
    per_rank: int  # 16-byte chunks of a row each block owns (the last block may own fewer)
    block: int  # threads a block: MAX_K chunks each cover its part
    slot: int  # bytes of one row slot: the block's part of dout, inp (and dinp when accumulating)
    stages: int  # row slots in the ring

    @property
    def shared(self) -> int:
        return self.stages * self.slot


def wide_layout(C: int, overwrite: bool = False, shared_per_block: int | None = None) -> WideLayout:
    """How a row wider than :data:`ROW_MAX_C` is split: the smallest cluster of
    :data:`WIDE_CLUSTERS` whose blocks hold their part in MAX_K chunks a thread, and as many row
    slots as ``shared_per_block`` bytes hold (at most :data:`WIDE_MAX_STAGES`; without it, the 2 the
    kernel needs at least)."""
    if C <= ROW_MAX_C:
        raise ValueError(f"v7_fast: rows of C <= {ROW_MAX_C} are held by one block (row_layout), "
                         f"got C={C}")
    chunks = C // 8
    cluster = next((cl for cl in WIDE_CLUSTERS if ceil_div(chunks, cl) <= MAX_K * MAX_BLOCK), None)
    if cluster is None:
        raise ValueError(f"v7_fast: C={C} is wider than {WIDE_CLUSTERS[-1]} blocks of {MAX_BLOCK} "
                         f"threads hold; the largest C is {MAX_C}")
    per_rank = ceil_div(chunks, cluster)
    block = 32 * ceil_div(per_rank, 32 * MAX_K)
    slot = (2 if overwrite else 3) * per_rank * 16
    stages = 2 if shared_per_block is None else min(WIDE_MAX_STAGES,
                                                    (shared_per_block - WIDE_STATIC_SHARED) // slot)
    if stages < 2:
        raise ValueError(f"v7_fast at C={C}: two row slots of {slot} bytes do not fit in "
                         f"{shared_per_block} bytes of shared memory a block")
    return WideLayout(cluster, per_rank, block, slot, stages)


def resident_clusters(device, cluster: int) -> int:
    """Clusters of ``cluster`` whole-SM blocks that ``device`` runs at once: its
    ``resident_clusters`` where known (the H200's, measured), else every SM in use. A grid of more
    clusters than run at once is still right, only slower: the clusters left over wait for a second
    round (61 % of the ceiling instead of 101 % at 2048 x 65536 on the H200, results/NOTES.md)."""
    return dict(device.resident_clusters).get(cluster, device.multiprocessors // cluster)


def wide_plan(N, C, device, *, overwrite=False, config=None):
    if config is not None and config != Config():
        raise ValueError("v7_fast: Config (K, prefetch, per_sm, staged) is for rows one block "
                         f"holds, C <= {ROW_MAX_C}; got C={C}")
    if tuple(device.compute_capability) < (9, 0):
        raise ValueError(f"v7_fast: C={C} > {ROW_MAX_C} splits each row over a thread-block "
                         f"cluster, which needs sm_90 or newer; {device.name} is {device.arch}")
    w = wide_layout(C, overwrite, device.shared_memory_per_block_optin)
    clusters = max(1, min(N, resident_clusters(device, w.cluster),
                          device.multiprocessors // w.cluster))
    return _with_final_sum(f"rmsnorm_backward_v7_wide{w.cluster}", clusters * w.cluster, w.block,
                           w.shared, clusters,
                           C, w.block, (("N", N), ("C", C), ("stages", w.stages),
                                        ("overwrite", int(bool(overwrite)))))


def shared_memory(C: int, block: int) -> int:
    # the two row slots the wide kernel needs at least (the plan takes more where there is room)
    if C > ROW_MAX_C:
        return max(wide_layout(C, overwrite=mode).shared for mode in (False, True))
    # enough for either mode
    return max(row_layout(C, block, overwrite=mode).smem for mode in (False, True))


def check_config(config, C: int, block: int, overwrite: bool) -> None:
    """The rung's ``config_check``: a :class:`Config` whose register layout exists at (C, block,
    mode)."""
    if not isinstance(config, Config):
        raise TypeError(f"config must be a v7_fast Config or None, got {type(config).__name__} "
                        f"{config!r}")
    row_layout(C, block, config.K, overwrite, config.prefetch)


def path(C: int, device, block: int = MAX_BLOCK, overwrite: bool = False,
         config: Config | None = None) -> tuple[str, str]:
    """``(path, why)``: the path v7_fast takes at C on ``device`` (its compute capability and
    limits: the target's, :func:`rmsnorm_lessons.core.build.target_facts`) and the reason.
    ``"register"`` runs everywhere; ``"cp.async"`` stages rows from sm_80; ``"cluster"`` splits
    rows over a thread-block cluster with bulk copies from sm_90."""
    if C > ROW_MAX_C:
        return "cluster", (f"C={C} > {ROW_MAX_C} is wider than one block holds: a cluster of "
                           f"blocks and bulk copies (sm_90 and newer; {device.arch} here)")
    if staged_here(C, device, block, overwrite, config) is not None:
        return "cp.async", (f"{STAGED_C[0]} <= C <= {STAGED_C[1]} on {device.arch} (sm_80 or "
                            "newer): rows staged in shared memory by cp.async")
    if tuple(device.compute_capability) < (8, 0):
        return "register", f"{device.arch} has no cp.async (sm_80 and newer): rows in registers"
    if config is not None and config.tunes_registers or block != MAX_BLOCK:
        return "register", "the config or block size tunes the register path"
    if not STAGED_C[0] <= C <= STAGED_C[1]:
        return "register", (f"C={C} is outside the staged range {STAGED_C[0]}..{STAGED_C[1]}: "
                            "rows in registers")
    return "register", (f"two staged row slots a group do not fit in {device.arch}'s "
                        f"{device.shared_memory_per_block_optin} B a block: rows in registers")


def plan(N, C, device, *, block, overwrite=False, config=None):
    taken, why = path(C, device, block, overwrite, config)
    if taken == "cluster":
        return Plan(wide_plan(N, C, device, overwrite=overwrite, config=config), taken, why)
    if taken == "cp.async":
        staged = staged_here(C, device, block, overwrite, config)
        return Plan(staged_plan(N, C, device, staged, overwrite), taken, why)
    r = resolve(N, C, device, block=block, overwrite=overwrite, config=config)
    s = r.layout
    return Plan(_with_final_sum("rmsnorm_backward_v7", r.grid, s.block, s.smem, r.grid, C, s.block,
                                (("N", N), ("C", C), ("G", s.group), ("K", s.K),
                                 ("prefetch", int(s.prefetch)),
                                 ("overwrite", int(bool(overwrite))))), taken, why)


RUNG = Rung(name="v7_fast",
            adds="past the seed: a row per row group in registers, no barrier per chunk, the "
            "final sum spread over many blocks, an overwrite mode, rows staged by cp.async, wider "
            "rows split over a cluster", dtype=BF16,
            c_multiple=8, deterministic=True, block_size=MAX_BLOCK, max_block=MAX_BLOCK,
            kernels=("rmsnorm_backward_v7", "reduce_dweight_v7", "rmsnorm_backward_v7_staged",
                     *WIDE_KERNELS),
            plan=plan, shared_memory=shared_memory, overwrite_mode=True, defines=DEFINES,
            config_check=check_config)
