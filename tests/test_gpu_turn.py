"""The package's side of the room's GPU turn (rmsnorm_lessons/speed/gpu_turn.py), against the hub's
own queue (hub/gpu_lock.py, served in this process): a timing outside a room takes no turn and is
not marked; in a room it waits behind who is ahead (and says who), is marked alone when it had the
GPU and shared when it could not; the tuning check measures v7 and its ceiling in one turn and
hands the turn's lease to the dashboard; a score no kernel can reach scores nothing."""
from __future__ import annotations

import io
import threading
import time

import pytest

from rmsnorm_lessons.course import record
from rmsnorm_lessons.core.ladder.v7_fast import Config
from rmsnorm_lessons.lessons.lesson11 import tuning
from rmsnorm_lessons.speed import bench, gpu_turn, timing
from _lesson_support import fake_tuning_gpu as _fake_gpu
from test_gpu_lock import _serve, gpu_lock


@pytest.fixture
def room(tmp_path, monkeypatch):
    stop = _serve(tmp_path, per_uid=10)
    monkeypatch.setenv(gpu_turn.ENV, str(tmp_path / gpu_lock.SOCKET))
    yield tmp_path
    stop()


def test_outside_a_room_nothing_waits_and_nothing_is_marked(monkeypatch):
    monkeypatch.delenv(gpu_turn.ENV, raising=False)
    said = io.StringIO()
    with gpu_turn.turn("timing", log=said) as t:
        assert gpu_turn.held() is None and not t.room
    assert t.mark() == "" and said.getvalue() == ""


def test_a_turn_waits_behind_who_is_ahead_and_says_so(room):
    said = io.StringIO()
    holding = threading.Event()
    done = threading.Event()

    def first():
        with gpu_turn.turn("tuning check", log=io.StringIO()):
            holding.set()
            done.wait(10)

    other = threading.Thread(target=first)
    other.start()
    assert holding.wait(10)
    threading.Timer(0.5, done.set).start()
    t0 = time.monotonic()
    with gpu_turn.turn("timing", log=said) as t:
        waited = time.monotonic() - t0
        with gpu_turn.turn("nested", log=said) as inner:  # inside a turn: that one
            assert inner is t
    other.join(10)
    text = said.getvalue()
    assert waited >= 0.4 and t.alone and t.mark() == "alone", text
    assert "1 ahead of you for the room's GPU: root (tuning check, holding it" in text, text
    assert "GPU turn: yours after" in text
    assert t.lease in {g["lease"] for g in gpu_lock.grants(room)}


def test_no_queue_or_a_turn_taken_back_is_marked_shared(room, monkeypatch, tmp_path):
    said = io.StringIO()
    monkeypatch.setenv(gpu_turn.ENV, str(tmp_path / "nowhere.sock"))
    with gpu_turn.turn("timing", log=said) as t:
        pass
    assert t.shared and t.mark() == "shared" and "does not answer" in said.getvalue()
    monkeypatch.setenv(gpu_turn.ENV, str(room / gpu_lock.SOCKET))
    with gpu_turn.turn("timing", log=said) as t:
        time.sleep(2)  # past the queue's limit here (1.5 s)
    assert t.shared and "took the turn back" in said.getvalue()
    assert t.lease not in {g["lease"] for g in gpu_lock.grants(room)}


def test_a_timing_says_how_the_gpu_was_had():
    alone = gpu_turn.Turn("t", lease="ab12")
    shared = gpu_turn.Turn("t", shared=True)
    rows = [timing._timing(name, 8, 1024, timing.Runs([0.1, 0.1, 0.12], turn), 10**6, 1000.0)
            for name, turn in (("v1_naive", alone), ("v2_warp", shared))]
    rows.append(timing._timing("v3_smem", 8, 1024, [0.1, 0.1], 10**6, 1000.0))
    assert [r.gpu for r in rows] == ["alone", "shared", ""]
    lines = bench.table(rows).splitlines()
    assert [("(GPU shared)" in line) for line in lines[1:]] == [False, True, False]
    times = timing.Times({"a": [1.0], "b": [2.0]}, shared)
    assert times["b"].turn is shared and times.turn is shared and times["a"] == [1.0]


def test_the_tuning_check_measures_in_one_turn_and_hands_on_its_lease(room, monkeypatch):
    _fake_gpu(monkeypatch, yours_ms=0.090, default_ms=0.100)
    v = tuning.check_tuning(Config(K=2, prefetch=False), 512, repeats=7)
    assert v.passed and v.lease in {g["lease"] for g in gpu_lock.grants(room)}, v
    assert "alone on the room's GPU" in v.message
    kept = record.make_record(record.TUNING, v)
    assert kept.lease == v.lease
    assert record.parse(kept.to_json())[0] == kept
    monkeypatch.setenv(gpu_turn.ENV, str(room / "nowhere.sock"))
    _fake_gpu(monkeypatch, yours_ms=0.090, default_ms=0.100)
    v = tuning.check_tuning(Config(K=2, prefetch=False), 512, repeats=7)
    assert v.lease is None and "shared: the dashboard does not rank it" in v.message


def test_a_score_no_kernel_can_reach_scores_nothing(monkeypatch):
    monkeypatch.delenv(gpu_turn.ENV, raising=False)
    _fake_gpu(monkeypatch, yours_ms=0.040, default_ms=0.100)  # twice the ceiling's speed
    v = tuning.check_tuning(Config(K=2), 512, repeats=7)
    assert v.status == "NOT VERIFIED" and v.score is None and "timing fault" in v.message


@pytest.mark.parametrize("field,value", [("time", "9999"), ("time", "2026-12-04 10:00:00"),
                                         ("lease", "<b>x</b>"), ("lease", 7),
                                         ("exercise", "x" * 200), ("lesson", "a b")])
def test_a_record_holds_only_what_a_check_writes(field, value):
    import json

    good = {"time": "2026-12-04T10:00:00Z", "lesson": "tuning", "exercise": record.TUNING,
            "status": "PASS", "message": "m\nsecond line " + "x" * 500, "score": 90.0,
            "lease": "ab12"}
    (kept,) = record.parse(json.dumps(good))
    assert kept.lease == "ab12" and kept.message == "m"  # one line, as a check writes it
    assert record.parse(json.dumps({**good, field: value})) == []
