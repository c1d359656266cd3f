"""v6_last_block (kernels/v6_last_block.cu): the seed's kernel10; an atomicInc ticket, the last
block sums."""
from .rung import BF16, Launch, Rung, Scratch, ceil_div, tensor_args

BLOCKS_PER_SM = 2  # the seed's: two 512-thread blocks per SM
SCRATCH_HEADER = 32  # floats before the partials: the ticket counter, alone in one 128-byte line
DEFINES = {"V6_SCRATCH_HEADER": SCRATCH_HEADER}


def shared_memory(C, block):
    # the seed's formula, twice what RMSNorm needs (a leftover of layernorm's dbias)
    return (2 * ceil_div(C, 256) * 256 + 2 * (block - 32) * 4) * 4


def plan(N, C, device, *, block, overwrite=False, config=None):
    grid = BLOCKS_PER_SM * device.multiprocessors
    # the counter is zeroed once, when the buffer is made: every launch leaves it at zero
    scratch = Scratch("scratch", (SCRATCH_HEADER + 2 * C * grid) * 4, zero="once")
    return [Launch("rmsnorm_backward_v6", grid, block, shared_memory(C, block),
                   (*tensor_args("dinp", "dweight"), ("scratch", scratch),
                    *tensor_args("dout", "inp", "weight", "rstd"), ("N", N), ("C", C)))]


RUNG = Rung(name="v6_last_block",
            adds="the seed's kernel10: one kernel, atomicInc ticket, the last block sums",
            dtype=BF16, c_multiple=8, deterministic=True, block_size=512, max_block=512,
            kernels=("rmsnorm_backward_v6",), plan=plan, shared_memory=shared_memory,
            defines=DEFINES)
