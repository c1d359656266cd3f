"""The course's front door: ``run`` one version of the ladder on NumPy arrays or GPUArrays.

``run`` resolves the version once, checks every argument before anything touches the GPU
(:mod:`~rmsnorm_lessons.core.validate`), then hands the rung's plan to a cached launcher
(:mod:`~rmsnorm_lessons.core.launch`). Where each version's launches are decided:
``rmsnorm_lessons/core/ladder/``.
"""
from __future__ import annotations

import numpy as np

from . import build, gpu, ladder, launch, validate
from .launch import LaunchError, Tensors

__all__ = ["forward", "run"]

FP32 = np.dtype(np.float32)


def run(version, dout, inp, weight, rstd, dinp=None, dweight=None, *, block_size: int | None = None,
        overwrite: bool = False, config=None, stream=None):
    """Run one backward pass of ``version``: returns ``(dinp, dweight)`` with this call's gradients
    added.

    NumPy inputs: copied to the GPU, and new NumPy arrays are returned (``dinp``/``dweight`` default
    to zeros and are not modified). GPUArray inputs: ``dinp`` and ``dweight`` are required, updated
    in place and returned; they may not overlap any other tensor. With ``overwrite`` (versions that
    offer it) dinp is set, not added to (dweight still accumulates). ``config``: a variant, for the
    versions that have them (:data:`rmsnorm_lessons.core.ladder.CONFIG_TAKERS`; the rung's
    ``config_check`` judges it). ``N == 0`` is a no-op. Every argument is checked before the GPU is
    touched.

    ``stream``: None runs on the default stream and waits for this call's work only (not for other
    streams). A PyCUDA Stream, a PyTorch stream or an int CUstream handle: the work is queued after
    what that stream holds, later work on it waits for ours, and ``run`` returns without waiting
    when the inputs are GPUArrays (as a PyTorch op does); with NumPy inputs it waits for that
    stream, since it copies the results back. Any Python thread may call ``run``, concurrently too.
    """
    spec = ladder.get(version)  # the one lookup: the Rung is handed on from here
    block, overwrite = validate.options(spec, block_size, overwrite, config)
    shp = validate.inputs(spec, dout, inp, weight, rstd, dinp, dweight)
    # a C the version cannot run on any device, or a config it cannot take there, says so here
    checked = validate.call(spec, shp.C, block, overwrite, config)
    gpu.foreign_handle(stream)  # a stream of the wrong kind says so here
    on_gpu = validate.is_gpuarray(inp)
    if on_gpu and (dinp is None or dweight is None):
        raise ValueError("dinp and dweight must be given as GPUArrays when the inputs are "
                         "GPUArrays")
    if not on_gpu:
        dinp = np.zeros(shp.shape, spec.dtype) if dinp is None else np.array(dinp, copy=True)
        dweight = np.zeros(shp.C, spec.dtype) if dweight is None else np.array(dweight, copy=True)
    if shp.N == 0:
        return dinp, dweight

    # any thread: the context is pushed for this call and popped after it
    with gpu.in_context() as g:
        return _run_on_gpu(checked, g.driver, shp, dout, inp, weight, rstd, dinp, dweight, on_gpu,
                           stream)


def _run_on_gpu(checked, drv, shp, dout, inp, weight, rstd, dinp, dweight, on_gpu, stream):
    spec = checked.rung
    L = launch.launcher_for(checked)
    pstream, bridge = launch.resolve_stream(stream)
    if on_gpu:
        tensors = Tensors(*(int(a.gpudata) for a in (dinp, dweight, dout, inp, weight, rstd)))
        if bridge is not None:
            bridge.enter()
        L(shp.N, tensors, pstream)
        if bridge is not None:
            bridge.leave()
        if stream is None:
            _wait_for(spec, drv, None)
        return dinp, dweight

    host = dict(dinp=dinp, dweight=dweight, dout=dout, inp=inp, weight=weight, rstd=rstd)
    device = {k: drv.mem_alloc(max(v.nbytes, 16)) for k, v in host.items()}
    try:
        if bridge is not None:
            bridge.enter()
        for k, v in host.items():
            if pstream is None:
                drv.memcpy_htod(device[k], gpu.as_bytes(np.ascontiguousarray(v)))
            else:
                drv.memcpy_htod_async(device[k], gpu.as_bytes(np.ascontiguousarray(v)), pstream)
        L(shp.N, Tensors(**{k: int(p) for k, p in device.items()}), pstream)
        for k in ("dinp", "dweight"):
            if pstream is None:
                drv.memcpy_dtoh(gpu.as_bytes(host[k]), device[k])
            else:
                drv.memcpy_dtoh_async(gpu.as_bytes(host[k]), device[k], pstream)
        if bridge is not None:
            bridge.leave()
        _wait_for(spec, drv, pstream)
    except drv.Error as exc:
        raise LaunchError(f"{spec.name}: the kernel failed: {exc}") from exc
    finally:
        for p in device.values():
            p.free()
    return dinp, dweight


def _wait_for(spec, drv, stream) -> None:
    """Wait for the work queued so far on ``stream`` (None: the default stream), not for other
    streams."""
    try:
        if stream is None:
            done = drv.Event(drv.event_flags.DISABLE_TIMING)
            done.record(None)
            done.synchronize()
        else:
            stream.synchronize()
    except drv.Error as exc:
        raise LaunchError(f"{spec.name}: the kernel failed: {exc}") from exc


def forward(inp, weight, eps: float = 1e-5):
    """RMSNorm forward on the GPU (fp32, one warp per row, ``kernels/rmsnorm_forward.cu``).

    Returns ``(out, rstd)`` as NumPy arrays; ``rstd`` is what the backward versions read.
    """
    x = np.asarray(inp)
    w = np.asarray(weight)
    if x.ndim not in (2, 3):
        raise ValueError(f"inp must have 2 dims (N, C) or 3 dims (B, T, C), got shape {x.shape}")
    if x.dtype != FP32 or w.dtype != FP32:
        raise TypeError(f"inp and weight must be float32, got {x.dtype.name} and {w.dtype.name}")
    C = x.shape[-1]
    if w.shape != (C,):
        raise ValueError(f"weight must have shape ({C},) to match inp's C, got {w.shape}")
    N = int(np.prod(x.shape[:-1]))
    out = np.empty_like(x)
    rstd = np.empty(x.shape[:-1], np.float32)
    if N == 0:
        return out, rstd
    with gpu.in_context() as g:
        return _forward_on_gpu(g.driver, x, w, out, rstd, N, C, eps)


def _forward_on_gpu(drv, x, w, out, rstd, N, C, eps):
    fn = build.source_module("rmsnorm_forward").get_function("rmsnorm_forward")
    d_inp, d_w = drv.to_device(np.ascontiguousarray(x)), drv.to_device(w)
    d_out, d_rstd = drv.mem_alloc(out.nbytes), drv.mem_alloc(max(rstd.nbytes, 4))
    try:
        warps = 8
        fn(d_out, d_rstd, d_inp, d_w, np.int32(N), np.int32(C), np.float32(eps),
           block=(32 * warps, 1, 1), grid=(ladder.ceil_div(N, warps), 1, 1))
        try:
            drv.Context.synchronize()
        except drv.Error as exc:
            raise LaunchError(f"rmsnorm_forward: the kernel failed: {exc}") from exc
        drv.memcpy_dtoh(out, d_out)
        drv.memcpy_dtoh(rstd, d_rstd)
    finally:
        for a in (d_inp, d_w, d_out, d_rstd):
            a.free()
    return out, rstd
