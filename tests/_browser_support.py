"""The browser tests' helpers (tests/test_browser.py): which lessons qualify, a generated
smoke notebook, a JupyterLab started with ``make lab`` in a copy of the checkout, and waiting on
the page (tests/test_site.py and tests/test_hub.py use some of them too)."""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SCREENSHOTS = ROOT / "build" / "screenshots"
CHROMIUM = os.environ.get("RMSNORM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-quic",
                 "--disable-dev-shm-usage"]
PREFERRED = ("02_", "03_")  # lesson-name prefixes, in order of preference
SERVER_START_S = 90
PAGE_LOAD_S = 120
RUN_ALL_S = 420  # the lessons' CPU cells take well under a minute; the browser adds rendering
SMOKE = "fallback-smoke"

try:
    import playwright.sync_api  # noqa: F401

    _PLAYWRIGHT = None
except ImportError as exc:  # pragma: no cover - depends on the machine
    _PLAYWRIGHT = f"the playwright package is not installed ({exc}); pip install playwright"


# --------------------------------------------------------------------------------------------------
# which lesson


def _code_cells(nb: dict):
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code" and "gpu" not in cell.get("metadata", {}).get("tags",
                                                                                         []):
            src = cell.get("source", "")
            yield "".join(src) if isinstance(src, list) else src


def _has_figure_and_widget(path: Path) -> bool:
    try:
        nb = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    code = "\n".join(_code_cells(nb))
    figure = re.search(r"\bplots\.\w+\(|\bplt\.|matplotlib", code)
    widget = re.search(r"\bwidgets\.\w+\(|ipywidgets|\binteract(ive)?\(", code)
    return bool(figure and widget)


def _lessons() -> list[str]:
    found = sorted(p for p in NOTEBOOKS.glob("*.ipynb") if not p.name.startswith("."))
    want = os.environ.get("RMSNORM_BROWSER_LESSON", "").strip()
    if want == SMOKE:
        return [SMOKE]
    if want and want != "all":
        stem = want.removesuffix(".ipynb")
        return [p.stem for p in found if p.stem == stem
                or p.stem.startswith(stem)][:1] or [f"missing:{stem}"]
    good = [p for p in found if _has_figure_and_widget(p)]
    if want == "all":
        return [p.stem for p in good] or [SMOKE]
    for prefix in PREFERRED:
        for p in good:
            if p.stem.startswith(prefix):
                return [p.stem]
    return [good[0].stem] if good else [SMOKE]


def _smoke_notebook(path: Path) -> None:
    """A stand-in lesson: the package's setup line, a figure and a widget, no GPU."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Browser smoke test\nStands in while no lesson has a "
                                      "figure and a widget."),
        nbformat.v4.new_code_cell("%matplotlib inline\nimport rmsnorm_lessons as rl\n"
                                  "from rmsnorm_lessons import notebook\n"
                                  "print(rl.notebook.setup())"),
        nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nimport numpy as np\n"
                                  "fig, ax = plt.subplots(figsize=(4, 2.5), dpi=80)\n"
                                  "ax.plot(np.arange(32), np.arange(32) % 8, 'o-')\n"
                                  "ax.set_title('a figure')\nplt.show()"),
        nbformat.v4.new_code_cell("import ipywidgets as widgets\n"
                                  "slider = widgets.IntSlider(value=3, min=0, max=31, "
                                  "description='lane')\nout = widgets.Output()\n"
                                  "def show(change=None):\n"
                                  "    out.clear_output()\n"
                                  "    with out:\n"
                                  "        print('lane', slider.value, 'reads element', "
                                  "slider.value * 4)\nslider.observe(show, 'value')\nshow()\n"
                                  "widgets.VBox([slider, out])"),
    ]
    nbformat.write(nb, str(path))


# --------------------------------------------------------------------------------------------------
# the server


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _settings(config_dir: Path) -> None:
    """JupyterLab user settings for a quiet, deterministic page: no news or update checks, every
    cell in the DOM (no windowing), no autosave races."""
    settings = {
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
            {"fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
        "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    }
    for rel, value in settings.items():
        f = config_dir / "lab" / "user-settings" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(value))


class Lab:
    def __init__(self, repo: Path, work: Path):
        self.repo = repo
        self.root = repo / "work" / "student"  # what `make lab` serves by default
        self.token = secrets.token_hex(16)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = work / "jupyterlab.log"
        config, data, runtime, ipython = (work / d
                                          for d in ("config", "data", "runtime", "ipython"))
        for d in (config, data, runtime, ipython):
            d.mkdir(parents=True, exist_ok=True)
        _settings(config)
        env = dict(os.environ)
        python_path = [str(repo)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        env.update(JUPYTER_CONFIG_DIR=str(config), JUPYTER_DATA_DIR=str(data),
                   JUPYTER_RUNTIME_DIR=str(runtime),
                   IPYTHONDIR=str(ipython), JUPYTER_PLATFORM_DIRS="0", PYTHONUNBUFFERED="1",
                   PYTHONPATH=os.pathsep.join(python_path))
        # the README's way: make lab ARGS="..." (it adds --allow-root as root), in the copy of the
        # checkout, with this interpreter (PY=, and -o venv: no venv build); the rest is ARGS
        args = ["--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
                "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
                "--LabApp.news_url=None",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--ServerApp.terminals_enabled=False", "--LabApp.extension_manager=readonly"]
        cmd = ["make", "--no-print-directory", "-C", str(repo), "-o", "venv", "lab",
               f"PY={sys.executable}", "ARGS=" + " ".join(args)]
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + SERVER_START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with "
                                   f"{self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}",
                                            timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"JupyterLab did not answer within {SERVER_START_S} "
                           f"s:\n{self.log_tail()}")

    def printed_url(self) -> bool:
        """The server printed its URL with the token (what a learner copies into the browser).
        Jupyter writes a token it was given as ``token=...`` (the one it makes up, as with ``make
        lab``, in full)."""
        self._log.flush()
        return f"127.0.0.1:{self.port}/lab?token=" in self.log_path.read_text(errors="replace")

    def log_tail(self, n: int = 40) -> str:
        try:
            self._log.flush()
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:  # the polite way: the server shuts its kernels down too
                req = urllib.request.Request(f"{self.url}/api/shutdown?token={self.token}",
                                             method="POST", data=b"")
                urllib.request.urlopen(req, timeout=10).close()
                self.proc.wait(timeout=20)
            except (urllib.error.URLError, OSError, subprocess.TimeoutExpired):
                pass
        # the server's own process group: it and its kernels
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                continue
        self._log.close()


# --------------------------------------------------------------------------------------------------
# the browser


def _wait(predicate, timeout_s: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"{what}: not within {timeout_s:.0f} s (last: {last!r})")


_STATE_JS = """() => {
  const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook');
  if (!nb) return null;
  // code cells with something in them (an empty cell never gets a number)
  const cells = [...nb.querySelectorAll('.jp-CodeCell')].filter(c => {
    const src = c.querySelector('.cm-content');
    return !src || src.textContent.trim() !== '';
  });
  const prompts = cells.map(c => (c.querySelector('.jp-InputArea-prompt') || {textContent: \
''}).textContent.trim());
  const indicator = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) \
.jp-Notebook-ExecutionIndicator');
  const status = document.querySelector('#jp-main-statusbar');
  return {prompts,
          indicator: indicator ? indicator.getAttribute('data-status') : null,
          statusbar: status ? status.textContent : ''};
}"""

_ERRORS_JS = """() => {
  const out = [];
  for (const el of document.querySelectorAll('.jp-OutputArea-output')) {
    const t = el.textContent || '';
    if (/Traceback \\(most recent call last\\)|^\\s*\\w+(Error|Exception)\\b/m.test(t) ||
        /Error displaying widget|model not found/i.test(t))
      out.push(t.slice(0, 400));
  }
  return out;
}"""


# what the kernel draws for a widget's cell: its images (in the widget or beside it, updated in
# place) and the text of Output and HTML widgets (not the sliders' own read-outs, which the browser
# updates)
_WIDGET_CONTENT_JS = """(el) => {
  const imgs = [...el.querySelectorAll('img')].map(i => i.src.length + ':' + i.src.slice(-64));
  const text = [...el.querySelectorAll('.widget-output .jp-OutputArea-output,\
 .widget-html-content')]
    .map(e => e.textContent);
  return JSON.stringify([imgs, text]);
}"""


def _nudge_slider(page, area) -> str | None:
    """Move the widget's first slider one step with the keyboard and wait for the kernel to redraw
    what the widget shows. None when it did (or there is no slider), else what went wrong."""
    handle = area.locator(".noUi-handle, .widget-slider input[type=range]").first
    if handle.count() == 0:
        print("the widget has no slider: not nudged")
        return None
    before = area.evaluate(_WIDGET_CONTENT_JS)
    handle.focus()
    page.keyboard.press("ArrowRight")
    try:
        _wait(lambda: area.evaluate(_WIDGET_CONTENT_JS) != before, 30,
              "the widget to redraw after a slider step")
    except TimeoutError as exc:
        return str(exc)
    print("one slider step: the kernel redrew the widget's output")
    return None


def _kernel_ready(page) -> bool:
    """The status bar names the kernel and says Idle (not 'No Kernel', 'Initializing',
    'Connecting')."""
    s = page.evaluate(_STATE_JS) or {}
    bar = s.get("statusbar") or ""
    return bool(re.search(r"\|\s*Idle", bar)) and "No Kernel" not in bar


def _failure_shot(page, shot: Path, lesson: str) -> None:
    """A screenshot of the failure, also as build/screenshots/<lesson>-failed.png (it outlives
    tmp)."""
    try:
        page.screenshot(path=str(shot))
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOTS / f"{lesson}-failed.png")
        print(f"failure screenshot: {SCREENSHOTS / f'{lesson}-failed.png'}")
    except Exception as exc:  # the page may be gone; the assertion that follows says what failed
        print(f"no failure screenshot: {exc}")


def _run_all(page) -> None:
    """Run > Run All Cells, as a learner would."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).first.click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).first.click()


def _finished(page, seen: dict):
    """The state once Run All is over: something ran, no cell is queued or running ([*]) and the
    kernel has been idle for three polls in a row. A cell that raised leaves the cells after it
    unnumbered."""
    s = page.evaluate(_STATE_JS)
    if not s or not s["prompts"]:
        return None
    busy = any(p.startswith("[*]") for p in s["prompts"])
    if busy or any(re.match(r"\[\d+\]", p) for p in s["prompts"]):
        seen["started"] = True
    idle = s["indicator"] == "idle" or (s["indicator"] is None and "Idle" in s["statusbar"])
    seen["idle"] = seen.get("idle", 0) + 1 if (idle and not busy and seen.get("started")) else 0
    return s if seen["idle"] >= 3 else None


def _saved_errors(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    errors = []
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                errors.append(f"cell {i}: {out.get('ename')}: {out.get('evalue')}")
    return errors
