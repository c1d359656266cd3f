"""The workshop hub as tests/test_hub.py drives it: ``make hub`` started and stopped, its log, its
accounts' passwords, its origins and certificate, Chromium pinned to that certificate, the pages a
learner uses, and the clean-up of everything it started (processes, accounts, homes)."""
from __future__ import annotations

import base64
import json
import hashlib
import os
import re
import secrets
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from test_browser import CHROMIUM, CHROMIUM_ARGS, _free_port, _kernel_ready, _wait

ROOT = Path(__file__).resolve().parent.parent
HUB = ROOT / "hub"
HUB_PYTHON = os.environ.get("HUB_PYTHON", "/usr/bin/python3")
ENV_BUILD_S = 900  # the learner environment, first time on a clean machine (pip; cached after)
HUB_START_S = 240
PAGE_S = 120
#: what each learner may use: enough for JupyterLab and a lesson's kernel, little enough that the
#: memory test's allocation meets it in a few seconds
MEM_LIMIT = "1G"


def _user_exists(name: str) -> bool:
    return subprocess.run(["id", name], capture_output=True).returncode == 0


def _processes_naming(*needles: str) -> list[int]:
    """Processes whose command line contains one of ``needles`` (this hub's port or state)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if any(n in cmd for n in needles):
                found.append(int(d.name))
    return found


def _pids_of(name: str) -> list[int]:
    r = subprocess.run(["ps", "-u", name, "-o", "pid="], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split()] if r.returncode == 0 else []


class Hub:
    def __init__(self, work: Path):
        tag = secrets.token_hex(3)
        self.learners = [f"hubt{tag}a", f"hubt{tag}b"]
        self.instructor = f"hubt{tag}i"
        self.names = self.learners + [self.instructor]
        for n in self.names:
            assert not _user_exists(n), f"account {n} exists already"
        self.port = _free_port()
        self.url = f"https://localhost:{self.port}/"  # the room's host name on this machine
        self.state = work / "state"
        self.log_path = work / "hub.log"
        self._log = open(self.log_path, "w")
        self.proc = None
        self.left_running: list[int] = []
        self.removal = None  # what --remove-accounts said

    def build_env(self) -> None:
        """The learner environment, before the clock of the hub's start runs (slow at first)."""
        t0 = time.monotonic()
        r = subprocess.run([str(HUB / "learner-env.sh")], cwd=ROOT, stdout=self._log,
                           stderr=subprocess.STDOUT, timeout=ENV_BUILD_S,
                           env={**os.environ, "HUB_PYTHON": HUB_PYTHON})
        assert r.returncode == 0, f"hub/learner-env.sh failed ({r.returncode}):\n{self.log_tail()}"
        print(f"learner environment ready in {time.monotonic() - t0:.0f} s")

    def learner_url(self, name: str) -> str:
        """A learner's server, on its own origin."""
        return f"https://{name}.localhost:{self.port}/user/{name}/"

    @property
    def dashboard_url(self) -> str:
        return f"https://dashboard--service.localhost:{self.port}/services/dashboard/"

    @property
    def cert(self) -> Path:
        return self.state / "room-cert.pem"

    def spki(self) -> str:
        """The base64 SHA-256 of the room certificate's public key: what Chromium is told to
        trust (and nothing else that is not signed by a CA it knows)."""
        key = subprocess.run(["openssl", "x509", "-in", str(self.cert), "-pubkey", "-noout"],
                             capture_output=True, check=True).stdout
        der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=key,
                             capture_output=True, check=True).stdout
        return base64.b64encode(hashlib.sha256(der).digest()).decode()

    def browser(self, playwright):
        return playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, timeout=60_000,
            args=[*CHROMIUM_ARGS, f"--ignore-certificate-errors-spki-list={self.spki()}"])

    def start(self) -> None:
        args = (f"--port {self.port} --learners {','.join(self.learners)} "
                f"--instructor {self.instructor} --state {self.state} --cull-timeout 900 "
                f"--mem-limit {MEM_LIMIT} --cpu-limit 1")
        # the README's command, with this interpreter (HUB_PY=; make hub needs no .venv)
        cmd = ["make", "--no-print-directory", "-C", str(ROOT), "hub",
               f"HUB_PY={sys.executable}", f"HUB_ARGS={args}"]
        env = {**os.environ, "HUB_PYTHON": HUB_PYTHON, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        _wait(lambda: self._ready(), HUB_START_S, "the hub to print its URL")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"make hub exited with {self.proc.returncode}:\n{self.log_tail()}")
        text = self.log_text()
        return f"hub: ready at {self.url}" in text and "services/dashboard/" in text

    def password(self, name: str) -> str:
        """The instructor's from the printed line; a learner's from the sheet the hub wrote."""
        if name == self.instructor:
            m = re.search(r"the instructor's password \(generated now.*\): (\S+)", self.log_text())
            assert m, f"the instructor's password was not printed:\n{self.log_tail()}"
            return m.group(1)
        sheet = self.state / "password-sheet.txt"
        assert stat.S_IMODE(sheet.stat().st_mode) == 0o600 and sheet.stat().st_uid == 0
        found = re.search(rf"^name: {re.escape(name)}\s+password: (\S+)$", sheet.read_text(), re.M)
        assert found, f"{name} is not on {sheet}"
        return found.group(1)

    def log_text(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def log_tail(self, n: int = 60) -> str:
        lines = [ln for ln in self.log_text().splitlines() if "is ignored: it is neither" not in ln]
        return "\n".join(lines[-n:])

    def stop(self) -> None:
        """The hub, its proxy and the learners' servers; then the accounts and their homes."""
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    # make, hub/run.py and JupyterHub: a clean stop
                    os.killpg(self.proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # JupyterHub may still be stopping the servers
                try:
                    os.killpg(self.proc.pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.5)
            else:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        # the proxy and the services: the hub stops them; what names this port or state is ours
        self.left_running = _processes_naming(f"--port {self.port} ", str(self.state))
        for pid in self.left_running:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for name in self.names:  # anything still running as a test account was started by this test
            for pid in _pids_of(name):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        # the instructor's way: the hub recorded creating these three, so it removes them
        self.removal = subprocess.run(
            [sys.executable, str(HUB / "run.py"), "--state", str(self.state),
             "--learners", ",".join(self.learners), "--instructor", self.instructor,
             "--remove-accounts"],
            capture_output=True, text=True, timeout=120)
        for name in self.names:
            if _user_exists(name):
                subprocess.run(["userdel", "--remove", "--force", name], capture_output=True)
        self._log.close()


# --------------------------------------------------------------------------------------------------
# a learner's pages


def _submit_login(page, hub: Hub, name: str, password: str, url: str | None = None) -> None:
    """Log in at the hub's page (``url``: one that leads there, e.g. the dashboard)."""
    page.goto(url or f"{hub.url}hub/login", timeout=PAGE_S * 1000)
    page.fill("#username_input", name)
    page.fill("#password_input", password)
    with page.expect_navigation(timeout=PAGE_S * 1000):
        page.click("#login_submit")


def _login(page, hub: Hub, name: str) -> None:
    _submit_login(page, hub, name, hub.password(name))
    # the hub spawns the server and redirects into JupyterLab, on the learner's own origin
    page.wait_for_url(re.compile(rf"^{re.escape(hub.learner_url(name))}lab"),
                      timeout=PAGE_S * 1000)
    # in the file browser (folded away, if an earlier visit folded it)
    page.locator(".jp-DirListing-item:has-text('01_rmsnorm_math.ipynb')").first.wait_for(
        state="attached", timeout=PAGE_S * 1000)


def _open_lesson(page, hub: Hub, name: str) -> None:
    page.goto(f"{hub.learner_url(name)}lab/tree/rmsnorm-lessons/01_rmsnorm_math.ipynb",
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


def _status(page, url: str) -> int:
    """The status of a GET of ``url`` from ``page`` (the page's origin and cookies)."""
    return page.evaluate("url => fetch(url).then(r => r.status)", url)


def _visit(context, url: str) -> tuple[int, str]:
    """Open ``url`` in a new page of ``context`` (its cookies; Chromium resolves *.localhost):
    the last response's status and the page's text."""
    page = context.new_page()
    try:
        resp = page.goto(url, timeout=PAGE_S * 1000)
        return resp.status, page.content()
    finally:
        page.close()


def _verdicts_on_disk(name: str) -> list[dict]:
    path = Path(f"/home/{name}/.rmsnorm-lessons/verdicts.jsonl")
    assert path.stat().st_uid == Path(f"/home/{name}").stat().st_uid
    return [json.loads(line) for line in path.read_text().splitlines()]


def _limits_of(hub: Hub) -> list[Path]:
    """The room's cgroup folders, as the hub printed them at start."""
    m = re.search(r"hub: limits per learner: cgroup v(\d).*, in (.+)$", hub.log_text(), re.M)
    assert m, f"the hub did not say which limits it used:\n{hub.log_tail()}"
    return [Path(p) for p in m.group(2).split(", ")]


def _ooms(bases, name: str) -> int:
    for base in bases:
        for f, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
            path = base / name / f
            if path.exists():
                found = re.search(rf"^{key} (\d+)$", path.read_text(), re.M)
                return int(found.group(1)) if found else 0
    raise AssertionError(f"no memory group for {name} under {bases}")


def _start_cell(page, code: str) -> None:
    """A new cell at the end with ``code``, run without waiting for it."""
    page.locator(".jp-Notebook .jp-CodeCell").last.locator(".cm-content").first.click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")
    page.keyboard.press("Enter")
    page.keyboard.insert_text(code)
    page.keyboard.press("Shift+Enter")
