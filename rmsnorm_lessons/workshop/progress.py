"""Learners' progress: ``python -m rmsnorm_lessons progress [NOTEBOOK|FOLDER ...]`` or
``--room DIR``.

Each notebook (a learner's own copy) is executed in a child process (nbclient; errors do not stop
it, and cells that need a GPU run where there is one and say why not where there is none), then
every call of a lesson's check (``lesson04.check_v3_kernel(...)``) gives one row with the word its
verdict starts with, PASS, NOT YET or NOT VERIFIED; each prediction (``rl.predict``) one row,
PREDICTED or NOT PREDICTED, guess against measurement (:mod:`.progress_predictions`), and a total
with the median error. A lesson's exercises come from the registry (:mod:`.lessons`): one the
notebook no longer calls is NOT YET. The notebook file itself is never written.

Whose code runs as whom: the child (:mod:`.worker`) runs one notebook, and its kernel, as the owner
of the learner's folder (``subprocess``'s ``user=``/``group=``), never as root for someone else's
notebook. ``--room DIR``: the workshop hub's state folder (its learners, the instructor left out),
or a folder whose every subfolder ``DIR/NAME`` holding lesson notebooks (in
``DIR/NAME/rmsnorm-lessons``, where the hub seeds them, or in ``DIR/NAME``) is the learner NAME
(:mod:`.learners`); a learner whose folder root owns is refused. The interpreter (``--python``) is
named by its absolute path (each notebook runs in its learner's folder). Notebooks run ``--jobs``
at a time; a line per finished notebook goes to stderr, the tables to stdout at the end.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..course import registry
from ..course.student import check_calls
from ..course.verdict import STATES
from .learners import (ROOM, ROOM_FOLDER, Learner, from_paths, from_room,  # noqa: F401
                       lesson_notebooks)
from .predictions import Seen
from .predictions import total as predictions_total

NEEDS = ("nbformat", "nbclient", "ipykernel")
INSTALL = "pip install 'rmsnorm-lessons[progress]'"
_VERDICT = re.compile(r"^(PASS|NOT YET|NOT VERIFIED): ?(.*)$", re.M)
REPLY = "rmsnorm-progress-reply "  # the worker's last line: this, then JSON
# what a child started as another user keeps of this environment (the rest is root's own)
_KEEP_ENV = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH",
             "CUDA_VISIBLE_DEVICES", "RMSNORM_LESSONS_KERNELS", "TZ")


@dataclass
class Result:
    lesson: str  # the notebook's stem, e.g. "04_shared_memory"
    exercise: str  # e.g. "lesson04.check_v3_kernel"
    status: str  # PASS, NOT YET or NOT VERIFIED
    message: str  # the verdict's first line, shortened
    learner: str = ""

    def line(self, who: int = 12, width: int = 36) -> str:
        return (f"{self.learner:<{who}} {self.lesson:<20} {self.exercise:<{width}} "
                f"{self.status:<13} {self.message}")


@dataclass
class Outcome:
    learner: Learner
    notebook: Path
    results: list[Result] = field(default_factory=list)
    predictions: list[Seen] = field(default_factory=list)
    error: str | None = None  # why the notebook could not be run (to the end)
    seconds: float = 0.0


def _text(outputs) -> tuple[str, str | None]:
    """The text a cell showed, and the error it raised (None if none)."""
    parts, error = [], None
    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            parts.append("".join(out.get("text", "")))
        elif kind in ("execute_result", "display_data"):
            parts.append("".join(out.get("data", {}).get("text/plain", "")))
        elif kind == "error":
            error = f"{out.get('ename')}: {out.get('evalue')}"
    return "\n".join(parts), error


def _short(message: str, width: int) -> str:
    message = message.strip()
    return message[:width - 3] + "..." if len(message) > width else message


def verdicts(nb: dict, lesson: str, width: int = 100) -> list[Result]:
    """One :class:`Result` per exercise of an executed notebook (as a dict): for a lesson of the
    registry its exercises in order (the last call of each counts), else every check call in it."""
    found: dict[str, Result] = {}
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        calls = check_calls("".join(source) if isinstance(source, list) else source)
        if not calls:
            continue
        text, error = _text(cell.get("outputs", []))
        shown = _VERDICT.findall(text)
        for k, (module, fn) in enumerate(calls):
            if k < len(shown):
                status, message = shown[k]
            elif error:
                status, message = "NOT YET", f"(no verdict: the cell raised {error})"
            else:
                status, message = "NOT YET", "(no verdict: the cell did not run)"
            name = f"{module}.{fn}"
            found.pop(name, None)
            found[name] = Result(lesson, name, status, _short(message, width))
    try:
        expected = registry.by_stem(lesson).exercises
    except ValueError:
        return list(found.values())
    results = [found.pop(name, None)
               or Result(lesson, name, "NOT YET", "(the notebook does not call it)")
               for name in expected]
    return results + list(found.values())


def totals(results: list[Result]) -> str:
    counts = {s: sum(r.status == s for r in results) for s in STATES}
    return ", ".join(f"{n} {s}" for s, n in counts.items()) + f" of {len(results)}"


# --- running one notebook -------------------------------------------------------------------------


def _child_env(learner: Learner) -> dict:
    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    python_path = [str(Path(p).resolve()) for p in entries if p]
    if learner.uid is None:
        env = dict(os.environ)
    else:
        account = pwd.getpwuid(learner.uid)
        env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
        env.update(HOME=account.pw_dir, USER=account.pw_name, LOGNAME=account.pw_name,
                   SHELL="/bin/sh")
    env.pop("PYTHONPATH", None)
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(python_path)
    return env


def _tail(f, limit: int = 1 << 20) -> str:
    """The last ``limit`` bytes of an output file (a learner's code may print without end)."""
    f.seek(0, os.SEEK_END)
    f.seek(max(0, f.tell() - limit))
    return f.read().decode(errors="replace")


def _stop_group(pgid: int) -> None:
    """Whatever the learner's notebook left running in the child's session (a background process
    would keep the run waiting): stopped once the child has exited."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reply(stdout: str) -> dict | None:
    replies = [ln[len(REPLY):] for ln in stdout.splitlines() if ln.startswith(REPLY)]
    try:
        reply = json.loads(replies[-1])
    except (IndexError, ValueError):
        return None
    rows = reply.get("results") if isinstance(reply, dict) else None
    if not isinstance(rows, list) or not all(
            isinstance(row, list) and len(row) == 4 and all(isinstance(x, str) for x in row)
            and row[2] in STATES for row in rows):
        return None
    try:
        reply["predictions"] = [Seen.from_row(g) for g in reply.get("predictions", [])]
    except (ValueError, TypeError):
        return None
    return reply


def run_notebook(learner: Learner, path: Path, python: str, timeout: int) -> Outcome:
    """Run one notebook as its learner in a child (:mod:`.progress_worker`), read its verdicts."""
    outcome = Outcome(learner, path)
    start = time.perf_counter()
    cmd = [python, "-m", "rmsnorm_lessons.workshop.worker", str(path.resolve()), str(timeout)]
    who = {}
    if learner.uid is not None:
        groups = os.getgrouplist(pwd.getpwuid(learner.uid).pw_name, learner.gid)
        who = dict(user=learner.uid, group=learner.gid, extra_groups=groups)
    # files, not pipes: a process the notebook leaves behind cannot hold the run open
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(cmd, cwd=path.resolve().parent, env=_child_env(learner),
                                    stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    start_new_session=True, **who)
        except OSError as exc:
            outcome.error = (f"could not start {python} as {learner.name}: {exc.strerror or exc}; "
                             f"as root, --python must name an interpreter every learner can run")
            return outcome
        try:
            proc.wait()
        finally:
            _stop_group(proc.pid)
            outcome.seconds = time.perf_counter() - start
        stdout, stderr = _tail(out), _tail(err)
    reply = _reply(stdout)
    if reply is None:
        tail = (stderr.strip() or stdout.strip() or "no output").splitlines()[-1]
        outcome.error = f"the run stopped (exit {proc.returncode}): {tail[:300]}"
        return outcome
    if learner.uid is not None and reply.get("uid") != learner.uid:
        outcome.error = f"ran as uid {reply.get('uid')}, not {learner.uid}: no verdicts counted"
        return outcome
    outcome.results = [Result(*row, learner=learner.name) for row in reply["results"]]
    outcome.predictions = reply["predictions"]
    for seen in outcome.predictions:
        seen.learner = learner.name
    outcome.error = reply.get("error") and str(reply["error"])
    return outcome


def missing(name: str) -> bool:
    """``name`` cannot be imported here."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is None
    except ImportError:
        return True


# --- the report -----------------------------------------------------------------------------------


def _finished_line(outcome: Outcome) -> str:
    what = (totals(outcome.results) if outcome.results else "no exercises") if not outcome.error \
        else f"could not be run: {outcome.error}"
    return f"{outcome.learner.name} {outcome.notebook.stem}: {what} ({outcome.seconds:.0f} s)"


def table(learner: Learner, outcomes: list[Outcome]) -> list[str]:
    """A learner's rows (each starting with the learner), a total per notebook and the learner's."""
    who = max(12, len(learner.name))
    head = f"{learner.name:<{who}}"
    if learner.refused:
        return [f"{head} refused: {learner.refused}"]
    lines = []
    for o in outcomes:
        lines += [r.line(who) for r in o.results] + [g.line(who) for g in o.predictions]
        if o.error:
            lines.append(f"{head} {o.notebook.stem:<20} could not be run: {o.error}")
        if o.results or not o.error:
            lines.append(f"{head} {o.notebook.stem:<20} total: "
                         + (totals(o.results) if o.results else "no exercises"))
    results = [r for o in outcomes for r in o.results]
    failed = sum(o.error is not None for o in outcomes)
    guesses = [g for o in outcomes for g in o.predictions]
    lines.append(f"{head} total: {totals(results)}"
                 + (f"; {predictions_total(guesses)}" if guesses else "")
                 + (f"; {failed} notebook(s) could not be run" if failed else ""))
    return lines


def summary(learners: list[Learner], outcomes: list[Outcome]) -> list[str]:
    """The room in a few lines: each learner's counts, then how many learners passed each one."""
    ran = [l for l in learners if not l.refused]
    failed = sum(o.error is not None for o in outcomes)
    lines = [f"room: {len(learners)} learner(s), {len(learners) - len(ran)} refused, "
             f"{len(outcomes)} notebook(s) run, {failed} could not be run",
             f"{'learner':<16} {'PASS':>5} {'NOT YET':>8} {'NOT VERIFIED':>13} {'of':>4}  not run"]
    for learner in learners:
        if learner.refused:
            lines.append(f"{learner.name:<16} refused")
            continue
        mine = [o for o in outcomes if o.learner is learner]
        results = [r for o in mine for r in o.results]
        counts = [sum(r.status == s for r in results) for s in STATES]
        guesses = [g for o in mine for g in o.predictions]
        lines.append(f"{learner.name:<16} {counts[0]:>5} {counts[1]:>8} {counts[2]:>13} "
                     f"{len(results):>4}  {sum(o.error is not None for o in mine)}"
                     + (f"  {predictions_total(guesses)}" if guesses else ""))
    passed: dict[str, set] = {}
    for o in outcomes:
        for r in o.results:
            passed.setdefault(r.exercise, set())
            if r.status == "PASS":
                passed[r.exercise].add(o.learner.name)
    if passed and ran:
        lines.append(f"PASS per exercise, of {len(ran)} learner(s): "
                     + ", ".join(f"{name} {len(who)}" for name, who in passed.items()))
    return lines


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def main(paths=(), room=None, jobs=None, python=None, timeout: int = 900, out=None,
         err=None) -> int:
    """Run the learners' notebooks and print their tables; 0 when every notebook ran, 1 when one
    could not be run or a learner was refused. ValueError (a usage error) for paths or a room that
    hold no notebooks, before anything runs."""
    out, err = out or sys.stdout, err or sys.stderr
    if room is not None and paths:
        raise ValueError("give notebooks and folders, or --room DIR, not both")
    absent = [name for name in NEEDS if missing(name)]
    if absent:
        print(f"progress: {', '.join(absent)} missing: {INSTALL}", file=err)
        return 1
    python = python or sys.executable
    found = shutil.which(python)
    if found is None:
        raise ValueError(f"--python {python}: no such interpreter")
    # each notebook runs in its learner's folder: a path relative to here would name nothing there
    python = os.path.abspath(found)
    if room is not None:
        learners = from_room(room)
    else:
        learners = from_paths(paths or [registry.notebook_dir()])
    for learner in learners:
        if learner.refused:
            print(f"{learner.name}: refused: {learner.refused}", file=err)
    work = [(l, nb) for l in learners if not l.refused for nb in l.notebooks]
    jobs = jobs or default_jobs()
    print(f"progress: {len(work)} notebook(s) of {len(learners)} learner(s), "
          f"{min(jobs, len(work) or 1)} at a time", file=err, flush=True)
    outcomes = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_notebook, l, nb, python, timeout) for l, nb in work]
        for k, future in enumerate(concurrent.futures.as_completed(futures), 1):
            outcome = future.result()
            outcomes.append(outcome)
            print(f"[{k}/{len(work)}] {_finished_line(outcome)}", file=err, flush=True)
    order = {(id(l), nb): i for i, (l, nb) in enumerate(work)}
    outcomes.sort(key=lambda o: order[(id(o.learner), o.notebook)])
    for learner in learners:
        for line in table(learner, [o for o in outcomes if o.learner is learner]):
            print(line, file=out)
    if room is not None or len(learners) > 1:
        print(file=out)
        for line in summary(learners, outcomes):
            print(line, file=out)
    out.flush()
    return 1 if any(o.error for o in outcomes) or any(l.refused for l in learners) else 0

