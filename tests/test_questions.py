"""The end-of-lesson questions of lessons 00-12 as rules over the lessons (CPU): the right answer
passes, a plausible wrong one says NOT YET with a reason (one that does not give the answer away),
None asks to be replaced; a choice outside the options is asked again; the notebooks ask them under
"## Questions", before "What to take away". A test of one lesson's questions alone is in that
lesson's file (tests/test_lesson<NN>.py)."""
import pytest
from _lesson_support import cells as _cells

from rmsnorm_lessons.course import registry
from rmsnorm_lessons.lessons import (lesson00, lesson01, lesson02, lesson03, lesson04, lesson07,
                                     lesson08, lesson09, lesson10, lesson11, lesson12)

# --- lessons 00-03 --------------------------------------------------------------------------------

# (check, arguments before the answer, right answer, a plausible wrong one, words of its reason)
CASES_00_03 = [
    (lesson00.check_ridge, (19.5, 1555), 19.5e12 / 1555e9, 1555 / 19500, "bytes per FLOP"),
    (lesson00.check_ridge, (19.5, 1555), 12.54, 12540.0, "units"),
    (lesson00.check_more_flops, (), "b", "a", "roofline"),
    (lesson01.check_rstd_scaling, (), "b", "a", "inverse"),
    (lesson01.check_fd_passes, (3, 8), 64, 48, "weight"),
    (lesson01.check_fd_passes, (3, 8), 64, 32, "+h and -h"),
    (lesson02.check_idle_sms, (4096, 256, 132), 116, 16, "blocks"),
    (lesson02.check_idle_sms, (4096, 256, 132), 116, 0, "blocks"),
    (lesson02.check_coalesce_v1, (), "b", "a", "32 threads"),
    (lesson02.check_free_atomics, (), "b", "a", "two remain"),
    (lesson03.check_lane_columns, (1000, 31), 31, 32, "lane 0"),
    (lesson03.check_small_n, (), "b", "a", "count the blocks"),
]


@pytest.mark.parametrize("check,args,right,wrong,why", CASES_00_03,
                         ids=[f"{c[0].__module__[-8:]}.{c[0].__name__}-{i}"
                              for i, c in enumerate(CASES_00_03)])
def test_a_question_passes_the_right_answer_and_explains_a_wrong_one(check, args, right, wrong,
                                                                     why):
    assert check(*args, right), check(*args, right)
    verdict = check(*args, wrong)
    assert not verdict and verdict.status == "NOT YET"
    assert why in verdict.message, verdict.message
    assert "replace None" in check(*args, None).message


def test_a_choice_outside_the_options_is_asked_again():
    assert "one of" in lesson00.check_more_flops("d").message
    assert "one of" in lesson02.check_free_atomics("c").message
    assert "whole number" in lesson03.check_lane_columns(1000, 31, 30.5).message


# --- lessons 04 and 07 ----------------------------------------------------------------------------

#: (check, right answer, plausible wrong answers, a word the first wrong answer's message holds)
CASES_04_07 = [
    (lesson04.check_two_row_warps, 3968, (4224, 256, 2, 4096), "every warp"),
    (lesson04.check_widest_c, 25344, (101376, 12288, 24750, 25000), "bytes"),
    (lesson07.check_launch_bound_registers, 40, (42, 64, 48, 32), "units of 256"),
    (lesson07.check_same_bits, "a", ("b", "c"), "grid"),
    (lesson07.check_second_wave, 42, (100, 58, 0, 50), "every block"),
]


@pytest.mark.parametrize("check, right, wrong, word", CASES_04_07,
                         ids=lambda c: getattr(c, "__name__", None))
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
    # round 2 moved a question of 04 to its Explore tail (the lesson's 75 minutes): two stay
    assert 2 <= len(asked) <= 5
    # each asks through one of the lesson's registered checks (an Explore question's comes after)
    names = [n for n in registry.by_stem(stem).exercises if "_kernel" not in n]
    for cell in asked:
        source = "".join(cell["source"])
        assert "### BEGIN SOLUTION" in source
        assert source.splitlines()[-1].split("(")[0] in names, source.splitlines()[-1]
        assert cell["metadata"]["rmsnorm_lessons"]["answers"]
    # a choice question lists its options in the markdown
    prose = "".join("".join(c["source"]) for c in cells[start:end] if c["cell_type"] == "markdown")
    if any('"a", "b" or "c"' in "".join(c["source"]) for c in asked):
        assert "**a)**" in prose and "**c)**" in prose


# --- lessons 08 and 09 ----------------------------------------------------------------------------

# (check, right, [(plausible wrong, a word of its reason)], the None message's words)
CASES_08_09 = [
    (lesson08.check_partial_floats, 264 * 1024,
     [(2 * 264 * 1024, "2 * C floats apart"), (263 * 1024, "its own"), (1024, "one block's")],
     "a number of floats"),
    (lesson08.check_second_wave, "a", [("b", "returns"), ("c", "read-modify-write")],
     '"a", "b", "c"'),
    (lesson09.check_in_flight_kib, 12, [(3, "several loads"), (48, "4 bytes"), (4, "every block")],
     "KiB per SM"),
]


@pytest.mark.parametrize("check, right, wrongs, missing", CASES_08_09,
                         ids=[c[0].__name__ for c in CASES_08_09])
def test_a_question_passes_the_answer_and_explains_a_wrong_one(check, right, wrongs, missing):
    verdict = check(right)
    assert verdict.passed and verdict.status == "PASS", verdict
    for wrong, why in wrongs:
        verdict = check(wrong)
        assert verdict.status == "NOT YET" and why in verdict.message, (wrong, verdict)
        if not isinstance(right, str):  # a number: not in the reason
            assert str(right) not in verdict.message.replace(str(wrong), ""), verdict
    verdict = check(None)
    assert verdict.status == "NOT YET" and "replace None" in verdict.message, verdict
    assert missing in verdict.message


# --- lessons 10-12 --------------------------------------------------------------------------------

CASES_10_12 = [
    # check, right, plausible wrong answers (with a word of the reason given)
    (lesson10.check_group_size, 192, [(768, "chunks"), (1536, "chunks of 8"),
                                      (100, "fewer than the row's")]),
    (lesson10.check_idle_slots, 56, [(200, "row's chunks"), (28, "both"), (7, "G x K")]),
    (lesson11.check_tail_rows, 136, [(4, "row groups"), (128, "idle"), (15, "full rounds")]),
    (lesson11.check_in_flight_bytes, 65536, [(32768, "both tensors"), (98304, "dinp"),
                                             (4096, "chunk is 16 bytes")]),
    (lesson11.check_more_sms, "c", [("b", "each block"), ("a", "C partials")]),
    (lesson11.check_reduce_rows, 9, [(132, "every partial row"), (8, "round up"),
                                     (16, "warps of a block"), (3, "round-robin")]),
    (lesson12.check_rank_chunks, 1280, [(10240, "channels"), (5120, "whole row"),
                                        (640, "shared among")]),
]


@pytest.mark.parametrize("check, right, wrongs", CASES_10_12,
                         ids=lambda x: getattr(x, "__name__", ""))
def test_question(check, right, wrongs):
    v = check(right)
    assert v.passed and v.status == "PASS", v.message
    for wrong, says in wrongs:
        v = check(wrong)
        assert v.status == "NOT YET" and says in v.message, (wrong, v.message)
    v = check(None)
    assert v.status == "NOT YET" and "replace None" in v.message
