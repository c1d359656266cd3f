"""Running a twin build in a child process and reading what it says.

:func:`run_program` is the general form (buffers, launches, calls); :mod:`rmsnorm_lessons.twin`
builds its programs from a rung's plan. The child (``_child.py``) imports nothing of the package,
so a kernel that crashes takes only it down; its time limit is the runtime's watchdog, which names
where the kernel was, with the parent's own limit a little later as a last resort.
"""
from __future__ import annotations

import pickle
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import lines
from .compile import Library

#: seconds a child may run (compile not included) before the watchdog stops the kernel
TIME_LIMIT = 30.0
CHILD = Path(__file__).resolve().parent / "_child.py"
#: one access of a trace (runtime/twin_trace.cpp): launch, block, thread, the buffer's number, the
#: kind (1 read, 2 write, 3 atomic), its bytes and its byte offset in the buffer
TRACE_DTYPE = np.dtype([(f, "<u4") for f in ("launch", "block", "thread", "buffer", "kind",
                                              "bytes", "offset")])


@dataclass(frozen=True)
class Hazard:
    """One thing the twin found: ``kind`` is ``race``, ``divergence``, ``out of bounds``,
    ``time limit``, ``crash`` or ``error``; ``text`` says it with the lines of the source."""

    kind: str
    text: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.text}"


@dataclass(frozen=True)
class Buffer:
    """A buffer of the launches: ``label`` names it in reports (``dinp``, ``scratch``), ``elem``
    is its element size (the shadow's granule), ``fills`` its contents before each call (None:
    left as the last call left it)."""

    name: str
    nbytes: int
    elem: int
    fills: tuple
    label: str = ""


@dataclass
class TwinRun:
    """What a child run gave: the buffers read back (bytes), the hazards, each launch's block
    order, whether a launch was stopped, and the child's wall time."""

    buffers: dict = field(default_factory=dict)
    hazards: list = field(default_factory=list)
    orders: list = field(default_factory=list)
    stopped: bool = False
    seconds: float = 0.0
    switches: int = 0  # fiber switches (the benchmark reads it)
    trace: object = None  # the accesses to the traced buffers (TRACE_DTYPE), where asked for
    trace_dropped: int = 0  # accesses past the log's limit, not kept


def _launch_dict(kernel: str, grid: int, block: int, shared: int, args) -> dict:
    for name, value in (("grid", grid), ("block", block), ("shared", shared)):
        least = 0 if name == "shared" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{kernel}: {name} must be a whole number (at least {least}), got "
                             f"{value!r}")
    if block > 1024:
        raise ValueError(f"{kernel}: block must be at most 1024 threads, got {block}")
    return {"kernel": kernel, "grid": grid, "block": block, "shared": shared, "args": list(args)}


def run_program(library: Library, buffers, launches, *, calls: int = 1, seed: int = 1,
                read=(), limit: float = TIME_LIMIT, trace=()) -> TwinRun:
    """Run ``launches`` (dicts: kernel, grid, block, shared, args as ``("buffer", name)`` or
    ``("value", number)``) ``calls`` times on ``buffers`` in a child process; the blocks of launch
    k of call c run in the order seeded by ``seed``, k and c (``seed=0``: the first call in block
    order). Returns the buffers named in ``read`` and every hazard, with its lines; and, for the
    buffers named in ``trace`` (a library built with hazards: the hooks see the accesses), every
    access each thread made to them, in its order (``TwinRun.trace``, :data:`TRACE_DTYPE`:
    ``buffer`` is the name's place in ``trace``, ``launch`` counts launch k of call c as
    ``c * len(launches) + k``)."""
    if limit <= 0:
        raise ValueError(f"limit must be a positive number of seconds, got {limit!r}")
    names = [b.name for b in buffers]
    trace = tuple(trace)
    unknown = [t for t in trace if t not in names]
    if unknown or len(set(trace)) != len(trace) or len(trace) > 256:
        raise ValueError(f"trace must name distinct buffers of the program ({', '.join(names)}),"
                         f" at most 256, got {trace!r}")
    if trace and not library.hazards:
        raise ValueError("trace needs a library built with hazards=True: only its hooks see "
                         "each access")
    launches = [_launch_dict(**launch) for launch in launches]
    with tempfile.TemporaryDirectory(prefix="rmsnorm-twin-run-") as tmp:
        tmp = Path(tmp)
        program = {"library": str(library.path), "hazards": library.hazards, "calls": calls,
                   "seed": seed, "limit": limit, "watch": str(tmp / "watch"),
                   "buffers": [dict(name=b.name, nbytes=b.nbytes, elem=b.elem, fill=list(b.fills),
                                    label=b.label or b.name) for b in buffers],
                   "launches": launches, "read": list(read), "trace": list(trace)}
        (tmp / "program").write_bytes(pickle.dumps(program))
        started = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, str(CHILD), str(tmp / "program"),
                                   str(tmp / "result")], capture_output=True, text=True,
                                  timeout=limit + 15)
            code, stderr = done.returncode, done.stderr
        except subprocess.TimeoutExpired:
            code, stderr = None, ""
        seconds = time.perf_counter() - started
        watch = (tmp / "watch").read_text(errors="replace") if (tmp / "watch").exists() else ""
        result = pickle.loads((tmp / "result").read_bytes()) if code == 0 else None
    return _decode(library, result, code, stderr, watch, limit, seconds)


def _decode(library, result, code, stderr, watch, limit, seconds) -> TwinRun:
    texts, kinds = [], []
    if result is not None:
        for line in result["reports"].splitlines():
            kind, _, text = line.partition("\t")
            kinds.append(kind if kind != "dropped" else "error")
            texts.append(text if kind != "dropped" else f"{text} reports not shown")
    stopped = result is None or result["status"] != 0
    if result is None:
        fields = watch.strip().split("\t")
        if code == 124 and fields[0] == "TWIN-TIMEOUT":
            place = fields[2] if len(fields) > 3 and fields[2] != fields[3] else fields[-3]
            kinds.append("time limit")
            texts.append(f"the kernel did not finish in {limit:g} s and was stopped: "
                         f"{fields[1]} was at {place} (last access at {fields[3]}): a loop that "
                         "does not advance, or a wait for another block (CUDA runs blocks in no "
                         "promised order, and may run them one at a time)")
        elif code is None:
            kinds.append("time limit")
            texts.append(f"the kernel did not finish in {limit:g} s and was stopped")
        elif fields[0] == "TWIN-CRASH" and len(fields) >= 6:
            kinds.append("crash")
            texts.append(f"the kernel crashed (signal {fields[4]}, address {fields[5]}): "
                         f"{fields[1]} at {fields[2]} (last access at {fields[3]}): a wild pointer,"
                         " or too deep a recursion")
        else:
            tail = [ln for ln in stderr.strip().splitlines() if ln.strip()][-1:] or ["no output"]
            kinds.append("error")
            texts.append(f"the twin's child process failed (exit {code}): {tail[0][:400]}")
    texts = lines.resolve(texts, library.path, library.label)
    hazards, shapes = [], set()
    for kind, text in zip(kinds, texts):  # one per place: not again for each element or block
        places = re.findall(r"thread \d+ at (.+?)(?=, thread \d+ at |: a __syncthreads)", text)
        if "different barriers" in text and len(set(places)) == 1:
            continue  # one barrier of the text, compiled into several calls
        shape = re.sub(r"\[\d+\]|\(byte \d+\)|\b(block|thread|threads) [\d, .]+", "#", text)
        if shape not in shapes:
            shapes.add(shape)
            hazards.append(Hazard(kind, text))
    run = TwinRun(hazards=hazards, stopped=stopped,
                  seconds=seconds)
    if result is not None:
        run.buffers, run.orders = result["buffers"], result["orders"]
        run.switches = result.get("switches", 0)
        if "trace" in result:
            run.trace = np.frombuffer(result["trace"], TRACE_DTYPE).copy()
            run.trace_dropped = int(result["trace_dropped"])
    return run
