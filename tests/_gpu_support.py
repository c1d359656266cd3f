"""Helpers shared by the GPU tests (imported by them; nothing here touches a GPU at import)."""
from __future__ import annotations

import numpy as np

from rmsnorm_lessons import check, kernels, reference

TENSORS = ("dout", "inp", "weight", "rstd", "dinp", "dweight")


def to_device(p: dict) -> dict:
    """GPUArrays holding a copy of every tensor of a problem from ``reference.random_problem``."""
    from pycuda import gpuarray

    return {k: gpuarray.to_gpu(np.ascontiguousarray(p[k])) for k in TENSORS}


def buffers(dev: dict) -> kernels.Buffers:
    return kernels.Buffers(**{k: dev[k].gpudata for k in TENSORS})


def reference_of(p: dict, dinp=None, dweight=None):
    """The float64 reference for problem ``p``, accumulating into its own (or the given) outputs."""
    return reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"],
                              p["dinp"] if dinp is None else dinp, p["dweight"] if dweight is None else dweight)


def compare(version, N, got, want, label=""):
    """Both comparisons with the course's tolerances; prints ||err||/||ref|| and max |err| (see ``-s``)."""
    spec = kernels.get(version)
    tol = check.tolerances(spec.dtype, N)
    a = check.compare(got[0], want[0], *tol["dinp"], name="dinp")
    b = check.compare(got[1], want[1], *tol["dweight"], name="dweight")
    print(f"{version:<15} {label:<22} dinp ||err||/||ref|| {a.rel_l2_error:.2e} max {a.max_abs_error:.2e} | "
          f"dweight ||err||/||ref|| {b.rel_l2_error:.2e} max {b.max_abs_error:.2e}", flush=True)
    return a, b


def bits(x) -> np.ndarray:
    """Raw bits of a float32 or bf16 array, for bitwise comparisons."""
    x = np.ascontiguousarray(np.asarray(x))
    return x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint16)
