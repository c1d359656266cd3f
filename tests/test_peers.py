"""The peers' bench loop (rmsnorm_lessons/speed/peers.py) with a made-up peer in place of PyTorch
(CPU): a noisy timing is timed again on the peer already built, a wrong peer is not timed, the sweep
says how long each peer took when asked, and a peer is timed in bursts as the versions are."""
from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest

from rmsnorm_lessons.core import gpu
from rmsnorm_lessons.speed import peers, timing


class FakePeer:
    built = 0
    before = None  # nothing to run before each call: timed in bursts

    def __init__(self, problem, sets):
        FakePeer.built += 1
        self.sets = sets


@pytest.fixture
def fake(monkeypatch):
    """A GPU-less stand-in for PyTorch and the device; yields the list of timings time_ms will
    return."""
    FakePeer.built = 0
    torch = SimpleNamespace(cuda=SimpleNamespace(mem_get_info=lambda device: (64 << 30, 80 << 30),
                                                 empty_cache=lambda: None))
    monkeypatch.setattr(gpu, "require", lambda: None)
    monkeypatch.setattr(gpu, "facts", lambda: SimpleNamespace(l2_bytes=50 << 20))
    monkeypatch.setattr(peers, "why_unavailable", lambda name: None)
    monkeypatch.setattr(peers, "_torch", lambda: torch)
    monkeypatch.setattr(peers, "_device", lambda torch: 0)
    monkeypatch.setitem(peers._CLASSES, "torch eager", FakePeer)
    monkeypatch.setattr(peers, "check_peer", lambda peer, problem, ref: SimpleNamespace(ok=True))
    timings = []
    monkeypatch.setattr(peers, "time_ms", lambda peer, sets, repeats=50: timings.pop(0))
    return timings


PROBLEM = {"inp": None}  # bench_peer passes the problem to the peer and the check only


def test_a_noisy_peer_is_timed_again_without_being_built_again(fake):
    fake += [[1.0, 1.0, 9.0, 1.0, 0.1], [1.0] * 5]  # a spread of 890 % first, then none
    log = io.StringIO()
    timing = peers.bench_peer("torch eager", 64, 256, 4000.0, problem=PROBLEM, ref=object(),
                              log=log)
    assert FakePeer.built == 1 and not fake  # both timings used, one build
    assert timing.ms == 1.0 and timing.ms_spread == 0.0 and not timing.noisy
    assert log.getvalue() == ""


def test_a_steady_peer_is_timed_once(fake):
    fake += [[1.0] * 5, [2.0] * 5]
    peers.bench_peer("torch eager", 64, 256, 4000.0, problem=PROBLEM, ref=object(),
                     log=io.StringIO())
    assert FakePeer.built == 1 and len(fake) == 1


def test_a_wrong_peer_is_not_timed(fake, monkeypatch):
    monkeypatch.setattr(peers, "check_peer", lambda peer, problem, ref: SimpleNamespace(ok=False))
    fake += [[1.0] * 5]
    with pytest.raises(AssertionError, match="torch eager is wrong at N=64 C=256; not timing it"):
        peers.bench_peer("torch eager", 64, 256, 4000.0, problem=PROBLEM, ref=object())
    assert len(fake) == 1


def test_sweep_says_each_peers_wall_time_when_asked(fake, monkeypatch):
    monkeypatch.setattr(peers.reference, "random_problem", lambda *a, **k: {"dout": 0, "inp": 0,
            "weight": 0,
                                                                            "rstd": 0})
    monkeypatch.setattr(peers.reference, "backward_by_rows", lambda *a: None)
    fake += [[1.0] * 5, [1.0] * 5, [1.0] * 5, [1.0] * 5]
    quiet, said = io.StringIO(), io.StringIO()
    rows = peers.sweep([(64, 256), (32, 512)], names=["torch eager"], copy_gbps=4000.0, log=quiet)
    assert [(r.N, r.C) for r in rows] == [(64, 256), (32, 512)] and quiet.getvalue() == ""
    peers.sweep([(64, 256), (32, 512)], names=["torch eager"], copy_gbps=4000.0, log=said,
                wall_times=True)
    lines = said.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == ["peer torch eager at 64x256",
                                                      "peer torch eager at 32x512"]
    assert all(line.endswith(" s") for line in lines)


class _Clock:
    """A fake GPU timeline: each backward call advances it; PyCUDA's events stamp it; query says
    whether the sleep ahead of a burst had already ended when the host asked (the answers are
    scripted)."""

    def __init__(self, late=()):
        self.now, self.late, self.slept = 0.0, list(late), []

    def driver(self):
        clock = self

        class Event:
            def record(self, stream=None):
                self.at = clock.now

            def query(self):
                return clock.late.pop(0) if clock.late else False

            def synchronize(self):
                pass

            def time_since(self, earlier):
                return self.at - earlier.at

        return SimpleNamespace(Event=Event)


class _TimedPeer:
    name = "made-up"

    def __init__(self, clock, cost=0.5, before=None):
        self.calls, self.before, self.cost, self.clock = [], before, cost, clock

    def backward(self, i):
        self.calls.append(i)
        self.clock.now += self.cost * (1 + (i == 0))  # set 0 is twice as slow


def _timeline(monkeypatch, late=()):
    clock = _Clock(late)
    monkeypatch.setattr(gpu, "driver", clock.driver)
    monkeypatch.setattr(timing, "_sleep", lambda us, stream=None: clock.slept.append(us))
    return clock


def test_a_peer_is_timed_in_bursts_after_one_untimed_call(monkeypatch):
    clock = _timeline(monkeypatch)
    peer = _TimedPeer(clock)
    times = peers.time_ms(peer, sets=4, warmup=1, repeats=2, burst=3)
    # 4 calls a round share a factor with 4 sets: 3 rotate. Warm-up 0; round 1: untimed 1, timed 2 0
    # 1; round 2: untimed 2, timed 0 1 2 (set 0 costs twice: the per-call figure averages the burst)
    assert peer.calls == [0, 1, 2, 0, 1, 2, 0, 1, 2]
    assert times == [pytest.approx((0.5 + 1.0 + 0.5) / 3)] * 2
    # the peers' sleep per call, for the burst and its lead
    assert clock.slept == [peers.SLEEP_US * 4] * 2


def test_a_peer_queued_too_late_gets_a_longer_sleep_and_is_reported_once(monkeypatch, capsys):
    monkeypatch.setattr(timing, "MAX_SLEEP_US", 4 * peers.SLEEP_US * 2)  # twice the first sleep
    clock = _timeline(monkeypatch, late=[True, True, True])
    peer = _TimedPeer(clock)
    times = peers.time_ms(peer, sets=4, warmup=0, repeats=2, burst=3)
    assert len(times) == 2
    assert clock.slept == [1200, 2400, 2400]  # doubled to the cap, then kept
    assert capsys.readouterr().err.count("timing made-up: the host could not queue 3") == 1


def test_a_peer_that_needs_a_call_before_each_backward_is_timed_one_call_at_a_time(monkeypatch):
    clock = _timeline(monkeypatch)
    before = []
    peer = _TimedPeer(clock, before=lambda i: before.append(i))
    times = peers.time_ms(peer, sets=3, warmup=0, repeats=3, burst=4)
    # no untimed call, no burst: before, then one
    assert peer.calls == [0, 1, 2] and before == [0, 1, 2]
    assert times == [pytest.approx(1.0), pytest.approx(0.5), pytest.approx(0.5)]


def test_sweep_checks_the_peers_on_the_problem_the_versions_were_checked_on(fake, monkeypatch):
    monkeypatch.setattr(peers.reference, "random_problem",
                        lambda *a, **k: pytest.fail("a second problem was made"))
    checked = []
    monkeypatch.setattr(peers, "check_peer", lambda peer, problem, ref: checked.append(
        (problem, ref)) or SimpleNamespace(ok=True))
    shared = SimpleNamespace(problem=PROBLEM, gradient=lambda: "the gradient alone")
    fake += [[1.0] * 5]
    peers.sweep([(64, 256)], names=["torch eager"], copy_gbps=4000.0, log=io.StringIO(),
                inputs={(64, 256, np.dtype(peers.bfloat16)): shared})
    assert checked == [(PROBLEM, "the gradient alone")]
