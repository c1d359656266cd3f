"""The instructor's dashboard (hub/dashboard.py) as HTML, without a hub: the grid, the leaderboard,
escaping,
and who is let in. tests/test_hub.py opens it for real, in Chromium, behind the hub."""
from __future__ import annotations

import getpass
import importlib.util
import os
import pwd
from pathlib import Path

from rmsnorm_lessons.course import record, registry
from rmsnorm_lessons.workshop import standings

HUB = Path(__file__).resolve().parent.parent / "hub"


def _dashboard(monkeypatch, learners="ada,grace", instructor="teach"):
    monkeypatch.setenv("RMSNORM_HUB_LEARNERS", learners)
    monkeypatch.setenv("RMSNORM_HUB_INSTRUCTOR", instructor)
    spec = importlib.util.spec_from_file_location("hub_dashboard", HUB / "dashboard.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rec(exercise, status, time, message="m", score=None):
    return record.Record(time, record.lesson_of(exercise), exercise, status, message, score)


def test_grid_and_leaderboard(monkeypatch):
    d = _dashboard(monkeypatch)
    wrong = _rec("lesson04.check_v3_kernel", "NOT YET", "2026-12-04T10:00:00Z",
                 "<b>bad</b> & worse")
    room = {"ada": [wrong,
                    _rec(record.TUNING, "PASS", "2026-12-04T10:02:03Z", score=91.25)],
            "grace": []}
    html = d.tables(room)
    every = standings.exercises()
    assert html.count("<th title=") == len(every)
    assert registry.by_stem("04_shared_memory").title in html
    assert "<b>bad</b>" not in html  # a learner's text, escaped
    assert "&lt;b&gt;bad&lt;/b&gt; &amp; worse" in html
    ada = html[html.index("data-learner=\"ada\""):html.index("data-learner=\"grace\"")]
    assert ada.count('class="none">not tried') == len(every) - 2
    assert 'class="not-yet"' in ada and 'class="pass"' in ada and "91.2%" in ada
    assert "<td>1/" in ada and "10:02:03" in ada and "<td>-</td>" in ada  # no prediction recorded
    grace = html[html.index("data-learner=\"grace\""):html.index("</tbody>")]
    assert grace.count("not tried") == len(every) and "<td>0/" in grace
    board = html[html.index('id="leaderboard"'):]
    assert "<td>1</td><td>ada</td><td>91.2 %</td>" in board and "grace" not in board
    assert "no kernel timed yet" in d.tables({"grace": []})


def test_predictions_show_as_a_count_and_a_median_and_break_nothing(monkeypatch):
    d = _dashboard(monkeypatch)
    room = {"ada": [record.Record("2026-12-04T10:00:00Z", "02_naive", "predict.02.v1_ms",
                                    "PREDICTED", "<i>x</i>", None, 0.4),
                    record.Record("2026-12-04T10:01:00Z", "02_naive", "predict.02.v2_ms",
                                    "NOT PREDICTED", "m", None, None),
                    _rec("lesson00.check_grid", "PASS", "2026-12-04T10:02:00Z")],
            "grace": []}
    html = d.tables(room)
    ada = html[html.index("data-learner=\"ada\""):html.index("data-learner=\"grace\"")]
    assert "<td>1/2, 40 %</td>" in ada and "<td>1/" in ada
    assert "predict.02" not in html  # the grid's columns stay the exercises
    assert html.count("<th title=") == len(standings.exercises())


def test_who_is_let_in(monkeypatch):
    d = _dashboard(monkeypatch)
    assert d.allowed({"name": "teach"}) and d.allowed({"name": "other", "admin": True})
    assert not d.allowed({"name": "ada"}) and not d.allowed({"name": "ada", "admin": False})
    assert not d.allowed(None) and not d.allowed({})


def test_read_room(monkeypatch):
    me = getpass.getuser()
    d = _dashboard(monkeypatch, learners=f"{me},hubt-no-such-user")
    home = Path(pwd.getpwnam(me).pw_dir)
    room = d.read_room(d.LEARNERS)
    assert list(room) == [me, "hubt-no-such-user"] and room["hubt-no-such-user"] == []
    want = record.read(home / record.HOME_FILE, owner=os.getuid())
    assert room[me] == want


def test_no_line_a_learner_writes_blanks_the_dashboard():
    """A learner writes their own verdicts file: a line nested past the JSON parser's depth (it
    raised RecursionError and the dashboard answered 500 for the whole room), or JSON that is not
    a record, is skipped like any other line that is not a record."""
    good = ('{"time": "2026-12-05T10:00:00", "lesson": "00", "exercise": "lesson00.check_grid", '
            '"status": "PASS", "message": "ok"}')
    text = "\n".join(["[" * 100_000, good, "[1, 2]", '"x"', "null", '{"status": 3}', good])
    assert [r.exercise for r in record.parse(text)] == ["lesson00.check_grid"] * 2
