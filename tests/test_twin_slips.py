"""Issue 46's four slips, settled on the CPU twin: v5 and v6 (as shipped, their row pass pasted in:
since issue 41 lessons 07 and 08 ask for what follows it) with their first __syncthreads (after
zeroing the block's shared dweight) or their last (before copying it out) removed.

The twin reports no hazard for any of the four, at shapes where every block has rows, where most
blocks of v6's grid have none (N = 1: 263 of 264), with one and with several 256-channel steps,
in two block orders, and their results are bit for bit the solution's. The barriers are redundant,
and why is visible in the text: every shared dweight slot a thread zeroes (c = 4t, 4t + 4 * block,
...) is next touched either by warp 0 inside the row loop, after the loop's first __syncthreads
(the one after the staging store, reached by every thread: the loop runs the same number of times
in every warp), or, in a block with no rows, by the copy-out loop of the same thread t (same c);
and warp 0's last add to a slot is followed by the loop's second __syncthreads before any other
thread copies that slot out. So no access pair is left unordered. The control: the row loop's
first barrier removed is a race the twin names, with its lines (so the test can fail).
"""
import dataclasses

import pytest

from rmsnorm_lessons import twin
from rmsnorm_lessons.core import gpu, ladder, reference
from rmsnorm_lessons.course import registry

import _mutations

pytestmark = pytest.mark.skipif(twin.available() is not None, reason=str(twin.available()))

EXERCISES = {"07_two_pass": "v5_two_pass", "08_last_block": "v6_last_block"}


def _barriers(text: str) -> list[int]:
    """Line numbers (1-based) of the text's __syncthreads statements."""
    return [k + 1 for k, line in enumerate(text.split("\n")) if line.strip() == "__syncthreads();"]


def _without(text: str, line: int) -> str:
    lines = text.split("\n")
    assert lines[line - 1].strip() == "__syncthreads();"
    lines[line - 1] = lines[line - 1].replace("__syncthreads();", "// (removed)")
    return "\n".join(lines)


def _text(stem: str) -> str:
    """The shipped rung's text with kernels/bf16_row_pass.cuh pasted in place of its #include."""
    from rmsnorm_lessons.core import build

    header = build.kernel_source("bf16_row_pass.cuh").replace("#pragma once\n", "", 1)
    text = build.kernel_source(EXERCISES[stem])
    assert text.count('#include "bf16_row_pass.cuh"\n') == 1
    return text.replace('#include "bf16_row_pass.cuh"\n', header)


def _sites(text: str) -> dict:
    """The first barrier (after zeroing), the last (before copying out), and the row loop's first
    (after the staging store)."""
    lines = text.split("\n")
    zeroed = next(k for k, l in enumerate(lines) if "f128::zeros());" in l and "store128" in l)
    copied = next(k for k, l in enumerate(lines) if "store128(my_partials + c" in l)
    bars = _barriers(text)
    first = min(b for b in bars if b > zeroed + 1)
    last = max(b for b in bars if b <= copied + 1)
    in_loop = min(b for b in bars if b > first)
    return {"first": first, "last": last, "row loop's first": in_loop}


def _shapes():
    two_sms = dataclasses.replace(gpu.target_facts_or_fallback()[0], multiprocessors=2)
    return [(1, 8, None, 1), (129, 776, None, 1), (203, 264, two_sms, 1), (203, 264, two_sms, 2)]


def _run(name, text, like, N, C, device, seed, **kw):
    rung = ladder.rung_from_source(name=name, source=f'#line 1 "{name}"\n' + text, like=like)
    p = reference.random_problem(N, C, rung.dtype, seed=N * 7 + C, accumulate=True)
    return twin.run_rung(rung, p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                         p["dweight"], device=device, seed=seed, **kw)


@pytest.fixture(scope="module", autouse=True)
def _forget():
    yield
    for name in [v for v in ladder.VERSIONS if v.startswith("slip_")]:
        ladder.unregister(name)


@pytest.mark.slow
@pytest.mark.parametrize("stem", sorted(EXERCISES))
def test_the_first_and_last_barrier_of_v5_and_v6_are_redundant(stem):
    like = EXERCISES[stem]
    text = _text(stem)
    sites = _sites(text)
    for N, C, device, seed in _shapes():
        want = _run(f"slip_{like}_solution", text, like, N, C, device, seed)
        assert want.hazards == [] and not want.stopped
        for which in ("first", "last"):
            got = _run(f"slip_{like}_{which}", _without(text, sites[which]), like, N, C, device,
                       seed)
            assert got.hazards == [], (which, N, C, [str(h) for h in got.hazards])
            assert got.dinp.tobytes() == want.dinp.tobytes(), (which, N, C)
            assert got.dweight.tobytes() == want.dweight.tobytes(), (which, N, C)


@pytest.mark.parametrize("stem", sorted(EXERCISES))
def test_the_row_loops_barrier_is_not_redundant(stem):
    like = EXERCISES[stem]
    text = _text(stem)
    line = _sites(text)["row loop's first"]
    staged = next(k + 1 for k, l in enumerate(text.split("\n")) if "store128(staging" in l)
    got = _run(f"slip_{like}_loop", _without(text, line), like, 129, 776, None, 1)
    races = [h.text for h in got.hazards if h.kind == "race"]
    assert races, "removing the row loop's first barrier must be a race"
    assert any("shared memory" in t and f"write at line {staged}" in t for t in races), races


def test_one_barrier_compiled_into_two_calls_is_not_divergence():
    """g++ -O2 copies the row loop's __syncthreads into both arms of ``if (warp != 0)``: two call
    sites, one barrier of the text (the report is dropped where both places are the same line)."""
    text = _mutations.solution_text(registry.by_stem("07_two_pass"))
    got = _run("slip_v5_o2", text, "v5_two_pass", 33, 8, None, 1, opt="-O2")
    assert got.hazards == [], [str(h) for h in got.hazards]
