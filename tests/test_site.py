"""The course website (``make site``, tools/build_site.py): built, every link checked, and read in
Chromium.

The site is built once, with ``make site SITE_ARGS="--out <tmp>"`` (the repository is not written to
but for the screenshots under build/screenshots/). Then:

* on disk: an index with the lessons of rmsnorm_lessons/course/registry.py, one page per notebook,
every
  relative link and image of every page pointing at a file that exists (so it works from file:// and
  any static HTTP server), no Markdown link left unrendered;
* the default build is the student edition: no solution marker and no line of a solution in a lesson
  page (``--instructor`` renders them); the CUDA of every kernel exercise is highlighted as CUDA;
* in Chromium, from file:// with every request to the network refused (what a reader offline gets):
  the index, then every lesson link in turn; each page's figures must load (every ``<img>`` that is
  not a badge from the web decoded, none broken, at least one per lesson that saved a PNG), its code
  must be highlighted (Pygments' token classes, coloured by the page's CSS), and its bar must lead
  to the next lesson and the kernels it reads. Screenshots: build/screenshots/site-index.png and
  site-lesson.png.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from test_browser import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS

from rmsnorm_lessons.course.registry import LESSONS as REGISTRY
from rmsnorm_lessons.course.student import BEGIN, END, student_notebook

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
LESSONS = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb") if not p.name.startswith("."))
SHOT_LESSON = "02_naive"  # the lesson page in site-lesson.png (first lesson if missing)

try:
    import playwright.sync_api  # noqa: F401

    _PLAYWRIGHT = None
except ImportError as exc:  # pragma: no cover - depends on the machine
    _PLAYWRIGHT = f"the playwright package is not installed ({exc})"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if shutil.which("make") is None:
        pytest.skip("make is missing: the site is built with `make site`")
    pytest.importorskip("nbconvert",
                        reason="nbconvert is not installed: the site is rendered with its HTML "
                               "exporter "
                                            "(it comes with the test and lab extras)")
    out = tmp_path_factory.mktemp("site") / "site"
    r = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "-o", "venv", "site",
                        f"PY={sys.executable}", f"SITE_ARGS=--out {out}"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"open file://{out.resolve()}/index.html" in r.stdout, r.stdout
    return out


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("href", "src"):
            if tag in ("a", "link", "img", "script") and a.get(key):
                self.refs.append(a[key])


def _local_refs(page: Path) -> list[str]:
    p = _Links()
    p.feed(page.read_text())
    return [r for r in p.refs if not re.match(r"^(https?:|data:|mailto:|#|javascript:)", r)]


class _Text(HTMLParser):
    """A page's text as a reader sees it (tags dropped, entities decoded)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data):
        self.parts.append(data)


def _page_text(page: Path) -> str:
    p = _Text()
    p.feed(page.read_text())
    return "".join(p.parts)


def _strings(node):
    """Every string in a notebook's JSON: sources, outputs, metadata, the widgets' state."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def _solution_lines(nb: dict) -> set[str]:
    """The stripped lines inside the notebook's solution regions."""
    lines = set()
    for cell in nb["cells"]:
        inside = False
        for line in "".join(cell["source"]).splitlines():
            if BEGIN in line:
                inside = True
            elif END in line:
                inside = False
            elif inside:
                lines.add(line.strip())
    return lines


def _has_png(nb_path: Path) -> bool:
    """Whether the page's edition of the notebook keeps a figure: the site is the student edition,
    which clears the figures that would show an answer before the learner's attempt (a what-changed
    picture below a prediction)."""
    nb = student_notebook(json.loads(nb_path.read_text()))
    return any("image/png" in o.get("data", {}) for c in nb["cells"] if c["cell_type"] == "code"
               for o in c.get("outputs", []))


def test_site_pages_and_links(site):
    index = (site / "index.html").read_text()
    for name in LESSONS:
        assert (site / f"{name}.html").is_file(), name
        assert f'href="{name}.html"' in index, f"the index does not link {name}"
    for lesson in REGISTRY:
        assert f'href="{lesson.stem}.html"' in index, f"the index does not link {lesson.stem}"
        if lesson.rung:
            assert f'href="kernels/{lesson.rung}.cu.html"' in index, f"no link to {lesson.rung}"
    assert "](" not in _page_text(site / "index.html"), "an unrendered Markdown link on the index"
    broken = []
    pages = sorted(site.rglob("*.html"))
    for page in pages:
        for ref in _local_refs(page):
            target = (page.parent / unquote(urlparse(ref).path)).resolve()
            if not target.is_file():
                broken.append(f"{page.relative_to(site)} -> {ref}")
    assert not broken, "links to nothing:\n" + "\n".join(broken)
    for i, name in enumerate(LESSONS):
        html = (site / f"{name}.html").read_text()
        if i + 1 < len(LESSONS):
            assert f'rel="next" href="{LESSONS[i + 1]}.html"' in html, name
        if i:
            assert f'rel="prev" href="{LESSONS[i - 1]}.html"' in html, name
    for extra in ("workshop.html", "gpu-sharing.html", "kubernetes.html",
                  Path("kernels", "index.html")):
        assert (site / extra).is_file(), extra
    print(f"{len(pages)} pages, every local link and image resolves")


def test_the_default_site_is_the_student_edition(site):
    """No page carries a solution marker, and no lesson page a line of a solution that the student
    edition does not also show (a skeleton's line, a kept output)."""
    marked = [p.relative_to(site).as_posix() for p in sorted(site.rglob("*.html"))
              if BEGIN in p.read_text() or END in p.read_text()]
    assert not marked, f"solution markers in {marked}"
    leaked, checked = [], 0
    for name in LESSONS:
        nb = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
        shown = {line.strip() for text in _strings(student_notebook(nb))
                 for line in text.splitlines()}
        secret = {line for line in _solution_lines(nb) - shown if len(line) > 3}
        page = {line.strip() for line in _page_text(site / f"{name}.html").splitlines()}
        checked += len(secret)
        leaked += [f"{name}: {line}" for line in sorted(secret & page)]
    assert checked, "no solution lines found in the notebooks: the markers changed?"
    assert not leaked, "solution lines in the student site:\n" + "\n".join(leaked)
    assert "student edition" in (site / "index.html").read_text()


def test_the_instructor_edition_keeps_the_solutions(tmp_path):
    """``--instructor`` renders the notebooks as committed: markers and solution lines included."""
    pytest.importorskip("nbconvert")
    site_tool = _tool()
    name = REGISTRY[2].stem
    nb_path = NOTEBOOKS / f"{name}.ipynb"
    rows = {r["notebook"]: r for r in site_tool.lesson_map()}
    page = tmp_path / "page.html"
    page.write_text(site_tool.render_lesson(nb_path, LESSONS, rows[name], instructor=True))
    text = _page_text(page)
    assert BEGIN in text
    solution = _solution_lines(json.loads(nb_path.read_text()))
    assert solution <= {line.strip() for line in text.splitlines()}
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "build_site.py"), "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--instructor" in r.stdout


def _tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_site", ROOT / "tools" / "build_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# a kernel exercise's cell, up to the next cell
_CELL = re.compile(r'<div class="jp-Cell [^"]*celltag_kernel-exercise[^"]*"'
                   r'.*?(?=<div class="jp-Cell |</body>)', re.S)


def test_the_cuda_of_kernel_exercises_is_highlighted_as_cuda(site):
    """In every kernel exercise's cell the CUDA text carries the CUDA lexer's token classes (kt: a
    type such as float; cp: a preprocessor line), not one Python string; the Python around it stays
    Python."""
    for lesson in REGISTRY:
        if not lesson.kernel_exercise:
            continue
        html = (site / f"{lesson.stem}.html").read_text()
        cell = _CELL.search(html)
        assert cell, f"{lesson.stem}: no cell tagged kernel-exercise on the page"
        cell = cell.group(0)
        assert '<span class="kt">' in cell, f"{lesson.stem}: its CUDA is not highlighted as CUDA"
        assert '<span class="o">=</span>' in cell, f"{lesson.stem}: its Python is not highlighted"
    first = (site / "02_naive.html").read_text()
    cell = _CELL.search(first).group(0)
    assert '<span class="cp">#include</span>' in cell
    assert '<span class="kr">__global__</span>' in cell


# every image of the page, but badges the prose links from the web (Colab, Binder): those need the
# network
_IMAGES_JS = """() => [...document.images].filter(i => !/^https?:/.test(i.src))
  .map(i => ({src: i.src.slice(0, 40), ok: i.complete && i.naturalWidth > 0}))"""
_HIGHLIGHT_JS = """() => {
  const code = document.querySelectorAll('.jp-InputArea .highlight, .jp-InputArea pre');
  const tokens = [...document.querySelectorAll('.jp-InputArea .highlight span[class]')];
  const body = getComputedStyle(document.body).color;
  const colours = new Set(tokens.slice(0, 400).map(s => getComputedStyle(s).color));
  colours.delete(body);
  return {blocks: code.length, tokens: tokens.length, colours: colours.size};
}"""


@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists(),
                    reason=f"{CHROMIUM} is missing (apt-get install chromium; .ci/run installs it)")
@pytest.mark.skipif(_PLAYWRIGHT is not None, reason=_PLAYWRIGHT or "")
def test_site_in_browser(site, tmp_path):
    from playwright.sync_api import sync_playwright

    shot_lesson = SHOT_LESSON if SHOT_LESSON in LESSONS else LESSONS[0]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    blocked: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
                                    timeout=60_000)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 1000})
            context.set_default_timeout(30_000)

            def offline(route):  # the site must read without the network
                blocked.append(route.request.url[:80])
                route.abort()

            context.route(re.compile(r"^https?://"), offline)
            page = context.new_page()
            index_url = (site / "index.html").resolve().as_uri()
            page.goto(index_url)
            page.locator("table a[href$='.html']").first.wait_for()
            page.screenshot(path=str(SCREENSHOTS / "site-index.png"), full_page=True)
            links = page.eval_on_selector_all("table tr td:first-child a",
                                              "as => as.map(a => a.href)")
            assert [Path(urlparse(u).path).stem for u in links] == LESSONS, links

            for link in links:
                name = Path(urlparse(link).path).stem
                page.goto(index_url)
                # follow the index's link, as a reader does
                page.click(f"table a[href='{name}.html']")
                page.wait_for_url(re.compile(rf"{re.escape(name)}\.html$"))
                page.wait_for_load_state("load")
                images = page.evaluate(_IMAGES_JS)
                broken = [i["src"] for i in images if not i["ok"]]
                assert not broken, f"{name}: broken images {broken}"
                if _has_png(NOTEBOOKS / f"{name}.ipynb"):
                    assert images, f"{name}: the notebook saved figures, the page shows none"
                hl = page.evaluate(_HIGHLIGHT_JS)
                assert hl["blocks"] > 0 and hl["tokens"] > 0 and hl["colours"] >= 2, \
                    f"{name}: code not highlighted {hl}"
                nav = page.locator("nav.site-nav").first
                assert nav.locator("a[href='index.html']").count() == 1, name
                kernel_links = nav.locator("a.kernel")
                for k in range(kernel_links.count()):
                    href = kernel_links.nth(k).get_attribute("href")
                    assert (site / href).is_file(), f"{name}: {href}"
                i = LESSONS.index(name)
                if i + 1 < len(LESSONS):
                    assert (nav.locator("a[rel='next']").get_attribute("href")
                            == f"{LESSONS[i + 1]}.html")
                print(f"{name}: {len(images)} images, all loaded; {hl['tokens']} highlighted "
                      f"tokens; {kernel_links.count()} kernel link(s)")
                if name == shot_lesson:
                    first = page.locator(".jp-OutputArea-output img").first
                    if first.count():
                        # the first figure at the bottom of the window, the code that drew it above
                        first.evaluate("img => img.scrollIntoView({block: 'end'})")
                        page.evaluate("() => window.scrollBy(0, 24)")
                    page.wait_for_timeout(300)
                    page.screenshot(path=str(SCREENSHOTS / "site-lesson.png"))

            # a kernel's page from a lesson's bar: highlighted CUDA
            page.goto((site / "kernels" / "v1_naive.cu.html").resolve().as_uri())
            assert page.locator(".highlight span.kt, .highlight span.k").count() > 0
        finally:
            browser.close()
    print(f"requests to the network refused (MathJax, the widget manager): {len(blocked)}")
    print(f"screenshots: {SCREENSHOTS / 'site-index.png'}, {SCREENSHOTS / 'site-lesson.png'}")


def test_the_index_opens_each_lesson_in_colab_from_the_one_address(site):
    from rmsnorm_lessons.core import project

    index = (site / "index.html").read_text()
    for lesson in REGISTRY:
        assert f'href="{project.colab_url(lesson.stem)}"' in index, lesson.stem
        assert "/student/" in project.colab_url(lesson.stem)
        instructor = project.file_url(f"notebooks/{lesson.notebook}")
        assert f'<a href="{instructor}">instructor\'s edition</a>' in index, lesson.stem
    assert f'href="{project.binder_url()}"' in index and "labpath=student/" in index
    for url in re.findall(r'href="(https://(?:colab\.research\.google\.com|mybinder\.org)[^"]+)"',
                          index):
        assert project.repository_path() in url, url


def test_site_has_the_workshop_pages_and_values_yaml_on_paper(site):
    """The Kubernetes page is in the site and says it is on paper; hub/values.yaml is a Zero to
    JupyterHub configuration with a GPU profile and the same seeding (parsed here, never
    deployed)."""
    yaml = pytest.importorskip("yaml")
    page = (site / "kubernetes.html").read_text()
    assert "on paper" in page and "values.yaml" in page
    assert "MIG" in (site / "gpu-sharing.html").read_text()
    values = yaml.safe_load((ROOT / "hub" / "values.yaml").read_text())
    single = values["singleuser"]
    limits = [p["kubespawner_override"].get("extra_resource_limits", {})
              for p in single["profileList"]]
    assert {"nvidia.com/gpu": "1"} in limits
    assert "rmsnorm-lessons" in " ".join(single["lifecycleHooks"]["postStart"]["exec"]["command"])
    assert values["cull"]["enabled"] is True
    assert "student" in (ROOT / "hub" / "Dockerfile").read_text()


def test_the_card_page_keeps_every_anchor_and_lesson_links_follow_it():
    """Without a build: the card's Markdown renders with each ``<a id>`` the linker may use, and a
    lesson page's ``reference_card.md#x`` becomes ``reference_card.html#x``."""
    pytest.importorskip("mistune")
    tool = _tool()
    page = tool._markdown(tool.CARD.read_text())
    ids = set(re.findall(r'<a id="([\w-]+)"></a>', page))
    assert ids == set(re.findall(r'<a id="([\w-]+)"></a>', tool.CARD.read_text()))
    assert {"sm", "warp", "lane", "block", "occupancy", "coalescing", "bank", "sass"} <= ids
    html = ('<a href="reference_card.md#warp">warp</a> <a href="reference_card.md">card</a> '
            '<a href="other.md#warp">other</a>')
    assert tool.card_links(html) == ('<a href="reference_card.html#warp">warp</a> '
                                     '<a href="reference_card.html">card</a> '
                                     '<a href="other.md#warp">other</a>')


def test_site_has_the_card_and_the_two_day_plan(site):
    from rmsnorm_lessons.course import schedule

    card = site / "reference_card.html"
    assert card.is_file()
    ids = set(re.findall(r'id="([\w-]+)"', card.read_text()))
    index = (site / "index.html").read_text()
    assert 'href="reference_card.html"' in index
    for page in sorted(site.rglob("*.html")):
        text = page.read_text()
        assert "reference_card.html" in text, f"{page.name}: no link to the card in its bar"
        for anchor in re.findall(r'href="(?:\.\./)*reference_card\.html#([\w-]+)"', text):
            assert anchor in ids, f"{page.name} links to #{anchor}, which the card lacks"
    words = _page_text(site / "index.html")
    for day in schedule.two_day_plan():
        assert f"Day {day.number}, {schedule.clock(day.start)} to {schedule.clock(day.end)}" \
            in words
        for slot in day.slots:
            needs = ", ".join(p[:2] for p in slot.lesson.prerequisites) or "-"
            row = re.search(rf'<td>{schedule.clock(slot.start)}-{schedule.clock(slot.end)}</td>\s*'
                            rf'<td><a href="{slot.lesson.stem}\.html">.*?</td>\s*'
                            rf'<td[^>]*>{slot.lesson.minutes}</td>\s*<td>{re.escape(needs)}</td>',
                            index, re.S)
            assert row, f"the index's plan has no row for {slot.lesson.stem}"


def test_the_student_site_says_a_finished_kernel_is_the_reference(site):
    tool = _tool()
    lesson = (site / "02_naive.html").read_text()
    assert ('<span class="kernels">reference kernels, to open after your attempt: '
            f'<a class="kernel" href="{tool.KDIR}/v1_naive.cu.html">') in lesson
    assert tool.REFERENCE_NOTE in (site / "kernels" / "v1_naive.cu.html").read_text()
    assert tool.REFERENCE_NOTE in (site / "kernels" / "index.html").read_text()
    index = (site / "index.html").read_text()
    assert f'<code>v1_naive</code></a> ({tool.REFERENCE})' in index
    page = tool.render_kernel(ROOT / "kernels" / "v1_naive.cu", LESSONS, ["02_naive"],
                              instructor=True)
    assert tool.REFERENCE_NOTE not in page and "reference kernels" not in tool._nav(
        LESSONS, "02_naive", ["v1_naive.cu"], instructor=True)


def test_the_two_editions_go_to_two_folders(monkeypatch):
    tool = _tool()
    built = []
    monkeypatch.setattr(tool, "build", lambda out, instructor=False: built.append(
        (out, instructor)) or [])
    assert tool.main([]) == 0 and tool.main(["--instructor"]) == 0
    assert built == [(tool.SITE / "student", False), (tool.SITE / "instructor", True)]
    assert tool.SITE == ROOT / "build" / "site"
