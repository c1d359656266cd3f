"""The NumPy reference: RMSNorm forward and backward, as the seed's CPU code computes them.

Shapes are ``(N, C)`` or ``(B, T, C)`` (the second is flattened to ``N = B*T`` rows). The arithmetic
runs in ``dtype``: float32 reproduces the seed's CPU reference, float64 is the oracle the GPU
versions are checked against. bf16 inputs are widened exactly before the arithmetic.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

EPS = 1e-5


def _real(x, name: str) -> np.ndarray:
    """``x`` as an array of real numbers (floats or ints, bf16 included), else a TypeError."""
    a = np.asarray(x)
    if a.dtype.kind not in "fiu" and a.dtype.name != "bfloat16":
        raise TypeError(f"{name} must hold real numbers (a float or int array), got dtype "
                        f"{a.dtype}")
    return a


def _rows(x, name: str, dtype) -> np.ndarray:
    a = _real(x, name)
    if a.ndim not in (2, 3):
        raise ValueError(f"{name} must have 2 dims (N, C) or 3 dims (B, T, C), got shape {a.shape}")
    if a.shape[-1] < 1:
        raise ValueError(f"{name} must have at least one channel (C >= 1), got shape {a.shape}")
    return a.astype(dtype, copy=False).reshape(-1, a.shape[-1])


def _channels(x, name: str, c: int, dtype) -> np.ndarray:
    """A per-channel tensor (weight, dweight) of shape (c,), else a ValueError naming it."""
    a = _real(x, name)
    if a.shape != (c,):
        raise ValueError(f"{name} must have shape ({c},) to match inp's C, got {a.shape}")
    return a.astype(dtype, copy=False)


def forward(inp, weight, eps: float = EPS, dtype=np.float64):
    """Return ``(out, rstd)``: ``rstd = 1/sqrt(mean(x**2) + eps)`` per row and ``out = x * rstd *
    weight``.

    ``out`` has the shape of ``inp``; ``rstd`` has its leading shape (``(N,)`` or ``(B, T)``).
    """
    shape = np.shape(inp)
    x = _rows(inp, "inp", dtype)
    w = _channels(weight, "weight", x.shape[1], dtype)
    rstd = 1.0 / np.sqrt(np.mean(x * x, axis=1) + dtype(eps))
    out = x * rstd[:, None] * w
    return out.reshape(shape), rstd.reshape(shape[:-1])


def _backward_arguments(dout, inp, weight, rstd, dinp, dweight, dtype):
    """:func:`backward`'s arguments checked (a ValueError or TypeError naming the one that is
    wrong) and in ``dtype``: inp, dout and dinp as (N, C) rows, weight, rstd per row, dweight; dinp
    and dweight as zeros where not given."""
    shape = np.shape(inp)
    x = _rows(inp, "inp", dtype)
    g = _rows(dout, "dout", dtype)
    if g.shape != x.shape:
        raise ValueError(f"dout must have the shape of inp {shape}, got {np.shape(dout)}")
    n, c = x.shape
    w = _channels(weight, "weight", c, dtype)
    r = _real(rstd, "rstd").astype(dtype, copy=False).reshape(-1)
    if r.shape != (n,):
        raise ValueError(f"rstd must hold one value per row ({n}), got shape {np.shape(rstd)}")
    if dinp is not None and np.shape(dinp) not in (shape, (n, c)):
        raise ValueError(f"dinp must have the shape of inp {shape}, got {np.shape(dinp)}")
    base_dinp = np.zeros((n, c), dtype) if dinp is None else _rows(dinp, "dinp", dtype)
    base_dweight = np.zeros(c, dtype) if dweight is None else _channels(dweight, "dweight", c,
                                                                        dtype)
    return x, g, w, r, base_dinp, base_dweight


def backward(dout, inp, weight, rstd, dinp=None, dweight=None, dtype=np.float64):
    """Return ``(dinp, dweight)`` after accumulating this call's gradients into them, like the seed.

    ``dinp += rstd * (dnorm - norm * mean(dnorm * norm))`` with ``norm = inp*rstd``, ``dnorm =
    weight*dout``, and ``dweight += sum over rows of norm * dout``. ``dinp`` and ``dweight`` default
    to zeros; when given they are not modified: new arrays in ``dtype`` are returned.
    """
    shape = np.shape(inp)
    x, g, w, r, base_dinp, base_dweight = _backward_arguments(dout, inp, weight, rstd, dinp,
                                                              dweight, dtype)  # (N, C) rows

    norm = x * r[:, None]
    dnorm = w * g
    dnorm_norm_mean = np.mean(dnorm * norm, axis=1, keepdims=True)
    grad_inp = r[:, None] * (dnorm - norm * dnorm_norm_mean)
    grad_weight = np.sum(norm * g, axis=0)
    return (base_dinp + grad_inp).reshape(shape), base_dweight + grad_weight


def backward_by_rows(dout, inp, weight, rstd, dinp=None, dweight=None, dtype=np.float64):
    """:func:`backward` of large problems, faster: the rows are independent, so it runs on blocks
    of rows (about 1 MiB of ``dtype`` each, whose temporaries stay in cache) on several threads
    (NumPy lets go of the GIL). The same ``dinp``; ``dweight`` is summed block by block, an order
    that may change its last bits. Takes ``(N, C)`` arrays only."""
    if np.ndim(inp) != 2:
        raise ValueError(f"inp must have 2 dims (N, C) for backward_by_rows (backward takes "
                         f"(B, T, C) too), got shape {np.shape(inp)}")
    n, c = np.shape(inp)
    if np.shape(dout) != (n, c):
        raise ValueError(f"dout must have the shape of inp {(n, c)}, got {np.shape(dout)}")
    if dinp is not None and np.shape(dinp) != (n, c):
        raise ValueError(f"dinp must have the shape of inp {(n, c)}, got {np.shape(dinp)}")
    rstd = np.asarray(rstd).reshape(-1)
    if rstd.shape != (n,):
        raise ValueError(f"rstd must hold one value per row ({n}), got shape {np.shape(rstd)}")
    base = np.zeros(c, dtype) if dweight is None else _channels(dweight, "dweight", c, dtype)
    step = max(1, (1 << 20) // (np.dtype(dtype).itemsize * max(c, 1)))
    grad_inp = np.empty((n, c), dtype)

    def block(a):
        b = min(n, a + step)
        grad_inp[a:b], grad_weight = backward(dout[a:b], inp[a:b], weight, rstd[a:b],
                                              None if dinp is None else dinp[a:b], dtype=dtype)
        return grad_weight

    starts = range(0, n, step)
    if len(starts) == 1:
        partials = [block(0)]
    else:
        with ThreadPoolExecutor(max_workers=_threads()) as pool:
            partials = list(pool.map(block, starts))
    return grad_inp, base + np.sum(partials, axis=0)


def _threads() -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(8, cpus or 1))


def loss_gradients_fd(dout, inp, weight, eps: float = EPS, h: float = 1e-6, rows=None, cols=None):
    """Central finite differences of ``L = sum(dout * forward(inp, weight))`` in float64.

    Returns ``(dinp_fd, dweight_fd)`` at the chosen ``rows`` x ``cols`` of ``inp`` (all by default)
    and every channel of ``weight``; compare with :func:`backward`, which computes the same
    derivatives.
    """
    x = _rows(inp, "inp", np.float64).copy()
    g = _rows(dout, "dout", np.float64)
    w = np.asarray(weight, dtype=np.float64).copy()
    n, c = x.shape
    rows = range(n) if rows is None else rows
    cols = range(c) if cols is None else cols

    def loss(xx, ww):
        return float(np.sum(g * forward(xx, ww, eps)[0]))

    dinp_fd = np.zeros((len(rows), len(cols)))
    for a, i in enumerate(rows):
        for b, j in enumerate(cols):
            keep = x[i, j]
            x[i, j] = keep + h
            up = loss(x, w)
            x[i, j] = keep - h
            down = loss(x, w)
            x[i, j] = keep
            dinp_fd[a, b] = (up - down) / (2 * h)
    dweight_fd = np.zeros(c)
    for j in range(c):
        keep = w[j]
        w[j] = keep + h
        up = loss(x, w)
        w[j] = keep - h
        down = loss(x, w)
        w[j] = keep
        dweight_fd[j] = (up - down) / (2 * h)
    return dinp_fd, dweight_fd


def random_problem(N: int, C: int, dtype=np.float32, seed=None, accumulate: bool = True):
    """Random inputs for one backward call, like the seed's (uniform in [-1, 1]).

    Returns a dict with ``dout, inp, weight, rstd, dinp, dweight``: ``rstd`` is computed in float32
    from the (possibly bf16-rounded) ``inp``, as the forward kernel would; with ``accumulate`` the
    initial ``dinp`` and ``dweight`` are random too, so a kernel that overwrites instead of adding
    is caught.
    """
    from .bf16 import bfloat16

    for name, value, least in (("N", N, 0), ("C", C, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        if value < least:
            raise ValueError(f"{name} must be at least {least}, got {value}")
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), bfloat16):
        raise ValueError(f"dtype must be float32 or bfloat16 (the ladder's), got {dtype}")
    rng = np.random.default_rng(seed)

    def uniform(*shape):
        # by blocks of rows, the same numbers as one draw (each is one draw of the stream), with
        # the conversions done while a block is still in cache
        out = np.empty(shape, dtype)
        step = max(1, (1 << 17) // shape[-1]) if len(shape) == 2 else shape[0]
        for a in range(0, shape[0], step):
            block = rng.uniform(-1.0, 1.0, size=(min(step, shape[0] - a),) + shape[1:])
            out[a:a + step] = block.astype(np.float32).astype(dtype)
        return out

    inp = uniform(N, C)
    weight = uniform(C)
    dout = uniform(N, C)
    step = max(1, (1 << 17) // max(C, 1))
    rstd = np.empty(N, np.float32)
    for a in range(0, N, step):
        rstd[a:a + step] = forward(inp[a:a + step].astype(np.float32), weight.astype(np.float32),
                                   dtype=np.float32)[1]
    if accumulate:
        dinp, dweight = uniform(N, C), uniform(C)
    else:
        dinp, dweight = np.zeros((N, C), dtype), np.zeros(C, dtype)
    return dict(dout=dout, inp=inp, weight=weight, rstd=rstd.astype(np.float32), dinp=dinp,
                dweight=dweight)
