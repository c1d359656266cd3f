"""The record of verdicts (rmsnorm_lessons/course/record.py, rmsnorm_lessons/workshop/standings.py)
and the notebook hook that writes it."""
from __future__ import annotations

import json
import os

import pytest

from rmsnorm_lessons.course import notebook, record, registry
from rmsnorm_lessons.course.verdict import Verdict, failed, not_verified, passed
from rmsnorm_lessons.workshop import standings


@pytest.fixture
def target(tmp_path, monkeypatch):
    path = tmp_path / "home" / ".rmsnorm-lessons" / "verdicts.jsonl"
    monkeypatch.setenv(record.ENV, str(path))
    return path


def test_exercise_named_from_the_cells_text():
    assert record.exercise_of("lesson04.check_v3_kernel(yours_v3)  # sanitize=True ...") == \
        "lesson04.check_v3_kernel"
    # the last call is the one whose value the cell shows
    two_calls = "print(lesson00.check_grid(1, 2, 3))\nlesson00.check_bytes(n, b)"
    assert record.exercise_of(two_calls) == "lesson00.check_bytes"
    assert record.exercise_of("tuning.check_tuning(Config(K=2))") == record.TUNING
    assert record.exercise_of("check_tuning(cfg, target=80)") == record.TUNING
    assert record.exercise_of("x = 1\nrl.check.check_version('v2_warp', 1, 8)") is None
    assert record.exercise_of("check_other(1)") is None
    assert record.exercise_of("") is None


def test_lessons_and_exercises_come_from_the_registry():
    for lesson in registry.LESSONS:
        for exercise in lesson.exercises:
            assert record.lesson_of(exercise) == lesson.stem
    assert record.lesson_of(record.TUNING) == "11_v7_tuning"  # lesson 11's row lists it
    assert record.lesson_of("lesson04.check_not_listed") == "04_shared_memory"
    assert record.lesson_of("nonsense") == ""
    names = standings.exercises()
    assert record.TUNING in names
    assert names == [e for lesson in registry.LESSONS for e in lesson.exercises]


def test_record_and_read_back(target):
    assert record.record("lesson04.check_v3_kernel", failed("dweight wrong\nsecond line")) is True
    tuned = Verdict(True, "92.0 % of the ceiling", score=92.0)
    assert record.record_cell("tuning.check_tuning(c)", tuned)
    assert not record.record_cell("print('no check here')", passed("x"))
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    assert oct(target.parent.stat().st_mode & 0o777) == "0o700"
    first, second = record.read(target, owner=os.getuid())
    assert (first.lesson, first.exercise, first.status, first.message, first.score) == \
        ("04_shared_memory", "lesson04.check_v3_kernel", "NOT YET", "dweight wrong", None)
    assert (second.lesson, second.status, second.score) == ("11_v7_tuning", "PASS", 92.0)
    assert first.time.endswith("Z") and len(first.time) == 20
    line = json.loads(target.read_text().splitlines()[0])
    assert set(line) == {"time", "lesson", "exercise", "status", "message", "score",
                         "prediction_error", "lease"}


def test_nothing_recorded_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(record.ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert record.record_path() is None
    assert record.record("lesson00.check_grid", passed("ok")) is False
    assert not (tmp_path / ".rmsnorm-lessons").exists()


def test_recording_never_raises(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        blocked = os.geteuid() != 0  # root writes anywhere: use a path under a file instead
        path = (ro / "d" / "v.jsonl") if blocked else (tmp_path / "a-file" / "v.jsonl")
        (tmp_path / "a-file").write_text("not a folder")
        monkeypatch.setenv(record.ENV, str(path))
        assert record.record("lesson00.check_grid", passed("ok")) is False
        assert record.record("lesson00.check_grid", "not a verdict") is False
    finally:
        ro.chmod(0o700)


def test_long_messages_and_bad_lines(target):
    record.record("lesson01.check_term2", failed("x" * 1000))
    with open(target, "a") as f:
        f.write("not json\n")
        base = {"time": "t", "lesson": "l", "exercise": "e", "message": ""}
        f.write(json.dumps({**base, "status": "WRONG"}) + "\n")
        f.write(json.dumps({**base, "status": "PASS", "score": "high"}) + "\n")
        f.write('{"time": "t", "lesson": "l", "exer')  # cut mid-line
    records = record.read(target)
    assert len(records) == 1 and len(records[0].message) == record.MESSAGE_MAX
    assert records[0].message.endswith("...")


def test_read_refuses_links_other_owners_and_keeps_the_tail(tmp_path, target):
    for i in range(50):
        record.record(f"lesson00.check_grid", failed(f"attempt {i}"))
    assert len(record.read(target)) == 50
    tail = record.read(target, limit=600)
    assert 0 < len(tail) < 50 and tail[-1].message == "attempt 49"
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    assert record.read(link) == []
    linked_folder = tmp_path / "folder-link"
    linked_folder.symlink_to(target.parent)
    assert record.read(linked_folder / target.name) == []
    assert len(record.read(target.parent / target.name)) == 50
    assert record.read(target, owner=os.getuid() + 1) == []
    assert record.read(tmp_path / "missing.jsonl") == []
    assert record.read(tmp_path) == []  # a folder


def _rec(exercise, status, time, score=None, error=None):
    return record.Record(time, record.lesson_of(exercise), exercise, status, "m", score, error)


def test_room_rows_and_leaderboard():
    room = {
        "ada": [_rec("lesson00.check_grid", "NOT YET", "2026-12-04T10:00:00Z"),
                _rec("lesson00.check_grid", "PASS", "2026-12-04T10:01:00Z"),
                _rec(record.TUNING, "NOT YET", "2026-12-04T10:02:00Z", score=70.0),
                _rec(record.TUNING, "PASS", "2026-12-04T10:03:00Z", score=91.5, error=4.0)],
        "grace": [_rec(record.TUNING, "PASS", "2026-12-04T10:05:00Z", score=95.0),
                  _rec(record.TUNING, "NOT YET", "2026-12-04T10:06:00Z", score=60.0)],
        "linus": [],
    }
    rows = {r.learner: r for r in standings.room_rows(room)}
    assert list(rows) == ["ada", "grace", "linus"]
    assert rows["ada"].cells["lesson00.check_grid"].status == "PASS"
    assert rows["ada"].passed == 2 and rows["ada"].last_time == "2026-12-04T10:03:00Z"
    assert rows["ada"].prediction_error == 4.0 and rows["grace"].prediction_error is None
    assert rows["grace"].cells[record.TUNING].status == "NOT YET"  # the last try, not the best
    assert rows["linus"].cells == {} and rows["linus"].last_time is None
    board, left_out = standings.leaderboard(room)  # no room's turns given: every score counts
    assert [(n, s) for n, s, _ in board] == [("grace", 95.0), ("ada", 91.5)] and left_out == {}


def test_predictions_are_records_of_their_own(target):
    assert record.record_prediction("02.v1_ms", "PREDICTED", "02.v1_ms: your guess ...", 1.1)
    assert record.record_prediction("03.v2_ms", "NOT PREDICTED", "no guess", None)
    assert not record.record_prediction("03.v2_ms", "PASS", "a check's word", None)
    first, second = record.read(target)
    assert (first.exercise, first.lesson, first.status, first.prediction_error) == (
        "predict.02.v1_ms", registry.LESSONS[2].stem, "PREDICTED", 1.1)
    assert (second.lesson, second.status, second.prediction_error) == (
        registry.LESSONS[3].stem, "NOT PREDICTED", None)
    # a prediction's word for a check, or a check's word for a prediction: not a record
    for exercise, status in (("lesson00.check_grid", "PREDICTED"), ("predict.02.x", "PASS")):
        with pytest.raises(ValueError, match="status"):
            record.Record.from_dict({"time": "2026-12-04T10:00:00Z", "lesson": "l",
                                       "exercise": exercise,
                                       "status": status, "message": "m"})


def test_room_rows_count_predictions_and_take_the_median_error():
    room = {"ada": [_rec("predict.02.a", "PREDICTED", "2026-12-04T10:00:00Z", error=0.9),
                    _rec("predict.02.a", "PREDICTED", "2026-12-04T10:01:00Z", error=0.1),
                    _rec("predict.02.b", "PREDICTED", "2026-12-04T10:02:00Z", error=0.5),
                    _rec("predict.03.c", "PREDICTED", "2026-12-04T10:03:00Z", error=3.0),
                    _rec("predict.03.d", "NOT PREDICTED", "2026-12-04T10:04:00Z"),
                    _rec("lesson00.check_grid", "PASS", "2026-12-04T10:05:00Z")]}
    (row,) = standings.room_rows(room)
    assert (row.passed, row.predicted, row.predictions) == (1, 3, 4)
    assert row.prediction_error == 0.5  # the median of the last errors 0.1, 0.5 and 3.0


def test_verdict_score():
    assert Verdict(True, "m", score=90).score == 90
    assert not_verified("m").score is None
    for bad in (float("nan"), float("inf"), "90", True):
        with pytest.raises(ValueError, match="score"):
            Verdict(False, "m", score=bad)


def test_the_notebook_hook_records_a_cells_verdict(target):
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    notebook.load_ipython_extension(ip)
    notebook.load_ipython_extension(ip)  # twice (setup() runs in every lesson): one hook
    hooks = [h for h in ip.events.callbacks["post_run_cell"] if h.__name__ == "record_verdict"]
    assert len(hooks) == 1
    try:
        r = ip.run_cell("from rmsnorm_lessons.lessons import lesson01\n"
                        "lesson01.check_term2(lambda *a: None)")
        assert r.success and not r.result
        ip.run_cell("x = lesson01.check_term2(lambda *a: None)")  # no value shown: nothing recorded
        ip.run_cell("print('hello')")
        records = record.read(target)
        assert [(r.exercise, r.status, r.lesson) for r in records] == \
            [("lesson01.check_term2", "NOT YET", "01_rmsnorm_math")]
        assert "None" in records[0].message
        # a record that cannot be written does not fail the cell
        os.environ[record.ENV] = str(target / "under-a-file")
        r = ip.run_cell("lesson01.check_term2(lambda *a: None)")
        assert r.success and r.result.status == "NOT YET"
    finally:
        ip.events.unregister("post_run_cell", hooks[0])


@pytest.mark.parametrize("answer, want", [("b", "b"), (" B ", "b"), ("c", "c")])
def test_a_choice_is_read_whatever_its_case(answer, want):
    from rmsnorm_lessons.course.verdict import read_choice
    assert read_choice(answer, "abc") == (want, None)


@pytest.mark.parametrize("answer, says", [(None, 'replace None with one of "a", "b", "c"'),
                                          (..., "replace the ..."), ("d", "got 'd'"),
                                          (2, "got 2"), ("ab", "got 'ab'")])
def test_a_choice_not_offered_is_not_yet(answer, says):
    from rmsnorm_lessons.course.verdict import read_choice
    got, verdict = read_choice(answer, "abc")
    assert got is None and not verdict.passed and verdict.verified and says in verdict.message
