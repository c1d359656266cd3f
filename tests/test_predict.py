"""rl.predict: a guess, then the measurement beside it (CPU)."""
import json
import math

import numpy as np
import pytest

import rmsnorm_lessons as rl
from rmsnorm_lessons import lessons, predict, verdicts


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setattr(predict, "_GUESSES", {})
    monkeypatch.delenv(verdicts.ENV, raising=False)


def test_rl_predict_is_the_module():
    assert rl.predict is predict
    assert {"guess", "versus", "Prediction", "Gap"} <= set(dir(rl.predict))


def test_a_written_guess_says_what_it_predicts(capsys):
    mine = predict.guess("02.v1_ms", ms=0.8, pct_of_copy=5)
    shown = capsys.readouterr().out.strip()
    assert shown == ("Prediction 02.v1_ms: 0.8 ms, 5 % of copy. The measurement below shows it "
                     "beside what it measures.")
    assert str(mine) == shown
    assert mine.key == "02.v1_ms" and mine.lesson == "02"
    assert mine.fields == {"ms": 0.8, "pct_of_copy": 5.0} and mine.pending == []
    assert predict.get("02.v1_ms") is mine


def test_an_unwritten_guess_asks_for_each_dots(capsys):
    mine = predict.guess("03.v2_ms", ms=..., bound=None, speedup=3)
    shown = capsys.readouterr().out.strip()
    assert shown.count(".") >= 1 and "\n" not in shown
    assert "replace each ..." in shown and "(ms, bound)" in shown and "run this cell again" in shown
    assert mine.pending == ["ms", "bound"] and mine.written == {"speedup": 3.0}


@pytest.mark.parametrize("key", ["2.v1", "02-v1", "02.V1", "02.", "x02.v1", "02.v1 ", 2, None])
def test_a_bad_key_is_refused_naming_key(key):
    with pytest.raises(ValueError, match="key must be"):
        predict.guess(key, ms=1)


def test_an_unknown_field_is_refused_listing_the_known_ones():
    with pytest.raises(ValueError) as e:
        predict.guess("02.v1_ms", millis=1)
    assert "'millis'" in str(e.value)
    for name in ("ms", "us", "gbps", "pct_of_copy", "pct_of_ceiling", "speedup", "ratio", "count",
                 "bound", "stall"):
        assert name in str(e.value)


@pytest.mark.parametrize("value", [0, -1, math.inf, math.nan, "0.8", True, [1]])
def test_a_numeric_guess_must_be_finite_and_positive(value):
    with pytest.raises(ValueError, match="ms"):
        predict.guess("02.v1_ms", ms=value)


def test_no_field_is_refused():
    with pytest.raises(ValueError, match="at least one field"):
        predict.guess("02.v1_ms")


def test_bound_is_one_of_five_words_and_stall_is_free_text(capsys):
    mine = predict.guess("07.stall", bound="Memory-bound", stall="Long Scoreboard")
    assert mine.fields == {"bound": "memory", "stall": "long_scoreboard"}
    with pytest.raises(ValueError, match="memory, latency, compute, atomics, launch"):
        predict.guess("07.stall", bound="bandwidth")
    with pytest.raises(ValueError, match="stall"):
        predict.guess("07.stall", stall="")


def test_numpy_numbers_are_numbers():
    mine = predict.guess("02.v1_ms", ms=np.float32(0.5), count=np.int64(3))
    assert mine.fields == {"ms": 0.5, "count": 3.0}


def _rows(gap):
    return {name: words for name, _, _, words in gap.rows}


def test_versus_shows_each_gap_and_the_largest(capsys):
    mine = predict.guess("02.v1_ms", ms=0.8, pct_of_copy=5, bound="latency")
    capsys.readouterr()
    gap = predict.versus(mine, ms=0.381, pct_of_copy=5.2, bound="memory",
                         why="every row's atomics wait on one another in L2")
    out = capsys.readouterr().out
    assert _rows(gap) == {"ms": "2.1x higher", "pct_of_copy": "within 10 %",
                          "bound": "you said latency; it is memory"}
    assert gap.error == pytest.approx((0.8 - 0.381) / 0.381)
    assert gap.status == "PREDICTED"
    lines = out.strip().splitlines()
    assert lines[0] == "02.v1_ms: your guess beside the measurement (prediction error 110 %)"
    assert lines[1].split() == ["field", "your", "guess", "measured", "gap"]
    assert lines[2].split()[:4] == ["ms", "0.8", "0.381", "2.1x"]
    assert lines[-1].startswith("Your largest miss is ms: you guessed 0.8, it measured 0.381")
    assert lines[-1].endswith("Every row's atomics wait on one another in L2.")
    assert len(lines) == 6 and str(gap) == out.strip()


def test_versus_lower_and_small_gaps():
    predict.guess("04.v3", ms=0.1, speedup=1.3, gbps=3000)
    gap = predict.versus("04.v3", ms=0.25, speedup=1.0, gbps=2900)
    assert _rows(gap) == {"ms": "2.5x lower", "speedup": "30 % higher", "gbps": "within 10 %"}
    assert gap.error == pytest.approx(0.6)


def test_versus_takes_the_key_of_the_last_guess():
    predict.guess("05.v4_ms", ms=1.0)
    predict.guess("05.v4_ms", ms=2.0)
    assert predict.versus("05.v4_ms", ms=2.0).error == 0.0


def test_without_a_guess_versus_shows_the_measurement_and_never_raises(capsys):
    gap = predict.versus("06.v5_ms", ms=0.2, why="the second kernel is short")
    out = capsys.readouterr().out
    assert gap.error is None and gap.status == "NOT PREDICTED"
    assert "no guess was written: predict first next time (the cell above)" in out
    assert "0.2" in out and "The second kernel is short." in out
    mine = predict.guess("06.v5_ms", ms=...)
    assert predict.versus(mine, ms=0.2).status == "NOT PREDICTED"


def test_measured_fields_must_have_been_guessed():
    mine = predict.guess("02.v1_ms", ms=0.8)
    with pytest.raises(ValueError, match="'gbps'"):
        predict.versus(mine, ms=0.4, gbps=100)
    with pytest.raises(ValueError, match="'wall'"):
        predict.versus(mine, wall=0.4)
    with pytest.raises(ValueError, match="'ms'"):
        predict.versus(mine, ms=...)
    with pytest.raises(ValueError, match="at least one measured"):
        predict.versus(mine)
    with pytest.raises(TypeError, match="mine"):
        predict.versus(0.8, ms=0.4)
    with pytest.raises(ValueError, match="key must be"):
        predict.versus("v1_ms", ms=0.4)


def test_a_measured_zero_is_shown_not_divided_by():
    mine = predict.guess("08.conflicts", count=4, ms=1)
    gap = predict.versus(mine, count=0, ms=1.05)
    assert _rows(gap)["count"] == "measured 0" and gap.error == pytest.approx(0.05 / 1.05)


def test_words_alone_give_no_error_but_a_sentence():
    mine = predict.guess("09.stall", stall="long_scoreboard", bound="memory")
    gap = predict.versus(mine, stall="barrier", bound="memory")
    assert gap.error is None and gap.status == "PREDICTED"
    assert _rows(gap) == {"stall": "you said long_scoreboard; it is barrier", "bound": "right"}


def test_ipython_shows_each_once():
    IPython = pytest.importorskip("IPython")
    from IPython.testing.globalipapp import get_ipython

    ip = get_ipython()
    ip.run_cell("import rmsnorm_lessons as rl")
    with IPython.utils.capture.capture_output() as cap:
        ip.run_cell("rl.predict.guess('02.v9_ms', ms=0.5)", store_history=True)
        ip.run_cell("g = rl.predict.versus('02.v9_ms', ms=0.5)\ng", store_history=True)
    assert cap.stdout.count("Prediction 02.v9_ms: 0.5 ms") == 1
    assert cap.stdout.count("02.v9_ms: your guess beside") == 1
    with IPython.utils.capture.capture_output() as cap:
        ip.run_cell("g", store_history=True)  # a later cell shows it again
    assert "02.v9_ms: your guess beside" in cap.stdout


def test_versus_records_a_line_where_recording_is_on(tmp_path, monkeypatch):
    path = tmp_path / "v.jsonl"
    monkeypatch.setenv(verdicts.ENV, str(path))
    predict.guess("02.v1_ms", ms=0.8)
    predict.versus("02.v1_ms", ms=0.4)
    predict.versus("03.v2_ms", ms=0.4)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    stem = {lesson.number: lesson.stem for lesson in lessons.LESSONS}
    assert [(d["exercise"], d["lesson"], d["status"]) for d in lines] == [
        ("predict.02.v1_ms", stem["02"], "PREDICTED"),
        ("predict.03.v2_ms", stem["03"], "NOT PREDICTED")]
    assert lines[0]["prediction_error"] == pytest.approx(1.0)
    assert lines[1]["prediction_error"] is None
    records = verdicts.read(path)
    assert [r.status for r in records] == ["PREDICTED", "NOT PREDICTED"]


def test_recording_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    predict.versus("02.v1_ms", ms=0.4)
    assert list(tmp_path.iterdir()) == []
