"""v5_two_pass (kernels/v5_two_pass.cu): deterministic; per-block partials, a second kernel sums
them."""
from .rung import BF16, Launch, Rung, Scratch, Tensor, ceil_div, persistent_grid, tensor_args

BLOCKS_PER_SM = 2  # __launch_bounds__(512, 2)
REDUCE_BLOCK = 256


def shared_memory(C, block):
    # the block's dweight (C rounded up to 256) + staging for warps 1.. of 4 floats per lane
    return (ceil_div(C, 256) * 256 + (block - 32) * 4) * 4


def plan(N, C, device, *, block, overwrite=False, config=None):
    grid = persistent_grid(N, block, device.multiprocessors, BLOCKS_PER_SM)
    partials = Scratch("partials", grid * C * 4)
    return [
        Launch("rmsnorm_backward_v5", grid, block, shared_memory(C, block),
               (("dinp", Tensor("dinp")), ("partials", partials),
                *tensor_args("dout", "inp", "weight", "rstd"), ("N", N), ("C", C))),
        Launch("reduce_dweight_v5", ceil_div(C, REDUCE_BLOCK), REDUCE_BLOCK, 0,
               (("dweight", Tensor("dweight")), ("partials", partials), ("blocks", grid),
                ("C", C))),
    ]


RUNG = Rung(name="v5_two_pass",
            adds="deterministic: per-block partials to scratch, a second kernel sums them",
            dtype=BF16, c_multiple=8, deterministic=True, block_size=512, max_block=512,
            kernels=("rmsnorm_backward_v5", "reduce_dweight_v5"), plan=plan,
            shared_memory=shared_memory)
