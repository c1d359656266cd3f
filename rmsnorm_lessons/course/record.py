"""A learner's verdicts, one JSON line per check run: what the workshop hub's dashboard reads.

Each line of ``~/.rmsnorm-lessons/verdicts.jsonl`` is one check a learner ran in a notebook::

    {"time": "2026-12-04T16:40:05Z", "lesson": "04_shared_memory",
     "exercise": "lesson04.check_v3_kernel", "status": "PASS", "message": "yours_v3 matches ...",
     "score": null, "prediction_error": null}

``status`` is the verdict's word (PASS, NOT YET, NOT VERIFIED), ``message`` its first line
(shortened), ``score`` the check's figure where it has one (the tuning exercise: % of the same-bytes
ceiling), and ``prediction_error`` (optional) how far a recorded prediction was from the
measurement. A prediction (:func:`rmsnorm_lessons.course.predict.versus`) is a line of its own:
exercise
``predict.<key>`` (``predict.02.v1_ms``), status PREDICTED or NOT PREDICTED (no guess was written),
``prediction_error`` the largest relative gap between guess and measurement.

Recording is on only where :data:`ENV` names the file (the hub sets it for every learner's server):
on a laptop, in the tests and when the notebooks are executed for the site, nothing is written to
the home. :mod:`rmsnorm_lessons.course.notebook` records a cell whose value is a verdict, naming the
exercise from the check call in the cell's text (``lesson04.check_v3_kernel(yours_v3)``). Recording
never raises: a read-only home or a full disk loses the line, never the verdict.
"""
from __future__ import annotations

import json
import math
import os
import re
import stat
import time as _time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import registry

#: the file to record into (``~`` is expanded); unset: nothing is recorded
ENV = "RMSNORM_LESSONS_VERDICTS"

#: where the hub asks for it, relative to a learner's home (the dashboard reads it there)
HOME_FILE = ".rmsnorm-lessons/verdicts.jsonl"

STATES = ("PASS", "NOT YET", "NOT VERIFIED")

#: a prediction's record: its exercise is PREDICT + the prediction's key, "predict.02.v1_ms"
PREDICT = "predict."

PREDICTION_STATES = ("PREDICTED", "NOT PREDICTED")

#: the tuning exercise (:mod:`rmsnorm_lessons.lessons.lesson11.tuning`): outside the lessons'
#: registry
TUNING = "tuning.check_tuning"

MESSAGE_MAX = 300

#: what a record's time reads like (UTC, to the second: :func:`now`)
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")

#: a record's lesson and exercise: a notebook stem, "lesson04.check_v3_kernel", "predict.02.v1_ms"
NAME = re.compile(r"[\w.\-]{0,80}")

#: a GPU turn's id (hub/gpu_lock.py hands out 16 hex digits)
LEASE = re.compile(r"[0-9a-f]{1,64}")

#: a learner's file is read from its end, at most this many bytes (a huge file cannot stall the hub)
READ_MAX = 1 << 20

#: a check call in a cell's text: ``lesson04.check_v3_kernel(``, ``tuning.check_tuning(``,
#: ``check_tuning(``
CALL = re.compile(r"(?<![\w.])(?:(lesson\d\d|tuning)\.)?(check_\w+)\s*\(")

@dataclass(frozen=True)
class Record:
    time: str  # UTC, ISO 8601 to the second, "2026-12-04T16:40:05Z"
    lesson: str  # the lesson's notebook stem ("04_shared_memory"), or "tuning"
    exercise: str  # "lesson04.check_v3_kernel"
    status: str  # PASS, NOT YET or NOT VERIFIED
    message: str  # the verdict's first line
    score: float | None = None
    prediction_error: float | None = None
    #: the room's GPU turn a score was measured in (the dashboard ranks only those), else None
    lease: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_dict(cls, d) -> "Record":
        """A record from a parsed line; ValueError when a field is missing or of the wrong kind.
        A learner writes their own file, so every field is held to what a check writes: a time
        of :data:`TIME`'s form, names of :data:`NAME`'s, a message of one line shortened as
        :func:`first_line` does, a lease of :data:`LEASE`'s."""
        if not isinstance(d, dict):
            raise ValueError("a record is a JSON object")
        for key in ("time", "lesson", "exercise", "status", "message"):
            if not isinstance(d.get(key), str):
                raise ValueError(f"a record's {key} must be a string")
        if not TIME.fullmatch(d["time"]):
            raise ValueError(f"a record's time must read like {now()!r}")
        for key in ("lesson", "exercise"):
            if not NAME.fullmatch(d[key]):
                raise ValueError(f"a record's {key} must be a short name, got {d[key][:40]!r}")
        lease = d.get("lease")
        if lease is not None and not (isinstance(lease, str) and LEASE.fullmatch(lease)):
            raise ValueError("a record's lease must be a turn's id (hex) or null")
        states = PREDICTION_STATES if is_prediction(d["exercise"]) else STATES
        if d["status"] not in states:
            raise ValueError(f"a record's status must be one of {states}, got {d['status']!r}")
        numbers = {}
        for key in ("score", "prediction_error"):
            value = d.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value)):
                raise ValueError(f"a record's {key} must be a finite number or null")
            numbers[key] = None if value is None else float(value)
        return cls(d["time"], d["lesson"], d["exercise"], d["status"], first_line(d["message"]),
                   **numbers, lease=lease)

def is_prediction(exercise: str) -> bool:
    return exercise.startswith(PREDICT)

def now() -> str:
    return _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime())

def first_line(message: str, limit: int = MESSAGE_MAX) -> str:
    line = (str(message).strip().splitlines() or [""])[0].strip()
    return line if len(line) <= limit else line[:limit - 3] + "..."

def exercise_of(source: str) -> str | None:
    """The exercise whose check a cell calls last (its value is the cell's), e.g.
    ``"lesson04.check_v3_kernel"``; a bare ``check_tuning(`` is the tuning exercise; None where the
    cell calls no check."""
    found = None
    for module, fn in CALL.findall(source or ""):
        if module:
            found = f"{module}.{fn}"
        elif fn == "check_tuning":
            found = TUNING
    return found

def lesson_of(exercise: str) -> str:
    """The lesson (notebook stem) whose registry row lists ``exercise``; "tuning" for the tuning
    exercise; else the lesson of its number (``lesson04.x`` -> 04's stem), else ""."""
    if exercise == TUNING and not any(TUNING in lesson.exercises for lesson in registry.LESSONS):
        return "tuning"
    if is_prediction(exercise):  # predict.02.v1_ms: lesson 02
        exercise = f"lesson{exercise[len(PREDICT):len(PREDICT) + 2]}."
    for lesson in registry.LESSONS:
        if exercise in lesson.exercises:
            return lesson.stem
    m = re.match(r"lesson(\d\d)\.", exercise)
    found = (lesson.stem for lesson in registry.LESSONS if m and lesson.number == m.group(1))
    return next(found, "")

def record_path() -> Path | None:
    where = os.environ.get(ENV, "").strip()
    return Path(where).expanduser() if where else None

def make_record(exercise: str, verdict) -> Record:
    score = getattr(verdict, "score", None)
    if score is not None and not (isinstance(score, (int, float)) and math.isfinite(score)):
        score = None
    lease = getattr(verdict, "lease", None)
    lease = lease if isinstance(lease, str) and LEASE.fullmatch(lease) else None
    return Record(now(), lesson_of(exercise), exercise, verdict.status, first_line(verdict.message),
                  None if score is None else float(score), lease=lease)

def record(exercise: str, verdict, path=None) -> bool:
    """Append ``verdict`` (a :class:`~rmsnorm_lessons.course.verdict.Verdict`) for ``exercise`` to
    ``path`` (default :func:`record_path`; nothing where that is None). True when the line was
    written; never raises (a read-only home, a full disk: the line is lost, the check is not)."""
    try:
        return _append(make_record(exercise, verdict), path)
    except Exception:  # recording is a convenience; the verdict is what matters
        return False

def record_prediction(key: str, status: str, message: str, error: float | None,
                      path=None) -> bool:
    """Append a prediction's line (exercise ``predict.<key>``, status PREDICTED or NOT PREDICTED,
    ``prediction_error`` = ``error``); like :func:`record`, never raises."""
    try:
        if status not in PREDICTION_STATES:
            return False
        if error is not None and not (isinstance(error, (int, float)) and math.isfinite(error)):
            error = None
        exercise = PREDICT + key
        return _append(Record(now(), lesson_of(exercise), exercise, status, first_line(message),
                              None, None if error is None else float(error)), path)
    except Exception:
        return False

def _append(rec: Record, path) -> bool:
    try:
        path = Path(path) if path is not None else record_path()
        if path is None:
            return False
        line = (rec.to_json() + "\n").encode()
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, line)  # one write of one short line: appended whole
        finally:
            os.close(fd)
        return True
    except Exception:  # recording is a convenience; the verdict is what matters
        return False

def record_cell(source: str, verdict, path=None) -> bool:
    """Record a cell's verdict under the exercise its text calls (nothing if it calls none)."""
    exercise = exercise_of(source)
    return record(exercise, verdict, path) if exercise else False

def parse(text: str) -> list[Record]:
    """The records in a file's text; lines that are not records (cut, edited) are skipped."""
    out = []
    for line in text.splitlines():
        try:
            out.append(Record.from_dict(json.loads(line)))
        # not JSON (a ValueError), nested past the parser's depth (RecursionError), or JSON that
        # is not a record: a learner's file is theirs to write, so any line may be anything
        except (ValueError, RecursionError, TypeError, KeyError, AttributeError):
            continue
    return out

def read(path, owner: int | None = None, limit: int = READ_MAX) -> list[Record]:
    """The records of the file at ``path`` ([] where there is none).

    ``owner``: only a regular file owned by this uid is read, and neither it nor its folder through
    a symbolic link, so a reader running as root (the hub's dashboard) reads a learner's own records
    and nothing they point it at. Only the last ``limit`` bytes are read."""
    path = Path(path)
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return []
    try:
        fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    except OSError:
        return []
    finally:
        os.close(folder)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (owner is not None and st.st_uid != owner):
            return []
        start = max(0, st.st_size - limit)
        os.lseek(fd, start, os.SEEK_SET)
        data = b""
        while len(data) < st.st_size - start:
            chunk = os.read(fd, st.st_size - start - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    text = data.decode("utf-8", errors="replace")
    if start:  # the first line is cut
        text = text.split("\n", 1)[-1]
    return parse(text)

def latest(records) -> dict[str, Record]:
    """The last attempt at each exercise (records are in the order they were written)."""
    last: dict[str, Record] = {}
    for r in records:
        last[r.exercise] = r
    return last
