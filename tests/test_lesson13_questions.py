"""Lesson 13's questions (the row that wraps, reading a profile): each check passes the right
answer, says NOT YET to a plausible wrong one with a reason, and asks to replace None."""
from types import SimpleNamespace

import pytest

from rmsnorm_lessons.core import gpu, ladder
from rmsnorm_lessons.inspection import nsight
from rmsnorm_lessons.lessons import lesson13

NUMBERS = [(lesson13.check_dram_percent, 62.5, (0.625, 31.25, 6.25)),
           (lesson13.check_occupancy_cap, 37.5, (0.375, 75, 18.75)),
           (lesson13.check_blocks_for_occupancy, 6, (5, 4, 7, 3)),
           (lesson13.check_wrap_row, 131072, (131071, 262144, 65536))]
CHECKS = [c for c, _, _ in NUMBERS]


@pytest.mark.parametrize("check, right, wrongs", NUMBERS, ids=lambda x: getattr(x, "__name__", ""))
def test_right_passes_and_wrong_is_not_yet(check, right, wrongs):
    verdict = check(right)
    assert verdict.passed, verdict.message
    for wrong in wrongs:
        verdict = check(wrong)
        assert verdict.status == "NOT YET" and len(verdict.message) > 20, (wrong, verdict.message)
        # the reason, not the answer
        assert f"{right}" not in verdict.message.split() and f'"{right}"' not in verdict.message


@pytest.mark.parametrize("check", CHECKS + [lesson13.check_dram_peak])
def test_none_asks_to_replace_it(check):
    verdict = check(None)
    assert verdict.status == "NOT YET" and verdict.message.startswith("replace None")


def test_a_fraction_asks_for_percent_and_the_blocks_say_how_short():
    assert "in %" in lesson13.check_dram_percent(0.625).message
    assert "in %" in lesson13.check_occupancy_cap(0.375).message
    assert "under the 32" in lesson13.check_blocks_for_occupancy(5).message
    assert "37.5 %" in lesson13.check_blocks_for_occupancy(4).message
    assert lesson13.blocks_for(50, 192) == 6 and lesson13.blocks_for(50, 256) == 4
    # the first row that wraps (moved from lesson 08 with its reasons)
    assert "still fits" in lesson13.check_wrap_row(131071).message
    assert "signed" in lesson13.check_wrap_row(262144).message
    assert "a row number" in lesson13.check_wrap_row(None).message


def test_q3s_reading_is_what_the_packages_rule_prints():
    q3 = nsight.Profile("x", "k", (1, 1), 30.0, 19.0, 1.0, {"long_scoreboard": 8.0, "wait": 2.0})
    assert nsight.reading(q3) == ("latency-bound: DRAM at 30 % of its peak, warps mostly waiting "
                                  "on long_scoreboard (global loads, 80 % of stalls) at 19 % "
                                  "achieved occupancy")
    assert 62.5 >= nsight.MEMORY_BOUND_PCT  # Q2's launch is on the memory-bound side


def _opening(dram_bytes, duration_us=143.3, dram_pct=58.5):
    profile = SimpleNamespace(dram_bytes=dram_bytes, duration_us=duration_us, dram_pct=dram_pct,
                              shape=(16384, 2048))
    return SimpleNamespace(profile=profile, source="saved on NVIDIA H100 80GB HBM3, 2026-12-05",
                           timing=SimpleNamespace(copy_gbps=2993.0))


def test_the_dram_peak_from_v6s_profile(monkeypatch):
    monkeypatch.setattr(gpu, "copy_bandwidth_or_saved", lambda: (2997.0, "saved"))
    nominal = ladder.get("v6_last_block").bytes_moved(16384, 2048)
    # the saved run counted no DRAM bytes: the bytes v6 must move
    o = _opening(None)
    want, moved, where = lesson13.dram_peak(o.profile)
    assert moved == nominal and "counted none" in where
    assert want == pytest.approx(nominal / 143.3e-6 / 0.585 / 1e9)
    v = lesson13.check_dram_peak(want, opening=o)
    assert v.passed and "above the copy bandwidth" in v.message and "H100" in v.message, v
    assert "(2,993 GB/s)" in v.message  # the copy of the card that measured the profile
    achieved = nominal / 143.3e-6 / 1e9
    for wrong, says in [(achieved, "what v6 achieved"), (want * 100, "divide by 100"),
                        (want / 100, "58 % is 0.58"), (want * 1e3, "powers of ten"),
                        (2993.0, "copy bandwidth"), (want * 1.5, "rate over the peak")]:
        v = lesson13.check_dram_peak(wrong, opening=o)
        assert v.status == "NOT YET" and says in v.message, (wrong, v.message)
    # a profile that counted its DRAM bytes: those
    o = _opening(300e6)
    assert lesson13.check_dram_peak(300e6 / 143.3e-6 / 0.585 / 1e9, opening=o).passed
    with pytest.raises(ValueError, match="no duration or DRAM %"):
        lesson13.dram_peak(_opening(None, duration_us=None).profile)
