"""One learner of the room test (hub/room_test.py), doing over HTTPS what their browser would do.

Logs in at the hub's page (its form and _xsrf cookie), follows the hub to the spawn page and waits
there until the server is up, follows it to the learner's own origin (NAME.localhost: the OAuth
round trip that gives that origin its own cookie) and JupyterLab's page; then opens lesson 01 as
JupyterLab does (the notebook through the contents API, a session that starts its kernel) and runs,
through the kernel's websocket, the lesson's set-up cell, its first NumPy cell and its first check,
exactly as the student edition has them. Every connection goes to 127.0.0.1 (``*.localhost`` is
loopback, as Chromium has it) with the origin's name for TLS, and the certificate is checked
against the room's own, host name included.

Runs from the learner environment (tornado is JupyterHub's).
"""
from __future__ import annotations

import asyncio
import datetime
import json
import re
import socket
import time
import uuid
from http.cookies import CookieError, SimpleCookie
from urllib.parse import quote, urlencode, urljoin, urlsplit

from tornado.httpclient import HTTPRequest
from tornado.netutil import Resolver
from tornado.simple_httpclient import SimpleAsyncHTTPClient
from tornado.websocket import websocket_connect

LESSON = "rmsnorm-lessons/01_rmsnorm_math.ipynb"
VERDICT = re.compile(r"^(PASS|NOT YET|NOT VERIFIED)\b", re.M)


class Loopback(Resolver):
    """Every name is this machine (the room runs here; ``*.localhost`` as browsers resolve it)."""

    async def resolve(self, host, port, family=socket.AF_UNSPEC):
        return [(socket.AF_INET, ("127.0.0.1", port))]


class Browser:
    """Cookies kept per host name (as a browser keeps host-only cookies), redirects followed by
    hand so that each hop's cookies land on its own host."""

    def __init__(self, tls_context, timeout: float = 120):
        self.tls = tls_context
        self.timeout = timeout
        self.jar: dict[str, dict[str, str]] = {}
        self.client = SimpleAsyncHTTPClient(force_instance=True, resolver=Loopback(),
                                            max_clients=4)

    def cookie(self, url: str, name: str) -> str | None:
        return self.jar.get(urlsplit(url).hostname, {}).get(name)

    def cookies(self, url: str) -> str:
        return "; ".join(f"{k}={v}" for k, v in self.jar.get(urlsplit(url).hostname, {}).items())

    def _keep(self, url: str, headers) -> None:
        jar = self.jar.setdefault(urlsplit(url).hostname, {})
        for line in headers.get_list("Set-Cookie"):
            try:
                parsed = SimpleCookie()
                parsed.load(line)
            except CookieError:
                continue
            for name, morsel in parsed.items():
                if morsel["max-age"] == "0" or not morsel.value or "1970" in morsel["expires"]:
                    jar.pop(name, None)
                else:
                    jar[name] = morsel.value

    async def fetch(self, url: str, method: str = "GET", body=None, headers=None,
                    follow: bool = True):
        """``(response, url it came from)``: redirects followed, cookies kept."""
        for _ in range(20):
            request = HTTPRequest(url, method=method, body=body, follow_redirects=False,
                                  headers={**(headers or {}), "Cookie": self.cookies(url)},
                                  ssl_options=self.tls, request_timeout=self.timeout,
                                  connect_timeout=self.timeout)
            response = await self.client.fetch(request, raise_error=False)
            self._keep(url, response.headers)
            location = response.headers.get("Location")
            if not (follow and response.code in (301, 302, 303, 307) and location):
                return response, url
            url = urljoin(url, location)
            if response.code != 307:
                method, body = "GET", None
        raise RuntimeError(f"more than 20 redirects, the last to {url}")

    async def login(self, hub: str, name: str, password: str):
        """The hub's login form; the response and URL the login ends at."""
        response, _ = await self.fetch(f"{hub}hub/login")
        if response.code != 200:
            raise RuntimeError(f"the login page answered {response.code}")
        form = urlencode({"username": name, "password": password,
                          "_xsrf": self.cookie(hub, "_xsrf") or ""})
        return await self.fetch(f"{hub}hub/login", "POST", form,
                                {"Content-Type": "application/x-www-form-urlencoded"})

    def close(self) -> None:
        self.client.close()


def _request(code: str, session: str, name: str) -> tuple[str, str]:
    msg_id = uuid.uuid4().hex
    now = datetime.datetime.now(datetime.timezone.utc).isoformat()
    return msg_id, json.dumps({
        "header": {"msg_id": msg_id, "username": name, "session": session,
                   "msg_type": "execute_request", "version": "5.3", "date": now},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": True,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}})


async def execute(ws, code: str, session: str, name: str, timeout: float) -> str:
    """Run ``code`` in the kernel behind ``ws``; its output as text (an error's too)."""
    msg_id, message = _request(code, session, name)
    await ws.write_message(message)
    out = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the kernel did not finish within {timeout:.0f} s: {code[:60]!r}")
        raw = await asyncio.wait_for(ws.read_message(), left)
        if raw is None:
            raise RuntimeError("the kernel's websocket closed")
        msg = json.loads(raw)
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind, content = msg["header"]["msg_type"], msg.get("content", {})
        if kind == "stream":
            out.append(content.get("text", ""))
        elif kind in ("execute_result", "display_data"):
            out.append(content.get("data", {}).get("text/plain", ""))
        elif kind == "error":
            out.append(f"{content.get('ename')}: {content.get('evalue')}")
        elif kind == "status" and content.get("execution_state") == "idle":
            return "\n".join(out)


def cells_to_run(notebook: dict) -> list[str]:
    """Lesson 01's set-up cell, its first NumPy cell and the first cell that calls a check."""
    code = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in notebook["cells"] if c["cell_type"] == "code"]
    check = next(i for i, c in enumerate(code) if re.search(r"\blesson01\.check_\w+\(", c))
    return code[:2] + [code[check]]


async def learner(hub: str, name: str, password: str, tls_context, timeout: float) -> dict:
    """One learner, end to end; what happened: ``ready_at`` (monotonic, the server's JupyterLab
    page answered), ``verdict`` (the check's word), ``error`` (why not)."""
    out = {"name": name, "ready_at": None, "verdict": None, "error": None}
    browser = Browser(tls_context)
    deadline = time.monotonic() + timeout
    try:
        response, url = await browser.login(hub, name, password)
        while "/hub/spawn" in url and response.code == 200:  # the spawn page: the server starts
            if time.monotonic() > deadline:
                raise TimeoutError("the server did not start in time")
            await asyncio.sleep(1)
            response, url = await browser.fetch(url)
        server = f"{urlsplit(hub).scheme}://{name}.{urlsplit(hub).netloc}/user/{name}/"
        if response.code != 200 or not url.startswith(f"{server}lab"):
            raise RuntimeError(f"the login ended at {url} ({response.code}), not at {server}lab")
        out["ready_at"] = time.monotonic()
        api = {"X-XSRFToken": browser.cookie(server, "_xsrf") or "",
               "Content-Type": "application/json"}
        response, _ = await browser.fetch(f"{server}api/contents/{quote(LESSON)}", headers=api)
        if response.code != 200:
            raise RuntimeError(f"lesson 01 did not open ({response.code})")
        cells = cells_to_run(json.loads(response.body)["content"])
        body = json.dumps({"path": LESSON, "type": "notebook", "name": LESSON.split("/")[-1],
                           "kernel": {"name": "python3"}})
        response, _ = await browser.fetch(f"{server}api/sessions", "POST", body, api)
        if response.code not in (200, 201):
            raise RuntimeError(f"no kernel for lesson 01 ({response.code})")
        kernel = json.loads(response.body)["kernel"]["id"]
        session = uuid.uuid4().hex
        wss = server.replace("https://", "wss://").replace("http://", "ws://")
        ws = await websocket_connect(HTTPRequest(
            f"{wss}api/kernels/{kernel}/channels?session_id={session}",
            headers={"Cookie": browser.cookies(server)}, ssl_options=tls_context,
            request_timeout=timeout), resolver=Loopback())
        try:
            for code in cells:
                said = await execute(ws, code, session, name, max(deadline - time.monotonic(), 1))
            found = VERDICT.search(said)
            if not found:
                raise RuntimeError(f"the check printed no verdict: {said[-300:]!r}")
            out["verdict"] = found.group(1)
        finally:
            ws.close()
    except Exception as exc:  # noqa: BLE001 - one learner's failure is reported, not raised
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        browser.close()
    return out


async def dashboard(hub: str, url: str, name: str, password: str, tls_context) -> str:
    """The instructor's login (which lands on the dashboard): the tables' HTML, as the page's
    script fetches them."""
    browser = Browser(tls_context)
    try:
        response, landed = await browser.login(hub, name, password)
        if response.code != 200 or not landed.startswith(url):
            raise RuntimeError(f"the instructor's login ended at {landed} ({response.code})")
        xsrf = re.search(r'"X-XSRFToken": "([^"]+)"', response.body.decode())
        response, _ = await browser.fetch(f"{url}api/tables",
                                          headers={"X-XSRFToken": xsrf.group(1) if xsrf else ""})
        if response.code != 200:
            raise RuntimeError(f"the dashboard's tables answered {response.code}")
        return json.loads(response.body)["html"]
    finally:
        browser.close()
