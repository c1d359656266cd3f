"""The kernel exercises' checks where there is no GPU: the CPU twin judges (issue 46).

Every solution of lessons 02-10 and 13 is PASS on the CPU, saying so and what the CPU cannot
judge; v7's (lesson 10) on the twin's build of v7's register path alone (the whole v7_fast.cu has
what the twin does not model), which its verdict says; where the twin cannot run at all (no g++)
the old NOT VERIFIED stands. A slip is NOT YET with the twin's
finding: a race with both lines, or the first wrong element.
"""
import pytest

from rmsnorm_lessons import twin
from rmsnorm_lessons.core import build, gpu
from rmsnorm_lessons.course import registry

import _mutations

pytestmark = [
    pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found"),
    pytest.mark.skipif(gpu.available(), reason="checks what is said where there is no GPU"),
]
STEMS = [lesson.stem for lesson in registry.kernel_exercises()]


def _check(stem: str, text: str):
    return _mutations.check_function(registry.by_stem(stem))(text)


@pytest.mark.slow
@pytest.mark.parametrize("stem", STEMS)
def test_every_solution_passes_on_the_cpu_twin(stem):
    if twin.available() is not None:
        pytest.skip(twin.available())
    verdict = _check(stem, _mutations.solution_text(registry.by_stem(stem)))
    assert verdict.status == "PASS", verdict.message
    if stem == "10_v7_one_pass":
        assert "The twin ran v7's register path alone" in verdict.message, verdict.message
    for words in ("on the CPU twin", "Checked in the SASS", "cannot judge speed"):
        assert words in verdict.message, verdict.message


def test_a_solution_passes_on_the_cpu_twin():
    if twin.available() is not None:
        pytest.skip(twin.available())
    verdict = _check("04_shared_memory", _mutations.solution_text(registry.by_stem(
        "04_shared_memory")))
    assert verdict.status == "PASS" and "on the CPU twin" in verdict.message, verdict.message


@pytest.mark.parametrize("stem", ["04_shared_memory", "09_bytes_in_flight"])
def test_not_verified_where_the_twin_cannot_run(stem, monkeypatch):
    monkeypatch.setattr(twin, "available", lambda: "the CPU twin needs g++ (hidden by the test)")
    verdict = _check(stem, _mutations.solution_text(registry.by_stem(stem)))
    assert verdict.status == "NOT VERIFIED", verdict.message
    for words in ("no GPU here", "registers", "Checked in the SASS", "hidden by the test"):
        assert words in verdict.message, verdict.message


def test_a_race_is_not_yet_with_both_lines():
    """v6's end with the barrier after the ticket removed: every thread reads the block's ticket
    while thread 0 may still be drawing it. No static check sees it (lesson 06's shared atomic
    made a plain add, the example before issue 41, is caught by its ATOMS check now); the twin
    does, naming both lines."""
    if twin.available() is not None:
        pytest.skip(twin.available())
    lines = _mutations.solution_text(registry.by_stem("08_last_block")).split("\n")
    at = next(k for k, l in enumerate(lines) if "if (ticket != gridDim.x - 1) return;" in l)
    assert lines[at - 1].strip() == "__syncthreads();"
    slip = "\n".join(lines[:at - 1] + lines[at:]).split("\n")
    write = next(k + 1 for k, l in enumerate(slip) if "ticket = atomicInc(" in l)
    read = next(k + 1 for k, l in enumerate(slip) if "if (ticket != gridDim.x - 1)" in l)
    verdict = _check("08_last_block", "\n".join(slip))
    assert verdict.status == "NOT YET", verdict.message
    assert "on the CPU twin" in verdict.message and "race" in verdict.message, verdict.message
    assert f"write at line {write}" in verdict.message, verdict.message
    assert f"read at line {read}" in verdict.message, verdict.message


def test_a_wrong_mean_is_not_yet_with_the_first_wrong_element():
    if twin.available() is not None:
        pytest.skip(twin.available())
    text = _mutations.solution_text(registry.by_stem("04_shared_memory"))
    slip = dict(_mutations.normalisation(text))
    verdict = _check("04_shared_memory", next(iter(slip.values())))
    assert verdict.status == "NOT YET", verdict.message
    assert "on the CPU twin" in verdict.message and "first wrong element: dinp[" in \
        verdict.message, verdict.message
