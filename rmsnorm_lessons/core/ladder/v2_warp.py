"""v2_warp (kernels/v2_warp.cu): one warp per row, coalesced loads, the __shfl_xor_sync
butterfly."""
from .rung import FP32, Launch, Rung, ceil_div, standard_args


def plan(N, C, device, *, block, overwrite=False, config=None):
    warps = block // 32
    return [Launch("rmsnorm_backward_v2", ceil_div(N, warps), block, 0, standard_args(N, C))]


RUNG = Rung(name="v2_warp", adds="one warp per row: coalesced loads, __shfl_xor_sync butterfly",
            dtype=FP32,
            c_multiple=1, deterministic=False, block_size=256, kernels=("rmsnorm_backward_v2",),
            plan=plan)
