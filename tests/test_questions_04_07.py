"""The end-of-lesson questions of lessons 04 and 07 (CPU): the right answer passes, a plausible
wrong one does not and says why, None asks to be replaced; the notebooks ask them under
"## Questions", before "What to take away"; lesson 07's occupancy table says what its prose says."""
import json
from pathlib import Path

import pytest

from rmsnorm_lessons.core import build
from rmsnorm_lessons.course import registry
from rmsnorm_lessons.inspection import occupancy
from rmsnorm_lessons.lessons import lesson04, lesson07

ROOT = Path(__file__).resolve().parent.parent

#: (check, right answer, plausible wrong answers, a word the first wrong answer's message holds)
CASES = [
    (lesson04.check_two_row_warps, 3968, (4224, 256, 2, 4096), "every warp"),
    (lesson04.check_widest_c, 25344, (101376, 12288, 24750, 25000), "bytes"),
    (lesson07.check_launch_bound_registers, 40, (42, 64, 48, 32), "units of 256"),
    (lesson07.check_same_bits, "a", ("b", "c"), "grid"),
    (lesson07.check_second_wave, 42, (100, 58, 0, 50), "every block"),
]


@pytest.mark.parametrize("check, right, wrong, word", CASES, ids=lambda c: getattr(c, "__name__",
                                                                                   None))
def test_a_question_passes_the_right_answer_only(check, right, wrong, word):
    verdict = check(right)
    assert verdict.passed, verdict
    if isinstance(right, str):
        assert check(right.upper() + " ").passed
    for answer in wrong:
        verdict = check(answer)
        assert not verdict.passed and verdict.status == "NOT YET", (answer, verdict)
    assert word in check(wrong[0]).message
    missing = check(None)
    assert missing.status == "NOT YET" and "replace None" in missing.message


def test_the_checks_follow_their_parameters():
    # 432 blocks of 8 warps: W = 3456 < 8192 / 2, so warps 0 .. 1279 take three rows
    assert lesson04.check_two_row_warps(3456 - 1280, sms=108).passed
    assert lesson04.check_two_row_warps(0, N=100).passed  # 13 blocks: every warp has one row
    assert lesson04.check_widest_c(227 * 1024 // 4, optin_kib=227).passed
    assert lesson07.most_registers(512, 2) == 64  # v5's own __launch_bounds__(512, 2)
    assert lesson07.check_launch_bound_registers(64, blocks=2).passed
    # at C = 2048 two blocks of v5 fit on an sm_89 SM: none waits
    assert lesson07.check_second_wave(0, C=2048).passed


def _cells(stem):
    return json.loads(registry.by_stem(stem).path.read_text())["cells"]


# 07_two_pass: its questions after round 2 (two in the lesson, the register question in its
# Explore tail) are checked in tests/test_lesson07.py
@pytest.mark.parametrize("stem", ["04_shared_memory"])
def test_the_questions_close_the_lesson(stem):
    cells = _cells(stem)
    # an optional "Explore" tail after the takeaways is not part of the lesson (issue 41)
    cells = cells[:next((i for i, c in enumerate(cells) if c["cell_type"] == "markdown"
                         and "".join(c["source"]).startswith("## Explore")), len(cells))]
    heads = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown"
             and "".join(c["source"]).startswith("## ")]
    titles = ["".join(cells[i]["source"]).splitlines()[0] for i in heads]
    assert titles[-2:] == ["## Questions", "## What to take away"], titles
    start, end = heads[-2], heads[-1]
    asked = [c for c in cells[start:end] if c["cell_type"] == "code"]
    assert 3 <= len(asked) <= 5
    names = [n for n in registry.by_stem(stem).exercises if "_kernel" not in n][-len(asked):]
    for cell, name in zip(asked, names):
        source = "".join(cell["source"])
        assert "### BEGIN SOLUTION" in source and source.splitlines()[-1].startswith(name + "(")
        assert cell["metadata"]["rmsnorm_lessons"]["answers"]
    # a choice question lists its options in the markdown
    prose = "".join("".join(c["source"]) for c in cells[start:end] if c["cell_type"] == "markdown")
    if any('"a", "b" or "c"' in "".join(c["source"]) for c in asked):
        assert "**a)**" in prose and "**c)**" in prose


# 05, 07 and 08: their what-changed cells run without a GPU after round 2 (the saved run's there)
# and set the guess beside the change; tests/test_lesson05.py, 07 and 08 check them
@pytest.mark.parametrize("stem, call", [
    ("04_shared_memory", "lesson04.opening(after=True)")])
def test_each_lesson_profiles_the_shape_it_times_beside_the_timing(stem, call):
    cells = _cells(stem)
    [at] = [i for i, c in enumerate(cells) if call in "".join(c["source"])]
    cell = cells[at]
    assert "".join(cell["source"]).startswith("%%gpu\n")
    assert {"gpu", "nbval-ignore-output"} <= set(cell["metadata"]["tags"])
    timing = [i for i, c in enumerate(cells) if "rl.bench.table(" in "".join(c["source"])]
    assert timing and timing[-1] < at <= timing[-1] + 2
    assert cells[at - 1]["cell_type"] == "markdown"


def test_occupancy_lives_in_lesson_07_and_lesson_04_points_there():
    prose04 = "".join("".join(c["source"]) for c in _cells("04_shared_memory"))
    assert "across_archs" not in prose04 and "lesson 07" in prose04
    code07 = "".join("".join(c["source"]) for c in _cells("07_two_pass"))
    assert 'rl.occupancy.occupancy("v5_two_pass", 2048, arch).explain()' in code07


@pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found")
def test_v5_across_arches_as_lesson_07_says():
    # registers decide at C = 2048 (the launch bounds give 2 blocks everywhere); at C = 16384 the
    # 100 KiB SMs hold one block, so half the plan's blocks wait for a second wave
    for C, want in ((2048, {"sm_80": 2, "sm_89": 2, "sm_90": 2, "sm_100": 2, "sm_120": 2}),
                    (16384, {"sm_80": 2, "sm_89": 1, "sm_90": 2, "sm_100": 2, "sm_120": 1})):
        o = {a: occupancy.occupancy("v5_two_pass", C, a) for a in occupancy.LESSON_ARCHES}
        assert {a: x.blocks_per_sm for a, x in o.items()} == want
    assert occupancy.occupancy("v5_two_pass", 2048, "sm_90").limiter == "registers"
    assert occupancy.occupancy("v5_two_pass", 16384, "sm_89").limiter == "shared memory"
