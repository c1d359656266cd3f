"""A rung of the ladder on the CPU twin: its plan executed launch by launch, as the GPU would.

:func:`run_rung` takes a rung (a shipped version's name, or a learner's rung from
``ladder.rung_from_source(..., like=...)``), NumPy inputs and the accumulators, builds the rung for
the twin (:func:`build_rung`), and runs its plan (``ladder.plan``: kernels, grids, blocks, shared
memory, arguments by name) in a child process, twice by default: the first call leaves the
scratch buffers as the kernels leave them (v6's ticket counter must be back at 0), the second is
the one returned, its scratch that is not zeroed by the plan filled with NaN first, as the GPU
check does.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from . import _core, compile, execute

NAN_WORD = np.uint32(0x7FC00000)  # what the GPU check fills scratch with: quiet NaN floats

#: the shapes a check runs on the twin, each there for a reason (N, C, SMs of the planned GPU; None:
#: the target's): the GPU check's shapes (odd N, C not a multiple of 32, one row, the small C
#: where an error of one part in C shows) but for its (8195, 1024), which is there so that every
#: block of a persistent grid takes several rows: the twin plans (203, 264) for a GPU of 2 SMs
#: instead, the same coverage at a fortieth of the work. C is rounded to the rung's multiple.
CHECK_SHAPES = ((129, 1600, None), (1000, 777, None), (203, 264, 2), (1, 7, None), (333, 8, None),
                (301, 16, None), (257, 24, None), (199, 40, None))


@dataclass
class RungRun:
    """dinp and dweight after the returned call, every hazard found (all calls), each launch's
    block order, whether a launch was stopped, and the seconds spent building and running."""

    dinp: np.ndarray | None
    dweight: np.ndarray | None
    hazards: list = field(default_factory=list)
    orders: list = field(default_factory=list)
    stopped: bool = False
    build_seconds: float = 0.0
    run_seconds: float = 0.0
    switches: int = 0
    trace: object = None  # accesses to the buffers named in ``trace`` (execute.TRACE_DTYPE)
    trace_dropped: int = 0


def build_rung(version, hazards: bool = True, opt: str = compile.OPT) -> compile.Library:
    """The twin's build of a rung: its text (``kernels/<name>.cu`` or a learner's source), its
    defines, its kernels."""
    rung = _core.ladder.get(version)
    stem, text, defines = _core.kernel_text(rung)
    path = None if rung.source is not None else _core.build.kernel_path(stem)
    return compile.library(text, rung.name, rung.kernels, defines=defines, hazards=hazards,
                           path=path, opt=opt)


def small_gpu(sms: int):
    """The target's facts (this GPU's, else the saved H200's) with ``sms`` multiprocessors."""
    import dataclasses

    return dataclasses.replace(_core.gpu.target_facts_or_fallback()[0], multiprocessors=sms)


def check_shapes(version, shapes=CHECK_SHAPES) -> list:
    """``[(N, C, device or None), ...]`` for ``version``: C rounded down to its multiple (up where
    that is 0), without shapes its plan refuses, each once."""
    rung = _core.ladder.get(version)
    m, out = rung.c_multiple, []
    for N, C, sms in shapes:
        C = C - C % m or m
        device = small_gpu(sms) if sms else None
        try:
            _core.ladder.plan(rung, N, C, device)
        except ValueError:
            continue
        if all((N, C, sms) != (n, c, s) for n, c, s, _ in out):
            out.append((N, C, sms, device))
    return [(N, C, device) for N, C, _, device in out]


def _array(name, value, dtype, shape):
    a = np.ascontiguousarray(np.asarray(value), dtype=dtype)
    if a.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {a.shape}")
    return a


def _scratch_fills(scratch, calls: int) -> tuple:
    zeros = bytes(scratch.nbytes)
    nan = np.full(scratch.nbytes // 4, NAN_WORD, np.uint32).tobytes().ljust(scratch.nbytes, b"\0")
    if scratch.zero == "once":
        return (zeros,) + (None,) * (calls - 1)
    return ((zeros if scratch.zero == "each" else nan),) * calls


def run_rung(version, dout, inp, weight, rstd, dinp=None, dweight=None, *, seed: int = 1,
             hazards: bool = True, device=None, calls: int = 2, block_size: int | None = None,
             limit: float = execute.TIME_LIMIT, opt: str = compile.OPT, trace=()) -> RungRun:
    """``version``'s plan at (N, C) = ``inp.shape`` on the CPU twin; ``dinp``/``dweight`` are added
    into (zeros where None), as on the GPU. ``seed`` permutes the blocks (0: in order, first
    call), ``device`` gives the plan its SM count (default: the target's facts, as the GPU check
    plans), ``calls`` is how many times the plan runs (the last is returned). ``trace``: tensors
    (``"inp"``, ``"dinp"``, ...) whose every access is logged (:func:`.execute.run_program`)."""
    rung = _core.ladder.get(version)
    inp = np.asarray(inp)
    if inp.ndim != 2:
        raise ValueError(f"inp must be 2-D (N, C), got shape {inp.shape}")
    N, C = inp.shape
    if not isinstance(calls, int) or calls < 1:
        raise ValueError(f"calls must be a whole number >= 1, got {calls!r}")
    dt = rung.dtype
    tensors = {"dout": _array("dout", dout, dt, (N, C)), "inp": _array("inp", inp, dt, (N, C)),
               "weight": _array("weight", weight, dt, (C,)),
               "rstd": _array("rstd", rstd, np.float32, (N,)),
               "dinp": _array("dinp", np.zeros((N, C)) if dinp is None else dinp, dt, (N, C)),
               "dweight": _array("dweight", np.zeros(C) if dweight is None else dweight, dt, (C,))}
    plan = _core.ladder.plan(rung, N, C, device, block_size=block_size)
    started = time.perf_counter()
    library = build_rung(rung, hazards, opt)
    built = time.perf_counter() - started
    if not plan:
        return RungRun(tensors["dinp"], tensors["dweight"], build_seconds=built)
    buffers = {name: execute.Buffer(name, max(a.nbytes, 1), a.itemsize, (a.tobytes(),) * calls)
               for name, a in tensors.items()}
    launches = []
    for launch in plan:
        args = []
        for pname, value in launch.args:
            if isinstance(value, _core.Tensor):
                args.append(("buffer", value.name))
            elif isinstance(value, _core.Scratch):
                buffers.setdefault(value.name, execute.Buffer(
                    value.name, value.nbytes, 4, _scratch_fills(value, calls),
                    label=f"scratch {value.name!r}"))
                args.append(("buffer", value.name))
            else:
                args.append(("value", int(value)))
        launches.append(dict(kernel=launch.kernel, grid=int(launch.grid), block=int(launch.block),
                             shared=int(launch.shared), args=args))
    ran = execute.run_program(library, list(buffers.values()), launches, calls=calls, seed=seed,
                              read=("dinp", "dweight"), limit=limit, trace=trace)
    out = {name: (np.frombuffer(ran.buffers[name], dt).reshape(tensors[name].shape).copy()
                  if name in ran.buffers else None) for name in ("dinp", "dweight")}
    return RungRun(out["dinp"], out["dweight"], ran.hazards, ran.orders, ran.stopped, built,
                   ran.seconds, ran.switches, ran.trace, ran.trace_dropped)
