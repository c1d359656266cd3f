"""v1_naive (kernels/v1_naive.cu): one thread per row, two loops over C, dweight by global
atomicAdd."""
from .rung import FP32, Launch, Rung, ceil_div, standard_args


def plan(N, C, device, *, block, overwrite=False, config=None):
    return [Launch("rmsnorm_backward_v1", ceil_div(N, block), block, 0, standard_args(N, C))]


RUNG = Rung(name="v1_naive",
            adds="one thread per row, two loops over C, dweight by global atomicAdd",
            dtype=FP32, c_multiple=1, deterministic=False, block_size=256,
            kernels=("rmsnorm_backward_v1",),
            plan=plan)
