"""v4_vec_bf16 (kernels/v4_vec_bf16.cu): bf16 storage, fp32 math, 128-bit loads and stores.

bf16 has no cheap float atomics, so the blocks add into an fp32 accumulator (zeroed before every call)
and a second, tiny kernel adds it into the bf16 dweight.
"""
from .rung import BF16, Launch, Rung, Scratch, Tensor, ceil_div, persistent_grid, tensor_args

BLOCKS_PER_SM = 4
ADD_BLOCK = 256


def shared_memory(C, block):
    return C * 4


def plan(N, C, device, *, block, overwrite=False, config=None):
    accum = Scratch("dweight_accum", C * 4, zero="each")
    grid = persistent_grid(N, block, device.multiprocessors, BLOCKS_PER_SM)
    return [
        Launch("rmsnorm_backward_v4", grid, block, shared_memory(C, block),
               (("dinp", Tensor("dinp")), ("dweight_accum", accum),
                *tensor_args("dout", "inp", "weight", "rstd"), ("N", N), ("C", C))),
        Launch("add_dweight_v4", ceil_div(C, ADD_BLOCK), ADD_BLOCK, 0,
               (("dweight", Tensor("dweight")), ("dweight_accum", accum), ("C", C))),
    ]


RUNG = Rung(name="v4_vec_bf16", adds="bf16 storage, fp32 math, 128-bit Packed128 loads/stores, cache hints",
            dtype=BF16, c_multiple=8, deterministic=False, block_size=256,
            kernels=("rmsnorm_backward_v4", "add_dweight_v4"), plan=plan, shared_memory=shared_memory,
            lesson="05_bf16_vectorized")
