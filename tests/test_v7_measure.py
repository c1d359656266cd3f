"""Around v7_fast (CPU, but for two GPU tests of the ceiling): the peers' byte counts and why they
cannot run, the bench's rows and command (GPU parts replaced by fakes), lesson 10's exercise, the
streaming ceiling and the fixed-cost fit.
"""
import dataclasses
import types

import numpy as np
import pytest

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import bf16, build, gpu, ladder
from rmsnorm_lessons.lessons import lesson11
from rmsnorm_lessons.speed import bench, peers

V7 = rl.ladder.get("v7_fast")


def plan(N, C, block_size=None, overwrite=False, config=None, device=gpu.H200):
    return ladder.plan(V7, N, C, device, block_size=block_size, overwrite=overwrite, config=config)




# --------------------------------------------------------------------------------------------------
# bench rows and peers (CPU)


def test_peer_bytes():
    N, C = 8192, 768
    assert peers.bytes_moved(N, C) == 3 * N * C * 2 + 4 * N + 2 * C * 2
    # the same row tensors as v7 in overwrite mode; v7 also reads dweight (it accumulates)
    assert V7.bytes_moved(N, C, overwrite=True) - peers.bytes_moved(N, C) == C * 2
    assert V7.bytes_moved(N, C) - peers.bytes_moved(N, C) == N * C * 2 + C * 2
    assert peers.bytes_moved(0, C) == 2 * C * 2


def test_peers_say_why_they_cannot_run(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_torch(name, *a, **kw):
        if name == "torch" or name.startswith("torch.") or name.startswith("liger_kernel"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    for name in peers.ALL_PEERS:  # the default three and the opt-in ones (Quack, max-autotune)
        assert peers.why_unavailable(name) == "PyTorch is not installed"
    assert peers.available() == []
    with pytest.raises(ValueError, match="peer must be one of"):
        peers.why_unavailable("cuDNN")


def test_quack_peers_say_when_quack_is_missing(monkeypatch):
    # PyTorch with a GPU, no quack-kernels: the three Quack peers say so; the others are unaffected
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: True),
                                       compile=object(), __version__="0.0")
    monkeypatch.setattr(peers, "_torch", lambda: fake_torch)
    monkeypatch.setattr(peers, "_liger", lambda: None)

    def no_quack():
        raise ImportError("No module named 'quack'")

    monkeypatch.setattr(peers, "_quack", no_quack)
    for name in ("Quack", "Quack kernel", "Quack tuned"):
        assert peers.why_unavailable(name) == \
            "Quack (quack-kernels) is not installed (No module named 'quack')"
    for name in ("torch eager", "torch.compile", "torch.compile max-autotune", "Liger-Kernel"):
        assert peers.why_unavailable(name) is None
    assert peers.available() == list(peers.PEERS)  # the default sweep: the three


def _t(name, N, C, ms, nbytes=10**9, copy=4000.0):
    return bench._timing(name, N, C, [ms] * 5, nbytes, copy)


def test_records_by_shape_and_against():
    rows = [_t("v6_last_block", 8, 8, 2.0), _t("v7_fast", 8, 8, 1.0),
            _t("v6_last_block", 16, 8, 4.0),
            _t("torch eager", 8, 8, 3.0), _t("v7_fast (dinp=)", 8, 8, 0.8),
            _t("Liger-Kernel", 8, 8, 0.5)]
    recs = bench.records(rows)
    assert [r["speedup_over_v6"] for r in recs] == [1.0, 2.0, 1.0, 2.0 / 3.0, 2.5, 4.0]
    assert recs[1]["percent_of_copy"] == pytest.approx(100 * (1e9 / 1e-3 / 1e9) / 4000)
    assert {"name", "N", "C", "ms", "gbps", "percent_of_copy", "speedup_over_v6"} <= set(recs[0])
    first = [(r.name, r.N) for r in bench.by_shape(rows)][:3]
    assert first == [("v6_last_block", 8), ("v7_fast", 8), ("torch eager", 8)]
    text = bench.against(rows, "v7_fast (dinp=)", peers.PEERS)
    assert "vs Liger-Kernel 0.5000 ms: 0.62x (SLOWER)" in text
    assert bench.overwrite_name("v7_fast") == "v7_fast (dinp=)"


# --------------------------------------------------------------------------------------------------
# lesson 11's exercise on the partials (CPU): the right answer passes, wrong ones are reported
# (lesson 09's floor time: tests/test_lesson09.py)


def test_lesson11_partials_fraction(monkeypatch):
    right = lesson11.partials_fraction(4096, 16384, 132)
    assert right == pytest.approx(2 * 132 * 16384 * 4 / V7.bytes_moved(4096, 16384))
    assert lesson11.check_partials_fraction(right, grid=132)
    for wrong, says in [(None, "replace None"), (100 * right, "percentage"), (right / 2, "half"),
                        (2 * right, "twice"), (0.5, "is off")]:
        v = lesson11.check_partials_fraction(wrong, grid=132)
        assert not v.passed and says in v.message, (wrong, v.message)
    # by default, the grid v7_fast's plan launches on this GPU, or on the H200 (132 blocks at
    # this shape)
    monkeypatch.setattr(gpu, "facts_or_fallback", lambda: (gpu.H200, "saved"))
    assert plan(4096, 16384)[0].grid == 132
    assert lesson11.check_partials_fraction(right)
    small = dataclasses.replace(gpu.H200, multiprocessors=66)
    monkeypatch.setattr(gpu, "facts_or_fallback", lambda: (small, "a smaller GPU"))
    assert lesson11.check_partials_fraction(lesson11.partials_fraction(4096, 16384, 66))



def test_bench_command_writes_every_row(tmp_path, monkeypatch, capsys):
    """``bench --peers --json --plot`` with the GPU parts replaced by fakes: rows, JSON and
    picture."""
    import json

    from rmsnorm_lessons import cli
    from rmsnorm_lessons.core import gpu

    shapes = [(8192, 768), (1024, 4096)]
    calls = {}

    def fake_sweep(versions, shapes_, repeats=50, check=True, copy_gbps=None, overwrite=False,
                   ceiling=False, show_progress=True, inputs=None):
        calls["sweep"] = (versions, overwrite, ceiling)
        calls.setdefault("shapes", []).extend(shapes_)
        out = []
        for N, C in shapes_:
            out += [_t("v6_last_block", N, C, 2.0, copy=copy_gbps),
                    _t("v7_fast", N, C, 1.0, copy=copy_gbps)]
            if overwrite:
                out.append(_t("v7_fast (dinp=)", N, C, 0.8, copy=copy_gbps))
        if ceiling:
            for N, C in shapes_:
                out.append(_t(bench.STREAM_NAME, N, C, 0.9, copy=copy_gbps))
                if overwrite:
                    out.append(_t(bench.STREAM_NAME + " (dinp=)", N, C, 0.6, copy=copy_gbps))
        return out

    def fake_peers(shapes_, names=None, repeats=50, copy_gbps=None, log=None, wall_times=False,
                   show_progress=True, inputs=None, ahead=None):
        calls["wall_times"] = wall_times
        return [_t(name, N, C, 3.0, copy=copy_gbps) for N, C in shapes_ for name in peers.PEERS]

    monkeypatch.setattr(gpu, "require", lambda: None)
    monkeypatch.setattr(bench, "copy_yardstick", lambda: bench.Yardstick(3900.0, 4000.0))
    monkeypatch.setattr(bench, "sweep", fake_sweep)
    monkeypatch.setattr(peers, "sweep", fake_peers)
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    rc = cli.main(["bench", "v6_last_block", "v7_fast", "--shapes", "8192x768,1024x4096", "--peers",
                   "--json", str(out_json), "--plot", str(out_png)])
    assert rc == 0
    # overwrite rows follow --peers; the same-bytes ceiling is on by default; a shape at a time
    assert calls["sweep"] == (["v6_last_block", "v7_fast"], True, True)
    assert calls["shapes"] == shapes
    # the shell's bench says what each peer cost: some compile for minutes
    assert calls["wall_times"]
    rows = json.loads(out_json.read_text())
    assert len(rows) == 2 * 8
    assert [r["name"] for r in rows[:8]] == ["v6_last_block", "v7_fast", "v7_fast (dinp=)",
                                             bench.STREAM_NAME,
                                             bench.STREAM_NAME + " (dinp=)", *peers.PEERS]
    for r in rows:
        assert {"name", "N", "C", "ms", "gbps", "percent_of_copy", "percent_of_ceiling", "noisy",
                "speedup_over_v6"} <= set(r)
    assert rows[2]["speedup_over_v6"] == pytest.approx(2.5)
    # accumulate mode against its ceiling
    assert rows[1]["percent_of_ceiling"] == pytest.approx(90.0)
    # dinp= against the overwrite ceiling
    assert rows[2]["percent_of_ceiling"] == pytest.approx(75.0)
    # a peer (dinp=): 0.6 ms over 3.0 ms
    assert rows[5]["percent_of_ceiling"] == pytest.approx(20.0)
    assert out_png.stat().st_size > 1000
    out = capsys.readouterr()
    # each shape's rows as soon as they are measured, under one header, with a progress line
    table = out.out.splitlines()
    assert sum(line.startswith("version") for line in table) == 1
    first = next(i for i, line in enumerate(table) if line.startswith("version"))
    assert [line.split()[0] for line in table[first + 1:first + 3]] == ["v6_last_block", "v7_fast"]
    assert "bench: 1/2 shapes in " in out.err and "s left" in out.err
    assert "bench: 2/2 shapes in " in out.err
    rc = cli.main(["bench", "v7_fast", "--shapes", "8192x768", "--no-peers", "--no-ceiling"])
    assert rc == 0 and calls["sweep"][1:] == (False, False)


# --------------------------------------------------------------------------------------------------
# the streaming ceiling and the fixed-cost fit (lab/v7_explore.py, lab/v7_fixed_cost.py, lesson 09)


def test_fit_fixed_cost_recovers_a_line():
    ns = [1024, 4096, 8192, 16384]
    ms = [(6.5 + 8.25e-3 * n) / 1e3 for n in ns]  # 6.5 us + 8.25 ns per row
    fixed, per_row = bench.fit_fixed_cost(ns, ms)
    assert fixed == pytest.approx(6.5) and per_row == pytest.approx(8.25)
    with pytest.raises(ValueError, match="at least two different N"):
        bench.fit_fixed_cost([4096, 4096], [0.01, 0.011])


def test_fixed_cost_plot():

    fig = lesson11.fixed_cost({"v7_fast": [(1024, 0.017), (16384, 0.142)],
                            bench.STREAM_NAME: [(1024, 0.012), (16384, 0.132)]}, C=4096)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels[0].startswith("v7_fast: 8.7 us + 8.14 ns/row"), labels


def test_stream_elementwise_refuses_a_partial_chunk():
    with pytest.raises(ValueError, match=r"n \(bf16 elements\) must be a multiple of 8"):
        bench.stream_elementwise(0, 0, 0, 12)


def test_stream_kernel_compiles_lean():
    res = build.resources("stream_ceiling", "sm_90")["stream_elementwise"]
    assert not res.spills and res.registers <= 32  # 2048 threads per SM: 8 blocks of 256


@pytest.mark.gpu
@pytest.mark.parametrize("accumulate", [True, False])
def test_stream_kernel_computes_what_it_says(accumulate):
    import rmsnorm_lessons as rl

    drv = rl.gpu.driver()
    n = 3 * 1000 * 8 + 8 * 7  # not a multiple of the grid's threads
    rng = np.random.default_rng(3)
    a, b, c = (bf16.to_bf16(rng.standard_normal(n)) for _ in range(3))
    dev = [drv.to_device(np.ascontiguousarray(x).view(np.uint16)) for x in (c, a, b)]
    bench.stream_elementwise(dev[0], dev[1], dev[2], n, accumulate=accumulate)
    got = np.empty(n, np.uint16)
    drv.memcpy_dtoh(got, dev[0])
    for d in dev:
        d.free()
    # a * b is exact in fp32 (8-bit mantissas), so fused or not the sum rounds once, then once
    # to bf16
    want = bf16.from_bf16(a) * bf16.from_bf16(b)
    want = want + (bf16.from_bf16(c) if accumulate else np.float32(0))
    assert np.array_equal(got, bf16.bits(bf16.to_bf16(want)))


@pytest.mark.gpu
def test_stream_ceiling_counts_v7s_bytes():
    import rmsnorm_lessons as rl

    t = bench.stream_ceiling(1024, 4096, copy_gbps=4000.0, overwrite=True, repeats=5)
    assert t.name == bench.STREAM_NAME + " (dinp=)"
    assert t.bytes == V7.bytes_moved(1024, 4096, overwrite=True)
    assert 0 < t.ms < 10 and t.gbps == pytest.approx(t.bytes / (t.ms * 1e-3) / 1e9)
    assert rl.gpu.available()
