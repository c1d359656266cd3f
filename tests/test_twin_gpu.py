"""The CPU twin and the GPU agree (issue 46): on a GPU, each kernel exercise's solution and each
mutant of the mutation suite (tests/_mutations.py) gets the same verdict from the CPU twin (the GPU
hidden from the check) as from the GPU itself: PASS for the solutions, NOT YET for the slips.
v7's exercise (lesson 10) is judged on the twin's build of v7's register path alone.

Some parts of a check are the twin's even on a GPU (:data:`TWIN_PARTS`): 03/04's coalescing (the
twin's record of every access), 06's bank layout and 07's block order (lessons/probe.py runs the
learner's staged() and reduce_dweight_v5 on the twin), 10/13's accesses out of bounds after a GPU's
PASS (probe.bounds_after_gpu). So the contract is: the same status; the GPU verdict was the GPU's
(never the twin's "no GPU here" run), and where it names the CPU twin, it is for one of those parts.

Needs a GPU: ``pytest -p no:randomly -m gpu tests/test_twin_gpu.py`` (one test per text; with
pytest-xdist, ``-n 8 --dist load``).
"""
import re

import pytest

from rmsnorm_lessons import twin
from rmsnorm_lessons.core import build, gpu, ladder
from rmsnorm_lessons.course.checking import cpu as cpu_twin
from rmsnorm_lessons.course import registry

import _mutations

NEEDS_A_GPU: tuple = ()  # none: v7 runs on the twin as its register path alone
TEXTS = {f"{lesson.stem[:2]}-solution": (lesson.stem, _mutations.solution_text(lesson))
         for lesson in registry.kernel_exercises() if lesson.stem not in NEEDS_A_GPU}
TEXTS.update({m.node: (m.exercise, m.text) for m in _mutations.all_mutants()
              if m.exercise not in NEEDS_A_GPU})

_COALESCING = (r"on the CPU twin, yours_v\d's accesses are not coalesced",
               r"the CPU twin's record of every access at \d+x\d+")
_BOUNDS = (r"on the CPU twin, at N=\d+, C=\d+ it found an access out of bounds.*?The GPU run's "
           r"numbers were right", r"on the CPU twin at [\dx, ]+, which checks each one",
           r"Accesses out of bounds were not checked \(the CPU twin")
#: the parts of each lesson's check the CPU twin judges on a GPU too, as the GPU verdict says them
TWIN_PARTS = {
    "03": _COALESCING, "04": _COALESCING,
    "06": (r"your staged\(\), run on the CPU twin at C = [\d, ]+",
           r"staged\(c, C\) could not be run on the CPU twin"),
    "07": (r"run on the CPU twin on partials whose sum depends on their order",
           r"reduce_dweight_v5 could not be run on the CPU twin"),
    "10": _BOUNDS, "13": _BOUNDS}


def twin_parts_left_out(node: str, message: str) -> str:
    """``message`` with the twin's parts of ``node``'s lesson blanked: what the GPU itself said."""
    for part in TWIN_PARTS.get(node[:2], ()):
        message = re.sub(part, "<the twin's part>", message, flags=re.S)
    return message


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(build.find_nvcc() is None, reason="nvcc not found"),
              pytest.mark.skipif(twin.available() is not None, reason=str(twin.available()))]


@pytest.fixture(autouse=True, scope="module")
def _forget_learners_rungs():
    yield
    for name in [v for v in ladder.VERSIONS if v.startswith("yours_")]:
        ladder.unregister(name)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("node", sorted(TEXTS))
def test_the_twin_and_the_gpu_give_the_same_verdict(node, monkeypatch):
    stem, text = TEXTS[node]
    check = _mutations.check_function(registry.by_stem(stem))
    on_gpu = check(text)
    # the GPU judged it (not the twin's run for a machine without one), and names the twin only
    # for the parts it hands the twin on a GPU too
    assert cpu_twin.CANNOT not in on_gpu.message and "(no GPU here)" not in on_gpu.message, \
        on_gpu.message
    assert "CPU twin" not in twin_parts_left_out(node, on_gpu.message), on_gpu.message
    with monkeypatch.context() as hidden:
        hidden.setattr(gpu, "why_unavailable", lambda: "hidden: the CPU twin's turn")
        on_cpu = check(text)
    assert on_cpu.message.startswith("on the CPU twin") or on_cpu.status == on_gpu.status == \
        "NOT YET", on_cpu.message  # a slip the static checks catch never reaches either run
    assert on_cpu.status == on_gpu.status, (
        f"{node}: the GPU says {on_gpu}\n\nthe CPU twin says {on_cpu}")
    if node.endswith("-solution"):
        assert on_gpu.status == "PASS", on_gpu.message
        if node[:2] in TWIN_PARTS:  # a PASS says what the twin judged of it
            assert twin_parts_left_out(node, on_gpu.message) != on_gpu.message, on_gpu.message
