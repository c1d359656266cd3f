"""A lesson in a real browser: JupyterLab on localhost, driven by Debian's Chromium through
Playwright.

What a learner does: start the server as the README says (``make lab ARGS=...``: the student
edition, in the git-ignored work/student/), open the lesson, Run > Run All Cells, wait for the
kernel to go idle, save. The test then asserts that no cell shows an error, that a figure (an
``<img>`` in an output area) and an ipywidget rendered, that ``git status`` is still clean (opening
and saving a lesson changes no tracked file), and saves a screenshot under pytest's tmp dir and as
``build/screenshots/<lesson>.png``.

``make lab`` runs in a temporary git repository holding this checkout's files (tests/_checkout.py):
this repository and its work/ are never written to, but for the screenshot under build/. The
server has its own config, data and runtime folders and is always shut down. Skipped where
/usr/bin/chromium or the ``playwright`` package is missing.

Which lesson: the first of ``PREFERRED`` that exists and has, outside gpu-tagged cells, both a plot
and a widget (``RMSNORM_BROWSER_LESSON=03_warp_per_row`` picks one, ``RMSNORM_BROWSER_LESSON=all``
takes every lesson that qualifies). While no lesson has both, a small generated notebook with a
figure and a widget stands in, and the test id says so (``fallback-smoke``).
"""
from __future__ import annotations

import json
import re
import shutil
import urllib.request
from pathlib import Path

import pytest

# test_site, test_hub and _hub_support import some of these from here
from _browser_support import (  # noqa: F401
    _ERRORS_JS,
    _PLAYWRIGHT,
    CHROMIUM,
    CHROMIUM_ARGS,
    PAGE_LOAD_S,
    RUN_ALL_S,
    SCREENSHOTS,
    SMOKE,
    Lab,
    _failure_shot,
    _finished,
    _free_port,
    _kernel_ready,
    _lessons,
    _nudge_slider,
    _run_all,
    _saved_errors,
    _smoke_notebook,
    _wait,
)
from _checkout import copy_checkout, status

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(),
                       reason=f"{CHROMIUM} is missing (apt-get install chromium; .ci/run installs "
                              f"it)"),
    pytest.mark.skipif(_PLAYWRIGHT is not None, reason=_PLAYWRIGHT or ""),
    pytest.mark.skipif(shutil.which("make") is None,
                       reason="make is missing: the server starts with `make lab`"),
]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    work = tmp_path_factory.mktemp("jupyterlab")
    repo = copy_checkout(work / "repo")
    # in the lab's folder before `make lab` fills it (it writes only the lessons missing there)
    (repo / "work" / "student").mkdir(parents=True)
    _smoke_notebook(repo / "work" / "student" / f"{SMOKE}.ipynb")
    server = Lab(repo, work)
    try:
        server.wait_ready()
        _wait(server.printed_url, 10, "the server to print its URL with the token")
        yield server
    finally:
        server.stop()




@pytest.mark.parametrize("lesson", _lessons())
def test_lesson_in_browser(lab, lesson, tmp_path):
    from playwright.sync_api import sync_playwright

    if lesson.startswith("missing:"):
        pytest.fail(f"RMSNORM_BROWSER_LESSON names no notebook in notebooks/: {lesson[8:]}")
    if lesson == SMOKE:
        print("no lesson in notebooks/ has both a figure and a widget yet: the generated smoke "
              "notebook stands in")
    nb_path = lab.root / f"{lesson}.ipynb"
    assert nb_path.is_file(), nb_path
    shot = tmp_path / f"{lesson}.png"
    console_errors: list[str] = []

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            user_data_dir=str(tmp_path / "chromium-profile"), executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 1100}, timeout=60_000)
        try:
            context.set_default_timeout(30_000)
            page = context.pages[0] if context.pages else context.new_page()
            page.on("pageerror", lambda exc: console_errors.append(str(exc)))
            page.goto(f"{lab.url}/lab/tree/{lesson}.ipynb?token={lab.token}", timeout=PAGE_LOAD_S
                      * 1000)
            # the notebook is open and its kernel has started
            page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first.wait_for(
                timeout=PAGE_LOAD_S * 1000)
            _wait(lambda: _kernel_ready(page), PAGE_LOAD_S, "the kernel to start")
            page.locator(".jp-NotebookPanel .jp-Notebook").first.click(position={"x": 5, "y": 5})
            _run_all(page)
            seen: dict = {}
            try:
                try:
                    _wait(lambda: _finished(page, seen) or seen.get("started"), 60,
                          "Run All Cells to start")
                except TimeoutError:  # the click went nowhere (a menu that did not open): once more
                    print("Run All Cells did not start within 60 s: choosing it again")
                    _run_all(page)
                state = _wait(lambda: _finished(page, seen), RUN_ALL_S, "Run All Cells to finish",
                              interval=1.0)
            except TimeoutError:
                _failure_shot(page, shot, lesson)
                raise
            errors = page.evaluate(_ERRORS_JS)
            # the kernel says idle and every code cell has its number
            if not all(re.match(r"\[\d+\]", p) for p in state["prompts"]):
                _failure_shot(page, shot, lesson)
                pytest.fail(f"not every cell ran: prompts {state['prompts']}; errors shown: "
                            f"{errors}")
            images = page.locator(".jp-OutputArea-output img")
            widgets = page.locator(".jp-OutputArea-output .jupyter-widgets, .jp-OutputArea-output "
                                   "[class*='widget-']")
            _wait(lambda: widgets.count() > 0, 30, "a widget to render")
            widget = widgets.first
            area = page.locator(".jp-CodeCell:has(.jp-OutputArea-output .jupyter-widgets) "
                                ".jp-Cell-outputWrapper").first
            nudge = _nudge_slider(page, area) if area.count() else None
            # command mode again
            page.locator(".jp-NotebookPanel .jp-Notebook").first.press("Escape")
            page.keyboard.press("Control+b")  # fold the file browser away: more room for the lesson
            page.wait_for_timeout(300)
            widget.scroll_into_view_if_needed()
            page.wait_for_timeout(500)
            page.screenshot(path=str(shot))

            # save (Ctrl+S) and read the outputs back from the copy on disk
            before = nb_path.stat().st_mtime_ns
            page.keyboard.press("Control+s")
            _wait(lambda: nb_path.stat().st_mtime_ns != before, 30, "the notebook to be saved")
            page.wait_for_timeout(500)  # the write may still be under way

            changed = status(lab.repo)
            assert changed == "", f"opening and saving {lesson} changed tracked files:\n{changed}"
            assert not errors, f"cells show errors:\n" + "\n---\n".join(errors)
            assert not _saved_errors(nb_path), _saved_errors(nb_path)
            assert images.count() > 0, "no figure (<img> in an output area) rendered"
            assert images.first.evaluate("img => img.naturalWidth > 0"), \
                "the figure's image is empty"
            box = widget.bounding_box()
            assert box and box["width"] > 0 and box["height"] > 0, "the widget has no size"
            assert nudge is None, nudge
            assert not console_errors, f"JavaScript errors on the page: {console_errors}"
        finally:
            context.close()

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, SCREENSHOTS / f"{lesson}.png")
    (SCREENSHOTS / f"{lesson}-failed.png").unlink(missing_ok=True)
    print(f"screenshot: {shot} and {SCREENSHOTS / f'{lesson}.png'}")


def test_lab_lists_the_lessons_only(lab):
    """The file browser's root (the contents API it reads): the lessons, what they link to (the
    reference card) and the smoke notebook, nothing else (no conftest.py, no tracked files of the
    repository)."""
    with urllib.request.urlopen(f"{lab.url}/api/contents?token={lab.token}", timeout=30) as r:
        names = sorted(item["name"] for item in json.load(r)["content"])
    from rmsnorm_lessons.course import registry, student

    shown = [n for n in names if n != f"{SMOKE}.ipynb"]
    assert shown == sorted([l.notebook for l in registry.LESSONS] + list(student.COMPANIONS)), names
