"""The instructor's view of the room: a JupyterHub service at ``/services/dashboard/``.

Started by the hub (hub/jupyterhub_config.py) as root, beside it: it reads each learner's verdicts
(``~/.rmsnorm-lessons/verdicts.jsonl``, which their checks write:
:mod:`rmsnorm_lessons.course.record`) from their private homes, and the room's GPU turns (the
gpu-lock service's record, hub/gpu_lock.py), and shows them as hub/room_view.py lays them out:
who is stuck where, the grid by lesson (a lesson's header opens its exercises), the tuning
leaderboard of scores measured alone on the GPU, and the GPU's queue. The learners are the room's
(``RMSNORM_HUB_LEARNERS``): the instructor is not one of them.

The page refreshes its tables every few seconds, keeping the lessons opened. Who may open it: the
hub lets through only users with ``access:services!service=dashboard`` (the admins and the
instructor: the roles in hub/jupyterhub_config.py); this service refuses anyone else too (403),
whatever their token says. With one origin per learner it has its own origin
(dashboard--service.HOST), which no learner's server shares.
"""
from __future__ import annotations

import html
import json
import os
import pwd
import sys
from pathlib import Path
from urllib.parse import urlparse

from rmsnorm_lessons.course import record

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_lock  # noqa: E402 - hub/gpu_lock.py: the record of GPU turns
import room_view  # noqa: E402 - hub/room_view.py: the tables

REFRESH_S = 5
INSTRUCTOR = os.environ.get("RMSNORM_HUB_INSTRUCTOR", "instructor").strip()
#: the room's learners; the instructor is never one of them
LEARNERS = [n.strip() for n in os.environ.get("RMSNORM_HUB_LEARNERS", "").split(",")
            if n.strip() and n.strip() != INSTRUCTOR]
GPU_LOCK_DIR = os.environ.get("RMSNORM_HUB_GPU_LOCK_DIR", "")


def read_room(names) -> dict:
    """learner -> their records, read from their home as their own file (:func:`record.read`)."""
    room = {}
    for name in names:
        try:
            user = pwd.getpwnam(name)
        except KeyError:
            room[name] = []
            continue
        try:
            room[name] = record.read(Path(user.pw_dir) / record.HOME_FILE, owner=user.pw_uid)
        except Exception:  # noqa: BLE001 - one learner's file never blanks the room
            room[name] = []
    return room


def tables() -> str:
    """The room now: its learners' records, the GPU turns recorded, the queue."""
    if GPU_LOCK_DIR:
        turns = {g["lease"]: g for g in gpu_lock.grants(GPU_LOCK_DIR)}
        queue = gpu_lock.status(GPU_LOCK_DIR, timeout=0.5)
    else:  # no queue: nothing was measured alone
        turns, queue = {}, None
    return room_view.tables(read_room(LEARNERS), turns, queue)


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>rmsnorm-lessons: the room</title>
<style>
body {{ font-family: sans-serif; margin: 1em; }}
table {{ border-collapse: collapse; font-size: 13px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 6px; white-space: nowrap; }}
#grid .ex {{ display: none; }}
#grid th.lesson {{ cursor: pointer; background: #eef; }}
#grid th.lesson.open {{ background: #ccd; }}
td.pass, td.all {{ background: #c8f0c8; }} td.not-yet {{ background: #f8e0a0; }}
td.some {{ background: #f4f4c0; }} td.stuck {{ outline: 2px solid #d08000; }}
td.not-verified {{ background: #d8e4f8; }} td.none {{ color: #999; }} .stamp {{ color: #666; }}
td.apart {{ color: #a00; }} #stuck b {{ font-size: 120%; }}
</style><style id="open"></style></head>
<body><h1>The room ({count} learners)</h1><div id="tables">{tables}</div>
<script>
const opened = new Set();
function show() {{
  // the opened lessons' exercise columns, kept across refreshes (the tables are replaced)
  document.getElementById("open").textContent = [...opened].map(
    k => `#grid .ex.l-${{CSS.escape(k)}} {{ display: table-cell; }}`).join("\\n");
  for (const th of document.querySelectorAll("#grid th.lesson"))
    th.classList.toggle("open", opened.has(th.dataset.lesson));
}}
document.addEventListener("click", e => {{
  const th = e.target.closest("#grid th.lesson");
  if (!th) return;
  opened.has(th.dataset.lesson) ? opened.delete(th.dataset.lesson) : opened.add(th.dataset.lesson);
  show();
}});
setInterval(async () => {{
  try {{
    // a script's fetch carries the XSRF token: the hub's service auth accepts its cookie only then
    const r = await fetch("api/tables",
                          {{credentials: "same-origin", headers: {{"X-XSRFToken": "{xsrf}"}}}});
    if (r.ok) {{ document.getElementById("tables").innerHTML = (await r.json()).html; show(); }}
  }} catch (e) {{}}
}}, {refresh_ms});
</script></body></html>
"""


def allowed(user) -> bool:
    return bool(user) and (user.get("name") == INSTRUCTOR or bool(user.get("admin")))


def make_app():
    from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
    from jupyterhub.utils import url_path_join
    from tornado import web

    class Base(HubOAuthenticated, web.RequestHandler):
        def check(self):
            user = self.get_current_user()
            if not allowed(user):
                raise web.HTTPError(403, "the room's dashboard is the instructor's")

    class Page(Base):
        @web.authenticated
        def get(self):
            self.check()
            self.set_header("Cache-Control", "no-store")
            token = self.xsrf_token
            token = token.decode() if isinstance(token, bytes) else token
            self.finish(PAGE.format(count=len(LEARNERS), tables=tables(),
                                    refresh_ms=REFRESH_S * 1000, xsrf=html.escape(token)))

    class Tables(Base):
        @web.authenticated
        def get(self):
            self.check()
            self.set_header("Cache-Control", "no-store")
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"html": tables()}))

    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/dashboard/")
    return web.Application([
        (prefix, Page),
        (url_path_join(prefix, "api/tables"), Tables),
        (url_path_join(prefix, "oauth_callback"), HubOAuthCallbackHandler),
    ], cookie_secret=os.urandom(32))


def main() -> None:
    from tornado.ioloop import IOLoop

    url = urlparse(os.environ["JUPYTERHUB_SERVICE_URL"])
    make_app().listen(url.port, url.hostname)
    IOLoop.current().start()


if __name__ == "__main__":
    main()
