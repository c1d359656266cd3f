"""rl.notebook.compare_with_ours: our kernel shown after the learner's check, whole or one function
(CPU: the extraction is checked on every shipped kernel file)."""
import re

import pytest

from rmsnorm_lessons.core import build
from rmsnorm_lessons.course import notebook
from rmsnorm_lessons.course.verdict import Verdict

FILES = sorted(p.name for p in build.kernel_dir().iterdir() if p.suffix in (".cu", ".cuh"))
# a function head as a reader sees it: qualifiers and attributes (__launch_bounds__(...)), a return
# type, the name, "("
HEAD = re.compile(r"(?:__global__|__device__)(?:[^;{}()]|__\w+__\([^)]*\))*?"
                  r"\b(?!__\w+__\s*\()(\w+)\s*\(")


def _without_structs(text: str) -> str:
    """Member functions are not parts: drop each struct's body."""
    while (m := re.search(r"\b(?:struct|class)\s+(?:alignas\(\d+\)\s*)?\w+\s*(?::[^;{]*)?\{",
                          text)):
        depth, j = 0, m.end() - 1
        for j in range(m.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                break
        text = text[:m.start()] + text[j + 1:]
    return text


def _heads(text: str) -> set:
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"(?m)^\s*#(?:[^\n]*\\\n)*[^\n]*", "", text)  # directives, continued lines too
    text = _without_structs(text)
    return {m.group(1) for m in HEAD.finditer(text)}


@pytest.mark.parametrize("name", FILES)
def test_every_function_of_every_kernel_file_is_found(name):
    text = build.kernel_source(name)
    spans = notebook.definitions(text)
    assert spans, f"{name}: no function found"
    assert {n for n, _, _ in spans} == _heads(text), name
    for (_, _, end), (_, start, _) in zip(spans, spans[1:]):
        assert end <= start, f"{name}: definitions overlap"


@pytest.mark.parametrize("name", FILES)
def test_each_part_is_one_whole_definition(name):
    text = build.kernel_source(name)
    for fn, start, end in notebook.definitions(text):
        part = text[start:end]
        code = notebook._code_mask(part)
        assert part.rstrip().endswith("}") and code.count("{") == code.count("}"), (name, fn)
        head = code[:code.index("{")]
        assert re.search(rf"\b{fn}\s*\(", head), f"{name}: {fn}'s part starts elsewhere"
        assert start == 0 or text[start - 1] == "\n", f"{name}: {fn} starts mid-line"
        first = part.splitlines()[0].strip()
        above = text[:start - 1].rsplit("\n", 1)[-1] if start else ""
        # the leading comment block is taken whole: the line right above is not a comment
        assert not above.strip().startswith("//"), f"{name}: {fn} lost its comment block"
        assert first.startswith(("//", "/*", "template", "extern", "__", "static", "inline")), \
            (name, fn, first)
        assert notebook.part_of(text, fn).count(part) == 1


def test_a_part_keeps_its_comment_and_stops_at_its_brace():
    text = build.kernel_source("v5_two_pass")
    part = notebook.part_of(text, "reduce_dweight_v5")
    assert part.startswith("// One thread per channel sums the blocks' partials")
    assert part.endswith("}") and "rmsnorm_backward_v5(" not in part
    assert "#include" not in notebook.part_of(text, "rmsnorm_backward_v5")


def test_braces_in_comments_strings_and_macros_do_not_count():
    text = ('#include "x.cuh"\n#define M(a) { a; \\\n  }\n'
            "namespace n {\n"
            "// says } and {\n"
            '__device__ int f(int x) { const char* s = "}{"; char c = \'}\'; /* { */ return x; }\n'
            "}  // namespace n\n"
            'extern "C" {\n'
            "/* a block\n   comment */\n"
            "__global__ void k(int* p) {\n    if (p) { p[0] = n::f(1); }\n}\n"
            "}\n"
            "struct S { __device__ int g() { return 1; } };\n")
    assert [n for n, _, _ in notebook.definitions(text)] == ["f", "k"]
    assert notebook.part_of(text, "f").startswith("// says } and {\n__device__ int f")
    assert notebook.part_of(text, "k").startswith("/* a block\n")
    assert notebook.part_of(text, "k").endswith("p[0] = n::f(1); }\n}")


def test_an_unknown_part_lists_the_functions_found():
    with pytest.raises(ValueError) as e:
        notebook.compare_with_ours(Verdict(True, "ok"), "v5_two_pass", part="rmsnorm_backward_v9")
    assert "'rmsnorm_backward_v9'" in str(e.value)
    assert "rmsnorm_backward_v5, reduce_dweight_v5" in str(e.value)


def test_an_unknown_source_lists_the_kernels():
    with pytest.raises(FileNotFoundError, match="v1_naive"):
        notebook.compare_with_ours(Verdict(True, "ok"), "v99")
    with pytest.raises(ValueError, match="source"):
        notebook.compare_with_ours(Verdict(True, "ok"), "")
    with pytest.raises(ValueError, match="anyway"):
        notebook.compare_with_ours(Verdict(True, "ok"), "v1_naive", anyway="yes")


@pytest.mark.parametrize("verdict, anyway, above", [
    (Verdict(True, "matches"), False, ""),
    (Verdict(True, "matches"), True, ""),
    (Verdict(False, "compiled; no GPU to run it", verified=False), True,
     "unchecked: your kernel was not run\n"),
    (Verdict(False, "dweight differs"), True,
     "unchecked: your kernel did not pass its check (NOT YET)\n"),
    (None, True, "unchecked: your kernel was not run (the check cell has not given a verdict "
                 "here)\n"),
])
def test_ours_is_shown_after_a_pass_or_on_request(capsys, verdict, anyway, above):
    assert notebook.compare_with_ours(verdict, "v5_two_pass", part="reduce_dweight_v5",
                                      anyway=anyway) is None
    out = capsys.readouterr().out
    assert out.startswith(above + "Ours: reduce_dweight_v5 in kernels/v5_two_pass.cu\n")
    assert notebook.part_of(build.kernel_source("v5_two_pass"), "reduce_dweight_v5") in out
    assert "rmsnorm_backward_v5(" not in out


def test_the_whole_file_without_part(capsys):
    notebook.compare_with_ours(Verdict(True, "matches"), "v1_naive")
    out = capsys.readouterr().out
    assert out.startswith("Ours: kernels/v1_naive.cu\n")
    assert build.kernel_source("v1_naive").rstrip() in out


@pytest.mark.parametrize("verdict, why", [
    (Verdict(False, "dweight differs"), "it says NOT YET"),
    # a kernel that was not run (no GPU: NOT VERIFIED) is never followed by ours (issue 41)
    (Verdict(False, "compiled; no GPU to run it", verified=False),
     "it says NOT VERIFIED: your kernel was not run"),
    (None, "the check cell has not given a verdict here"),
    ("PASS: forged", "the check cell has not given a verdict here"),
])
def test_ours_stays_hidden_otherwise(capsys, verdict, why):
    notebook.compare_with_ours(verdict, "v1_naive")
    out = capsys.readouterr().out.strip()
    assert "\n" not in out and why in out and "anyway=True" in out
    assert "rmsnorm_backward_v1" not in out and "__global__" not in out


def test_a_kernel_that_was_not_run_shows_no_line_of_ours(capsys):
    # issue 41: a wrong v1 checked with no GPU (NOT VERIFIED) prints no line of v1_naive.cu
    notebook.compare_with_ours(Verdict(False, "compiled; no GPU to run it", verified=False),
                               "v1_naive")
    out = capsys.readouterr().out
    ours = [line.strip() for line in build.kernel_source("v1_naive").splitlines()
            if len(line.strip()) >= 12]
    assert ours and not any(line in out for line in ours), out
