"""The benchmark's yardstick (CPU, the GPU replaced by fakes): enough rotated buffer sets, noisy rows timed
again and flagged, the same-bytes ceiling measured beside the rows and each row's percent of it."""
import io

import pytest

from rmsnorm_lessons import bench, check, ladder

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
    assert "noisy: torch.compile at 4096x1024: spread 50 % of the median after two runs" in log.getvalue()
    text = bench.table([kept])
    assert text.splitlines()[1].endswith("  ~")


def test_percent_of_ceiling_by_shape_and_mode():
    rows = [_t("v7_fast", ms=1.0), _t("v7_fast (dinp=)", ms=0.8, nbytes=3 * GB), _t("Quack kernel", ms=0.7, nbytes=3 * GB),
            _t(bench.STREAM_NAME, ms=0.9), _t(bench.STREAM_NAME + " (dinp=)", ms=0.75, nbytes=3 * GB),
            _t("v7_fast", C=2048, ms=1.0)]
    recs = {(r["name"], r["C"]): r for r in bench.records(rows, baseline=None, overwriting=("Quack kernel",))}
    assert recs[("v7_fast", 1024)]["percent_of_ceiling"] == pytest.approx(90.0)  # 0.9 ms / 1.0 ms, same bytes
    assert recs[("v7_fast (dinp=)", 1024)]["percent_of_ceiling"] == pytest.approx(93.75)
    assert recs[("Quack kernel", 1024)]["percent_of_ceiling"] == pytest.approx(100 * 0.75 / 0.7)  # a peer: dinp=
    assert recs[("v7_fast", 2048)]["percent_of_ceiling"] is None  # no ceiling timed at that shape
    assert recs[(bench.STREAM_NAME, 1024)]["percent_of_ceiling"] is None
    lines = bench.table(rows, overwriting=("Quack kernel",)).splitlines()
    assert "% ceil" in lines[0]
    assert lines[1].split()[-1] == "90.0%" and lines[3].split()[-1] == "107.1%"
    assert "% ceil" not in bench.table(rows[:3]).splitlines()[0]  # no ceiling rows: no column


class _FakeProblem:
    def __init__(self, N, C, dtype, sets=None, seed=0):
        self.buffers, self.sets = [None], 1

    def free(self):
        pass


def test_sweep_times_the_ceiling_in_each_mode_it_timed(monkeypatch):
    timed, ceilings = [], []
    monkeypatch.setattr(bench, "runnable", lambda spec, N, C: None)
    monkeypatch.setattr(bench, "DeviceProblem", _FakeProblem)
    monkeypatch.setattr(bench.checking, "check_version", lambda *a, **k: type("R", (), {"ok": True})())
    monkeypatch.setattr(bench, "check_overwrite", lambda *a, **k: type("R", (), {"ok": True})())

    def fake_bench(version, N, C, copy_gbps, repeats=50, problem=None, *, overwrite=False, **kw):
        timed.append((version, N, C, overwrite))
        name = bench.overwrite_name(version) if overwrite else ladder.get(version).name
        return _t(name, N, C)

    def fake_ceiling(N, C, copy_gbps, overwrite=False, repeats=50):
        ceilings.append((N, C, overwrite))
        return _t(bench.STREAM_NAME + (bench.OVERWRITE_SUFFIX if overwrite else ""), N, C, ms=0.9)

    monkeypatch.setattr(bench, "bench_version", fake_bench)
    monkeypatch.setattr(bench, "stream_ceiling", fake_ceiling)
    shapes = [(64, 1024), (32, 2048)]
    rows = bench.sweep(["v6_last_block", "v7_fast"], shapes, copy_gbps=4000.0, overwrite=True, ceiling=True)
    assert ceilings == [(64, 1024, False), (64, 1024, True), (32, 2048, False), (32, 2048, True)]
    assert [r.name for r in rows[-4:]] == [bench.STREAM_NAME, bench.STREAM_NAME + " (dinp=)"] * 2
    assert len(timed) == 6  # v6, v7, v7 (dinp=) at each shape
    assert all(r["percent_of_ceiling"] is not None for r in bench.records(rows) if not r["name"].startswith("stream"))
    assert bench.sweep(["v7_fast"], shapes[:1], copy_gbps=4000.0)[-1].name == "v7_fast"  # no ceiling unless asked
    assert check  # the module the sweep checks with (imported by bench as checking)


def test_table_columns_stay_aligned_with_long_names():
    rows = [bench.Timing("v7_fast", 16384, 4096, 0.1479, 0.01, 537_000_000, 3631.0, 4230.0),
            bench.Timing(bench.STREAM_NAME + bench.OVERWRITE_SUFFIX, 16384, 4096, 0.1024, 0.01, 403_000_000,
                         3933.0, 4230.0)]
    header, *lines = bench.table(rows).splitlines()
    shape_end = header.index("N x C") + len("N x C")
    assert all(line.index("16384x4096") + len("16384x4096") == shape_end for line in lines), (header, lines)
    assert len({line.index("%") for line in lines}) == 1  # the "% copy" column lines up too
