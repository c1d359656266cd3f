"""The CPU twin and the GPU agree (issue 46): on a GPU, each kernel exercise's solution and each
mutant of the mutation suite (tests/_mutations.py) gets the same verdict from the CPU twin (the GPU
hidden from the check) as from the GPU itself: PASS for the solutions, NOT YET for the slips.
v7's exercise (lesson 10) is judged on the twin's build of v7's register path alone.

Needs a GPU: ``pytest -p no:randomly -m gpu tests/test_twin_gpu.py`` (one test per text; with
pytest-xdist, ``-n 8 --dist load``).
"""
import pytest

from rmsnorm_lessons import twin
from rmsnorm_lessons.core import build, gpu, ladder
from rmsnorm_lessons.course import registry

import _mutations

NEEDS_A_GPU: tuple = ()  # none: v7 runs on the twin as its register path alone
TEXTS = {f"{lesson.stem[:2]}-solution": (lesson.stem, _mutations.solution_text(lesson))
         for lesson in registry.kernel_exercises() if lesson.stem not in NEEDS_A_GPU}
TEXTS.update({m.node: (m.exercise, m.text) for m in _mutations.all_mutants()
              if m.exercise not in NEEDS_A_GPU})

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
    assert "on the CPU twin" not in on_gpu.message
    with monkeypatch.context() as hidden:
        hidden.setattr(gpu, "why_unavailable", lambda: "hidden: the CPU twin's turn")
        on_cpu = check(text)
    assert on_cpu.message.startswith("on the CPU twin") or on_cpu.status == on_gpu.status == \
        "NOT YET", on_cpu.message  # a slip the static checks catch never reaches either run
    assert on_cpu.status == on_gpu.status, (
        f"{node}: the GPU says {on_gpu}\n\nthe CPU twin says {on_cpu}")
    if node.endswith("-solution"):
        assert on_gpu.status == "PASS", on_gpu.message
