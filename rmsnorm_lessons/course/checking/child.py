"""A learner's kernel runs first in a child process, so a crash there leaves the notebook usable.

:func:`run_in_child` sends the learner's rung (pickled: :func:`rmsnorm_lessons.core.child.run_job`)
to a child Python, which runs every numeric check of :func:`.kernel_running.run_checks` and one call
at the timing shape, and sends the :class:`~.kernel_running.Outcome` back as JSON. Where the child
dies (an illegal or misaligned address, a launch failure, a kernel that never ends), the outcome is
NOT YET and says what happened; the shape it died at runs again under compute-sanitizer's memcheck,
which names the line of the learner's text (the kernels are built with ``-lineinfo``, and the text
starts with ``#line 1 "<name>"``). The parent launches only a kernel that passed here.

:func:`run_plain_in_child` does the same for a kernel that is not a rung (lesson 09's): the child
loads the compiled text and runs the lesson's own ``run(module)``, checks and timing both.
"""
from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from ...core import child
from ...inspection import sanitizer
from .running import Outcome, run_checks, run_once

ACTION = "rmsnorm_lessons.course.checking.child:child_checks"
PLAIN_ACTION = "rmsnorm_lessons.course.checking.child:child_plain"
CHECK_TIMEOUT = 180.0  # seconds: the numeric checks take a few; a kernel that never ends is cut off
MEMCHECK_TIMEOUT = 300.0
AT = "kernel_child: at"  # the line the child prints before each shape
#: what a dying child's output says, and what it means for the learner
FAULTS = (
    ("misaligned address", "a misaligned address: a load or store of k bytes at an address that is "
                           "not a multiple of k (load128/store128 need 16-byte aligned addresses)"),
    ("illegal memory access", "an illegal memory access: a read or write outside every buffer "
                              "(past the end of a row, of a tensor or of shared memory?)"),
    ("illegal address", "an illegal address: a read or write outside every buffer"),
    ("unspecified launch failure", "a launch failure: the kernel faulted"),
    ("illegal instruction", "an illegal instruction"),
    ("too many resources requested", "too many resources requested for the launch (registers or "
                                     "shared memory per block)"),
)


@dataclass
class ChildRun:
    """What the child said: the outcome, whether it crashed, the shape it was at, its output."""

    outcome: Outcome
    crashed: bool
    shape: tuple | None
    finished: child.Finished


def _say_at(N, C) -> None:
    print(f"{AT} {N} {C}", flush=True)


def child_checks(rung, shapes, seed=0, rows_per_block=None, hints=None, time_shape=None) -> dict:
    """The child's side: every numeric check, then one call at ``time_shape``; the outcome as
    JSON."""
    child.use_the_parents_build(rung)
    outcome = run_checks(rung, [tuple(s) for s in shapes], seed=seed,
                         rows_per_block=rows_per_block, hints=hints, on_shape=_say_at)
    if outcome.ok and time_shape is not None:
        _say_at(*time_shape)
        try:
            run_once(rung, tuple(time_shape), seed=seed)
        except Exception as exc:  # the learner's kernel at the timing shape
            N, C = time_shape
            outcome = Outcome(False, f"at N={N}, C={C} (the timing shape) running it failed: "
                                     f"{type(exc).__name__}: {str(exc).strip()[:400]}", ("error",))
    return {"ok": outcome.ok, "message": outcome.message, "kinds": list(outcome.kinds)}


def child_plain(name: str, source: str, run) -> dict:
    """The child's side for a kernel that is not a rung: compile (the parent's build is on disk),
    load, ``run(module)``."""
    from ...core import build, gpu

    gpu.require()
    compiled = build.compile_source(f'#line 1 "{name}"\n' + source, gpu.facts().arch, name=name)
    outcome = run(gpu.driver().module_from_buffer(compiled.binary))
    return {"ok": outcome.ok, "message": outcome.message.strip(),
            "kinds": list(outcome.kinds)}


def _last_shape(output: str):
    at = [line[len(AT):].split() for line in output.splitlines() if line.startswith(AT)]
    return (int(at[-1][0]), int(at[-1][1])) if at else None


def what_happened(done: child.Finished, result: dict | None, timeout: float) -> str:
    """One sentence: how the child's run of the learner's kernel ended."""
    if done.timed_out:
        return (f"it did not finish in {timeout:g} s and was stopped: a kernel that never ends (a "
                "loop that does not advance, a barrier or a wait not every thread reaches?)")
    text = (done.output + " " + (result or {}).get("message", "")).lower()
    for key, meaning in FAULTS:
        if key in text:
            return f"the GPU reported {meaning}"
    if done.returncode is not None and done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        return f"the process was killed by {name}"
    if result is not None:
        return result["message"]
    tail = [ln for ln in done.stderr.strip().splitlines() if ln.strip()][-1:] or ["no output"]
    return f"the process exited with code {done.returncode}: {tail[0][:300]}"


def run_in_child(rung, shapes, *, seed=0, rows_per_block=None, hints=None, time_shape=None,
                 text: str | None = None, timeout: float = CHECK_TIMEOUT,
                 runner=child.run_job) -> ChildRun:
    """The numeric checks (and one call at ``time_shape``) of ``rung`` in a child process; where
    it crashed, the outcome says how and at which shape, and memcheck's line where it can (of
    ``text``: the learner's text with its ``#line 1`` in front; default the rung's source).
    ``runner``: :func:`rmsnorm_lessons.core.child.run_job` (the tests give a fake)."""
    kwargs = dict(rung=rung, shapes=[tuple(s) for s in shapes], seed=seed,
                  rows_per_block=rows_per_block, hints=hints, time_shape=time_shape)
    done, result = runner(ACTION, kwargs, timeout=timeout)
    shape = _last_shape(done.stdout)
    if result is not None and "error" not in result.get("kinds", ()):
        return ChildRun(Outcome(bool(result["ok"]), result["message"], tuple(result["kinds"])),
                        False, shape, done)
    if shape is None:  # it never reached the kernel: a child that cannot start, not a crash
        return ChildRun(Outcome(False, "the check's child process stopped before it ran your "
                                       f"kernel: {what_happened(done, result, timeout)}",
                                ("error",)), True, None, done)
    message = (f"at N={shape[0]}, C={shape[1]} your kernel crashed the check's child process "
               "(this notebook's own GPU context is untouched): "
               f"{what_happened(done, result, timeout)}.")
    if not done.timed_out:
        again = dict(kwargs, time_shape=None, shapes=[])
        if shape in kwargs["shapes"]:
            k = kwargs["shapes"].index(shape)
            again.update(shapes=[shape], seed=seed + k)
        else:
            again.update(time_shape=shape)
        text = text or rung.source or ""
        named = re.match(r'#line 1 "([^"]+)"', text)
        message += " " + memcheck_sentence(again, named.group(1) if named else rung.name, text,
                                           runner)
    return ChildRun(Outcome(False, message, ("error",)), True, shape, done)


def memcheck_sentence(kwargs: dict, name: str, text: str, runner=child.run_job,
                      action: str = ACTION) -> str:
    """compute-sanitizer's memcheck on the child's job ``kwargs``: the first error and the line of
    the learner's ``text`` (named ``name``) it names, in a sentence."""
    exe = sanitizer.find()
    if exe is None:
        return "(compute-sanitizer is not installed here, so memcheck could not name the line.)"
    done, _ = runner(action, kwargs, wrapper=sanitizer.wrapper(exe, "memcheck", print_limit=5),
                     timeout=MEMCHECK_TIMEOUT)
    report = sanitizer.Report("memcheck", name, done.returncode, done.output)
    if not report.entries:
        return f"compute-sanitizer's memcheck, run again at that shape: {report.sentence()}."
    entry = report.entries[0]
    lines = sanitizer.lines_of(entry, name)
    details = "; ".join(e for e in entry[1:] if not e.startswith(("at ", "by thread")))[:300]
    said = f"compute-sanitizer's memcheck: {entry[0]}"
    if lines:
        source = text.split("\n")
        # the text carries '#line 1 "name"' as its line 0: line k of the learner is source[k]
        shown = source[lines[0]].strip() if 0 < lines[0] < len(source) else ""
        said += f", at line {lines[0]} of your text" + (f": {shown}" if shown else "")
    else:
        said += f" ({entry[1][:200]})" if len(entry) > 1 else ""
    return said + (f" ({details})" if details else "") + "."


def run_plain_in_child(name: str, source: str, run, *, timeout: float = CHECK_TIMEOUT,
                       runner=child.run_job) -> ChildRun:
    """A kernel that is not a rung: ``run(module)`` (the lesson's check and timing) in a child;
    where it crashed, how, and memcheck's line where it can."""
    kwargs = dict(name=name, source=source, run=run)
    done, result = runner(PLAIN_ACTION, kwargs, timeout=timeout)
    if result is not None and "error" not in result.get("kinds", ()):
        return ChildRun(Outcome(bool(result["ok"]), result["message"], tuple(result["kinds"])),
                        False, None, done)
    message = (f"your kernel crashed the check's child process (this notebook's own GPU context is "
               f"untouched): {what_happened(done, result, timeout)}.")
    if not done.timed_out:
        text = f'#line 1 "{name}"\n' + source
        message += " " + memcheck_sentence(kwargs, name, text, runner, PLAIN_ACTION)
    return ChildRun(Outcome(False, message, ("error",)), True, None, done)
