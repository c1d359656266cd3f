"""v4_vec_bf16 (kernels/v4_vec_bf16.cu): bf16 storage, fp32 math, 128-bit loads and stores.

bf16 has no cheap float atomics, so the blocks add into an fp32 accumulator (zeroed before every
call) and a second, tiny kernel adds it into the bf16 dweight. A block stages its sums in shared
memory channel-planar (:func:`staged` is the kernel's ``staged()``); :data:`INTERLEAVED_RUNG` is the
same kernel built with ``-DV4_INTERLEAVED=1`` (channel c at slot c, an 8-way bank conflict), so
lesson 06 can time both.
"""
import dataclasses

import numpy as np

from .rung import BF16, Launch, Rung, Scratch, Tensor, ceil_div, persistent_grid, tensor_args

BLOCKS_PER_SM = 4
ADD_BLOCK = 256
VEC = 8  # bf16 values per 128-bit chunk (x128::size)
WARP = 32
BANKS = 32  # shared-memory banks, 4 bytes wide
INTERLEAVED = "v4_interleaved"  # the name of INTERLEAVED_RUNG


def shared_memory(C, block):
    return C * 4


def staged(c, C, interleaved=False):
    """The shared-memory slot (a 4-byte word) of channel ``c``, as the kernel's ``staged()``
    computes it."""
    c = np.asarray(c)
    return c if interleaved else (c % VEC) * (C // VEC) + c // VEC


def lane_slots(C, k=0, step=0, interleaved=False):
    """The slots the 32 lanes of a warp add element ``k`` of their chunk into at ``step`` of the
    loop (lane l holds chunk q = l + 32 * step, channels 8q .. 8q + 7); lanes past the row's end are
    left out."""
    c = VEC * (np.arange(WARP) + WARP * step) + k
    return staged(c[c < C], C, interleaved)


def conflict_degree(C, k=0, step=0, interleaved=False) -> int:
    """How many different words the busiest of the 32 banks serves for one shared atomic of the warp
    (1: no conflict). Bank of a 4-byte slot: slot % 32."""
    slots = lane_slots(C, k, step, interleaved)
    return max(np.unique(slots[slots % BANKS == b]).size for b in np.unique(slots % BANKS))


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


RUNG = Rung(name="v4_vec_bf16",
            adds="bf16 storage, fp32 math, 128-bit Packed128 loads/stores, cache hints, "
            "channel-planar dweight staging", dtype=BF16, c_multiple=8, deterministic=False,
            block_size=256,
            kernels=("rmsnorm_backward_v4", "add_dweight_v4"), plan=plan,
            shared_memory=shared_memory)


#: v4 with its dweight staged at slot c, the layout v4 first shipped with: the same file and plan,
#: built with ``-DV4_INTERLEAVED=1``. Not on the ladder until
#: ``rmsnorm_lessons.core.ladder.v4_interleaved()`` registers it.
INTERLEAVED_RUNG = dataclasses.replace(RUNG, name=INTERLEAVED, file=RUNG.name,
                                       defines={"V4_INTERLEAVED": 1},
                                       adds="v4 with its dweight staged interleaved (channel c at "
                                       "slot c: an 8-way bank conflict)")
