"""The benchmark's yardstick (CPU, the GPU replaced by fakes): enough rotated buffer sets, noisy
rows timed again and flagged, the same-bytes ceiling measured beside the rows and each row's percent
of it."""
import io

import numpy as np
import pytest

from rmsnorm_lessons.core import bf16, compare, ladder
from rmsnorm_lessons.speed import bench, timing

GB = 10**9


def _t(name, N=4096, C=1024, ms=1.0, spread=0.05, nbytes=4 * GB, copy=4000.0):
    gbps = nbytes / (ms * 1e-3) / 1e9
    return bench.Timing(name, N, C, ms, spread, nbytes, gbps, copy)


def test_at_least_eight_sets_where_memory_allows():
    l2 = 60 * 2**20
    assert bench.sets_for(1 * GB, l2, 100 * GB) == bench.MIN_SETS == 8  # three L2s would be one set
    assert bench.sets_for(4 << 20, l2, 100 * GB) == 45  # small sets: three L2s' worth
    assert bench.sets_for(1 << 20, l2, 100 * GB) == 64  # at most 64
    assert bench.sets_for(1 * GB, l2, 4 * GB) == 2  # half the free memory holds two
    assert bench.sets_for(8 * GB, l2, 4 * GB) == 1


def test_a_steady_row_is_timed_once():
    calls = []

    def timed():
        calls.append(1)
        return _t("v7_fast", spread=0.05)

    assert bench.steady(timed).ms_spread == 0.05 and len(calls) == 1


def test_a_noisy_row_is_timed_again_and_the_steadier_kept():
    runs = iter([_t("v7_fast", ms=1.3, spread=0.9), _t("v7_fast", ms=1.0, spread=0.04)])
    log = io.StringIO()
    kept = bench.steady(lambda: next(runs), log=log)
    assert (kept.ms, kept.noisy) == (1.0, False) and log.getvalue() == ""


def test_a_row_noisy_twice_is_flagged():
    runs = iter([_t("torch.compile", spread=40.0), _t("torch.compile", spread=0.5)])
    log = io.StringIO()
    kept = bench.steady(lambda: next(runs), log=log)
    assert kept.ms_spread == 0.5 and kept.noisy
    assert ("noisy: torch.compile at 4096x1024: spread 50 % of the median after two runs"
            in log.getvalue())
    text = bench.table([kept])
    assert text.splitlines()[1].endswith("  ~")


def test_percent_of_ceiling_by_shape_and_mode():
    rows = [_t("v7_fast", ms=1.0), _t("v7_fast (dinp=)", ms=0.8, nbytes=3 * GB), _t("Quack kernel",
            ms=0.7, nbytes=3 * GB),
            _t(bench.STREAM_NAME, ms=0.9), _t(bench.STREAM_NAME + " (dinp=)", ms=0.75,
                                              nbytes=3 * GB),
            _t("v7_fast", C=2048, ms=1.0)]
    recs = {(r["name"], r["C"]): r for r in bench.records(rows, baseline=None,
                                                          overwriting=("Quack kernel",))}
    # 0.9 ms / 1.0 ms, same bytes
    assert recs[("v7_fast", 1024)]["percent_of_ceiling"] == pytest.approx(90.0)
    assert recs[("v7_fast (dinp=)", 1024)]["percent_of_ceiling"] == pytest.approx(93.75)
    # a peer: dinp=
    assert recs[("Quack kernel", 1024)]["percent_of_ceiling"] == pytest.approx(100 * 0.75 / 0.7)
    assert recs[("v7_fast", 2048)]["percent_of_ceiling"] is None  # no ceiling timed at that shape
    assert recs[(bench.STREAM_NAME, 1024)]["percent_of_ceiling"] is None
    lines = bench.table(rows, overwriting=("Quack kernel",)).splitlines()
    assert "% ceil" in lines[0]
    assert lines[1].split()[-1] == "90.0%" and lines[3].split()[-1] == "107.1%"
    assert "% ceil" not in bench.table(rows[:3]).splitlines()[0]  # no ceiling rows: no column


class _FakeProblem:
    made = []

    def __init__(self, N, C, dtype, sets=None, seed=0):
        self.buffers, self.sets = [None] * 3, 3
        _FakeProblem.made.append((N, C, np.dtype(dtype)))

    def free(self):
        pass


# three rungs of the ladder: the first fp32 one, and the last two bf16 ones (the last overwrites)
FP32_RUNG = next(r.name for r in ladder.SHIPPED if r.dtype == np.float32)
SEED, FAST = [r.name for r in ladder.SHIPPED if r.dtype == bf16.bfloat16][-2:]


def test_sweep_times_a_shapes_rows_and_ceilings_interleaved(monkeypatch):
    assert ladder.get(FAST).overwrite_mode and not ladder.get(SEED).overwrite_mode
    rounds, alone = [], []
    _FakeProblem.made = []
    monkeypatch.setattr(bench, "runnable", lambda spec, N, C: None)
    monkeypatch.setattr(bench, "DeviceProblem", _FakeProblem)
    checked, made_inputs = [], []

    class FakeInputs:
        def __init__(self, N, C, dtype, seed=0, accumulate=True):
            self.key = (N, C, np.dtype(dtype))
            made_inputs.append(self.key)

    def fake_check(spec, N, C, overwrite=False, inputs=None, **k):
        checked.append((spec.name, overwrite, inputs.key))
        return type("R", (), {"ok": True})()

    monkeypatch.setattr(bench.compare, "Inputs", FakeInputs)
    monkeypatch.setattr(bench.compare, "check_version", fake_check)
    monkeypatch.setattr(bench.launch, "launcher", lambda spec, C, overwrite=False,
                        config=None: (lambda N, tensors: None))
    monkeypatch.setattr(bench, "_stream_launcher", lambda accumulate,
                        stream=None: (lambda *a: None))

    def fake_interleaved(launches, sets=1, warmup=5, repeats=50, stream=None):
        rounds.append((list(launches), sets))
        # the ceiling 0.9 ms, v7 (dinp=) noisy, the others 1 ms
        return {name: ([0.9] * 10 if name.startswith(bench.STREAM_NAME) else
                       [0.5, 1.0,
                        2.0] * 4 if name == f"{FAST} (dinp=)" else [1.0] * 10) for name in launches}

    def fake_time_ms(launch, sets=1, warmup=5, repeats=50, stream=None):
        alone.append(sets)
        return [0.8] * 10

    monkeypatch.setattr(bench, "time_interleaved", fake_interleaved)
    monkeypatch.setattr(bench, "time_ms", fake_time_ms)
    shapes = [(64, 1024), (32, 2048)]
    given = {}
    rows = bench.sweep([FP32_RUNG, SEED, FAST], shapes, copy_gbps=4000.0,
                       overwrite=True,
                       ceiling=True, inputs=given)
    # per shape: the fp32 rung on its own buffers, then every bf16 row and both ceilings in one
    # interleaved run
    bf16_rows = [SEED, FAST, f"{FAST} (dinp=)", bench.STREAM_NAME, bench.STREAM_NAME + " (dinp=)"]
    assert rounds == [([FP32_RUNG], 3), (bf16_rows, 3)] * 2
    assert [(N, C) for N, C, _ in _FakeProblem.made] == [(64, 1024)] * 2 + [(32, 2048)] * 2
    # one host problem (and its float64 references) per shape and dtype, shared by its checks
    f32, b16 = np.dtype(np.float32), np.dtype(bf16.bfloat16)
    assert made_inputs == [(64, 1024, f32), (64, 1024, b16), (32, 2048, f32), (32, 2048, b16)]
    assert sorted(given, key=str) == sorted(made_inputs, key=str)  # the caller's dict holds them
    bench.sweep([FP32_RUNG], [(64, 1024)], copy_gbps=4000.0, inputs=given)
    assert len(made_inputs) == 4  # and a second sweep takes them from it
    assert checked[:4] == [(FP32_RUNG, False, (64, 1024, f32)), (SEED, False, (64, 1024, b16)),
                           (FAST, False, (64, 1024, b16)), (FAST, True, (64, 1024, b16))]
    assert [r.name for r in rows] == [FP32_RUNG, *bf16_rows] * 2
    noisy = [r for r in rows if r.name == f"{FAST} (dinp=)"]
    # timed again alone, steadier kept
    assert alone == [3, 3] and all(r.ms == 0.8 and not r.noisy for r in noisy)
    recs = bench.records(rows)
    assert all(r["percent_of_ceiling"] == pytest.approx(90.0)
               for r in recs if r["name"] == FAST)
    # no ceiling unless asked
    assert bench.sweep([FAST], shapes[:1], copy_gbps=4000.0)[-1].name == FAST
    assert bench.compare is compare  # the module the sweep checks with


def test_the_default_sweep_has_the_wide_rows():
    assert bench.SHAPES[-2:] == [(4096, 32768), (2048, 65536)] and len(bench.SHAPES) == 10


def test_the_yardstick_is_the_faster_copy():
    y = bench.Yardstick(dtod_gbps=4213.0, kernel_gbps=4302.0)
    assert y.gbps == 4302.0
    assert str(y) == ("copy 4302 GB/s (bytes read + written): the faster of cuMemcpyDtoD 4213 GB/s "
                      "and a copy "
                      "kernel 4302 GB/s")
    assert bench.Yardstick(4213.0, 4100.0).gbps == 4213.0


def test_table_columns_stay_aligned_with_long_names():
    rows = [bench.Timing("v7_fast", 16384, 4096, 0.1479, 0.01, 537_000_000, 3631.0, 4230.0),
            bench.Timing(bench.STREAM_NAME + bench.OVERWRITE_SUFFIX, 16384, 4096, 0.1024, 0.01,
                         403_000_000,
                         3933.0, 4230.0)]
    header, *lines = bench.table(rows).splitlines()
    shape_end = header.index("N x C") + len("N x C")
    assert all(line.index("16384x4096") + len("16384x4096") == shape_end
               for line in lines), (header, lines)
    assert len({line.index("%") for line in lines}) == 1  # the "% copy" column lines up too


class _FakeEvent:
    clock = 0.0

    def record(self, stream=None):
        self.at = _FakeEvent.clock

    def synchronize(self):
        pass

    # what query() answers, first to last (then False): whether the GPU had already got there
    late = []

    def query(self):
        return _FakeEvent.late.pop(0) if _FakeEvent.late else False

    def time_since(self, earlier):
        return self.at - earlier.at


def test_interleaved_rounds_take_turns_and_consecutive_sets(monkeypatch):
    monkeypatch.setattr(timing.gpu, "driver", lambda: type("Driver", (), {"Event": _FakeEvent}))
    monkeypatch.setattr(timing, "_sleep", lambda us, stream=None: None)
    calls = []

    def launcher(name, cost):
        def launch(i):
            calls.append((name, i))
            _FakeEvent.clock += cost
        return launch

    times = bench.time_interleaved({"A": launcher("A", 1.0), "B": launcher("B", 2.0)}, sets=3,
                                   warmup=1, repeats=2,
                                   burst=1)
    # warm-up A0 B1, then rounds of (untimed, timed) pairs: (A2 A0 B1 B2) (A0 A1 B2 B0): every
    # launch reads the set after the previous launch's, and only the second of each pair is inside
    # the events
    assert calls == [("A", 0), ("B", 1), ("A", 2), ("A", 0), ("B", 1), ("B", 2), ("A", 0), ("A", 1),
                     ("B", 2), ("B", 0)]
    assert times == {"A": [1.0, 1.0], "B": [2.0, 2.0]}
    calls.clear()
    assert bench.time_ms(launcher("C", 0.5), sets=2, warmup=0, repeats=3, burst=1) == [0.5] * 3
    # 2 sets share a factor with 2
    assert calls == [("C", 0), ("C", 0), ("C", 0), ("C", 0), ("C", 0), ("C", 0)]


def test_rotation_shares_no_factor_with_the_launches():
    assert bench.rotation(8, 1) == 8
    assert bench.rotation(8, 2) == 7
    assert bench.rotation(8, 4) == 7
    assert bench.rotation(8, 12) == 7
    assert bench.rotation(9, 12) == 7  # 9 and 8 share a factor with 12
    assert bench.rotation(45, 5) == 44
    assert bench.rotation(1, 6) == 1
    with pytest.raises(ValueError, match="sets and launches"):
        bench.rotation(0, 2)


def test_every_interleaved_launch_visits_every_set(monkeypatch):
    monkeypatch.setattr(timing.gpu, "driver", lambda: type("Driver", (), {"Event": _FakeEvent}))
    monkeypatch.setattr(timing, "_sleep", lambda us, stream=None: None)
    seen = {name: set() for name in "ABCD"}

    def launcher(name):
        def launch(i):
            seen[name].add(i)
            _FakeEvent.clock += 1.0
        return launch

    # 8 sets, 4 launches taking turns: without the rotation each would see 2 of the sets
    bench.time_interleaved({name: launcher(name) for name in seen}, sets=8, warmup=0, repeats=7,
                           burst=1)
    assert all(s == set(range(7)) for s in seen.values()), seen


def test_bursts_are_timed_together_and_divided(monkeypatch):
    monkeypatch.setattr(timing.gpu, "driver", lambda: type("Driver", (), {"Event": _FakeEvent}))
    monkeypatch.setattr(timing, "_sleep", lambda us, stream=None: None)
    calls = []

    def launch(i):
        calls.append(i)
        # set 0 is slower: the per-launch figure averages the burst
        _FakeEvent.clock += 0.25 + 0.5 * (i == 0)

    times = bench.time_ms(launch, sets=8, warmup=0, repeats=2, burst=3)
    # an untimed launch and a burst of 3 make 4 a round, which shares a factor with 8 sets: 7 rotate
    assert calls == [0, 1, 2, 3, 4, 5, 6, 0]
    # set 0 in the second burst
    assert times == [pytest.approx(0.25), pytest.approx((2 * 0.25 + 0.75) / 3)]
    with pytest.raises(ValueError, match="burst must be at least 1"):
        bench.time_ms(launch, burst=0)


def test_a_burst_queued_too_late_is_timed_again_with_a_longer_sleep(monkeypatch, capsys):
    monkeypatch.setattr(timing.gpu, "driver", lambda: type("Driver", (), {"Event": _FakeEvent}))
    slept = []
    monkeypatch.setattr(timing, "_sleep", lambda us, stream=None: slept.append(us))
    monkeypatch.setattr(_FakeEvent, "late", [True, True, False])  # late twice, then in time

    def launch(i):
        _FakeEvent.clock += 1.0

    assert bench.time_ms(launch, warmup=0, repeats=2, burst=2) == [1.0, 1.0]  # one figure a round
    # 100 us a launch, doubled until in time, kept for the next round
    assert slept == [300, 600, 1200, 1200]
    assert capsys.readouterr().err == ""

    monkeypatch.setattr(timing, "MAX_SLEEP_US", 1000)
    # never in time: stops doubling, says so once
    monkeypatch.setattr(_FakeEvent, "late", [True] * 10)
    slept.clear()
    assert bench.time_ms(launch, warmup=0, repeats=2, burst=2) == [1.0, 1.0]
    assert slept == [300, 600, 1000, 1000]
    err = capsys.readouterr().err
    assert err.count("could not queue 2 launches within 1000 us") == 1


def test_a_launch_with_a_call_before_it_is_timed_alone():
    with pytest.raises(ValueError, match="burst must be 1, got 4"):
        bench.time_interleaved({"A": lambda i: None}, before={"A": lambda i: None}, burst=4)
