"""The instructor's dashboard (hub/dashboard.py, hub/room_view.py, and the rules of what counts,
rmsnorm_lessons/workshop/standings.py) as HTML, without a hub: the grid by lesson, forged verdicts
counted apart, scores bounded to what a check can produce, the leaderboard of scores measured alone
on the room's GPU, learners grouped by the check they are stuck on, escaping, and who is let in.
tests/test_hub.py opens it for real, in Chromium, behind the hub (a lesson's columns opened
too)."""
from __future__ import annotations

import calendar
import getpass
import json
import os
import pwd
import re
import time

from rmsnorm_lessons.course import record, registry
from rmsnorm_lessons.workshop import standings
from test_hub_tls import _load

room_view = _load("room_view")
EVERY = standings.exercises()
L00 = registry.by_stem("00_setup").exercises
L04 = registry.by_stem("04_shared_memory").exercises


def _dashboard(monkeypatch, learners="ada,grace", instructor="teach"):
    monkeypatch.setenv("RMSNORM_HUB_LEARNERS", learners)
    monkeypatch.setenv("RMSNORM_HUB_INSTRUCTOR", instructor)
    monkeypatch.delenv("RMSNORM_HUB_GPU_LOCK_DIR", raising=False)
    return _load("dashboard")


def _rec(exercise, status, at, message="m", score=None, lease=None):
    return record.Record(at, record.lesson_of(exercise), exercise, status, message, score,
                         lease=lease)


def _row(html: str, name: str) -> str:
    start = html.index(f'data-learner="{name}"')
    return html[start:html.index("</tr>", start)]


def _epoch(at: str) -> float:
    return calendar.timegm(time.strptime(at, "%Y-%m-%dT%H:%M:%SZ"))


def test_the_grid_is_by_lesson_and_opens_each_lesson():
    other = next(e for e in L04 if e != "lesson04.check_v3_kernel")
    room = {"ada": [_rec("lesson04.check_v3_kernel", "NOT YET", "2026-12-04T10:00:00Z",
                         "<b>bad</b> & worse"),
                    _rec(other, "PASS", "2026-12-04T10:01:00Z"),
                    _rec(record.TUNING, "PASS", "2026-12-04T10:02:03Z", score=91.25)],
            "grace": []}
    html = room_view.tables(room, turns={})
    lessons = [lesson for lesson in registry.LESSONS if lesson.exercises]
    assert html.count('<th class="lesson"') == len(lessons)
    assert html.count('<th class="ex ') == len(EVERY)  # every exercise, hidden until opened
    assert registry.by_stem("04_shared_memory").title in html
    assert "<b>bad</b>" not in html and "&lt;b&gt;bad&lt;/b&gt; &amp; worse" in html
    ada = _row(html, "ada")
    assert f"<td>2/{len(EVERY)}</td>" in ada and "10:02:03" in ada
    assert re.search(rf'class="lesson l-04 some" data-lesson="04" data-passed="1">1/{len(L04)}<',
                     ada)
    assert 'class="lesson l-00 none"' in ada and f">0/{len(L00)}<" in ada
    assert ada.count('class="ex ') == len(EVERY) and "91.2%" in ada
    grace = _row(html, "grace")
    assert f"<td>0/{len(EVERY)}</td>" in grace and grace.count("not tried") == len(EVERY)


def test_forged_verdicts_are_counted_apart_and_never_passed():
    """A learner writes their own file: 104 PASS lines under names no lesson has, 3 PASS of one
    real exercise, a score of 1e308 and one of -5: none of it is passed or ranked."""
    forged = [_rec(f"lesson{n:02d}.check_forged{k}", "PASS", "2026-12-04T10:00:00Z")
              for n in range(14) for k in range(7)] + \
        [_rec(f"x.check_{k}", "PASS", "2026-12-04T10:00:00Z") for k in range(6)]
    real = [_rec("lesson00.check_grid", "PASS", "2026-12-04T10:01:00Z")] * 3
    scores = [_rec(record.TUNING, "PASS", "2026-12-04T10:02:00Z", score=1e308),
              _rec(record.TUNING, "PASS", "2026-12-04T10:02:01Z", score=-5.0)]
    room = {"ada": forged + real + scores}
    (row,) = standings.room_rows(room)
    assert row.passed == 1 and row.unknown == 104 and row.out_of_range == 2
    assert record.TUNING not in row.cells  # the grid shows no forged score
    html = room_view.tables(room, turns={})
    ada = _row(html, "ada")
    assert f"<td>1/{len(EVERY)}</td>" in ada
    assert "104 names the lessons do not have; 2 scores no check makes" in ada
    assert "forged" not in ada.split("not from a check")[0] and "check_forged" not in html
    assert standings.leaderboard(room, turns=None)[0] == []
    assert "no kernel timed yet" in html and "e+307" not in html and "1e308" not in html


def test_only_scores_measured_alone_in_the_learner_s_own_turn_are_ranked():
    at = "2026-12-04T10:02:00Z"
    turns = {"a1": {"lease": "a1", "name": "ada", "start": _epoch(at) - 30, "end": _epoch(at) - 1},
             "g1": {"lease": "g1", "name": "grace", "start": _epoch(at) - 30,
                    "end": _epoch(at) - 1}}
    room = {"ada": [_rec(record.TUNING, "PASS", at, score=91.0, lease="a1"),
                    _rec(record.TUNING, "PASS", at, score=99.0)],  # no turn: shared
            "grace": [_rec(record.TUNING, "PASS", at, score=95.0, lease="a1")],  # ada's turn
            "linus": [_rec(record.TUNING, "PASS", "2026-12-04T11:00:00Z", score=97.0,
                           lease="g1")]}  # long after the turn it names (and not his)
    board, left_out = standings.leaderboard(room, turns=turns)
    assert [(n, s) for n, s, _ in board] == [("ada", 91.0)]
    assert left_out == {"ada": 1, "grace": 1, "linus": 1}
    html = room_view.tables(room, turns=turns)
    assert "<td>1</td><td>ada</td><td>91.0 %</td>" in html
    assert re.search(r'id="not-ranked">not ranked.*ada 1, grace 1, linus 1', html)


def test_learners_are_grouped_by_the_check_they_are_stuck_on():
    v3, v1 = "lesson04.check_v3_kernel", "lesson02.check_v1_kernel"
    room = {f"l{i}": [_rec(v1, "PASS", "2026-12-04T09:00:00Z"),
                      _rec(v3, "NOT YET", "2026-12-04T10:00:00Z")] for i in range(7)}
    room.update({"m0": [_rec(v1, "NOT YET", "2026-12-04T10:00:00Z")],
                 "m1": [_rec(v1, "NOT YET", "2026-12-04T10:00:00Z"),
                        _rec(v1, "PASS", "2026-12-04T10:05:00Z")],  # passed since: not stuck
                 "m2": [_rec(v3, "NOT YET", "2026-12-04T10:00:00Z"),
                        _rec("lesson99.check_x", "NOT YET", "2026-12-04T10:06:00Z")],
                 "idle": []})
    rows = standings.room_rows(room)
    assert standings.stuck(rows) == [(v3, [f"l{i}" for i in range(7)] + ["m2"]), (v1, ["m0"])]
    html = room_view.stuck_list(rows)
    assert "<b>8</b> on lesson 04&#x27;s v3_kernel check: l0, l1" in html
    assert "<b>1</b> on lesson 02&#x27;s v1_kernel check: m0" in html
    assert "<b>1</b> not started: idle" in html
    assert html.index("v3_kernel") < html.index("v1_kernel")  # the largest group first


def test_predictions_show_as_a_count_and_a_median_and_break_nothing():
    room = {"ada": [record.Record("2026-12-04T10:00:00Z", "02_naive", "predict.02.v1_ms",
                                  "PREDICTED", "<i>x</i>", None, 0.4),
                    record.Record("2026-12-04T10:01:00Z", "02_naive", "predict.02.v2_ms",
                                  "NOT PREDICTED", "m", None, None),
                    _rec("lesson00.check_grid", "PASS", "2026-12-04T10:02:00Z")],
            "grace": []}
    html = room_view.tables(room, turns={})
    ada = _row(html, "ada")
    assert "<td>1/2, 40 %</td>" in ada and f"<td>1/{len(EVERY)}</td>" in ada
    assert "predict.02" not in html and "<td class=\"apart\">-</td>" in ada


def test_the_instructor_is_not_a_learner_and_others_are_not_let_in(monkeypatch):
    d = _dashboard(monkeypatch, learners="ada,teach,grace")
    assert d.LEARNERS == ["ada", "grace"]  # the instructor is never counted
    assert d.allowed({"name": "teach"}) and d.allowed({"name": "other", "admin": True})
    assert not d.allowed({"name": "ada"}) and not d.allowed({"name": "ada", "admin": False})
    assert not d.allowed(None) and not d.allowed({})
    assert 'id="gpu">GPU turns: the queue does not answer' in d.tables()


def test_read_room(monkeypatch):
    me = getpass.getuser()
    d = _dashboard(monkeypatch, learners=f"{me},hubt-no-such-user")
    home = pwd.getpwnam(me).pw_dir
    room = d.read_room(d.LEARNERS)
    assert list(room) == [me, "hubt-no-such-user"] and room["hubt-no-such-user"] == []
    want = record.read(os.path.join(home, record.HOME_FILE), owner=os.getuid())
    assert room[me] == want


def test_no_line_a_learner_writes_blanks_the_dashboard():
    """A learner writes their own verdicts file: a line nested past the JSON parser's depth (it
    raised RecursionError and the dashboard answered 500 for the whole room), or JSON that is not
    a record, is skipped like any other line that is not a record."""
    good = json.dumps({"time": "2026-12-05T10:00:00Z", "lesson": "00_setup",
                       "exercise": "lesson00.check_grid", "status": "PASS", "message": "ok"})
    text = "\n".join(["[" * 100_000, good, "[1, 2]", '"x"', "null", '{"status": 3}', good])
    assert [r.exercise for r in record.parse(text)] == ["lesson00.check_grid"] * 2
