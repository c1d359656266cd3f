"""The dashboard's tables as HTML (hub/dashboard.py serves them): the room at a glance.

* **Where learners are stuck**: learners grouped by the check their last attempt failed ("7 on
  lesson 04's v3_kernel check"), the largest group first, and those who have not started;
* **the grid**, a row per learner and a column per lesson: how many of the lesson's exercises they
  passed ("2/3"), coloured; a lesson's header opens its exercises' columns (the last verdict of
  each, its message on hover) and closes them again; beside it the learner's total, last attempt,
  predictions, and what their file holds that no check wrote (names the lessons do not have,
  scores no check can produce), counted apart and never passed;
* **the tuning leaderboard**: each learner's best score measured alone on the room's GPU (a turn
  the room's queue recorded for them), with the scores left out counted beside it;
* the GPU's queue now.

Everything a learner wrote is escaped. The rules of what counts are
:mod:`rmsnorm_lessons.workshop.standings`'.
"""
from __future__ import annotations

import html

from rmsnorm_lessons.course import record, registry
from rmsnorm_lessons.workshop import standings

esc = html.escape
SHORT = {"PASS": "PASS", "NOT YET": "NOT YET", "NOT VERIFIED": "NOT VERIFIED"}


def _clock(iso: str | None) -> str:
    return iso[11:19] if iso and len(iso) >= 19 else "-"


def _key(stem: str) -> str:
    """A lesson's key in class names and data attributes: its number, or "tuning"."""
    return stem[:2] if stem[:2].isdigit() else stem


def lesson_title(stem: str) -> str:
    try:
        return registry.by_stem(stem).title
    except ValueError:
        return "the tuning exercise (rmsnorm_lessons.lessons.lesson11.tuning)"


def predictions(row) -> str:
    """``"3/4, 40 %"``: predictions written of those measured, and the median prediction error."""
    if not row.predictions and row.prediction_error is None:
        return "-"
    error = "-" if row.prediction_error is None else f"{100 * row.prediction_error:.0f} %"
    return f"{row.predicted}/{row.predictions}, {error}"


def stuck_list(rows) -> str:
    items = [f'<li data-exercise="{esc(e)}"><b>{len(who)}</b> on {esc(standings.label(e))}: '
             f"{esc(', '.join(who))}</li>" for e, who in standings.stuck(rows)]
    idle = [r.learner for r in rows if r.last_time is None]
    if idle:
        items.append(f'<li data-exercise=""><b>{len(idle)}</b> not started: '
                     f"{esc(', '.join(idle))}</li>")
    return f'<ul id="stuck">{"".join(items) or "<li>nobody is stuck</li>"}</ul>'


def _exercise_cell(key: str, e: str, r) -> str:
    if r is None:
        return f'<td class="ex l-{key} none">not tried</td>'
    tip = f"{r.time}: {r.message}"
    score = f" {r.score:.1f}%" if r.score is not None else ""
    cls = r.status.lower().replace(" ", "-")
    return (f'<td class="ex l-{key} {cls}" title="{esc(tip)}">'
            f"{esc(SHORT.get(r.status, r.status))}{esc(score)}</td>")


def _lesson_cell(key: str, exercises, row) -> str:
    done = sum(1 for e in exercises if e in row.cells and row.cells[e].status == "PASS")
    tried = any(e in row.cells for e in exercises)
    cls = "all" if done == len(exercises) else ("some" if tried else "none")
    if row.stuck in exercises:
        cls += " stuck"
    return (f'<td class="lesson l-{key} {cls}" data-lesson="{key}" data-passed="{done}">'
            f"{done}/{len(exercises)}</td>")


def _apart(row) -> str:
    said = []
    if row.unknown:
        said.append(f"{row.unknown} name{'s' * (row.unknown != 1)} the lessons do not have")
    if row.out_of_range:
        said.append(f"{row.out_of_range} score{'s' * (row.out_of_range != 1)} no check makes")
    return (f'<td class="apart">{esc("; ".join(said))}</td>' if said
            else '<td class="apart">-</td>')


def grid(rows) -> str:
    groups = standings.by_lesson()
    total = sum(len(e) for _, e in groups)
    head = []
    for stem, exercises in groups:
        key = _key(stem)
        head.append(f'<th class="lesson" data-lesson="{key}" title="{esc(lesson_title(stem))}: '
                    f'click to open or close its {len(exercises)} exercises">{esc(key)}</th>')
        head += [f'<th class="ex l-{key}" title="{esc(e)}">{esc(e.partition(".")[2] or e)}</th>'
                 for e in exercises]
    body = []
    for row in rows:
        cells = []
        for stem, exercises in groups:
            key = _key(stem)
            cells.append(_lesson_cell(key, exercises, row))
            cells += [_exercise_cell(key, e, row.cells.get(e)) for e in exercises]
        body.append(f'<tr data-learner="{esc(row.learner)}" data-passed="{row.passed}" '
                    f'data-tried="{int(row.last_time is not None)}"><th>{esc(row.learner)}</th>'
                    f"<td>{row.passed}/{total}</td><td>{esc(_clock(row.last_time))}</td>"
                    f"<td>{esc(predictions(row))}</td>{_apart(row)}{''.join(cells)}</tr>")
    return ('<table id="grid"><thead><tr><th>learner</th><th>passed</th>'
            "<th>last attempt (UTC)</th><th>predictions written, median error</th>"
            f"<th>not from a check</th>{''.join(head)}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def leaderboard(room: dict, turns: dict | None) -> str:
    board, left_out = standings.leaderboard(room, turns=turns)
    lines = "".join(f"<tr><td>{i}</td><td>{esc(n)}</td><td>{s:.1f} %</td>"
                    f"<td>{esc(_clock(t))}</td></tr>" for i, (n, s, t) in enumerate(board, 1))
    table = ('<table id="leaderboard"><thead><tr><th>#</th><th>learner</th>'
             "<th>% of the same-bytes ceiling</th><th>at (UTC)</th></tr></thead><tbody>"
             + (lines or '<tr><td colspan="4">no kernel timed yet</td></tr>') + "</tbody></table>")
    if left_out:
        who = ", ".join(f"{n} {k}" for n, k in left_out.items())
        table += (f'<p id="not-ranked">not ranked, not measured alone on the room\'s GPU (no '
                  f"turn of theirs recorded): {esc(who)}</p>")
    return table


def queue_line(queue) -> str:
    if queue is None:
        return '<p id="gpu">GPU turns: the queue does not answer</p>'
    if not queue:
        return '<p id="gpu">GPU: free</p>'
    head, rest = queue[0], queue[1:]
    return (f'<p id="gpu">GPU: {esc(str(head.get("name")))} ({esc(str(head.get("what")))}, '
            f'{esc(str(head.get("for_s")))} s); {len(rest)} waiting</p>')


def tables(room: dict, turns: dict | None = None, queue=None) -> str:
    """Everything below the page's title, as HTML."""
    rows = standings.room_rows(room)
    return (f"{queue_line(queue)}<h2>Where learners are stuck</h2>{stuck_list(rows)}"
            f"<h2>Exercises, by lesson</h2>{grid(rows)}"
            "<h2>Tuning: v7_fast's variants against the same-bytes ceiling</h2>"
            f'{leaderboard(room, turns)}<p class="stamp">read at {esc(record.now())}</p>')
