"""A child Python process: the one way the package and its tools start one, and the rung it runs
there.

Parent side: :func:`command` is ``[*wrapper, python, *args]`` (the wrapper a tool that runs a whole
program: ``compute-sanitizer --tool memcheck``, ``ncu ...``) and :func:`run` runs it with a timeout,
unbuffered, its output captured (:class:`Finished`). :mod:`rmsnorm_lessons.sanitizer`,
:mod:`rmsnorm_lessons.nsight`, ``tools/sanitize.py`` and the tests' ``run_in_child`` use them.

Child side: :func:`run_rung` runs a rung ``calls`` times on one random problem at a shape, through
``rl.kernels.run`` (every input initialised on the host, as initcheck wants), and says so in one
line. ``python -m rmsnorm_lessons.child SPEC`` rebuilds a rung from a JSON spec (:func:`rung_spec`:
its CUDA text in a file, its shipped plan) and runs it: a learner's rung exists only in the parent's
ladder.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass


@dataclass
class Finished:
    """A child that ran: its exit code (None: killed at the timeout) and what it printed."""

    returncode: int | None
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def command(args, wrapper=()) -> list[str]:
    """``[*wrapper, this Python, *args]``: e.g. ``args = ["-m", "rmsnorm_lessons.child", spec]``."""
    return [*map(str, wrapper), sys.executable, *map(str, args)]


def run(cmd: list[str], timeout: float = 600, env: dict | None = None, cwd=None) -> Finished:
    """Run ``cmd`` (from :func:`command`) to its end or ``timeout`` seconds, Python unbuffered (so a
    child killed at the timeout has printed what it had), ``env`` added to this process's
    environment."""
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env,
                              cwd=None if cwd is None else str(cwd))
    except subprocess.TimeoutExpired as exc:
        return Finished(None, _text(exc.stdout), _text(exc.stderr))
    return Finished(proc.returncode, proc.stdout, proc.stderr)


def _text(out) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else (out or "")


# --------------------------------------------------------------------------------------------------
# the child's side


def run_rung(rung, N: int, C: int, calls: int = 1, seed: int = 0) -> str:
    """Run ``rung`` ``calls`` times (each call's gradients added to the last's) on one random
    problem of shape (N, C); return (and print) the line that says it ran."""
    from . import gpu, kernels, ladder, reference

    if not isinstance(calls, int) or calls < 1:
        raise ValueError(f"calls must be a whole number >= 1, got {calls!r}")
    gpu.require()  # no GPU: GpuUnavailable, saying why, before anything is built
    rung = ladder.get(rung)
    p = reference.random_problem(N, C, rung.dtype, seed=seed)
    dinp, dweight = p["dinp"], p["dweight"]
    for _ in range(calls):
        dinp, dweight = kernels.run(rung, p["dout"], p["inp"], p["weight"], p["rstd"], dinp,
                                    dweight)
    line = f"child: {rung.name} N={N} C={C}: {'one call' if calls == 1 else f'{calls} calls'} done"
    print(line, flush=True)
    return line


def rung_spec(rung, shape, source_path: str) -> dict:
    """What a child needs to rebuild ``rung``: its text (in ``source_path``), its plan's module and
    name, its shape (C rounded down to the rung's multiple)."""
    module = getattr(rung.plan, "__module__", "")
    if not module.startswith("rmsnorm_lessons.ladder."):
        raise ValueError("the child needs a plan from rmsnorm_lessons.ladder (a shipped rung's "
                         "plan)")
    shared_module = getattr(rung.shared_memory, "__module__", "").rsplit(".", 1)[-1]
    N, C = shape
    # a shipped rung's name is taken in the child's ladder: its copy there gets another
    name = rung.name if rung.source is not None else f"{rung.name}_as_built"
    return dict(name=name, source=source_path, plan_module=module.rsplit(".", 1)[-1],
                plan_fn=rung.plan.__name__,
                shared_module=shared_module if shared_module.startswith("v") else "",
                kernels=list(rung.kernels), dtype=str(rung.dtype), c_multiple=rung.c_multiple,
                block_size=rung.block_size, max_block=rung.max_block, defines=rung.defines,
                N=N, C=C - C % rung.c_multiple)


def rebuild(spec: dict):
    """The rung :func:`rung_spec` describes, registered in this process's ladder."""
    import importlib
    from pathlib import Path

    from . import ladder

    def ladder_module(name):
        return importlib.import_module(f"rmsnorm_lessons.ladder.{name}")

    plan = getattr(ladder_module(spec["plan_module"]), spec["plan_fn"])
    shared = ladder_module(spec["shared_module"]).shared_memory if spec["shared_module"] else None
    return ladder.rung_from_source(name=spec["name"], source=Path(spec["source"]).read_text(),
                                   plan=plan, kernels=spec["kernels"], dtype=spec["dtype"],
                                   c_multiple=spec["c_multiple"], block_size=spec["block_size"],
                                   max_block=spec["max_block"], shared_memory=shared,
                                   defines=spec["defines"])


def main(argv=None) -> int:
    """``python -m rmsnorm_lessons.child SPEC``: rebuild the rung of the JSON ``SPEC`` and call it
    once."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m rmsnorm_lessons.child SPEC (a JSON rung spec: child.rung_spec)",
              file=sys.stderr)
        return 2
    spec = json.loads(args[0])
    run_rung(rebuild(spec), spec["N"], spec["C"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
