"""bf16 on the host, through ml_dtypes.

ml_dtypes' ``bfloat16`` converts from float32 with round-to-nearest-even, which is what the device's
``__float2bfloat16`` (and the ``(floatX)`` casts in the seed) do, so a tensor rounded here is
bit-for-bit the tensor the kernel would have produced.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

bfloat16 = np.dtype(ml_dtypes.bfloat16)

#: relative spacing of bf16 numbers (2**-7); the seed's tolerance rule uses 0.079 for bf16 outputs
EPSILON = float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)


def to_bf16(x) -> np.ndarray:
    """Round an array to bf16 (round-to-nearest-even)."""
    return np.asarray(x, dtype=np.float32).astype(bfloat16)


def from_bf16(x) -> np.ndarray:
    """Widen a bf16 array to float32 (exact)."""
    return np.asarray(x).astype(np.float32)


def bits(x) -> np.ndarray:
    """The raw 16-bit patterns of a bf16 array (for bitwise comparisons)."""
    return np.ascontiguousarray(np.asarray(x, dtype=bfloat16)).view(np.uint16)


def is_bf16(dtype) -> bool:
    return np.dtype(dtype) == bfloat16
