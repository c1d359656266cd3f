"""rl.predict: a guess, then the measurement beside it (CPU)."""
import json
import math

import numpy as np
import pytest

import rmsnorm_lessons as rl
from rmsnorm_lessons.course import predict, record, registry
from rmsnorm_lessons.workshop import predictions


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setattr(predict, "_GUESSES", {})
    monkeypatch.delenv(record.ENV, raising=False)


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


@pytest.mark.parametrize("key", ["2.v1", "02-v1", "02.V1", "02.", "x02.v1", "02.v1 ", "02.v1\n", 2,
                                 None])
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
    mine = predict.guess("08.stall", bound="Memory-bound", stall="Long Scoreboard")
    assert mine.fields == {"bound": "memory", "stall": "long_scoreboard"}
    with pytest.raises(ValueError, match="memory, latency, compute, atomics, launch"):
        predict.guess("08.stall", bound="bandwidth")
    with pytest.raises(ValueError, match="stall"):
        predict.guess("08.stall", stall="")


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
    predict.guess("04.v3", ms=0.1, speedup=1.3, gbps=3000, count=80)
    gap = predict.versus("04.v3", ms=0.25, speedup=1.0, gbps=2900, count=100)
    assert _rows(gap) == {"ms": "2.5x lower", "speedup": "30 % higher", "gbps": "within 10 %",
                          "count": "20 % lower"}
    assert gap.error == pytest.approx(0.6)


def test_versus_takes_the_key_of_the_last_guess():
    predict.guess("05.v4_ms", ms=1.0)
    predict.guess("05.v4_ms", ms=2.0)
    assert predict.versus("05.v4_ms", ms=2.0).error == 0.0


def test_without_a_guess_versus_shows_the_measurement_and_never_raises(capsys):
    gap = predict.versus("07.v5_ms", ms=0.2, why="the second kernel is short")
    out = capsys.readouterr().out
    assert gap.error is None and gap.status == "NOT PREDICTED"
    assert "no guess was written: predict first next time (the cell above)" in out
    assert "0.2" in out and "The second kernel is short." in out
    mine = predict.guess("07.v5_ms", ms=...)
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
    mine = predict.guess("09.conflicts", count=4, ms=1)
    gap = predict.versus(mine, count=0, ms=1.05)
    assert _rows(gap)["count"] == "measured 0" and gap.error == pytest.approx(0.05 / 1.05)


def test_words_alone_give_no_error_but_a_sentence():
    mine = predict.guess("10.stall", stall="long_scoreboard", bound="memory")
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
    # in IPython a gap is a display with its data beside the text
    [shown] = [o.data for o in cap.outputs]
    assert shown["text/plain"].startswith("02.v9_ms: your guess beside")
    assert shown[predict.GAP_MIME]["measured"] == {"ms": 0.5}
    with IPython.utils.capture.capture_output() as cap:
        ip.run_cell("g", store_history=True)  # a later cell shows it again
    assert [o.data["text/plain"][:27] for o in cap.outputs] == ["02.v9_ms: your guess beside"]


def test_a_saved_gap_shows_this_learners_guess_beside_the_saved_measurement():
    IPython = pytest.importorskip("IPython")
    from IPython.testing.globalipapp import get_ipython

    from rmsnorm_lessons.course import notebook

    get_ipython()
    predict.guess("02.v1_ms", ms=0.8)  # the author's guess, on the H200
    saved = predict.versus("02.v1_ms", ms=0.4, why="atomics wait in L2")
    outputs = [{"output_type": "stream", "name": "stdout", "text": "v1 took 0.4 ms\n"},
               {"output_type": "display_data", "metadata": {},
                "data": {"text/plain": str(saved), predict.GAP_MIME: saved.data()}}]
    predict.guess("02.v1_ms", ms=0.2)  # the learner's, here
    with IPython.utils.capture.capture_output() as cap:
        notebook.show(json.loads(json.dumps(outputs)))  # as read from the notebook file
    assert cap.stdout == "v1 took 0.4 ms\n"
    [shown] = [o.data for o in cap.outputs]
    assert shown[predict.GAP_MIME]["rows"] == [["ms", "0.2", "0.4", "2.0x lower"]]
    assert shown["text/plain"].endswith("Atomics wait in L2.") and "0.8" not in shown["text/plain"]


def test_replay_without_a_guess_or_with_other_fields():
    data = {"key": "03.v2_ms", "measured": {"ms": 0.3, "bound": "memory"}, "why": ""}
    assert predict.replay(data).status == "NOT PREDICTED"
    predict.guess("03.v2_ms", bound="latency")
    gap = predict.replay(data)
    assert [r[0] for r in gap.rows] == ["bound"] and gap.status == "PREDICTED"
    predict.guess("03.v2_ms", gbps=100)
    assert predict.replay(data).status == "NOT PREDICTED"
    for bad in (None, {}, {"key": "x", "measured": {"ms": 1}}, {"key": "03.a", "measured": {}},
                {"key": "03.a", "measured": {"ms": -1}}, {"key": "03.a", "measured": [1]}):
        assert predict.replay(bad) is None, bad


def test_versus_records_a_line_where_recording_is_on(tmp_path, monkeypatch):
    path = tmp_path / "v.jsonl"
    monkeypatch.setenv(record.ENV, str(path))
    predict.guess("02.v1_ms", ms=0.8)
    predict.versus("02.v1_ms", ms=0.4)
    predict.versus("03.v2_ms", ms=0.4)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    stem = {lesson.number: lesson.stem for lesson in registry.LESSONS}
    assert [(d["exercise"], d["lesson"], d["status"]) for d in lines] == [
        ("predict.02.v1_ms", stem["02"], "PREDICTED"),
        ("predict.03.v2_ms", stem["03"], "NOT PREDICTED")]
    assert lines[0]["prediction_error"] == pytest.approx(1.0)
    assert lines[1]["prediction_error"] is None
    records = record.read(path)
    assert [r.status for r in records] == ["PREDICTED", "NOT PREDICTED"]


def test_recording_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    predict.versus("02.v1_ms", ms=0.4)
    assert list(tmp_path.iterdir()) == []


# --- reading the predictions back from an executed notebook (progress) ---------------------------

def _printed(capsys, code):
    capsys.readouterr()
    exec(code, {"rl": rl})
    return capsys.readouterr().out


def _cell(source, text):
    return {"cell_type": "code", "metadata": {}, "source": source,
            "outputs": [{"output_type": "stream", "name": "stdout", "text": text}] if text else []}


def test_seen_reads_what_guess_and_versus_printed(capsys):
    saved = "Not run here (no GPU). Saved output from NVIDIA H200, 2026-12-02:\n"
    nb = {"cells": [
        _cell("mine = rl.predict.guess('02.v1_ms', ms=0.8, bound='latency')",
              _printed(capsys, "rl.predict.guess('02.v1_ms', ms=0.8, bound='latency')")),
        _cell("%%gpu\nrl.predict.versus(mine, ms=t.ms, bound='memory')",
              _printed(capsys, "rl.predict.versus('02.v1_ms', ms=0.4, bound='memory', why='x')")),
        _cell("m2 = rl.predict.guess('02.v2_ms', ms=...)",
              _printed(capsys, "rl.predict.guess('02.v2_ms', ms=...)")),
        # no GPU here: the H200's saved output (the author's guess) is not the learner's
        _cell("%%gpu\nrl.predict.versus(m2, ms=t.ms)",
              saved + _printed(capsys, "rl.predict.guess('02.v2_ms', ms=1)\n"
                                       "rl.predict.versus('02.v2_ms', ms=0.5)")),
        _cell("rl.predict.guess('02.v3_ms', ms=2)", _printed(capsys,
                                                             "rl.predict.guess('02.v3_ms', ms=2)")),
        _cell("%%gpu\nrl.predict.versus('02.v3_ms', ms=t.ms)", saved + "anything\n"),
        _cell("rl.predict.versus('02.v4_ms', ms=t.ms)", ""),
    ]}
    got = {s.key: (s.status, s.error, s.detail) for s in predictions.seen(nb)}
    assert list(got) == ["02.v1_ms", "02.v2_ms", "02.v3_ms", "02.v4_ms"]
    assert got["02.v1_ms"] == ("PREDICTED", 1.0, "ms: guess 0.8 / measured 0.4 / gap 2.0x "
                                                 "higher; bound: guess latency / measured memory "
                                                 "/ gap you said latency; it is memory")
    not_here = "guess - / measured - (not measured here)"
    assert got["02.v2_ms"] == ("NOT PREDICTED", None, not_here)
    assert got["02.v3_ms"] == ("PREDICTED", None, "guess 2 ms / measured - (not measured here)")
    assert got["02.v4_ms"] == ("NOT PREDICTED", None, not_here)


def test_seen_takes_versus_without_a_guess_cell(capsys):
    text = _printed(capsys, "rl.predict.versus('05.v4_ms', ms=0.5)")
    [s] = predictions.seen({"cells": [_cell("rl.predict.versus('05.v4_ms', ms=t)",
                                                     text)]})
    assert (s.key, s.status, s.error, s.measured) == ("05.v4_ms", "NOT PREDICTED", None, True)
    assert s.detail == "ms: guess - / measured 0.5 / gap not guessed"


def test_seen_reads_a_gaps_data_live_or_replayed_and_skips_saved_text():
    predict.guess("07.v5_ms", ms=0.1)
    gap = predict.versus("07.v5_ms", ms=0.3)
    display = {"output_type": "display_data", "metadata": {},
               "data": {"text/plain": str(gap), predict.GAP_MIME: gap.data()}}
    saved = {"output_type": "stream", "name": "stdout",
             "text": "Not run here (no GPU). Saved output from NVIDIA H200, 2026-12-02:\n"}
    author = {"output_type": "stream", "name": "stdout",
              "text": "Prediction 06.v5_ms: 9 ms. The measurement below shows it beside what "
                      "it measures.\n"}
    cell = {"cell_type": "code", "metadata": {}, "source": "%%gpu\nrl.predict.versus(mine, ms=t)",
            "outputs": [saved, author, display]}
    [s] = predictions.seen({"cells": [cell]})
    assert (s.key, s.status, s.measured, s.guessed) == ("07.v5_ms", "PREDICTED", True, "")
    assert s.error == pytest.approx(2 / 3)
    assert s.detail == "ms: guess 0.1 / measured 0.3 / gap 3.0x lower"


@pytest.mark.gpu
def test_on_a_gpu_the_measurement_cell_measures_and_shows_the_gap_once(tmp_path, monkeypatch):
    from rmsnorm_lessons.core import gpu
    from rmsnorm_lessons.course import notebook

    reason = gpu.why_unavailable()
    if reason is not None:
        pytest.skip(reason)
    IPython = pytest.importorskip("IPython")
    from IPython.testing.globalipapp import get_ipython

    ip = get_ipython()
    notebook.load_ipython_extension(ip)
    path = tmp_path / "v.jsonl"
    monkeypatch.setenv(record.ENV, str(path))
    ip.run_cell("import rmsnorm_lessons as rl\n"
                "mine = rl.predict.guess('02.v1_ms', ms=0.5, pct_of_copy=10)", store_history=True)
    with IPython.utils.capture.capture_output() as cap:
        result = ip.run_cell("%%gpu\nt = rl.bench.bench_version('v1_naive', 1024, 768, 3000.0, "
                             "repeats=5)\nrl.predict.versus(mine, ms=t.ms, "
                             "pct_of_copy=100 * t.fraction_of_copy)", store_history=True)
    assert result.success, cap.stdout
    [shown] = [o.data for o in cap.outputs]  # once, though the call is the cell's value
    data = shown[predict.GAP_MIME]
    ms, pct = data["measured"]["ms"], data["measured"]["pct_of_copy"]
    assert ms > 0 and pct > 0 and data["status"] == "PREDICTED"
    assert data["error"] == pytest.approx(max(abs(0.5 - ms) / ms, abs(10 - pct) / pct))
    [line] = record.read(path)
    assert (line.exercise, line.status) == ("predict.02.v1_ms", "PREDICTED")
    assert line.prediction_error == pytest.approx(data["error"])
