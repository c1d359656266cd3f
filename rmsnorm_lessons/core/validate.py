"""Every argument of a call, checked before anything touches the GPU.

Errors are ``TypeError`` (wrong kind of thing, wrong dtype) or ``ValueError`` (shape, layout, range,
overlap, a version's rule), and every message names the argument and the rule it breaks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ladder

# the checks of a call's sizes and options against a rung live with the rung (ladder.plan uses them
# too); here they are part of every call's checks
from .ladder.arguments import MAX_C, MAX_N, block_size, flag, options, shared_memory, size

__all__ = ["Call", "MAX_C", "MAX_N", "Shape", "block_size", "call", "flag", "inputs", "is_gpuarray",
           "options", "shared_memory", "size"]

FP32 = np.dtype(np.float32)
OUTPUTS = ("dinp", "dweight")


@dataclass(frozen=True)
class Shape:
    N: int
    C: int
    shape: tuple  # the shape of inp as given: (N, C) or (B, T, C)


def is_gpuarray(x) -> bool:
    return hasattr(x, "gpudata") and hasattr(x, "strides")


def _describe(x) -> str:
    return f"{type(x).__module__}.{type(x).__name__}"


def _dtype_name(dt: np.dtype) -> str:
    order = {"<": "little-endian ", ">": "big-endian "}.get(dt.byteorder, "")
    return f"{order}{dt.name}"


@dataclass(frozen=True)
class Call:
    """One call's launch options, checked against its rung at its width: what a launcher is built
    from (:func:`rmsnorm_lessons.core.launch.launcher_for`), so nothing checks them twice."""

    rung: ladder.Rung
    C: int
    block: int
    overwrite: bool
    config: object = None


def call(rung: ladder.Rung, C: int, block: int, overwrite: bool, config=None) -> Call:
    """The :class:`Call` of ``rung`` at width ``C`` with ``block`` and ``overwrite`` as
    :func:`options` returned them: its shared memory (no GPU gives a block more) and its config at
    this width are checked here."""
    shared_memory(rung, C, block)
    rung.check_config(config, C, block, overwrite)
    return Call(rung, int(C), int(block), bool(overwrite), config)


def inputs(version, dout, inp, weight, rstd, dinp=None, dweight=None) -> Shape:
    """Check kinds, shapes, dtypes, layout, alignment, overlaps and the version's C rule (a name or
    the Rung itself); return N and C."""
    spec = ladder.get(version)
    arrays = dict(dout=dout, inp=inp, weight=weight, rstd=rstd, dinp=dinp, dweight=dweight)
    for name, a in arrays.items():
        if a is None and name in OUTPUTS:
            continue
        if not (isinstance(a, np.ndarray) or is_gpuarray(a)):
            raise TypeError(f"{name} must be a NumPy array or a PyCUDA GPUArray, got "
                            f"{_describe(a)}")
    given = [n for n, a in arrays.items() if a is not None]
    kinds = {n: is_gpuarray(arrays[n]) for n in given}
    if len(set(kinds.values())) > 1:
        on_gpu = [n for n in given if kinds[n]]
        raise TypeError("arrays must all be NumPy or all GPUArrays; GPUArrays: "
                        f"{', '.join(on_gpu)}")

    if inp.ndim not in (2, 3):
        raise ValueError("inp must have 2 dims (N, C) or 3 dims (B, T, C), got shape "
                         f"{tuple(inp.shape)}")
    shape = tuple(int(s) for s in inp.shape)
    C = shape[-1]
    N = int(np.prod(shape[:-1]))
    expect = {"dout": shape, "dinp": shape, "weight": (C,), "rstd": shape[:-1], "dweight": (C,)}
    for name, want in expect.items():
        a = arrays[name]
        if a is not None and tuple(a.shape) != want:
            raise ValueError(f"{name} must have shape {want} to match inp {shape}, got "
                             f"{tuple(a.shape)}")

    for name in ("dout", "inp", "weight", "dinp", "dweight"):
        a = arrays[name]
        if a is not None and np.dtype(a.dtype) != spec.dtype:
            raise TypeError(f"{name} must be native {spec.dtype.name} for {spec.name}, got "
                            f"{_dtype_name(np.dtype(a.dtype))}")
    if np.dtype(rstd.dtype) != FP32:
        raise TypeError(f"rstd must be native float32 (the forward pass caches it in fp32), got "
                        f"{_dtype_name(np.dtype(rstd.dtype))}")

    for name in given:
        if not arrays[name].flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous (rows stored one after another); "
                             f"use np.ascontiguousarray or a fresh GPUArray")
    size(spec, N, C)
    if kinds.get("inp"):
        _check_device_arrays(spec, {n: arrays[n] for n in given})
    else:
        _check_host_overlaps({n: arrays[n] for n in given})
    return Shape(N, C, shape)


def _check_host_overlaps(arrays: dict) -> None:
    """NumPy outputs are written back in place after the launch: one sharing memory with another
    tensor would be overwritten by it (or overwrite it) in an order nobody chose."""
    for out in OUTPUTS:
        if out not in arrays:
            continue
        for other, a in arrays.items():
            both_outputs = other == "dinp" and out == "dweight"
            if other != out and not both_outputs and np.shares_memory(arrays[out], a):
                kind = "is the same memory as" if arrays[out] is a else "overlaps"
                raise ValueError(f"{out} {kind} {other}: an output may not share memory with "
                                 "another tensor (outputs are copied back into it after the "
                                 "launch)")


def _check_device_arrays(spec: ladder.Rung, arrays: dict) -> None:
    # empty arrays have no memory (PyCUDA gives them gpudata None): nothing to align or overlap
    arrays = {n: a for n, a in arrays.items() if a.gpudata is not None and int(a.nbytes) > 0}
    # 128-bit rungs load 16 bytes at a time; the others need their element's own alignment
    for name, a in arrays.items():
        itemsize = np.dtype(a.dtype).itemsize
        align = 16 if spec.c_multiple > 1 and name != "rstd" else itemsize
        address = int(a.gpudata)
        if address % align:
            raise ValueError(f"{name} must start on a {align}-byte boundary for {spec.name} "
                             f"({'128-bit loads' if align == 16 else 'its element size'}); its "
                             f"address ends in {address % 16:#x}")
    spans = {n: (int(a.gpudata), int(a.gpudata) + int(a.nbytes)) for n, a in arrays.items()
             if a.nbytes}
    for out in OUTPUTS:
        if out not in spans:
            continue
        lo, hi = spans[out]
        for other, (olo, ohi) in spans.items():
            both_outputs = other == "dinp" and out == "dweight"
            if other != out and lo < ohi and olo < hi and not both_outputs:
                kind = "is the same memory as" if (lo, hi) == (olo, ohi) else "overlaps"
                raise ValueError(f"{out} {kind} {other}: an output may not share memory with "
                                 "another tensor (the kernels read and write them in different "
                                 "orders)")
