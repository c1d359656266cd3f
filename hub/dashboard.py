"""The instructor's view of the room: a JupyterHub service at ``/services/dashboard/``.

Started by the hub (hub/jupyterhub_config.py) as root, beside it: it reads each learner's verdicts
(``~/.rmsnorm-lessons/verdicts.jsonl``, which their checks write:
:mod:`rmsnorm_lessons.course.record`) from their private homes, and shows

* a grid, learner x exercise (the exercises of the lesson registry, then the tuning exercise): the
  last verdict of each (PASS / NOT YET / NOT VERIFIED, or not tried), the time of the learner's last
  attempt, and their predictions (``rl.predict``): how many were written of those measured and the
  median prediction error ("-" until there are some);
* a leaderboard of the tuning exercise: each learner's best % of the same-bytes ceiling.

The page refreshes its tables every few seconds. Who may open it: the hub lets through only users
with ``access:services!service=dashboard`` (the admins and the instructor: the roles in
hub/jupyterhub_config.py); this service refuses anyone else too (403), whatever their token says.
"""
from __future__ import annotations

import html
import json
import os
import pwd
from pathlib import Path
from urllib.parse import urlparse

from rmsnorm_lessons.course import record, registry
from rmsnorm_lessons.workshop import standings

REFRESH_S = 5
LEARNERS = [n.strip() for n in os.environ.get("RMSNORM_HUB_LEARNERS", "").split(",") if n.strip()]
INSTRUCTOR = os.environ.get("RMSNORM_HUB_INSTRUCTOR", "instructor").strip()
SHORT = {"PASS": "PASS", "NOT YET": "NOT YET", "NOT VERIFIED": "NOT VERIFIED"}


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


def _clock(iso: str | None) -> str:
    return iso[11:19] if iso and len(iso) >= 19 else "-"


def tables(room: dict) -> str:
    """The grid and the leaderboard as HTML (everything a learner wrote is escaped)."""
    names = standings.exercises()
    esc = html.escape
    head = "".join(f'<th title="{esc(lessons_title(e))}">{esc(e)}</th>' for e in names)
    rows = []
    for row in standings.room_rows(room):
        cells = []
        for e in names:
            r = row.cells.get(e)
            if r is None:
                cells.append('<td class="none">not tried</td>')
            else:
                tip = f"{r.time}: {r.message}"
                score = f" {r.score:.1f}%" if r.score is not None else ""
                cls = r.status.lower().replace(" ", "-")
                cells.append(f'<td class="{cls}" title="{esc(tip)}">'
                             f"{esc(SHORT.get(r.status, r.status))}{esc(score)}</td>")
        error = predictions(row)
        rows.append(f'<tr data-learner="{esc(row.learner)}"><th>{esc(row.learner)}</th>'
                    f"<td>{row.passed}/{len(names)}</td><td>{esc(_clock(row.last_time))}</td>"
                    f"<td>{esc(error)}</td>{''.join(cells)}</tr>")
    grid = ('<table id="grid"><thead><tr><th>learner</th><th>passed</th>'
            f"<th>last attempt (UTC)</th><th>predictions written, median error</th>{head}"
            "</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")
    board = standings.leaderboard(room)
    lines = "".join(f"<tr><td>{i}</td><td>{esc(n)}</td><td>{s:.1f} %</td>"
                    f"<td>{esc(_clock(t))}</td></tr>" for i, (n, s, t) in enumerate(board, 1))
    leader = ('<table id="leaderboard"><thead><tr><th>#</th><th>learner</th>'
              "<th>% of the same-bytes ceiling</th><th>at (UTC)</th></tr></thead><tbody>"
              + (lines or '<tr><td colspan="4">no kernel timed yet</td></tr>') + "</tbody></table>")
    return (f"<h2>Exercises</h2>{grid}"
            "<h2>Tuning: v7_fast's variants against the same-bytes ceiling</h2>"
            f'{leader}<p class="stamp">read at {esc(record.now())}</p>')


def predictions(row) -> str:
    """``"3/4, 40 %"``: predictions written of those measured, and the median prediction error."""
    if not row.predictions and row.prediction_error is None:
        return "-"
    error = "-" if row.prediction_error is None else f"{100 * row.prediction_error:.0f} %"
    return f"{row.predicted}/{row.predictions}, {error}"


def lessons_title(exercise: str) -> str:
    stem = record.lesson_of(exercise)
    try:
        return registry.by_stem(stem).title
    except ValueError:
        return "the tuning exercise (rmsnorm_lessons.lessons.lesson11.tuning)"


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>rmsnorm-lessons: the room</title>
<style>
body {{ font-family: sans-serif; margin: 1em; }}
table {{ border-collapse: collapse; font-size: 13px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 6px; white-space: nowrap; }}
#grid thead th {{ writing-mode: vertical-rl; transform: rotate(180deg); text-align: left; }}
td.pass {{ background: #c8f0c8; }} td.not-yet {{ background: #f8e0a0; }}
td.not-verified {{ background: #d8e4f8; }} td.none {{ color: #999; }} .stamp {{ color: #666; }}
</style></head>
<body><h1>The room ({count} learners)</h1><div id="tables">{tables}</div>
<script>
setInterval(async () => {{
  try {{
    // a script's fetch carries the XSRF token: the hub's service auth accepts its cookie only then
    const r = await fetch("api/tables",
                          {{credentials: "same-origin", headers: {{"X-XSRFToken": "{xsrf}"}}}});
    if (r.ok) document.getElementById("tables").innerHTML = (await r.json()).html;
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
            self.finish(PAGE.format(count=len(LEARNERS), tables=tables(read_room(LEARNERS)),
                                    refresh_ms=REFRESH_S * 1000, xsrf=html.escape(token)))

    class Tables(Base):
        @web.authenticated
        def get(self):
            self.check()
            self.set_header("Cache-Control", "no-store")
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"html": tables(read_room(LEARNERS))}))

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
