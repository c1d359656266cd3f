"""The workshop hub for real: ``make hub`` on a free port; two learners, an instructor, Chromium.

What it does, as an instructor and two learners would:

1. creates nothing by hand: ``make hub HUB_ARGS=...`` builds or reuses the learner environment,
   writes the student edition and the password sheet, makes the room's self-signed certificate,
   starts JupyterHub and its proxy (TLS, each learner's server on its own origin NAME.localhost,
   each learner's memory and CPU in a cgroup of their own: 1G and one core here), and the hub
   creates the three local accounts (two learners, one instructor) with fresh names
   (``hubt<hex>a``, ``...b``, ``...i``); the instructor's password is generated and printed once.
   Chromium trusts the room's certificate by its key alone (``--ignore-certificate-errors-spki-
   list``), as a learner who compared the fingerprint would;
2. before the instructor ever logs in, someone else tries the instructor's name with guesses (the
   name, a learner's password, ...): refused; then logs each learner in, in their own browser
   context (own cookies), with the password on the sheet the hub wrote: each lands in JupyterLab
   at https://NAME.localhost:PORT/user/NAME/;
3. checks on disk that each home is private (0700) and holds the student edition, owned by the
   learner, equal to the one the hub wrote (solutions stripped);
4. opens lesson 01 in each JupyterLab and runs its first two code cells (CPU only: the set-up line
   and the NumPy forward pass), which must print the forward pass's rstd;
5. writes a file from learner 1's notebook and checks, from learner 2's notebook, the browser and
   the shell, that learner 2 can neither read it nor list learner 1's home;
6. runs a check in each learner's notebook (lesson 01's, a wrong answer), which records its verdict
   in the learner's home; the instructor logs in with the printed password, with no ?next=, and
   lands on the dashboard (its own origin): both learners' rows, NOT YET; learner 1 then passes the
   check and the open page shows PASS without a reload; learner 2 gets 403 at the dashboard;
7. saves build/screenshots/hub-learner1.png, hub-learner2.png and hub-dashboard.png;
8. memory: learner 1 runs a cell that allocates without bound; the OOM killer ends learner 1's
   kernel inside learner 1's group (JupyterLab says so, the server answers on, a restarted kernel
   runs), while learner 2 runs cells as usual (build/screenshots/hub-memory-limit.png);
9. origins: the instructor opens a page of learner 1's server (the hub asks first); a script
   there reads its own origin but neither the hub's pages nor the dashboard;
10. always stops the hub (which stops the learners' servers and the proxy), ends any process left
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
from _hub_support import (HUB, HUB_PYTHON, PAGE_S, ROOT, Hub, _limits_of, _login, _new_cell,
                          _ooms, _open_lesson, _pids_of, _run_cell, _start_cell, _submit_login,
                          _user_exists, _verdicts_on_disk, _visit, _status)
from rmsnorm_lessons.course import registry
from rmsnorm_lessons.workshop import standings
from test_browser import CHROMIUM, SCREENSHOTS

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
    pytest.mark.skipif(shutil.which("openssl") is None,
                       reason="openssl is missing: it makes the room's certificate"),
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
            assert _status(page, f"{hub.url}hub/api/user") == 403
        assert "refused a login as" in hub.log_text()
    finally:
        context.close()


CHECK_WRONG = ("from rmsnorm_lessons.lessons import lesson01\n"
               "lesson01.check_term2(lambda *a: None)  # wrong")
CHECK_RIGHT = ("def t2_ok(dout, inp, weight, rstd):\n"
               "    norm = inp * rstd[:, None]\n"
               "    mean = np.mean(weight * dout * norm, axis=1, keepdims=True)\n"
               "    return -rstd[:, None] * norm * mean\n\n"
               "lesson01.check_term2(t2_ok)")


L01 = registry.by_stem("01_rmsnorm_math").exercises
FORGE = """import json, pathlib, time
p = pathlib.Path.home() / ".rmsnorm-lessons" / "verdicts.jsonl"
now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
fake = [dict(time=now, lesson="x", exercise=f"lesson{n:02d}.check_forged{k}", status="PASS",
             message="<img src=x onerror=alert(1)>") for n in range(14) for k in range(8)]
fake += [dict(time=now, lesson="11_v7_tuning", exercise="tuning.check_tuning", status="PASS",
              message="fast", score=s, lease=lease) for s, lease in ((1e308, None), (99.0, "beef"))]
with p.open("a") as f:
    f.write("".join(json.dumps(x) + chr(10) for x in fake))
print("forged", len(fake))"""


def _cell_of(page, name: str, lesson: str, exercise: str = ""):
    row = f"#grid tr[data-learner='{name}']"
    return page.locator(f"{row} td.ex.l-{lesson}[title]" if exercise else
                        f"{row} td.lesson.l-{lesson}")


def _room_view(browser, hub: Hub, pages: dict):
    """Each learner runs a check; the instructor's login lands on the dashboard, which groups
    both as stuck on it and follows along; a lesson's columns open; a learner's forged lines are
    counted apart; the instructor's own file is not a learner's; a learner gets 403 there.
    Returns the instructor's dashboard page."""
    one, two = hub.learners
    for name in hub.learners:
        out = _new_cell(pages[name], CHECK_WRONG, f"{name}: a check", "# wrong")
        assert "NOT YET" in out, out
        assert [(v["exercise"], v["status"]) for v in _verdicts_on_disk(name)] == \
            [("lesson01.check_term2", "NOT YET")]
    # the instructor's own verdicts file (as if they had tried a check): never a learner's row
    subprocess.run(["runuser", "-u", hub.instructor, "--", "sh", "-c",
                    "mkdir -p ~/.rmsnorm-lessons && echo '" + json.dumps(
                        {"time": "2026-12-04T10:00:00Z", "lesson": "00_setup",
                         "exercise": "lesson00.check_grid", "status": "PASS", "message": "m"})
                    + "' >> ~/.rmsnorm-lessons/verdicts.jsonl"], check=True)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    # no ?next=: the instructor's login lands on the dashboard, an origin of its own
    _submit_login(page, hub, hub.instructor, hub.password(hub.instructor))
    page.locator("#grid").wait_for(timeout=PAGE_S * 1000)
    assert page.url.startswith(hub.dashboard_url), page.url
    assert "The room (2 learners)" in page.inner_text("h1")
    assert page.locator(f"#grid tr[data-learner='{hub.instructor}']").count() == 0
    stuck = page.locator("#stuck li").first.inner_text()
    assert stuck.startswith("2 on lesson 01's term2 check") and one in stuck and two in stuck
    for name in hub.learners:
        assert _cell_of(page, name, "01").inner_text() == f"0/{len(L01)}"
    assert not _cell_of(page, one, "01", "x").first.is_visible()  # closed until asked
    assert "no kernel timed yet" in page.locator("#leaderboard").inner_text()
    # learner 1 passes it; the open page shows it within a few refreshes, with no reload
    out = _new_cell(pages[one], CHECK_RIGHT, f"{one}: the check, right", "t2_ok")
    assert "PASS" in out, out
    page.locator(f"#grid tr[data-learner='{one}'] td.lesson.l-01[data-passed='1']").wait_for(
        timeout=30_000)
    assert _cell_of(page, two, "01").inner_text() == f"0/{len(L01)}"
    page.locator("#grid th.lesson[data-lesson='01']").click()  # lesson 01's exercises open
    term2 = page.locator(f"#grid tr[data-learner='{one}'] td.ex.l-01.pass")
    assert term2.is_visible() and term2.inner_text() == "PASS"
    page.wait_for_timeout(6000)  # a refresh later, still open
    assert page.locator(f"#grid tr[data-learner='{one}'] td.ex.l-01.pass").is_visible()
    # learner 2 writes 114 lines no check wrote, from their own notebook
    out = _new_cell(pages[two], FORGE, f"{two}: forged verdicts", "forged")
    assert "forged 114" in out, out
    apart = page.locator(f"#grid tr[data-learner='{two}'] td.apart")
    apart.filter(has_text="112 names the lessons do not have").wait_for(timeout=30_000)
    assert "1 score no check makes" in apart.inner_text()
    # of 114 lines, one names an exercise of the course with a score a check can make: counted,
    # as every verdict is (self-reported); the other 113 are not
    every = len(standings.exercises())
    assert page.locator(f"#grid tr[data-learner='{two}'] td").nth(0).inner_text() == f"1/{every}"
    assert "no kernel timed yet" in page.locator("#leaderboard").inner_text()
    assert f"{two} 1" in page.locator("#not-ranked").inner_text()  # a lease the room never gave
    assert not dialogs, dialogs  # a learner's markup is text
    # a learner is not let in
    for url in (hub.dashboard_url, f"{hub.dashboard_url}api/tables"):
        status, text = _visit(pages[two].context, url)
        assert status == 403 and "data-learner" not in text, (url, status)
    return page


def test_hub_two_learners(hub):
    from playwright.sync_api import sync_playwright

    one, two = hub.learners
    secret = f"secret-{secrets.token_hex(4)}.txt"
    text = f"only {one} reads this"
    shots = {}
    with sync_playwright() as p:
        browser = hub.browser(p)
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
            status, seen = _visit(pages[two].context, f"{hub.learner_url(one)}files/{secret}")
            assert status == 403 and text not in seen, \
                f"{two} asked for {one}'s file through the hub: {status}"
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


GREEDY = ("hog = []  # without bound\n"
          "while True:\n"
          "    hog.append(bytearray(64 << 20))")


def test_a_learner_who_allocates_without_bound_is_stopped_and_the_other_works_on(hub):
    """Learner 1 runs a cell that allocates without end; the kernel's OOM killer ends it inside
    learner 1's own memory group (the hub's --mem-limit), JupyterLab says the kernel died, and
    learner 1's server itself answers on. Learner 2, at the same time, runs cells as usual."""
    from playwright.sync_api import sync_playwright

    one, two = hub.learners
    bases = _limits_of(hub)
    before = {n: _ooms(bases, n) for n in hub.learners}
    with sync_playwright() as p:
        browser = hub.browser(p)
        try:
            pages = {}
            for name in hub.learners:
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                context.set_default_timeout(30_000)
                pages[name] = context.new_page()
                _login(pages[name], hub, name)
                _open_lesson(pages[name], hub, name)
            _start_cell(pages[one], GREEDY)
            for i in range(3):  # learner 2 works while learner 1's kernel grows
                out = _new_cell(pages[two], f"print('still here', {i}, sum(range(10**6)))",
                                f"{two}: a cell while {one} allocates", f"'still here', {i}")
                assert f"still here {i} 499999500000" in out, out
            pages[one].get_by_text(re.compile("kernel.*(died|restarting)", re.I)).first.wait_for(
                timeout=PAGE_S * 1000)
            assert _ooms(bases, one) > before[one] and _ooms(bases, two) == before[two]
            pages[one].keyboard.press("Escape")  # the dialog
            pages[one].wait_for_timeout(3000)  # the kernel restarts
            out = _new_cell(pages[one], "print('back', 6 * 7)", f"{one}: after the restart",
                            "'back'")
            assert "back 42" in out, out
            shot = SCREENSHOTS / "hub-memory-limit.png"
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            pages[one].screenshot(path=str(shot))
        finally:
            browser.close()


PROBE = """async ([own, hub, dashboard]) => {
  const get = url => fetch(url, {credentials: 'include'})
      .then(r => r.text().then(t => 'read ' + r.status + ' ' + t.length))
      .catch(e => 'blocked: ' + e.name);
  return {own: await get(own), hub: await get(hub), dashboard: await get(dashboard)};
}"""


def test_a_learner_s_origin_cannot_act_as_the_instructor(hub):
    """The instructor, logged in, opens a page of learner 1's server (the hub asks first): a
    script running there (as in any page learner 1 serves) reads its own origin, but neither the
    hub's pages (where an _xsrf token would let it make an admin token) nor the dashboard: four
    origins, one each."""
    from urllib.parse import urlsplit

    from playwright.sync_api import sync_playwright

    one, two = hub.learners
    origins = {urlsplit(u).netloc for u in (hub.url, hub.dashboard_url, hub.learner_url(one),
                                            hub.learner_url(two))}
    assert len(origins) == 4, origins
    with sync_playwright() as p:
        browser = hub.browser(p)
        try:
            _login(browser.new_context().new_page(), hub, one)  # learner 1's server runs
            page = browser.new_context().new_page()
            _submit_login(page, hub, hub.instructor, hub.password(hub.instructor))
            page.locator("#grid").wait_for(timeout=PAGE_S * 1000)
            # a page of learner 1's server (their JupyterLab; its API's answers forbid scripts)
            page.goto(f"{hub.learner_url(one)}lab", timeout=PAGE_S * 1000,
                      wait_until="domcontentloaded")
            # the hub asks first: another's server (the instructor says yes, for the probe)
            assert "/hub/api/oauth2/authorize" in page.url, page.url
            with page.expect_navigation(timeout=PAGE_S * 1000, wait_until="domcontentloaded"):
                page.get_by_role("button", name="Authorize").click()
            assert page.url.startswith(hub.learner_url(one)), page.url
            seen = page.evaluate(PROBE, [f"{hub.learner_url(one)}static/favicon.ico",
                                         f"{hub.url}hub/token", f"{hub.dashboard_url}api/tables"])
        finally:
            browser.close()
    assert seen["own"].startswith("read 200"), seen  # the probe can read what it may
    assert seen["hub"].startswith("blocked") and seen["dashboard"].startswith("blocked"), seen
