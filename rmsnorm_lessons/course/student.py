"""The student edition of the course: ``python -m rmsnorm_lessons student OUT/``.

The notebooks ship as the instructor edition: every exercise filled in between nbgrader's region
markers, so every check cell says PASS on a GPU. The student edition is the same notebooks with each
solution region replaced by its skeleton, the outputs of the solution cells and of the cells that
show or check their answers cleared, the outputs of the cells tagged ``reveal`` (our kernel, shown
after the learner's check) and ``prediction`` (the author's guess) cleared too, and below each
prediction the outputs that would show what it asks for (:func:`answered_below`). The set-up cell's
output (the author's machine) goes. The outputs a GPU saved (cells tagged ``gpu``) stay under one
line, "saved on <card>, <date>: run the cell for yours", the card and date of the run the notebook
records (:data:`.notebook.RUN_KEY`; without that record they go too); a saved measurement shown
beside a guess (:func:`.predict.versus`) elsewhere is kept without the author's guess; every other
output (tables and figures) is kept.

Markers. A line containing ``BEGIN SOLUTION`` opens a solution region and a line containing
``END SOLUTION`` closes it, whatever the comment mark (``### BEGIN SOLUTION`` in Python,
``// ### BEGIN SOLUTION`` inside a cell's CUDA text): nbgrader's ClearSolutions matches the
delimiter text inside the line the same way (its current source: ``if self.begin_solution_delimeter
in line``; versions before 0.6 compared the whole stripped line with ``### BEGIN SOLUTION``, which a
``//`` line does not match). Right after a region an optional skeleton block holds what the student
edition has instead:

* in CUDA text, ``#if 0 // ### BEGIN SKELETON`` ... ``#endif // ### END SKELETON``: the lines
  between are kept as they are (in the instructor edition the preprocessor skips them);
* in Python, ``### BEGIN SKELETON`` ... ``### END SKELETON`` with every line commented out by ``#
  ``, which is removed.

Without a skeleton block the region is simply removed: a Python exercise keeps its placeholder
before the region (``answer = None``) or after it (``return None``), which the solution overrides.

Why a few lines of our own rather than nbgrader's preprocessor: ClearSolutions replaces a region by
one stub per notebook language (Python's ``# YOUR CODE HERE`` / ``raise NotImplementedError()``).
Inside a CUDA string that stub is not CUDA (``# YOUR`` is an invalid preprocessor directive), so the
kernel would not compile, and in a Python cell it raises, so the student edition would not run top
to bottom; neither can keep the given code around a CUDA region nor put back a skeleton that
compiles and says NOT YET. The markers stay nbgrader's, so an instructor who grades with nbgrader
can still find the regions.
"""
from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

BEGIN, END = "BEGIN SOLUTION", "END SOLUTION"
BEGIN_SKELETON, END_SKELETON = "BEGIN SKELETON", "END SKELETON"
#: files beside the lessons that they link to, copied into every edition
COMPANIONS = ("reference_card.md",)
#: a cell that calls a lesson's check: ``lesson04.check_v3_kernel(yours_v3)``
CHECK_CALL = re.compile(r"\b(lesson\d\d|tuning)\.(check_\w+)\s*\(")
_BOUND = re.compile(r"^\s*(?:def\s+(\w+)|(\w+)\s*=[^=])", re.M)
#: cells whose outputs the student edition clears whatever they call: our kernel after the check,
#: the guess written in the instructor edition, and an investigation's answers (issue 41: the
#: learner's diagnosis and decision, what changed once their kernel is in)
CLEARED_TAGS = ("reveal", "prediction", "diagnosis", "decision", "what-changed")
#: the line above a GPU cell's saved outputs in the student edition (the card and the date are the
#: notebook's recorded run); its output carries :data:`.notebook.LABEL_KEY`, which
#: :func:`.notebook.show` leaves out
SAVED_LABEL = "saved on {device}, {date}: run the cell for yours"


class MarkerError(ValueError):
    """Solution or skeleton markers that do not pair up."""


def has_solution(text: str) -> bool:
    return any(BEGIN in line for line in text.splitlines())


def _uncomment(line: str) -> str:
    m = re.match(r"^(\s*)# ?(.*)$", line)
    return (m.group(1) + m.group(2)) if m else line


def strip_solutions(text: str) -> str:
    """``text`` with every solution region replaced by the skeleton block after it (or removed)."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if END in line or BEGIN_SKELETON in line or END_SKELETON in line:
            raise MarkerError(f"line {i + 1}: {line.strip()!r} without a {BEGIN} before it")
        if BEGIN not in line:
            out.append(line)
            i += 1
            continue
        j = i + 1
        while j < len(lines) and END not in lines[j]:
            if BEGIN in lines[j]:
                raise MarkerError(f"line {j + 1}: a {BEGIN} inside the region opened at line "
                                  f"{i + 1}")
            j += 1
        if j == len(lines):
            raise MarkerError(f"line {i + 1}: {BEGIN} without {END}")
        i = j + 1
        if i < len(lines) and BEGIN_SKELETON in lines[i]:
            cuda = lines[i].strip().startswith("#if")
            k = i + 1
            while k < len(lines) and END_SKELETON not in lines[k]:
                k += 1
            if k == len(lines):
                raise MarkerError(f"line {i + 1}: {BEGIN_SKELETON} without {END_SKELETON}")
            body = lines[i + 1:k]
            out.extend(body if cuda else [_uncomment(b) for b in body])
            i = k + 1
    return "\n".join(out)


def solution_only(text: str) -> str:
    """The instructor's text without the skeleton blocks and the marker lines (what the solution
    reads as)."""
    lines, out, skip = text.split("\n"), [], False
    for line in lines:
        if BEGIN_SKELETON in line:
            skip = True
        elif END_SKELETON in line:
            skip = False
        elif not skip and BEGIN not in line and END not in line:
            out.append(line)
    return "\n".join(out)


def solution_lines(text: str) -> list[str]:
    """The lines inside the solution regions of ``text`` (markers and skeletons excluded)."""
    out, inside = [], False
    for line in text.split("\n"):
        if BEGIN in line:
            inside = True
        elif END in line:
            inside = False
        elif inside:
            out.append(line)
    return out


def tags(cell) -> list:
    return cell.get("metadata", {}).get("tags", [])


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def check_calls(text: str) -> list[tuple[str, str]]:
    """``[(module, check function name), ...]`` called in a cell's text: ``("lesson04",
    "check_v3_kernel")``, ``("tuning", "check_tuning")``."""
    return [(m.group(1), m.group(2)) for m in CHECK_CALL.finditer(text)]


def _clear(cell) -> None:
    cell["outputs"] = []
    cell["execution_count"] = None


def student_notebook(nb: dict) -> dict:
    """A copy of the notebook (nbformat 4, as a dict) as the student edition."""
    from .notebook import RUN_KEY

    nb = copy.deepcopy(nb)
    everything = nb.get("cells", [])
    code = [i for i, c in enumerate(everything) if c.get("cell_type") == "code"]
    bound_elsewhere = set()
    for i in code:
        if not has_solution(_source(everything[i])):
            bound_elsewhere.update(bound_names(_source(everything[i])))
    answered = answered_below(everything) | {  # and the set-up cell's: the author's machine
        i for i in code[:1] if "setup" in tags(everything[i])
        or "notebook.setup()" in _source(everything[i])}
    label = saved_label(nb.get("metadata", {}).get(RUN_KEY))
    answers: set[str] = set()  # names an earlier solution cell binds (and no other cell does)
    for i in code:
        cell = everything[i]
        text = _source(cell)
        _hide_guesses(cell)
        _drop_answers(cell)
        if has_solution(text):
            if "prediction" not in tags(cell):  # a guess is no answer that later cells must hide
                answers.update(bound_names(text) - bound_elsewhere)
            cell["source"] = strip_solutions(text)
            _clear(cell)
        elif any(t in CLEARED_TAGS for t in tags(cell)) or i in answered:
            _clear(cell)
        elif check_calls(text) or _reads(text, answers):
            _clear(cell)  # it checks or shows an answer
        elif ("gpu" in tags(cell) and "opening" not in tags(cell)  # an opening says it itself
              and cell.get("outputs")):
            if label is None:
                _clear(cell)  # no record of where they were made: nothing to label them with
            else:
                cell["outputs"] = [copy.deepcopy(label)] + cell["outputs"]
    _investigation(nb)
    return nb


def saved_label(run) -> dict | None:
    """The output above a GPU cell's saved outputs: "saved on <card>, <date>: run the cell for
    yours", from the notebook's recorded run (``{"device": ..., "date": ...}``); None where the run
    is not recorded."""
    if not isinstance(run, dict) or not run.get("device") or not run.get("date"):
        return None
    from .notebook import LABEL_KEY

    text = SAVED_LABEL.format(device=run["device"], date=run["date"])
    return {"output_type": "display_data", "metadata": {LABEL_KEY: True},
            "data": {"text/plain": text, "text/markdown": f"*{text}*"}}


def _reads(text: str, names) -> bool:
    names = sorted(set(names))
    return bool(names) and re.search(r"\b(" + "|".join(map(re.escape, names)) + r")\b",
                                     text) is not None


def answered_below(cells) -> set[int]:
    """Indices of the code cells whose outputs would show what a ``prediction`` cell asks for:
    below each prediction, down to the last cell that uses its guess, the cells that use the
    guess, the ``gpu`` cells, and the cells that bind a name those users take from above
    (:func:`free_names`; where no cell uses the guess, the first code cell below it)."""
    out: set[int] = set()
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "code" or "prediction" not in tags(cell):
            continue
        guess = bound_names(_source(cell))
        below = [j for j in range(i + 1, len(cells)) if cells[j].get("cell_type") == "code"]
        users = [j for j in below if _reads(_source(cells[j]), guess)] or below[:1]
        read = set().union(*(free_names(_source(cells[j])) for j in users))
        for j in below:
            if users and j > users[-1]:
                break
            if j in users or "gpu" in tags(cells[j]) or read & bound_names(_source(cells[j])):
                out.add(j)
    return out


def free_names(text: str) -> set[str]:
    """The names a cell reads that it does not bind itself (what it takes from the cells above);
    a cell that does not parse reads every word it holds."""
    import ast

    lines = [line for line in text.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return set(re.findall(r"[A-Za-z_]\w*", text))
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Load)}
    return loaded - bound_names(text)


def bound_names(text: str) -> set[str]:
    """The names a cell's Python binds at its top level (assignments, ``def``, ``for``, imports):
    read from its syntax tree, so the C inside a kernel's string (``r = rstd[row];``) binds
    nothing. A cell that does not parse (IPython magics aside) falls back to a line pattern."""
    import ast

    lines = [line for line in text.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return {a or b for a, b in _BOUND.findall(text)}
    names: set[str] = set()

    def visit(node) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            return  # what a function binds inside stays inside
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                             ast.GeneratorExp)):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _drop_answers(cell) -> None:
    """The strings that would give a numeric answer away stay in the instructor's edition."""
    meta = cell.get("metadata", {}).get("rmsnorm_lessons")
    if isinstance(meta, dict) and "answers" in meta:
        del meta["answers"]
        if not meta:
            del cell["metadata"]["rmsnorm_lessons"]


def _hide_guesses(cell) -> None:
    from . import predict

    for out in cell.get("outputs", []):
        gap = out.get("data", {}).get(predict.GAP_MIME)
        if gap is not None:
            out["data"] = predict.measurement_only(gap) or {}


def _sources(sources) -> list[Path]:
    """Notebook files as given; a folder stands for the registry's lessons in it (a folder without
    any is refused, as is a path that is neither)."""
    from .registry import LESSONS

    paths = []
    for s in map(Path, sources):
        if s.is_dir():
            found = [s / lesson.notebook for lesson in LESSONS if (s / lesson.notebook).is_file()]
            if not found:
                raise ValueError(f"{s}: a folder without lesson notebooks")
            paths.extend(found)
        elif s.is_file():
            paths.append(s)
        else:
            raise ValueError(f"{s}: no such notebook or folder")
    return paths


def _read_notebook(path: Path) -> dict:
    """The notebook at ``path``, or a ValueError naming the file when it is not one."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a notebook (not JSON: {exc})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError(f"{path} is not a notebook (JSON without a list of cells)")
    return nb


def write_edition(sources, out_dir, instructor: bool = False, overwrite: bool = False):
    """Write the student edition (or, ``instructor=True``, a copy of the instructor edition) of
    ``sources`` (notebook files, or folders of lessons) into ``out_dir``. A notebook already there
    is kept, a learner's work, unless ``overwrite``. Returns (the paths written, the paths kept)."""
    out = Path(out_dir)
    paths = _sources(sources)
    notebooks = {path: _read_notebook(path) for path in paths}  # every source read before writing
    out.mkdir(parents=True, exist_ok=True)
    written, kept = [], []
    for path in paths:
        target = out / path.name
        if target.exists() and not overwrite:
            kept.append(target)
            continue
        # a temporary name first: an interrupted run leaves no half notebook for a later run to keep
        partial = target.with_name(f".{target.name}.partial")
        if instructor:
            partial.write_bytes(path.read_bytes())
        else:
            with open(partial, "w") as f:
                nb = student_notebook(notebooks[path])
                json.dump(nb, f, indent=1, ensure_ascii=False)
                f.write("\n")
        partial.replace(target)
        written.append(target)
    for folder in dict.fromkeys(path.parent for path in paths):
        for name in COMPANIONS:  # what the lessons link to travels with them
            if (folder / name).is_file() and folder.resolve() != out.resolve():
                shutil.copyfile(folder / name, out / name)
    return written, kept


def write_student_edition(sources, out_dir) -> list[Path]:
    """Write the student edition of ``sources`` (notebook files, or folders of lessons) into
    ``out_dir``, replacing what is there."""
    return write_edition(sources, out_dir, overwrite=True)[0]


def default_notebooks() -> Path:
    """The course's lessons (the instructor edition): :func:`.lessons.notebook_dir`."""
    from .registry import notebook_dir

    return notebook_dir()


# --- issue 41: an investigation's opening and explanations ---------------------------------------

#: the heading the student edition puts above an explanation it folds
EXPLANATION_HEADING = ("#### After your diagnosis: the explanation (folded: click the bar at its "
                       "left to open it)")
_MEASURED = re.compile(r"^(?P<what>.+ at \d+x\d+), measured now on (?P<card>.+?)\s*$")
_READING = re.compile(r"^(memory-bound|latency-bound|no reading)\b")


def inserted(cell) -> bool:
    """A cell the student edition added (an explanation's heading), not one of the lesson's."""
    meta = cell.get("metadata", {}).get("rmsnorm_lessons")
    return isinstance(meta, dict) and "inserted" in meta


def _saved_opening(text: str, date: str) -> str:
    """An opening's saved output as the student edition shows it: its first line says whose
    figures they are and asks for the learner's own; no reading line."""
    lines = [line for line in text.split("\n") if not _READING.match(line)]
    m = _MEASURED.match(lines[0]) if lines else None
    if m:
        lines[0] = f"{m['what']}, saved on {m['card']}, {date}: run the cell for yours"
    return "\n".join(lines)


def _investigation(nb: dict) -> None:
    """The cells of issue 41's investigation: an ``opening`` keeps its saved output, labelled as
    another machine's; an ``explanation`` (markdown) is folded under a one-line heading."""
    from .notebook import RUN_KEY

    date = (nb.get("metadata", {}).get(RUN_KEY) or {}).get("date", "date not recorded")
    cells, out = nb.get("cells", []), []
    for i, cell in enumerate(cells):
        if cell.get("cell_type") == "code" and "opening" in tags(cell):
            for o in cell.get("outputs", []):
                if "text" in o:
                    o["text"] = _saved_opening(_source({"source": o["text"]}), date)
                elif "text/plain" in o.get("data", {}):
                    o["data"]["text/plain"] = _saved_opening(
                        _source({"source": o["data"]["text/plain"]}), date)
        if cell.get("cell_type") == "markdown" and "explanation" in tags(cell):
            cell.setdefault("metadata", {}).setdefault("jupyter", {})["source_hidden"] = True
            previous = cells[i - 1] if i else {}
            if not (previous.get("cell_type") == "markdown" and "explanation" in tags(previous)):
                heading = {"cell_type": "markdown", "source": EXPLANATION_HEADING,
                           "metadata": {"rmsnorm_lessons": {"inserted": "explanation heading"}}}
                if "id" in cell:
                    heading["id"] = f"{cell['id']}-heading"[:64]
                out.append(heading)
        out.append(cell)
    nb["cells"] = out
