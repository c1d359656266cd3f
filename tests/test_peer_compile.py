"""torch.compile's shapes compiled ahead in other processes (rmsnorm_lessons/speed/peer_compile.py),
on CPU: the pool runs a task per shape in spawned processes, the bench waits for its shape, a failed
worker is said and left to the bench, and the peers' sweep waits for torch.compile only.
(lab/peer_compile_cpu.py shows the cache hits themselves, with torch.)"""
from __future__ import annotations

import io
import math
import operator
from types import SimpleNamespace

import pytest

from rmsnorm_lessons.speed import peer_compile, peers


def test_each_shape_runs_once_in_a_worker_and_wait_returns_its_result():
    with peer_compile.Ahead([(3, 5), (7, 11), (3, 5)], workers=2, task=operator.mul) as ahead:
        assert sorted(ahead.futures) == [(3, 5), (7, 11)]  # a shape asked twice runs once
        assert ahead.wait(7, 11) == 77 and ahead.wait(3, 5) == 15
        assert ahead.wait(2, 2) is None  # not asked for: the bench compiles it itself


def test_a_failed_worker_is_said_in_one_line_and_left_to_the_bench():
    log = io.StringIO()
    with peer_compile.Ahead([(4, 9)], workers=1, task=math.sqrt, log=log) as ahead:
        assert ahead.wait(4, 9) is None
    assert log.getvalue().startswith("torch.compile ahead at 4x9 failed (TypeError: ")
    assert log.getvalue().rstrip().endswith("compiling it in the bench")
    assert len(log.getvalue().splitlines()) == 1


def test_no_shapes_is_refused():
    with pytest.raises(ValueError, match="shapes must name at least one"):
        peer_compile.Ahead([])


@pytest.mark.parametrize("shapes, cpus, want", [(10, 16, 4), (10, 2, 1), (2, 64, 2), (1, 1, 1)])
def test_workers_are_a_quarter_of_the_cpus_and_at_most_one_per_shape(shapes, cpus, want):
    assert peer_compile.workers_for(shapes, cpus) == want


def test_only_the_default_mode_is_compiled_ahead():
    # max-autotune times its candidates on the GPU: ahead of its turn it would disturb the timings
    assert peer_compile.AHEAD == ("torch.compile",)
    assert set(peer_compile.AHEAD) <= set(peers.PEERS)


def test_the_peers_sweep_waits_for_torch_compile_at_its_shape_only(monkeypatch):
    waited, benched = [], []
    monkeypatch.setattr(peers.gpu, "require", lambda: None)
    monkeypatch.setattr(peers, "why_unavailable", lambda name: None)
    monkeypatch.setattr(peers.bench, "shape_inputs",
                        lambda inputs, N, C, dtype: SimpleNamespace(problem={}, gradient=lambda: 0))
    monkeypatch.setattr(peers, "bench_peer", lambda name, N, C, *a, **k: benched.append(
        (name, N, C)) or SimpleNamespace())
    ahead = SimpleNamespace(peers=("torch.compile",),
                            wait=lambda N, C: waited.append((N, C, list(benched))))
    peers.sweep([(64, 256), (32, 512)], names=["torch eager", "torch.compile", "Liger-Kernel"],
                copy_gbps=4000.0, log=io.StringIO(), ahead=ahead, show_progress=False)
    # at each shape, just before torch.compile is built, after the peers before it
    assert waited == [(64, 256, [("torch eager", 64, 256)]),
                      (32, 512, [("torch eager", 64, 256), ("torch.compile", 64, 256),
                                 ("Liger-Kernel", 64, 256), ("torch eager", 32, 512)])]


def test_the_bench_compiles_ahead_only_where_torch_compile_is_asked_for_and_can_run(monkeypatch):
    from rmsnorm_lessons import bench_command as cli

    made = []
    monkeypatch.setattr(cli.peer_compile, "Ahead", lambda shapes: made.append(shapes) or
                        SimpleNamespace(futures=dict.fromkeys(shapes), workers=2))
    monkeypatch.setattr(cli.peers, "why_unavailable", lambda name: None)
    assert cli.compile_ahead([(1, 8), (2, 8)], ["torch eager", "Liger-Kernel"]) is None
    assert cli.compile_ahead([(1, 8), (2, 8)], ["torch.compile"]) is not None
    monkeypatch.setattr(cli.peers, "why_unavailable", lambda name: "PyTorch is not installed")
    assert cli.compile_ahead([(1, 8)], ["torch.compile"]) is None
    assert made == [[(1, 8), (2, 8)]]
