"""v3_smem (kernels/v3_smem.cu): dweight summed per block in shared memory, a persistent grid."""
from .rung import FP32, Launch, Rung, persistent_grid, standard_args

BLOCKS_PER_SM = 4  # 4 x 256 threads: half an SM's threads, room for C floats of shared memory each


def shared_memory(C, block):
    return C * 4  # the block's dweight, one float per channel


def plan(N, C, device, *, block, overwrite=False, config=None):
    grid = persistent_grid(N, block, device.multiprocessors, BLOCKS_PER_SM)
    return [Launch("rmsnorm_backward_v3", grid, block, shared_memory(C, block),
                   standard_args(N, C))]


RUNG = Rung(name="v3_smem",
            adds="dweight summed per block in shared memory, one global atomic per block and "
            "channel", dtype=FP32, c_multiple=1, deterministic=False, block_size=256,
            kernels=("rmsnorm_backward_v3",), plan=plan, shared_memory=shared_memory)
