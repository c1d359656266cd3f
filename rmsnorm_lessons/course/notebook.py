"""Notebook support: the ``%%gpu`` cell magic, a one-line status banner, and the record of verdicts.

A cell that launches kernels starts with ``%%gpu`` (and carries the cell tag ``gpu``). Where a GPU
works the cell runs as usual. Where not, it says so in one sentence and shows the output the same
cell made on the course's GPU, read from the notebook file itself (the lessons ship with the outputs
of an H200 run, and ``python -m rmsnorm_lessons.course.execute`` records in the notebook's metadata
where and when that run was), so the prose that follows still has its tables and figures beside it.

Where :data:`rmsnorm_lessons.course.record.ENV` names a file (the workshop hub sets it), a cell
whose value is a check's verdict is recorded there (:mod:`rmsnorm_lessons.course.record`) for the
instructor's dashboard.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..core import devices, gpu

#: notebook metadata key where rmsnorm_lessons.course.execute records the device and date of the run
RUN_KEY = "rmsnorm_lessons"
#: an output's metadata key that marks the student edition's "saved on <card>, <date>: run the cell
#: for yours" line above a GPU cell's saved outputs (:func:`.student.saved_label`)
LABEL_KEY = "rmsnorm_lessons_saved_label"


def gpu_cell(line: str, cell: str):
    try:  # a bad $RMSNORM_ARCH: its one message, as where no GPU is (the saved output below)
        devices.target_arch()
        reason = gpu.why_unavailable()
    except devices.ArchError as exc:
        reason = f"{exc}: unset it or fix it, then restart the kernel"
    if reason is not None:
        saved = saved_outputs(cell)
        if saved is None:
            print(f"Skipped (this cell launches kernels): {reason}")
            return None
        outputs, where = saved
        print(f"Not run here ({reason.split(':')[0]}). Saved output from {where}:")
        show(outputs)
        return None
    from IPython import get_ipython

    result = get_ipython().run_cell(cell)
    if not result.success:  # the traceback is already shown; fail the cell too, so nbval sees it
        raise GpuCellFailed("the %%gpu cell above raised an error")
    return None


class GpuCellFailed(RuntimeError):
    pass


def _body(source: str) -> str:
    """A %%gpu cell's code without its magic line, for matching (trailing space ignored)."""
    lines = source.splitlines()
    if lines and lines[0].startswith("%%gpu"):
        lines = lines[1:]
    return "\n".join(line.rstrip() for line in lines).strip()


def _notebooks() -> list[Path]:
    # JupyterLab tells the kernel its notebook (JPY_SESSION_NAME); otherwise the kernel's folder
    # holds it. Last, the instructor edition the package carries: a cell the student edition
    # shows without outputs (a measurement below a prediction), or a runtime whose folder holds
    # no notebook (Colab's /content), finds its saved outputs there.
    from .registry import notebook_dir

    named = os.environ.get("JPY_SESSION_NAME")
    found = [Path(named)] if named and named.endswith(".ipynb") and Path(named).is_file() else []
    try:
        shipped = sorted(notebook_dir().glob("[0-9][0-9]_*.ipynb"))
    except FileNotFoundError:
        shipped = []
    return found + sorted(Path.cwd().glob("*.ipynb")) + shipped


def saved_outputs(cell: str, notebooks=None):
    """``(outputs, "NVIDIA H200, 2026-12-02")`` saved for the %%gpu cell with this code, or None.

    Looks in the running notebook's file (and the other notebooks of its folder, then the
    lessons the package carries) for a cell with the same code whose outputs came from a GPU run
    recorded in the notebook's metadata.
    """
    want = _body(cell)
    for path in notebooks if notebooks is not None else _notebooks():
        try:
            nb = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue
        run = nb.get("metadata", {}).get(RUN_KEY)
        if not run:
            continue
        for c in nb.get("cells", []):
            if c.get("cell_type") != "code" or not c.get("outputs"):
                continue
            source = "".join(c.get("source", []))
            if source.startswith("%%gpu") and _body(source) == want:
                return c["outputs"], (f"{run.get('device', 'a GPU')}, "
                                      f"{run.get('date', 'date not recorded')}")
    return None


def show(outputs) -> None:
    """Display saved notebook outputs (streams, rich displays, results) in the running IPython. A
    saved prediction gap (:func:`.predict.versus`) shows this learner's guess beside the saved
    measurement instead of the guess of the run that saved it; the student edition's "saved on
    <card>, <date>" line is left out."""
    from IPython.display import publish_display_data  # only inside IPython

    from . import predict

    for out in outputs:
        kind = out.get("output_type")
        if out.get("metadata", {}).get(LABEL_KEY):  # the student edition's "saved on ..." line:
            continue  # gpu_cell says where the outputs come from itself
        gap = out.get("data", {}).get(predict.GAP_MIME)
        if gap is not None and predict.replay(gap) is not None:
            continue
        if kind == "stream":
            text = "".join(out.get("text", []))
            print(text, end="" if text.endswith("\n") else "\n")
        elif kind in ("display_data", "execute_result"):
            data = {k: "".join(v) if isinstance(v, list) else v for k,
                    v in out.get("data", {}).items()}
            publish_display_data(data, out.get("metadata", {}))
        elif kind == "error":
            print(f"{out.get('ename')}: {out.get('evalue')}")


def record_verdict(result) -> None:
    """IPython's ``post_run_cell`` hook: a cell whose value is a Verdict is recorded under the
    exercise its text calls. Never raises: a failed record must not turn a check's cell into an
    error."""
    try:
        from . import record
        from .verdict import Verdict

        value = getattr(result, "result", None)
        if isinstance(value, Verdict) and record.record_path() is not None:
            info = getattr(result, "info", None)
            record.record_cell(getattr(info, "raw_cell", "") or "", value)
    except Exception:  # pragma: no cover - record.record already swallows its own errors
        pass


def arch_error(shell, etype, value, tb, tb_offset=None):
    """IPython's handler for :class:`~rmsnorm_lessons.core.devices.ArchError` in a lesson: its one
    message (which names $RMSNORM_ARCH and what it may be), no traceback."""
    print(f"{value}: unset it or fix it, then restart the kernel")
    return []


def load_ipython_extension(ipython) -> None:
    ipython.register_magic_function(gpu_cell, magic_kind="cell", magic_name="gpu")
    ipython.set_custom_exc((devices.ArchError,), arch_error)
    hooks = ipython.events.callbacks.get("post_run_cell", [])
    if not any(getattr(h, "__name__", "") == record_verdict.__name__
               and getattr(h, "__module__", "") == __name__ for h in hooks):
        ipython.events.register("post_run_cell", record_verdict)


def setup() -> str:
    """Register ``%%gpu`` in the running IPython and return a one-line summary of what works
    here."""
    try:
        from IPython import get_ipython

        ip = get_ipython()
        if ip is not None:
            load_ipython_extension(ip)
    except ImportError:  # pragma: no cover
        pass
    reason = gpu.why_unavailable()
    if reason is None:
        f = gpu.facts()
        return (f"GPU: {f.name} ({f.arch}, {f.multiprocessors} SMs): every cell of this lesson "
                f"runs here.")
    return (f"No GPU here: cells marked %%gpu show the output they made on the course's GPU "
            f"instead of running. {reason}")


# --- "compare with ours": the reference kernel, shown after the learner's check -----------------

_IDENT_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_NOT_NAMES = {"if", "for", "while", "switch", "return", "sizeof", "alignas", "decltype",
              "__launch_bounds__", "__align__", "static_assert", "catch", "defined"}
_AFTER_PARAMS = re.compile(r"\s*(?:(?:const|noexcept|override|final)\b\s*)*\{")
_DIRECTIVE = re.compile(r"[ \t]*#")
_OPENS_SCOPE = re.compile(r"(?:\bnamespace(?:\s+\w+)?|\bextern\s*\"C\")\s*$")


def _code_mask(text: str) -> str:
    """``text`` with comments, string and character literals and preprocessor lines blanked
    (newlines kept), so braces and parentheses can be counted on what remains."""
    out, i, n = list(text), 0, len(text)

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    line_start = True
    while i < n:
        ch = text[i]
        if line_start and _DIRECTIVE.match(text, i):
            j = i
            while True:  # a directive runs to an end of line not escaped by a backslash
                j = text.find("\n", j)
                if j < 0:
                    j = n
                    break
                if text[j - 1] != "\\":
                    break
                j += 1
            blank(i, j)
            i = j
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif ch in "\"'":
            j = i + 1
            while j < n and text[j] != ch and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if ch == '"' and text[max(0, i - 12):i].rstrip().endswith("extern"):
                i = j + 1  # keep extern "C" readable
                continue
            blank(i, min(j + 1, n))
            i = j + 1
        else:
            line_start = ch == "\n" or (line_start and ch in " \t")
            i += 1
            continue
        line_start = False
    return "".join(out)


def _match(code: str, i: int, opening: str, closing: str) -> int:
    """The index just past the bracket that closes the one at ``code[i]``."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == opening:
            depth += 1
        elif code[j] == closing:
            depth -= 1
            if depth == 0:
                return j + 1
    raise ValueError(f"unbalanced {opening}{closing} in the kernel source")


def definitions(text: str) -> list[tuple[str, int, int]]:
    """``(name, start, end)`` of each function or kernel defined in a CUDA source, in file order:
    from the comment block right above its declaration to its closing brace. Functions inside a
    ``namespace`` or ``extern "C" {`` are found; those inside a struct are not."""
    code = _code_mask(text)
    found, i, decl = [], 0, 0  # decl: where the current top-level declaration starts
    while i < len(code):
        ch = code[i]
        if ch == "{":
            end = _match(code, i, "{", "}")
            if _OPENS_SCOPE.search(code[decl:i]):
                i, decl = i + 1, i + 1  # look inside
                continue
            i = decl = end
            continue
        if ch in ";}":
            i = decl = i + 1
            continue
        m = _IDENT_CALL.match(code, i) if (i == 0 or not (code[i - 1].isalnum()
                                                          or code[i - 1] == "_")) else None
        if m and m.group(1) not in _NOT_NAMES:
            close = _match(code, m.end() - 1, "(", ")")
            body = _AFTER_PARAMS.match(code, close)
            if body:
                end = _match(code, body.end() - 1, "{", "}")
                found.append((m.group(1), _leading_comment(text, code, decl), end))
                i = decl = end
                continue
            i = close
            continue
        i += 1
    return found


def _leading_comment(text: str, code: str, decl: int) -> int:
    """The start of the line where the declaration at or after ``decl`` begins, moved up over the
    comment lines right above it (no blank line between)."""
    first = len(code[:decl]) + (len(code[decl:]) - len(code[decl:].lstrip()))
    start = text.rfind("\n", 0, first) + 1
    while start > 0:
        above = text.rfind("\n", 0, start - 1) + 1
        line = text[above:start - 1].strip()
        if not (line.startswith("//") or line.startswith("/*") or line.startswith("*")
                or line.endswith("*/")):
            break
        start = above
    return start


def part_of(text: str, part: str) -> str:
    """The definition of function or kernel ``part`` in CUDA source ``text`` (every overload, in
    file order); ValueError listing the functions found where there is none of that name."""
    spans = definitions(text)
    mine = [text[a:b] for name, a, b in spans if name == part]
    if not mine:
        names = ", ".join(dict.fromkeys(name for name, _, _ in spans)) or "none"
        raise ValueError(f"part {part!r} is not a function defined in this file; its functions: "
                         f"{names}")
    return "\n\n".join(mine)


HIDDEN = ("Ours stays hidden until your kernel passes its check ({why}): run the check, or pass "
          "anyway=True to see it now.")
#: the line above ours where the learner asked to see it before their kernel passed (issue 41)
UNCHECKED = "unchecked: {why}"


def _not_passed(verdict) -> str:
    """Why the learner's kernel has not passed: it was not run, or it was and failed."""
    from .verdict import Verdict

    if isinstance(verdict, Verdict) and verdict.status == "NOT VERIFIED":
        return "your kernel was not run"
    if isinstance(verdict, Verdict):
        return "your kernel did not pass its check (NOT YET)"
    return "your kernel was not run (the check cell has not given a verdict here)"


def compare_with_ours(verdict, source: str, part: str | None = None, anyway: bool = False):
    """In a cell tagged ``reveal``, after the learner's check: print our kernel (``source``: a rung
    or a file under kernels/; ``part``: one function of it) where ``verdict`` is PASS; else one
    sentence saying why it stays hidden. NOT VERIFIED (the kernel was not run: no GPU) keeps it
    hidden too. ``anyway=True`` prints it whatever the verdict, under a line saying that the
    learner's kernel is unchecked."""
    from ..core import build
    from .verdict import Verdict

    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"source must be a rung name or a file under kernels/, got {source!r}")
    if part is not None and not isinstance(part, str):
        raise ValueError(f"part must be the name of a function in {source} (a string), "
                         f"got {part!r}")
    if not isinstance(anyway, bool):
        raise ValueError(f"anyway must be True or False, got {anyway!r}")
    text = build.kernel_source(source)  # FileNotFoundError listing the kernels
    shown = part_of(text, part) if part is not None else text
    name = build.kernel_path(source).name
    passed = isinstance(verdict, Verdict) and verdict.status == "PASS"
    if passed or anyway:
        what = f"{part} in kernels/{name}" if part is not None else f"kernels/{name}"
        above = "" if passed else UNCHECKED.format(why=_not_passed(verdict)) + "\n"
        print(f"{above}Ours: {what}\n\n{shown.rstrip()}")
        return None
    if isinstance(verdict, Verdict) and verdict.status == "NOT VERIFIED":
        why = "it says NOT VERIFIED: your kernel was not run"
    elif isinstance(verdict, Verdict):
        why = f"it says {verdict.status}"
    else:
        why = "the check cell has not given a verdict here"
    print(HIDDEN.format(why=why))
    return None
