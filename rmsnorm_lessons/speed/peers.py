"""Peers for the benchmark: RMSNorm backward as others compute it, timed like the versions.

* ``torch eager``: ``torch.nn.functional.rms_norm`` on bf16 tensors, its backward through autograd.
* ``torch.compile``: the same function compiled (static shapes, forward and backward graphs).
* ``Liger-Kernel``: ``liger_kernel.ops.rms_norm.rms_norm_backward`` (Triton), called directly with
  the tensors its forward saved, as its autograd function does (``in_place=True``, its default: dinp
  is written over dout).

Opt-in peers (``sweep(names=...)``, ``bench --peer NAME``; not in the default sweep, since
autotuning and a CuTe DSL compile take minutes):

* ``torch.compile max-autotune``: the same function compiled with
  ``mode="max-autotune-no-cudagraphs"``.
* ``Quack``: ``quack.rmsnorm.rmsnorm_bwd`` (quack-kernels, CuTe DSL), its whole call: the kernel,
  which writes fp32 dweight partials per persistent block, then their sum in PyTorch.
* ``Quack kernel``: the same kernel alone (``torch.ops.quack.rmsnorm_bwd_f``); its partials are
  summed for the check only, outside the timed call.
* ``Quack tuned``: ``quack.rmsnorm.rmsnorm_bwd_tuned`` (its autotuned configuration), then the sum.

Every peer computes the gradient alone (dinp =, dweight =), so each moves ``3 * N * C * 2`` bytes
plus rstd, weight and dweight (:func:`bytes_moved`). Each is checked against the float64 reference
on its own outputs before it is timed, and timed by the versions' own loop
(:func:`rmsnorm_lessons.speed.timing.time_ms`): PyCUDA's events on PyTorch's default stream around a
burst of backward calls queued behind a sleeping kernel, warm-up first, the median of many bursts,
consecutive calls on different tensor sets together larger than L2. Only the backward is timed: the
forward graph is built once per tensor set beforehand.

PyTorch shares the CUDA context with PyCUDA (both use the device's primary context; :mod:`gpu` is
started first). A peer that is not installed is skipped with one line saying so.
"""
from __future__ import annotations

import inspect as _inspect
import sys
import time

import numpy as np

from ..core import compare, gpu, reference
from ..core.bf16 import bfloat16
from . import bench, timing

EPS = 1e-5
PEERS = ("torch eager", "torch.compile", "Liger-Kernel")  # the default sweep
# asked for by name
EXTRA_PEERS = ("torch.compile max-autotune", "Quack", "Quack kernel", "Quack tuned")
ALL_PEERS = PEERS + EXTRA_PEERS
# per call of a burst: about what autograd's (or Triton's) host work takes; lengthened when short
SLEEP_US = 300


def bytes_moved(N: int, C: int, itemsize: int = 2) -> int:
    """The fewest bytes a peer must move: dout and inp read, dinp written (overwritten, not read),
    rstd read, weight read and dweight written (overwritten)."""
    return 3 * N * C * itemsize + N * 4 + 2 * C * itemsize


def _torch():
    import torch  # noqa: F401 (ImportError says it is missing)

    return torch


def _liger():
    """Liger's Triton RMSNorm module itself (its package may rebind the names it exports to another
    backend's; the submodule stays the Triton one)."""
    import importlib

    return importlib.import_module("liger_kernel.ops.rms_norm")


def _quack():
    """Quack's RMSNorm module (quack-kernels; it needs nvidia-cutlass-dsl and apache-tvm-ffi)."""
    import importlib

    return importlib.import_module("quack.rmsnorm")


def why_unavailable(name: str) -> str | None:
    """None where the peer can run here, else one sentence saying why not."""
    if name not in ALL_PEERS:
        raise ValueError(f"peer must be one of {', '.join(ALL_PEERS)}; got {name!r}")
    try:
        torch = _torch()
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA device"
    if name == "torch.compile" and not hasattr(torch, "compile"):
        return f"this PyTorch ({torch.__version__}) has no torch.compile"
    if name == "Liger-Kernel":
        try:
            _liger()
        except ImportError as exc:
            return f"Liger-Kernel is not installed ({exc})"
    if name.startswith("Quack"):
        try:
            _quack()
        except ImportError as exc:
            return f"Quack (quack-kernels) is not installed ({exc})"
    return None


def available() -> list[str]:
    return [p for p in PEERS if why_unavailable(p) is None]


# --------------------------------------------------------------------------------------------------
# tensors


def _device(torch):
    import os

    return torch.device("cuda", int(os.environ.get("RMSNORM_LESSONS_DEVICE", "0")))


def to_torch(a: np.ndarray, device):
    """A bf16 (ml_dtypes) or float32 NumPy array as a CUDA tensor of the same dtype."""
    torch = _torch()
    a = np.ascontiguousarray(a)
    if a.dtype == bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(a).to(device)


def to_numpy(t) -> np.ndarray:
    """A bf16 or float32 tensor back as a NumPy array (bf16 as ml_dtypes' bfloat16)."""
    torch = _torch()
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(bfloat16)
    return t.numpy()


def rms_norm_function(C: int):
    """What the eager and compiled peers run: torch's RMSNorm over the last dimension (width C)."""
    F = _torch().nn.functional
    return lambda x, w: F.rms_norm(x, (C,), w, eps=EPS)


def compiled_function(C: int, mode: str | None = None):
    """:func:`rms_norm_function` through torch.compile (static shapes). The bench and
    :mod:`peer_compile`'s workers build it here alike: what a worker compiled is then found in
    Inductor's caches on disk by the bench."""
    torch = _torch()
    # AOTAutograd donates saved buffers to the backward unless told not to; retain_graph needs them
    try:
        import torch._functorch.config as functorch_config

        functorch_config.donated_buffer = False
    except (ImportError, AttributeError):
        pass
    # a fresh cache for every shape: no recompile limit, no dynamic shapes
    torch._dynamo.reset()
    options = {"mode": mode} if mode else {}
    return torch.compile(rms_norm_function(C), dynamic=False, fullgraph=True, **options)


# --------------------------------------------------------------------------------------------------
# the peers: each builds per-set state once and returns a call that runs one backward on set i


class _Peer:
    name = ""

    def __init__(self, problem: dict, sets: int):
        torch = _torch()
        self.torch = torch
        self.device = _device(torch)
        # the events, the sleep and the tensors on rl.gpu's device
        torch.cuda.set_device(self.device)
        self.N, self.C = problem["inp"].shape
        self.weight = to_torch(problem["weight"], self.device)
        self.inp = [to_torch(problem["inp"], self.device) for _ in range(sets)]
        self.dout = [to_torch(problem["dout"], self.device) for _ in range(sets)]
        self.before = None  # a call run before the start event (not timed), if the peer needs one

    def backward(self, i: int):  # -> (dinp, dweight) tensors
        raise NotImplementedError

    def check_call(self):  # a first backward on set 0, on fresh tensors, for the correctness check
        return self.backward(0)


class _Eager(_Peer):
    name = "torch eager"

    def __init__(self, problem, sets):
        super().__init__(problem, sets)
        self.w = self.weight.requires_grad_(True)
        self.x = [x.requires_grad_(True) for x in self.inp]
        self.fn = self.function()
        self.out = [self.fn(x, self.w) for x in self.x]  # the graphs, built once and kept
        self.torch.cuda.synchronize()

    def function(self):
        return rms_norm_function(self.C)

    def backward(self, i):
        return self.torch.autograd.grad(self.out[i], (self.x[i], self.w), self.dout[i],
                                        retain_graph=True)


class _Compiled(_Eager):
    name = "torch.compile"
    mode = None  # torch.compile's default

    def function(self):
        return compiled_function(self.C, self.mode)

    def check_call(self):
        got = self.backward(0)
        try:  # a second backward through the same graph: some versions refuse (freed saved tensors)
            self.backward(0)
        except RuntimeError as exc:
            print("torch.compile: backward cannot run twice on one graph here "
                  f"({str(exc).splitlines()[0]}); "
                  f"timing a fresh forward before each backward, outside the timed region",
                  file=sys.stderr)
            self._refresh_each_call()
        return got

    def _refresh_each_call(self):
        torch = self.torch
        flush = torch.empty(256 << 20, dtype=torch.uint8, device=self.device)

        def before(i):
            self.out[i] = self.fn(self.x[i], self.w)
            # the forward just read inp: read past L2 (no dirty lines left) before the timed
            # backward
            flush.sum()

        self.before = before


class _CompiledMaxAutotune(_Compiled):
    name = "torch.compile max-autotune"
    # autotuned Triton kernels; no CUDA graphs (the timing sees each call)
    mode = "max-autotune-no-cudagraphs"


class _Quack(_Peer):
    name = "Quack"

    def __init__(self, problem, sets):
        super().__init__(problem, sets)
        self.quack = _quack()
        # rstd as the forward saved it (fp32, one per row): the same for every set
        self.rstd = to_torch(problem["rstd"], self.device)
        self.torch.cuda.synchronize()

    def backward(self, i):
        dx, dw = self.quack.rmsnorm_bwd(self.inp[i], self.weight, self.dout[i], self.rstd)[:2]
        return dx, dw


class _QuackKernel(_Quack):
    name = "Quack kernel"

    def __init__(self, problem, sets):
        super().__init__(problem, sets)
        # the persistent grid rmsnorm_bwd uses
        self.sm_count = self.quack.get_sm_count(self.C, self.device)

    def backward(self, i):  # the kernel alone: dx and the fp32 partials of dweight, not yet summed
        return self.torch.ops.quack.rmsnorm_bwd_f(self.inp[i], self.weight, self.dout[i], self.rstd,
                                                  None,
                                                  self.sm_count)

    def check_call(self):
        dx, partials = self.backward(0)
        return dx, partials.sum(dim=0).to(self.weight.dtype)


class _QuackTuned(_QuackKernel):
    name = "Quack tuned"

    def __init__(self, problem, sets):
        super().__init__(problem, sets)
        torch = self.torch
        self.dx = [torch.empty_like(x) for x in self.inp]
        self.partials = torch.empty((self.sm_count, self.C), device=self.device,
                                    dtype=torch.float32)

    def backward(self, i):  # the autotuned kernel (its search runs in the warm-up), then the sum
        self.quack.rmsnorm_bwd_tuned(self.inp[i], self.weight, self.dout[i], self.rstd, self.dx[i],
                                     dw_partial=self.partials, has_dw_partial=True)
        return self.dx[i], self.partials.sum(dim=0).to(self.weight.dtype)

    def check_call(self):
        return self.backward(0)


class _Liger(_Peer):
    name = "Liger-Kernel"

    def __init__(self, problem, sets):
        super().__init__(problem, sets)
        self.liger = liger = _liger()
        self.saved = []
        for x in self.inp:
            Y, X, RSTD, block, warps, mode = liger.rms_norm_forward(x, self.weight, EPS, 0.0,
                                                                    "llama", None)
            self.saved.append((X, RSTD, block, warps, mode))
        params = _inspect.signature(liger.rms_norm_backward).parameters
        self.extra = {k: v for k, v in (("row_mode", None),) if k in params}
        self.torch.cuda.synchronize()

    def _call(self, dY, i):
        X, RSTD, block, warps, mode = self.saved[i]
        return self.liger.rms_norm_backward(dY=dY, X=X, W=self.weight, RSTD=RSTD, offset=0.0,
                                            casting_mode=mode,
                                            BLOCK_SIZE=block, num_warps=warps, in_place=True,
                                            **self.extra)

    def backward(self, i):
        # in place: dinp is written over dout[i]. Later calls on the same set read that gradient as
        # their dout: the values change, the work does not (the check runs on fresh tensors)
        return self._call(self.dout[i], i)

    def check_call(self):
        return self._call(self.dout[0].clone(), 0)


_CLASSES = {c.name: c for c in (_Eager, _Compiled, _Liger, _CompiledMaxAutotune, _Quack,
                                _QuackKernel, _QuackTuned)}


# --------------------------------------------------------------------------------------------------
# checking and timing


def burst_of(peer: _Peer, burst: int | None = None) -> int:
    """Calls timed back to back per figure: one for a peer that must run something before each
    call."""
    return 1 if peer.before else (burst or timing.BURST)


def time_ms(peer: _Peer, sets: int, warmup: int = 5, repeats: int = 50,
            burst: int | None = None) -> list[float]:
    """Milliseconds per backward call, timed as the versions are (:func:`timing.time_ms`: bursts of
    ``burst`` calls, default :data:`timing.BURST`, each behind one untimed call and a sleeping
    kernel), on PyTorch's default stream, which is the one PyCUDA's events and sleep use. A peer
    that must run something before each call (``before``) is timed one call at a time, after it."""
    return timing.time_ms(peer.backward, sets, warmup, repeats, burst=burst_of(peer, burst),
                         name=peer.name, before=peer.before, sleep_us=SLEEP_US)


def check_peer(peer: _Peer, problem: dict, ref=None) -> compare.CheckReport:
    """The peer's gradients on set 0 against the float64 reference (the gradient alone: no
    accumulation)."""
    dx, dw = peer.check_call()
    # (each peer computes rstd itself, in fp32 from the same bf16 inp: the same to ~1 ulp)
    if ref is None:
        ref = reference.backward_by_rows(problem["dout"], problem["inp"],
                                         problem["weight"], problem["rstd"])
    return compare.compare_outputs(bfloat16, peer.N, (to_numpy(dx), to_numpy(dw)), ref,
                                 name=peer.name, C=peer.C)


def bench_peer(name: str, N: int, C: int, copy_gbps: float, repeats: int = 50, problem=None,
               ref=None,
               seed: int = 0, log=sys.stderr) -> timing.Timing:
    """Check one peer at one shape, then time it; raises AssertionError (with the report) when it is
    wrong.

    ``problem`` (from ``reference.random_problem``) and ``ref`` (its float64 gradients) may be
    shared by several peers at one shape. A noisy timing is timed once more (:func:`timing.steady`)
    on the peer already built: compiling or autotuning it again would take minutes and change
    nothing measured."""
    # PyCUDA's context first: PyTorch then finds the primary context current and shares it
    gpu.require()
    reason = why_unavailable(name)
    if reason is not None:
        raise RuntimeError(f"{name} cannot run here: {reason}")
    torch = _torch()
    problem = problem or reference.random_problem(N, C, bfloat16, seed=seed, accumulate=False)
    per_set = 4 * N * C * 2 + N * 4  # inp, dout, the forward's output and the new dinp
    free, _ = torch.cuda.mem_get_info(_device(torch))
    sets = timing.sets_for(per_set, gpu.facts().l2_bytes, free)
    peer = _CLASSES[name](problem, sets)
    try:
        report = check_peer(peer, problem, ref)
        if not report.ok:
            raise AssertionError(f"{name} is wrong at N={N} C={C}; not timing it:\n{report}")
        return timing.steady(lambda: timing._timing(name, N, C, time_ms(peer, sets,
                repeats=repeats),
                                                  bytes_moved(N, C), copy_gbps, burst_of(peer)),
                             log=log)
    finally:
        del peer
        torch.cuda.empty_cache()


def sweep(shapes=None, names=None, repeats: int = 50, copy_gbps: float | None = None,
          log=sys.stderr,
          wall_times: bool = False, show_progress: bool = True, inputs: dict | None = None,
          ahead=None):
    """Check and time every available peer at every shape; a missing peer is skipped with one line.
    ``wall_times``: also say on ``log`` how long each peer took at each shape, building (compiling,
    autotuning) and checking included. ``show_progress``: a progress bar over the shapes.
    ``inputs``: the dict of problems that :func:`bench.sweep` fills, to check the peers on the
    problem the versions were checked on (and not compute another problem and its reference).
    ``ahead``: a :class:`peer_compile.Ahead` compiling some peers' shapes in other processes
    (``ahead.peers``); such a peer waits for its shape there, then finds it in Inductor's caches."""
    gpu.require()
    names = list(names or PEERS)
    runnable = []
    for name in names:
        reason = why_unavailable(name)
        if reason is None:
            runnable.append(name)
        else:
            print(f"skip peer {name}: {reason}", file=log)
    shapes = list(shapes or bench.SHAPES)
    copy_gbps = copy_gbps or gpu.copy_bandwidth()
    results = []
    if not runnable:
        return results
    for N, C in (bench.progress(shapes, total=len(shapes), desc="peers") if show_progress
                 else shapes):
        shared = bench.shape_inputs({} if inputs is None else inputs, N, C, bfloat16)
        problem, ref = shared.problem, shared.gradient()
        for name in runnable:
            started = time.perf_counter()
            if ahead is not None and name in ahead.peers:
                ahead.wait(N, C)
            try:
                results.append(bench_peer(name, N, C, copy_gbps, repeats, problem=problem, ref=ref,
                                          log=log))
            except AssertionError as exc:  # a wrong peer is not timed, and said so
                print(f"peer NOT TIMED: {exc}", file=log)
            # a peer that fails to run is reported, not fatal to the benchmark
            except Exception as exc:
                first = (str(exc).splitlines() or [""])[0][:300]
                print(f"peer {name} failed at {N}x{C}: {type(exc).__name__}: {first}", file=log)
            if wall_times:  # compiling and autotuning take minutes for some peers
                print(f"peer {name} at {N}x{C}: {time.perf_counter() - started:.1f} s", file=log,
                      flush=True)
    return results

