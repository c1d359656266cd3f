"""The course as a static website: ``python tools/build_site.py [--out FOLDER] [--instructor]``.

The student site goes to build/site/student/, the instructor's (``--instructor``) to
build/site/instructor/: two folders, so building one never replaces the other.

What it writes, all in one folder, every link relative (it works from ``file://`` and from any plain
HTTP server, e.g. ``python -m http.server -d build/site``):

* ``index.html``: the README's opening paragraph and the lessons (from
rmsnorm_lessons/course/registry.py),
  each lesson a link, and its kernel a link to the kernel's page (or, where a lesson builds
  several, the kernel files it reads);
* ``<lesson>.html`` per notebook in ``notebooks/``: the notebook as committed, with the outputs it
  was saved with (the H200's tables and figures, the widgets' saved state), a bar to the previous
  lesson, the index and the next lesson, and links to the kernels the lesson reads;
* ``kernels/<file>.html`` for every file of ``kernels/``, highlighted, with a link to the plain file
  (copied beside it); in the student site every link to a kernel, and the kernel's page, says that
  it is the course's reference, to open after an attempt at the lesson's exercise;
* ``workshop.html``, ``gpu-sharing.html``, ``kubernetes.html``: hub/README.md, hub/gpu-sharing.md
  and hub/kubernetes.md (running the course for a room of learners);
* ``reference_card.html``: notebooks/reference_card.md, the terms and SASS opcodes the lessons link
  to (``reference_card.md#warp`` in a notebook becomes ``reference_card.html#warp`` in its page);
  the index shows the two-day plan of rmsnorm_lessons/course/schedule.py beside it.

Renderer: nbconvert's HTML exporter with its ``lab`` template. It is installed already (JupyterLab
pulls it in), so the site costs no new dependency and no Node build; it writes each figure into the
page as a base64 PNG (a page is one file, no broken image paths), highlights code with Pygments at
build time (no JavaScript needed to read the code), and embeds the widgets' saved state, which
``@jupyter-widgets/html-manager`` renders in the browser. Jupyter Book 2 / MyST would give a nicer
theme and cross-references but needs Node and its own build of every page; mkdocs-jupyter wraps this
same nbconvert step in MkDocs. What needs the network when the page is opened: MathJax (the
formulas) and the widget manager, both loaded from a CDN as nbconvert's template does; without it
the formulas show as TeX source and a widget's place stays empty, and everything else (text, code,
figures, tables) is in the page. Code cells are highlighted as Python, but for the CUDA inside them
(the triple-quoted string a kernel exercise hands to its check), which is highlighted as CUDA.

The default is the student edition (``python -m rmsnorm_lessons student``: solutions replaced by
their skeletons, the cells that show or check an answer without their outputs); ``--instructor``
renders the notebooks as committed, solutions included (``make site SITE_ARGS=--instructor``).
"""
from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
KERNELS = ROOT / "kernels"
README = ROOT / "README.md"
CARD = NOTEBOOKS / "reference_card.md"
CARD_PAGE = "reference_card.html"
#: a link to the card as the notebooks write it (beside them), in the HTML nbconvert makes of it
CARD_LINK = re.compile(r'href="reference_card\.md(#[\w-]*)?"')
PAGES = [  # (source, page, title)
    (ROOT / "hub" / "README.md", "workshop.html", "Running a workshop: the hub"),
    (ROOT / "hub" / "gpu-sharing.md", "gpu-sharing.html", "Twenty learners on one H200"),
    (ROOT / "hub" / "kubernetes.md", "kubernetes.html", "Past one machine: Zero to JupyterHub"),
]
KDIR = "kernels"  # the site's folder of kernel pages
#: where each edition's site goes by default (build/site/<edition>)
SITE = ROOT / "build" / "site"
#: what the student site says beside a link to a finished kernel, and on its page
REFERENCE = "the reference: open it after your attempt"
REFERENCE_NOTE = ("This is the course's reference kernel, the finished answer to the exercises "
                  "that build it: open it after your own attempt, not before.")
KERNEL_REF = re.compile(r"kernels/(\w+\.cuh?)\b|kernel_source\(\s*[\"'](\w+)[\"']")
#: a triple-quoted string in a code cell, and what makes its text CUDA rather than prose
TRIPLE = re.compile(r"(?<![\w'\"])([rR]?)('\'\'|\"\"\")(.*?)\2", re.S)
CUDA_HINT = re.compile(r"__global__|__device__|#include|__shfl\w*|threadIdx|blockIdx")
#: the course's own cell magics whose cell body is Python (rmsnorm_lessons' %%gpu)
PYTHON_MAGICS = ("gpu",)

NAV_CSS = """
.site-nav { display: flex; gap: 1.2rem; align-items: baseline; flex-wrap: wrap; padding: .6rem 1rem;
  margin: 0 0 1rem; background: #f3f5f8; border-bottom: 1px solid #d0d7de; font: 15px system-ui, \
sans-serif;
  position: sticky; top: 0; z-index: 10; }
.site-nav.site-footer { position: static; margin: 2rem 0 0; border-top: 1px solid #d0d7de; }
.site-nav a { color: #0a58ca; text-decoration: none; }
.site-nav a:hover { text-decoration: underline; }
.site-nav .here { font-weight: 600; }
.site-nav .kernels { margin-left: auto; color: #555; }
"""
CSS = NAV_CSS + """
body.site { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 60rem; \
margin: 0 auto;
  padding: 0 1.5rem 3rem; line-height: 1.5; color: #1d1d1f; }
body.site table { border-collapse: collapse; margin: 1rem 0; }
body.site th, body.site td { border: 1px solid #d0d7de; padding: .3rem .6rem; vertical-align: top; \
text-align: left; }
body.site code { background: #f3f5f8; padding: 0 .2em; border-radius: 3px; }
body.site pre { background: #f6f8fa; padding: .8rem; overflow-x: auto; border-radius: 4px; }
body.site .highlight pre { background: #f6f8fa; }
"""


# --------------------------------------------------------------------------------------------------
# sources


def lesson_map() -> list[dict]:
    """The lessons, from the registry: ``[{"notebook", "kernel", "kernel_file", "adds", ...}]``;
    ``kernel`` is the registry's Markdown for the kernel column, ``kernel_file`` the one file of
    ``kernels/`` it names (None where it names several or none)."""
    from rmsnorm_lessons.course.registry import LESSONS

    rows = []
    for lesson in LESSONS:
        m = re.fullmatch(r"`(\w+)`", lesson.kernel.strip())
        name = m.group(1) if m else None
        found = name and (KERNELS / f"{name}.cu").is_file()
        rows.append({"notebook": lesson.stem, "kernel": lesson.kernel, "adds": lesson.adds,
                     "minutes": lesson.minutes, "kernel_file": f"{name}.cu" if found else None})
    return rows


def readme_intro(readme: Path = README) -> str:
    """The README's first paragraph (after the title)."""
    paras = [p.strip() for p in re.split(r"\n\s*\n", readme.read_text()) if p.strip()]
    return next((p for p in paras[1:] if not p.startswith(("#", "<!--", "!["))), "")


def instructor_path(stem: str) -> str:
    """The instructor's edition of lesson ``stem``, relative to the repository's root."""
    from rmsnorm_lessons.core import project

    return f"{project.EDITIONS['instructor']}/{stem}.ipynb"


def kernels_of(nb: dict, row: dict | None) -> list[str]:
    """Kernel files a lesson reads: its row of the lesson map, then the ones its cells name."""
    names: list[str] = []
    if row and row.get("kernel_file"):
        names.append(row["kernel_file"])
    text = "\n".join("".join(c.get("source", "")) for c in nb.get("cells", []))
    for a, b in KERNEL_REF.findall(text):
        names.append(a or f"{b}.cu")
    seen = []
    for n in names:
        if n not in seen and (KERNELS / n).is_file():
            seen.append(n)
    return seen


# --------------------------------------------------------------------------------------------------
# rendering


def _markdown(text: str) -> str:
    import mistune
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import TextLexer, get_lexer_by_name
    from pygments.util import ClassNotFound

    class Renderer(mistune.HTMLRenderer):
        def block_code(self, code, info=None):
            try:
                lexer = get_lexer_by_name(info.split()[0]) if info else TextLexer()
            except ClassNotFound:
                lexer = TextLexer()
            return highlight(code, lexer, HtmlFormatter())

    md = mistune.create_markdown(renderer=Renderer(escape=False),
                                 plugins=["table", "strikethrough"])
    return md(text)


def _code_tokens(source: str):
    """Pygments tokens of a code cell: Python (after a %%gpu line), and CUDA inside its
    triple-quoted strings that read as CUDA."""
    from IPython.lib.lexers import IPython3Lexer
    from pygments.lexers import CudaLexer
    from pygments.token import Keyword, Operator, String, Text

    options = dict(stripnl=False, ensurenl=False)
    python, cuda = IPython3Lexer(**options), CudaLexer(**options)
    magic = re.match(r"%%(\w+)([^\n]*\n?)", source)
    if magic and magic.group(1) in PYTHON_MAGICS:
        yield from ((Operator, "%%"), (Keyword, magic.group(1)), (Text, magic.group(2)))
        source = source[magic.end():]
    pos = 0
    for m in TRIPLE.finditer(source):
        if not CUDA_HINT.search(m.group(3)):
            continue
        yield from python.get_tokens(source[pos:m.start()])
        if m.group(1):
            yield String.Affix, m.group(1)
        yield String.Double, m.group(2)
        yield from cuda.get_tokens(m.group(3))
        yield String.Double, m.group(2)
        pos = m.end()
    yield from python.get_tokens(source[pos:])


def highlight_cell(source: str, language=None, metadata=None) -> str:
    """nbconvert's ``highlight_code`` filter for the lesson pages (same HTML classes as its own)."""
    from pygments import format as pygments_format
    from pygments.formatters import HtmlFormatter

    formatter = HtmlFormatter(cssclass=" highlight hl-ipython3")
    return pygments_format(_code_tokens(source or " "), formatter)


def _page(title: str, nav: str, body: str, depth: int = 0) -> str:
    up = "../" * depth
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{html.escape(title)}</title>\n"
            f'<link rel="stylesheet" href="{up}site.css">\n<link rel="stylesheet" '
            f'href="{up}pygments.css">\n</head>\n<body '
            f'class="site">\n{nav}\n<main>\n{body}\n</main>\n</body>\n</html>\n')


def _nav(lessons: list[str], here: str | None = None, kernels: list[str] = (),
         depth: int = 0, instructor: bool = False) -> str:
    up = "../" * depth
    mark = ' class="here"' if here == "index" else ""
    parts = [f'<a href="{up}index.html"{mark}>Course index</a>']
    if here in lessons:
        i = lessons.index(here)
        if i > 0:
            parts.append(f'<a class="prev" rel="prev" href="{up}{lessons[i - 1]}.html">&larr; '
                         f'{lessons[i - 1]}</a>')
        parts.append(f'<span class="here">{here}</span>')
        if i + 1 < len(lessons):
            parts.append(f'<a class="next" rel="next" '
                         f'href="{up}{lessons[i + 1]}.html">{lessons[i + 1]} &rarr;</a>')
    parts.append(f'<a href="{up}kernels/index.html">Kernels</a>')
    mark = ' class="here"' if here == CARD_PAGE else ""
    parts.append(f'<a href="{up}{CARD_PAGE}"{mark}>Reference card</a>')
    parts.append(f'<a href="{up}workshop.html">Workshop</a>')
    if kernels:
        links = ", ".join(f'<a class="kernel" href="{up}kernels/{k}.html">{k}</a>' for k in kernels)
        what = "kernels" if instructor else "reference kernels, to open after your attempt"
        parts.append(f'<span class="kernels">{what}: {links}</span>')
    return '<nav class="site-nav">' + " ".join(parts) + "</nav>"


def render_lesson(path: Path, lessons: list[str], row: dict | None,
                  instructor: bool = False) -> str:
    import nbformat
    from nbconvert import HTMLExporter

    raw = json.loads(path.read_text())
    if not instructor:
        from rmsnorm_lessons.course.student import student_notebook

        raw = student_notebook(raw)
    kernels = kernels_of(raw, row)
    nb = nbformat.reads(json.dumps(raw), as_version=4)
    exporter = HTMLExporter(template_name="lab", embed_images=True,
                            filters={"highlight_code": highlight_cell})
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": path.stem}})
    nav = _nav(lessons, path.stem, kernels, instructor=instructor)
    style = f"<style>{NAV_CSS}</style>"
    body = re.sub(r"<title>.*?</title>",
                  f"<title>{html.escape(path.stem)}: rmsnorm-lessons</title>", body,
                  count=1, flags=re.S)
    body = body.replace("</head>", f"{style}\n</head>", 1)
    body, n = re.subn(r"(<body[^>]*>)", lambda m: f"{m.group(1)}\n{nav}", body, count=1)
    if not n:
        raise RuntimeError(f"{path.name}: nbconvert's page has no <body>")
    footer = nav.replace('class="site-nav"', 'class="site-nav site-footer"')
    return card_links(body.replace("</body>", f"{footer}\n</body>", 1))


def card_links(page: str) -> str:
    """``page`` with its links to the card's Markdown pointed at the card's page (same anchor)."""
    return CARD_LINK.sub(lambda m: f'href="{CARD_PAGE}{m.group(1) or ""}"', page)


def render_kernel(path: Path, lessons: list[str], users: list[str],
                  instructor: bool = False) -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import CudaLexer

    code = highlight(path.read_text(), CudaLexer(), HtmlFormatter(linenos="table"))
    code = re.sub(r'(&quot;|")(\w+\.cuh)(&quot;|")',
                  lambda m: f'{m.group(1)}<a href="{m.group(2)}.html">{m.group(2)}</a>{m.group(3)}'
                  if (KERNELS / m.group(2)).is_file() else m.group(0), code)
    used = ", ".join(f'<a href="../{u}.html">{u}</a>' for u in users) or "no lesson names it"
    note = "" if instructor else f'<p class="reference"><strong>{REFERENCE_NOTE}</strong></p>\n'
    body = (f"<h1><code>kernels/{path.name}</code></h1>\n{note}<p>Read in: {used}. "
            f'<a href="{path.name}">Plain file</a>.</p>\n{code}')
    return _page(f"kernels/{path.name}", _nav(lessons, None, depth=1), body, depth=1)


def build(out: Path, instructor: bool = False) -> list[Path]:
    from pygments.formatters import HtmlFormatter

    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    (out / "kernels").mkdir(parents=True)
    rows = {r["notebook"]: r for r in lesson_map()}
    paths = sorted(p for p in NOTEBOOKS.glob("*.ipynb") if not p.name.startswith("."))
    lessons = [p.stem for p in paths]
    (out / "site.css").write_text(CSS)
    (out / "pygments.css").write_text(HtmlFormatter().get_style_defs(".highlight"))
    written = []
    users: dict[str, list[str]] = {}
    missing = sorted(set(rows) - set(lessons))
    if missing:
        raise SystemExit(f"site: the lesson registry names notebooks not in notebooks/: {missing}")
    if not CARD.is_file():
        raise SystemExit(f"site: {CARD.relative_to(ROOT)} is missing; the lessons link to it")
    (out / CARD_PAGE).write_text(_page("Reference card: rmsnorm-lessons",
                                       _nav(lessons, CARD_PAGE), _markdown(CARD.read_text())))
    written.append(out / CARD_PAGE)
    for p in paths:
        page = out / f"{p.stem}.html"
        page.write_text(render_lesson(p, lessons, rows.get(p.stem), instructor))
        for k in kernels_of(json.loads(p.read_text()), rows.get(p.stem)):
            users.setdefault(k, []).append(p.stem)
        written.append(page)
        print(f"site: {page.relative_to(out)}")

    kernel_files = sorted(p for p in KERNELS.iterdir() if p.suffix in (".cu", ".cuh"))
    for k in kernel_files:
        shutil.copyfile(k, out / "kernels" / k.name)
        (out / "kernels" / f"{k.name}.html").write_text(
            render_kernel(k, lessons, users.get(k.name, []), instructor))
    items = "\n".join(f'<li><a href="{k.name}.html"><code>{k.name}</code></a>'
                      f'{" (" + ", ".join(users[k.name]) + ")" if k.name in users else ""}</li>'
                      for k in kernel_files)
    intro = "" if instructor else f"<p>{REFERENCE_NOTE}</p>\n"
    (out / "kernels" / "index.html").write_text(
        _page("Kernels", _nav(lessons, None, depth=1),
              f"<h1>The kernels</h1>\n{intro}<ul>\n{items}\n</ul>", depth=1))

    for src, name, title in PAGES:
        if src.is_file():
            pages = dict((s.stem, n) for s, n, _ in PAGES)
            text = re.sub(r"\]\((\w[\w-]*)\.md\)",
                          lambda m: f"]({pages.get(m.group(1), m.group(1) + '.md')})",
                          src.read_text())
            (out / name).write_text(_page(title, _nav(lessons, name), _markdown(text)))
            written.append(out / name)

    # the repository's address: pyproject.toml's [project.urls]
    from rmsnorm_lessons.core import project
    from rmsnorm_lessons.course import schedule

    table = ["| lesson | kernel | what it adds | min | open |", "| --- | --- | --- | ---: | --- |"]
    for name in lessons:
        r = rows.get(name, {"kernel": "-", "kernel_file": None, "adds": "", "minutes": ""})
        if r["kernel_file"]:
            kernel = f"[{r['kernel']}]({KDIR}/{r['kernel_file']}.html)"
            kernel += "" if instructor else f" ({REFERENCE})"
        else:  # several kernels or none: the registry's words, then the files the lesson reads
            read = kernels_of(json.loads((NOTEBOOKS / f"{name}.ipynb").read_text()), r)
            links = ", ".join(f"[`{k}`]({KDIR}/{k}.html)" for k in read)
            links += f" ({REFERENCE})" if links and not instructor else ""
            if r["kernel"] == "-":
                kernel = links or "-"
            else:
                kernel = f"{r['kernel']}; reads {links}" if links else r["kernel"]
        table.append(f"| [`{name}`]({name}.html) | {kernel} | {r['adds']} | {r['minutes']} "
                     f"| [Colab]({project.colab_url(name)}) ([instructor's edition]"
                     f"({project.file_url(instructor_path(name))})) |")
    edition = ("the notebooks as committed, solutions included (the instructor edition)"
               if instructor else "the student edition (solutions replaced by skeletons)")
    index = (f"# rmsnorm-lessons\n\n{readme_intro()}\n\n## The lessons\n\n" + "\n".join(table) +
             f"\n\nEvery page is {edition}, with the outputs they were saved with (made on an "
             f"NVIDIA H200). [The kernels]({KDIR}/index.html) are the CUDA files the lessons "
             f"compile.\n\nEach lesson opens, as the learner's edition, in "
             f"[Colab]({project.colab_url('00_setup')}) (a GPU "
             f"runtime; the lesson's first cell sets it up) or, without a GPU, in "
             f"[Binder]({project.binder_url()}); the source is at "
             f"[{project.repository_path()}]({project.repository_url()}).\n\n"
             f"The words the lessons use and the SASS opcodes the checks name are on one page: "
             f"[the reference card]({CARD_PAGE}).\n\n"
             "## Two days\n\nThe lessons as a two-day workshop, from each lesson's minutes and "
             "prerequisites:\n\n" + schedule.plan_markdown(lambda lesson: f"{lesson.stem}.html")
             + "\n\n"
             "## For instructors\n\n"
             "- [Running a workshop](workshop.html): a JupyterHub for a room of learners on one "
             "GPU machine.\n- [Twenty learners on one H200](gpu-sharing.html): time-slicing, MPS, "
             "MIG, and what they do to the timings the lessons show.\n"
             "- [Past one machine](kubernetes.html): Zero to JupyterHub on Kubernetes.\n")
    (out / "index.html").write_text(_page("rmsnorm-lessons", _nav(lessons, "index"),
                                          _markdown(index)))
    written.insert(0, out / "index.html")
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None,
                    help="folder to write (replaced); default build/site/student, or "
                         "build/site/instructor with --instructor")
    ap.add_argument("--instructor", action="store_true",
                    help="the notebooks as committed, solutions in (default: the student edition)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    out = Path(args.out) if args.out else SITE / ("instructor" if args.instructor else "student")
    written = build(out, instructor=args.instructor)
    index = out.resolve() / "index.html"
    print(f"site: {len(written)} pages in {out}; open file://{index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
