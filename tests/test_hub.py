"""The workshop hub for real: ``make hub`` on a free port; two learners, an instructor, Chromium.

What it does, as an instructor and two learners would:

1. creates nothing by hand: ``make hub HUB_ARGS=...`` builds or reuses the learner environment,
   writes the student edition and the password sheet, starts JupyterHub and its proxy,
   and the hub creates the three local accounts (two learners, one instructor) with fresh names
   (``hubt<hex>a``, ``...b``, ``...i``); the instructor's password is generated and printed once;
2. before the instructor ever logs in, someone else tries the instructor's name with guesses (the
   name, a learner's password, ...): refused; then logs each learner in, in their own browser
   context (own cookies), with the password on the sheet the hub wrote;
3. checks on disk that each home is private (0700) and holds the student edition, owned by the
   learner, equal to the one the hub wrote (solutions stripped);
4. opens lesson 01 in each JupyterLab and runs its first two code cells (CPU only: the set-up line
   and the NumPy forward pass), which must print the forward pass's rstd;
5. writes a file from learner 1's notebook and checks, from learner 2's notebook, the browser and
   the shell, that learner 2 can neither read it nor list learner 1's home;
6. runs a check in each learner's notebook (lesson 01's, a wrong answer), which records its verdict
   in the learner's home; the instructor logs in with the printed password and opens the dashboard
   (``/services/dashboard/``): both learners' rows, NOT YET; learner 1 then passes the check and the
   open page shows PASS without a reload; learner 2 gets 403 at the dashboard;
7. saves build/screenshots/hub-learner1.png, hub-learner2.png and hub-dashboard.png;
8. always stops the hub (which stops the learners' servers and the proxy), ends any process left
   running as the three accounts (by process id), and deletes the accounts and their homes with
   ``--remove-accounts`` (the hub recorded creating them).

Skipped, with the reason, where it cannot run: not root, no useradd/userdel, no Chromium or
Playwright, no configurable-http-proxy and no npm to install it, no world-runnable Python for the
learners.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from _hub_support import HUB, HUB_PYTHON, ROOT, Hub, _pids_of, _user_exists
from test_browser import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS, _kernel_ready, _wait

PAGE_S = 120

try:
    import playwright.sync_api  # noqa: F401

    _PLAYWRIGHT = None
except ImportError as exc:  # pragma: no cover - depends on the machine
    _PLAYWRIGHT = f"the playwright package is not installed ({exc})"


def _load_run():
    import importlib.util

    spec = importlib.util.spec_from_file_location("hub_run", HUB / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _proxy_reason() -> str | None:
    run = _load_run()
    if run.find_proxy(install=False) or shutil.which("npm"):
        return None
    return "configurable-http-proxy is missing and so is npm to install it (.ci/run installs npm)"


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="the hub must run as root: it creates local accounts and starts "
                              "servers as them"),
    pytest.mark.skipif(not (shutil.which("useradd") and shutil.which("userdel")),
                       reason="useradd/userdel missing"),
    pytest.mark.skipif(not Path(CHROMIUM).exists(),
                       reason=f"{CHROMIUM} is missing (apt-get install chromium; .ci/run installs "
                              f"it)"),
    pytest.mark.skipif(_PLAYWRIGHT is not None, reason=_PLAYWRIGHT or ""),
    pytest.mark.skipif(not os.access(HUB_PYTHON, os.X_OK),
                       reason=f"{HUB_PYTHON} is missing: the learners need a Python every user can "
                              f"run"),
    pytest.mark.skipif(shutil.which("make") is None,
                       reason="make is missing: the hub starts with `make hub`"),
    pytest.mark.skipif(_proxy_reason() is not None, reason=_proxy_reason() or ""),
]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    work = tmp_path_factory.mktemp("hub")
    server = Hub(work)
    try:
        server.build_env()
        server.start()
        yield server
    finally:
        server.stop()
        left = [n for n in server.names if _user_exists(n) or Path(f"/home/{n}").exists()]
        assert not left, f"accounts or homes left behind: {left}"
        assert not server.left_running, (f"processes left running after the hub stopped: "
                                         f"{server.left_running}")
        assert server.removal is not None and server.removal.returncode == 0, server.removal
        for name in server.names:
            assert f"removed the account {name}" in server.removal.stdout, server.removal.stdout
        print(f"hub log: {server.log_path}")


# --------------------------------------------------------------------------------------------------
# the browser side


def _submit_login(page, hub: Hub, name: str, password: str, url: str | None = None) -> None:
    page.goto(url or f"{hub.url}hub/login", timeout=PAGE_S * 1000)
    page.fill("#username_input", name)
    page.fill("#password_input", password)
    with page.expect_navigation(timeout=PAGE_S * 1000):
        page.click("#login_submit")


def _login(page, hub: Hub, name: str) -> None:
    _submit_login(page, hub, name, hub.password(name))
    # the hub spawns the server and redirects into JupyterLab
    page.wait_for_url(re.compile(rf"/user/{name}/lab"), timeout=PAGE_S * 1000)
    page.locator(".jp-DirListing-item:has-text('01_rmsnorm_math.ipynb')").first.wait_for(
        timeout=PAGE_S * 1000)


def _open_lesson(page, hub: Hub, name: str) -> None:
    page.goto(f"{hub.url}user/{name}/lab/tree/rmsnorm-lessons/01_rmsnorm_math.ipynb",
              timeout=PAGE_S * 1000)
    page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first.wait_for(timeout=PAGE_S * 1000)
    _wait(lambda: _kernel_ready(page), PAGE_S, "the kernel to start")


def _cell_output(cell) -> str:
    return (cell.locator(".jp-OutputArea").inner_text() if cell.locator(".jp-OutputArea").count()
            else "")


def _run_cell(page, cell, what: str) -> str:
    """Run one code cell (click into it, Shift+Enter) and return its output's text once it has a
    number."""
    cell.locator(".cm-content").first.click()
    page.keyboard.press("Shift+Enter")
    prompt = cell.locator(".jp-InputArea-prompt")
    _wait(lambda: re.match(r"\[\d+\]", prompt.inner_text().strip()), 120, f"{what} to run")
    out = _cell_output(cell)
    assert "Traceback" not in out and "Error" not in out.split("\n")[0], f"{what}: {out[:600]}"
    return out


def _new_cell(page, code: str, what: str, marker: str) -> str:
    """A new code cell at the end of the notebook with ``code`` (which contains ``marker``), run;
    its output."""
    cells = page.locator(".jp-Notebook .jp-CodeCell")
    cells.last.locator(".cm-content").first.click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")  # a cell below, in command mode
    page.keyboard.press("Enter")  # edit it
    page.keyboard.insert_text(code)  # as text: no auto-closed brackets or auto-indent
    page.keyboard.press("Shift+Enter")
    cell = page.locator(".jp-Notebook .jp-CodeCell").filter(has_text=marker).last
    _wait(lambda: re.match(r"\[\d+\]", cell.locator(".jp-InputArea-prompt").inner_text().strip()),
          60, what)
    return _cell_output(cell)


def _student_edition_seeded(hub: Hub, name: str) -> None:
    import pwd

    user = pwd.getpwnam(name)
    home = Path(user.pw_dir)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700, f"{home} is {oct(home.stat().st_mode)}"
    seeded = home / "rmsnorm-lessons"
    generated = ROOT / "build" / "hub" / "student"  # run.py --student's default
    want = sorted(p.name for p in generated.glob("*.ipynb"))
    assert want == sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")), want
    assert sorted(p.name for p in seeded.glob("*.ipynb")) == want
    for p in [seeded, *seeded.iterdir()]:
        assert p.stat().st_uid == user.pw_uid, f"{p} is not owned by {name}"
    for n in want:
        assert json.loads((seeded / n).read_text()) == json.loads((generated / n).read_text()), n
        assert "BEGIN SOLUTION" not in (seeded / n).read_text(), f"{n}: a solution was left in"
    instructor = "".join((ROOT / "notebooks" / n).read_text() for n in want)
    if "BEGIN SOLUTION" in instructor:
        assert "".join((seeded / n).read_text() for n in want) != instructor


def _takeover_refused(browser, hub: Hub) -> None:
    """Before the instructor's first login, someone else types the instructor's name: every guess is
    refused, and no session comes of it (no first-use password to claim the account with)."""
    context = browser.new_context()
    try:
        page = context.new_page()
        learner_pw = hub.password(hub.learners[0])
        for name, guess in [(hub.instructor, hub.instructor), (hub.instructor, "instructor"),
                            (hub.instructor, "password1234"), (hub.instructor, learner_pw),
                            (hub.learners[1], learner_pw)]:
            _submit_login(page, hub, name, guess)
            assert "/hub/login" in page.url, f"{name} with {guess!r} got in: {page.url}"
            assert context.request.get(f"{hub.url}hub/api/user").status == 403
        assert "refused a login as" in hub.log_text()
    finally:
        context.close()


CHECK_WRONG = ("from rmsnorm_lessons.course.verdict import lesson01\n"
               "lesson01.check_term2(lambda *a: None)  # wrong")
CHECK_RIGHT = ("def t2_ok(dout, inp, weight, rstd):\n"
               "    norm = inp * rstd[:, None]\n"
               "    mean = np.mean(weight * dout * norm, axis=1, keepdims=True)\n"
               "    return -rstd[:, None] * norm * mean\n\n"
               "lesson01.check_term2(t2_ok)")


def _verdicts_on_disk(name: str) -> list[dict]:
    path = Path(f"/home/{name}/.rmsnorm-lessons/verdicts.jsonl")
    assert path.stat().st_uid == Path(f"/home/{name}").stat().st_uid
    return [json.loads(line) for line in path.read_text().splitlines()]


def _room_view(browser, hub: Hub, pages: dict):
    """Each learner runs a check; the instructor's dashboard shows both and follows along; a learner
    gets 403 there. Returns the instructor's dashboard page."""
    one, two = hub.learners
    for name in hub.learners:
        out = _new_cell(pages[name], CHECK_WRONG, f"{name}: a check", "# wrong")
        assert "NOT YET" in out, out
        assert [(v["exercise"], v["status"]) for v in _verdicts_on_disk(name)] == \
            [("lesson01.check_term2", "NOT YET")]
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    _submit_login(page, hub, hub.instructor, hub.password(hub.instructor),
                  f"{hub.url}services/dashboard/")
    page.locator("#grid").wait_for(timeout=PAGE_S * 1000)
    assert "/services/dashboard/" in page.url, page.url
    for name in hub.learners:
        row = page.locator(f"#grid tr[data-learner='{name}']")
        assert row.count() == 1 and row.locator("td.not-yet").count() == 1, row.inner_html()
        assert "not tried" in row.inner_text()
    assert "no kernel timed yet" in page.locator("#leaderboard").inner_text()
    # learner 1 passes it; the open page shows it within a few refreshes, with no reload
    out = _new_cell(pages[one], CHECK_RIGHT, f"{one}: the check, right", "t2_ok")
    assert "PASS" in out, out
    page.locator(f"#grid tr[data-learner='{one}'] td.pass").wait_for(timeout=30_000)
    assert page.locator(f"#grid tr[data-learner='{two}'] td.pass").count() == 0
    # a learner is not let in
    resp = pages[two].context.request.get(f"{hub.url}services/dashboard/")
    assert resp.status == 403 and "data-learner" not in resp.text(), resp.status
    resp = pages[two].context.request.get(f"{hub.url}services/dashboard/api/tables")
    assert resp.status == 403 and "data-learner" not in resp.text(), resp.status
    return page


def test_hub_two_learners(hub):
    from playwright.sync_api import sync_playwright

    one, two = hub.learners
    secret = f"secret-{secrets.token_hex(4)}.txt"
    text = f"only {one} reads this"
    shots = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
                                    timeout=60_000)
        try:
            _takeover_refused(browser, hub)
            pages = {}
            for name in hub.learners:
                # own cookies
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                context.set_default_timeout(30_000)
                page = context.new_page()
                _login(page, hub, name)
                _student_edition_seeded(hub, name)
                _open_lesson(page, hub, name)
                cells = page.locator(".jp-Notebook .jp-CodeCell")
                out0 = _run_cell(page, cells.nth(0), f"{name}: lesson 01's set-up cell")
                out1 = _run_cell(page, cells.nth(1), f"{name}: lesson 01's forward pass")
                assert "rstd per row" in out1 and "mean(norm**2) per row" in out1, out1
                print(f"{name}: {out0.strip()[:120]!r} / {out1.strip().splitlines()[0]!r}")
                pages[name] = page

            # learner 1 writes a file in their home, from their notebook
            out = _new_cell(pages[one], "import pathlib\n"
                                        f"p = pathlib.Path.home() / {secret!r}\n"
                                        f"p.write_text({text!r})\n"
                                        "print('wrote', p, 'owner', p.owner())",
                            f"{one}: writing a file", secret)
            assert f"wrote /home/{one}/{secret} owner {one}" in out, out
            assert (Path(f"/home/{one}") / secret).read_text() == text
            # learner 2 cannot read it, nor list learner 1's home, from their notebook ...
            out = _new_cell(pages[two], "import getpass, os\n"
                                        "print('I am', getpass.getuser())\n"
                                        f"other = '/home/{one}/{secret}'\n"
                                        "try:\n"
                                        "    print('read:', open(other).read())\n"
                                        "except OSError as e:\n"
                                        "    print('read refused:', type(e).__name__)\n"
                                        "try:\n"
                                        f"    print('listed:', os.listdir('/home/{one}'))\n"
                                        "except OSError as e:\n"
                                        "    print('listing refused:', type(e).__name__)",
                            f"{two}: reading {one}'s file", secret)
            assert f"I am {two}" in out, out
            assert ("read refused: PermissionError" in out
                    and "listing refused: PermissionError" in out), out
            assert text not in out
            # ... nor through learner 1's server, with learner 2's cookies
            resp = pages[two].context.request.get(f"{hub.url}user/{one}/files/{secret}")
            assert resp.status == 403 and text not in resp.text(), \
                f"{two} asked for {one}'s file through the hub: {resp.status}"
            # ... nor from a shell as learner 2
            r = subprocess.run(["runuser", "-u", two, "--", "cat", f"/home/{one}/{secret}"],
                               capture_output=True, text=True)
            assert r.returncode != 0 and text not in r.stdout, r

            dashboard = _room_view(browser, hub, pages)
            shots["dashboard"] = SCREENSHOTS / "hub-dashboard.png"
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            dashboard.screenshot(path=str(shots["dashboard"]), full_page=True)

            for i, name in enumerate(hub.learners, 1):
                page = pages[name]
                page.keyboard.press("Escape")
                page.keyboard.press("Control+b")  # fold the file browser away
                page.wait_for_timeout(300)
                page.locator(".jp-Notebook .jp-CodeCell").last.scroll_into_view_if_needed()
                page.wait_for_timeout(500)
                shots[name] = SCREENSHOTS / f"hub-learner{i}.png"
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(shots[name]))
        finally:
            browser.close()

    # what the hub enforces on each learner's server process (LocalProcessSpawner +
    # hub/jupyterhub_config.py)
    for name in hub.learners:
        pids = [pid for pid in _pids_of(name)
                if "jupyterhub-singleuser"
                in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")]
        assert pids, f"no jupyterhub-singleuser process runs as {name}"
        limits = Path(f"/proc/{pids[0]}/limits").read_text()
        assert re.search(r"Max processes\s+4096\s+4096", limits), limits
    log = hub.log_text()
    assert "Starting service 'idle-culler'" in log, "the idle culler was not started"
    assert "Service idle-culler exited" not in log, hub.log_tail()
    print("screenshots:", ", ".join(str(s) for s in shots.values()))
