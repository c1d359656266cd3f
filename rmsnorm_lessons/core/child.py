"""A child Python process: the one way the package and its tools start one, and the rung it runs
there.

Parent side: :func:`command` is ``[*wrapper, python, *args]`` (the wrapper a tool that runs a whole
program: ``compute-sanitizer --tool memcheck``, ``ncu ...``) and :func:`run` runs it with a timeout,
unbuffered, its output captured (:class:`Finished`). :mod:`rmsnorm_lessons.inspection.sanitizer`,
:mod:`rmsnorm_lessons.inspection.nsight`, ``tools/sanitize.py`` and the tests' ``run_in_child`` use
them.

Child side: :func:`run_rung` runs a rung ``calls`` times on one random problem at a shape, through
``rl.run`` (every input initialised on the host, as initcheck wants), and says so in one
line. ``python -m rmsnorm_lessons.core.child SPEC`` rebuilds a rung from a JSON spec
(:func:`rung_spec`: its CUDA text in a file, its shipped plan) and runs it: a learner's rung exists
only in the parent's ladder.

A job (:func:`run_job`) is the general way: a function of the package to call in a child, with its
arguments pickled to a file (a learner's rung among them, its plan even where it is a function
defined inside a lesson's check: :class:`_Pickler`); ``python -m rmsnorm_lessons.core.child --job
FILE`` registers the rung, calls the function and writes what it returns as JSON beside the file.
"""
from __future__ import annotations

import importlib
import json
import marshal
import os
import pickle
import subprocess
import sys
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path


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
    """``[*wrapper, this Python, *args]``: e.g. ``args = ["-m", "rmsnorm_lessons.core.child",
    spec]``."""
    return [*map(str, wrapper), sys.executable, *map(str, args)]


def run(cmd: list[str], timeout: float = 600, env: dict | None = None, cwd=None) -> Finished:
    """Run ``cmd`` (from :func:`command`) to its end or ``timeout`` seconds, Python unbuffered (so a
    child killed at the timeout has printed what it had), ``env`` added to this process's
    environment."""
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    # the child imports this very package, also where the parent found it by a sys.path entry of
    # its own (a notebook's)
    here = str(Path(__file__).resolve().parents[2])
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (here, full_env.get("PYTHONPATH")) if p)
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
    from . import gpu, ladder, reference
    from .run import run

    if not isinstance(calls, int) or calls < 1:
        raise ValueError(f"calls must be a whole number >= 1, got {calls!r}")
    gpu.require()  # no GPU: GpuUnavailable, saying why, before anything is built
    rung = ladder.get(rung)
    p = reference.random_problem(N, C, rung.dtype, seed=seed)
    dinp, dweight = p["dinp"], p["dweight"]
    for _ in range(calls):
        dinp, dweight = run(rung, p["dout"], p["inp"], p["weight"], p["rstd"], dinp,
                                    dweight)
    line = f"child: {rung.name} N={N} C={C}: {'one call' if calls == 1 else f'{calls} calls'} done"
    print(line, flush=True)
    return line


def rung_spec(rung, shape, source_path: str) -> dict:
    """What a child needs to rebuild ``rung``: its text (in ``source_path``), its plan's module and
    name, its shape (C rounded down to the rung's multiple)."""
    module = getattr(rung.plan, "__module__", "")
    if not module.startswith("rmsnorm_lessons.core.ladder."):
        raise ValueError("the child needs a plan from rmsnorm_lessons.core.ladder (a shipped "
                         "rung's "
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
        return importlib.import_module(f"rmsnorm_lessons.core.ladder.{name}")

    plan = getattr(ladder_module(spec["plan_module"]), spec["plan_fn"])
    shared = ladder_module(spec["shared_module"]).shared_memory if spec["shared_module"] else None
    return ladder.rung_from_source(name=spec["name"], source=Path(spec["source"]).read_text(),
                                   plan=plan, kernels=spec["kernels"], dtype=spec["dtype"],
                                   c_multiple=spec["c_multiple"], block_size=spec["block_size"],
                                   max_block=spec["max_block"], shared_memory=shared,
                                   defines=spec["defines"])


# --------------------------------------------------------------------------------------------------
# jobs: a function and its pickled arguments, run in a child


def _importable(fn) -> bool:
    """``fn`` is found again by its module and qualified name (what plain pickle does)."""
    if "<locals>" in fn.__qualname__ or "<lambda>" in fn.__qualname__:
        return False
    try:
        found = importlib.import_module(fn.__module__)
        for part in fn.__qualname__.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return False
    return found is fn


def _function(module, code, name, defaults, kwdefaults, cells):
    try:
        scope = vars(importlib.import_module(module))
    except ImportError:  # a module the child cannot import (a test's): the closure alone is there
        scope = {"__builtins__": __builtins__}
    fn = types.FunctionType(marshal.loads(code), scope, name, defaults,
                            tuple(types.CellType(c) for c in cells) if cells else None)
    fn.__kwdefaults__ = kwdefaults
    return fn


class _Pickler(pickle.Pickler):
    """Pickle, plus modules (by name) and functions defined inside another (a lesson's check
    defines its rung's plan there): their code, their defaults and the values they close over,
    their globals those of their module. The child is this same Python, so the code loads there."""

    def reducer_override(self, obj):
        if isinstance(obj, types.ModuleType):
            return importlib.import_module, (obj.__name__,)
        if isinstance(obj, types.FunctionType) and not _importable(obj):
            cells = tuple(c.cell_contents for c in obj.__closure__ or ())
            return _function, (obj.__module__, marshal.dumps(obj.__code__), obj.__name__,
                               obj.__defaults__, obj.__kwdefaults__, cells)
        return NotImplemented


def write_job(folder, action: str, kwargs: dict) -> Path:
    """``folder/job.pkl``: call ``action`` (``"package.module:function"``) with ``kwargs``."""
    if ":" not in action:
        raise ValueError(f"action must be 'module:function', got {action!r}")
    path = Path(folder) / "job.pkl"
    with open(path, "wb") as f:
        _Pickler(f, protocol=pickle.HIGHEST_PROTOCOL).dump({"action": action, "kwargs": kwargs})
    return path


def result_path(job: Path) -> Path:
    return Path(job).with_suffix(".json")


def run_job(action: str, kwargs: dict, wrapper=(), timeout: float = 600,
            env: dict | None = None) -> tuple[Finished, dict | None]:
    """Call ``action(**kwargs)`` in a child Python (behind ``wrapper``, e.g. compute-sanitizer):
    the child's :class:`Finished` and the JSON its function returned (None where it never
    returned: it died, or was killed at the timeout)."""
    with tempfile.TemporaryDirectory(prefix="rmsnorm-child-") as tmp:
        job = write_job(tmp, action, kwargs)
        done = run(command(["-m", "rmsnorm_lessons.core.child", "--job", job], wrapper), timeout,
                   env)
        try:
            result = json.loads(result_path(job).read_text())
        except (OSError, ValueError):
            result = None
    return done, result


def do_job(job) -> dict:
    """The child's side of :func:`run_job`: register the rung it carries (``kwargs["rung"]``, where
    it is not a shipped one), call the function, write its JSON beside the job, return it."""
    from . import ladder

    with open(job, "rb") as f:
        spec = pickle.load(f)
    kwargs = spec["kwargs"]
    rung = kwargs.get("rung")
    if isinstance(rung, ladder.Rung) and rung.name not in {r.name for r in ladder.SHIPPED}:
        ladder.register(rung, replace=True)
    module, name = spec["action"].split(":")
    result = getattr(importlib.import_module(module), name)(**kwargs)
    tmp = result_path(job).with_suffix(".part")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, result_path(job))
    return result


def use_the_parents_build(rung) -> None:
    """In a child: launch ``rung`` from the cubin the parent built while inspecting the text (for
    this GPU's arch, kept on disk by :func:`rmsnorm_lessons.core.build.compile_file`, in
    ``$RMSNORM_CACHE_DIR``), instead of building it a second time through PyCUDA's SourceModule.
    Only this process's ``build.source_module`` is changed, and only for ``rung``."""
    from . import build, gpu

    original = build.source_module
    module = gpu.driver().module_from_buffer(build.compile_file(rung, gpu.facts().arch).binary)

    def source_module(name, arch=None, defines=None):
        if (name is rung or name == rung.name) and arch is None and not defines:
            return module
        return original(name, arch, defines)

    build.source_module = source_module


def call_rung(rung, N: int, C: int, calls: int = 1, seed: int = 0) -> dict:
    """A job's action: :func:`run_rung`, its line as JSON (the rung launched from the parent's
    build, where it has its own source: :func:`use_the_parents_build`)."""
    from . import gpu

    gpu.require()  # no GPU: GpuUnavailable, saying why, before anything is built
    if rung.source is not None:
        use_the_parents_build(rung)
    return {"line": run_rung(rung, N, C, calls, seed)}


def main(argv=None) -> int:
    """``python -m rmsnorm_lessons.core.child SPEC``: rebuild the rung of the JSON ``SPEC`` and call
    it
    once; ``python -m rmsnorm_lessons.core.child --job FILE``: do the job (:func:`run_job`)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "--job":
        do_job(args[1])
        return 0
    if len(args) != 1:
        print("usage: python -m rmsnorm_lessons.core.child SPEC (a JSON rung spec: "
              "child.rung_spec) | "
              "--job FILE (child.run_job)", file=sys.stderr)
        return 2
    spec = json.loads(args[0])
    run_rung(rebuild(spec), spec["N"], spec["C"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
