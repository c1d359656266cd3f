"""Lessons 04-08 without a GPU: their pictures, exercises (right answers pass, wrong ones fail with
a useful message), the shared-memory widget and the notebooks' shape. The GPU paths are marked
``gpu``."""
import ast
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

import rmsnorm_lessons as rl
from rmsnorm_lessons.core import bf16, gpu, ladder, launch
from rmsnorm_lessons.course import plots
from rmsnorm_lessons.inspection import access, occupancy
from rmsnorm_lessons.lessons import lesson04, lesson05, lesson08

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ["04_shared_memory.ipynb", "05_bf16.ipynb", "06_vectorized.ipynb",
             "07_two_pass.ipynb",
             "08_last_block.ipynb"]


# --- plots ----------------------------------------------------------------------------------------


def _small(fig):
    assert isinstance(fig, Figure)
    assert fig.dpi == plots.DPI and fig.get_size_inches()[0] <= plots.FIGSIZE[0]
    return fig


@pytest.mark.parametrize("strides", [(1, 2, 32, 33), (0,), (1,), (64, 3)])
def test_bank_conflicts_figure(strides):
    fig = _small(lesson04.bank_conflicts(strides))
    titles = [ax.get_title() for ax in fig.axes]
    for stride, title in zip(strides, titles):
        degree = 1 if stride == 0 else math.gcd(stride, 32)
        assert (f"{degree}-way" in title) if degree > 1 else ("no conflict" in title), title


def test_bank_layout_follows_the_word_index():
    rows, banks = access.bank_layout(33)
    assert rows[1] == 1 and banks[1] == 1 and len(set(banks.tolist())) == 32
    rows, banks = access.bank_layout(32)
    assert set(banks.tolist()) == {0} and rows.tolist() == list(range(32))
    for stride in (0, 1, 2, 3, 32, 33, 48, 64, 1024):
        assert access.bank_conflict_degree(stride) == (math.gcd(stride, 32) if stride else 1)


def test_partials_and_ticket_figures():
    _small(plots.partials_reduction())
    _small(plots.partials_reduction(rows=5, warps_per_block=1, blocks=4, channels=3))
    for blocks in (1, 2, 8, 20):
        fig = _small(lesson08.ticket_timeline(blocks=blocks, seed=blocks))
        labels = [t.get_text() for t in fig.axes[0].texts if t.get_text().startswith("ticket")]
        assert sorted(labels,
                      key=lambda s: int(s.split()[1])) == [f"ticket {k}" for k in range(blocks)]


def test_bf16_error_histogram():
    rng = np.random.default_rng(0)
    fig = lesson05.bf16_error_histogram({"a": rng.random(1000), "b": np.r_[0.0, rng.random(10)]},
                                     limit=0.5,
                                     xlabel="x", title="t")
    _small(fig)
    assert "1 exact" in " ".join(t.get_text() for t in fig.axes[0].get_legend().get_texts())
    _small(lesson05.bf16_error_histogram({"zeros only": np.zeros(5)}))


@pytest.mark.parametrize("version", ladder.with_shared_dweight())
@pytest.mark.parametrize("C", [1024, 16384])
def test_shared_memory_chart(version, C):
    _small(plots.shared_memory_chart(version, C=C, Cs=[256, 1024, 4096, 16384]))


@pytest.mark.parametrize("version,per_sm",
                         [(r.name, getattr(getattr(ladder, r.name), "BLOCKS_PER_SM", None))
                          for r in ladder.SHIPPED if r.config_check is None])
def test_plan_blocks_per_sm_is_read_from_the_plans(version, per_sm):
    # what the shared-memory chart and summary draw as "the plan launches k per SM"
    assert occupancy.plan_blocks_per_sm(version, 1024) == per_sm
    if per_sm is not None:
        assert per_sm == getattr(ladder, version).BLOCKS_PER_SM
        for sms in (1, 108, 132):
            device = dataclasses.replace(gpu.H200, multiprocessors=sms)
            assert ladder.plan(version, 1 << 22, 1024, device)[0].grid == per_sm * sms


# --- exercises ------------------------------------------------------------------------------------


def _round_bits(x):
    u = x.view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def test_lesson05_bf16_round():
    assert lesson05.check_bf16_round(_round_bits).passed
    # a bf16 array is accepted too
    assert lesson05.check_bf16_round(lambda x: bf16.to_bf16(x)).passed
    cases = [(lambda x: (x.view(np.uint32) >> 16).astype(np.uint16), "truncates"),
             (lambda x: ((x.view(np.uint32) + 0x8000) >> 16).astype(np.uint16), "ties"),
             (lambda x: _round_bits(x)[:-1], "shape"),
             (lambda x: _round_bits(x).astype(np.float32), "uint16"),
             (lambda x: _round_bits(x) ^ 1, "differ"),
             (lambda x: None, "returns None"),
             (lambda x: x.nope, "AttributeError")]
    for fn, expect in cases:
        v = lesson05.check_bf16_round(fn)
        assert not v.passed and expect in v.message, v.message


def test_lesson05_half_ulp():
    assert lesson05.check_half_ulp(0.125).passed
    assert lesson05.check_half_ulp(2 ** -8, lo=1.0).passed
    assert lesson05.check_half_ulp(0.5, lo=128.0).passed
    # the notebook's question: between 1/16 and 1/8
    assert lesson05.check_half_ulp(2 ** -12, lo=1 / 16).passed
    v = lesson05.check_half_ulp(2 ** -11, lo=1 / 16)
    assert not v.passed and "spacing" in v.message, v.message
    for wrong, expect in [(0.25, "spacing"), (0.125 / 2 ** 16, "float32"), (0.1, "not 0.1"),
                          (None, "replace"),
                          ("x", "number")]:
        v = lesson05.check_half_ulp(wrong)
        assert not v.passed and expect in v.message, v.message


def test_half_ulp_is_what_ml_dtypes_does():
    x = np.linspace(32, 64, 100001, endpoint=False).astype(np.float32)
    err = np.abs(bf16.from_bf16(bf16.to_bf16(x)).astype(np.float64) - x)
    assert err.max() == lesson05.bf16._half_spacing(32.0)


def test_lesson07_atomic_inc():
    assert lesson08.check_atomic_inc(lambda old, limit: 0 if old >= limit else old + 1).passed
    cases = [(lambda old, limit: 0 if old > limit else old + 1, "wraps when old >= limit"),
             (lambda old, limit: 0 if old >= limit - 1 else old + 1, "still becomes limit"),
             (lambda old, limit: old + 1, "atomicInc stores"),
             (lambda old, limit: None, "returns None"),
             (lambda old, limit: {}[old], "KeyError")]
    for fn, expect in cases:
        v = lesson08.check_atomic_inc(fn)
        assert not v.passed and expect in v.message, v.message


def test_seed_tickets_and_v6_tickets():
    assert lesson08.seed_tickets(4, 3) == [[0, 1, 2, 3], [4, 0, 1, 2], [3, 4, 0, 1]]
    # v6's limit gridDim.x - 1: every launch draws 0..G-1 and the counter comes back to 0
    for G in (1, 2, 5, 264):
        assert lesson08.seed_tickets(G, 4, limit=G - 1) == [list(range(G))] * 4


def test_lesson07_seed_tickets_check():
    assert lesson08.check_seed_tickets([4, 0, 1, 2], [3, 4, 0, 1]).passed
    assert lesson08.check_seed_tickets((4, 0, 1, 2), np.array([3, 4, 0, 1])).passed
    for l2, l3, expect in [([0, 1, 2, 3], [0, 1, 2, 3], "not 0"),
                           ([4, 0, 1, 2], [0, 1, 2, 3], "launch 3"),
                           ([1, 2, 3, 4], [3, 4, 0, 1], "launch 2 is not"),
                           (None, None, "replace None"),
                           (["a"], [1], "whole numbers")]:
        v = lesson08.check_seed_tickets(l2, l3)
        assert not v.passed and expect in v.message, v.message


# --- lessons 07 and 08: the learner writes before ours shows --------------------------------------


def _sources(name):
    """(cell type, tags, source and saved outputs) of each cell of a notebook, read as JSON."""
    import json

    def shown(cell):
        return "".join("".join(o.get("text") or o.get("data", {}).get("text/plain") or "")
                       for o in cell.get("outputs", []))

    nb = json.loads((ROOT / "notebooks" / name).read_text())
    return [(c["cell_type"], c["metadata"].get("tags", []), "".join(c["source"]) + shown(c))
            for c in nb["cells"]]


def _tagged(cells, tag):
    return [i for i, (_, tags, _) in enumerate(cells) if tag in tags]


@pytest.mark.parametrize("name, rung, parts", [
    ("07_two_pass.ipynb", "v5_two_pass", ("rmsnorm_backward_v5", "reduce_dweight_v5")),
    ("08_last_block.ipynb", "v6_last_block", ("rmsnorm_backward_v6",))])
def test_ours_shows_only_after_the_learners_check(name, rung, parts):
    from rmsnorm_lessons.core import build
    from rmsnorm_lessons.course import notebook

    cells = _sources(name)
    [exercise], [check], reveals = (_tagged(cells, t) for t in
                                    ("kernel-exercise", "exercise-check", "reveal"))
    assert reveals and exercise < check < min(reveals)
    import json

    check_source = "".join(json.loads((ROOT / "notebooks" / name).read_text())
                           ["cells"][check]["source"])
    assert check_source.rstrip().endswith("\nverdict"), "the check cell shows its verdict"
    ours = build.kernel_source(rung)
    for _, _, text in cells[:exercise]:  # nothing above the exercise prints ours
        assert f'kernel_source("{rung}")' not in text, text
        for part in parts:
            assert notebook.part_of(ours, part) not in text
    shown = "".join(cells[i][2] for i in reveals)
    for part in parts:
        assert f'part="{part}"' in shown
        assert notebook.part_of(ours, part)  # the part exists in ours


@pytest.mark.parametrize("name, keys", [
    ("07_two_pass.ipynb", ("07.scratch_traffic", "07.v5_vs_v4")),
    ("08_last_block.ipynb", ("08.v6_vs_v5",))])
def test_lessons_06_07_predict_before_they_measure(name, keys):
    cells = _sources(name)
    for key in keys:
        [guess] = [i for i, (_, tags, text) in enumerate(cells)
                   if "prediction" in tags and f'guess("{key}"' in text]
        assert "..." in cells[guess][2], "the saved notebook leaves the guess to the learner"
        var = cells[guess][2].split("=")[0].strip()  # mine_x = rl.predict.guess(...)
        [measured] = [i for i, (_, _, text) in enumerate(cells)
                      if f"versus({var}," in text or f"guess_beside({var}," in text]
        assert guess < measured


# --- the widget -----------------------------------------------------------------------------------


def test_shared_memory_summary():
    from rmsnorm_lessons.course import widgets

    text = widgets.shared_memory_summary("v3_smem", 16384)
    assert all(s in text for s in ("65536 B", "opts in", "3 block(s) fit", "second wave")), text
    text = widgets.shared_memory_summary("v3_smem", 1024)
    assert "within the 48 KiB" in text and "all of them run at once" in text
    assert "cannot launch" in widgets.shared_memory_summary("v6_last_block", 30000)
    assert "launch bounds" in widgets.shared_memory_summary("v6_last_block", 1024, block_size=1024)


def test_shared_memory_explorer_builds_and_redraws_without_a_gpu():
    from rmsnorm_lessons.course import widgets

    e = widgets.shared_memory_explorer("v6_last_block", C=8192)
    assert e.block_size.value == 512 and "80896 B" in e.summary()
    assert isinstance(e.figure(), Figure)
    e.version.value = "v3_smem"
    assert e.block_size.value == 256 and "v3_smem" in e.summary()
    e.C.value = 16384
    assert "second wave" in e.summary()


# --- the notebooks themselves ---------------------------------------------------------------------


def _cells(name):
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    nbformat.validate(nb)
    return nb.cells


def _names(source):
    """(names stored, names loaded) by a cell, its IPython magics left out."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("%"))
    stored, loaded = set(), set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            (stored if isinstance(node.ctx, ast.Store) else loaded).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            stored.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            stored.update((a.asname or a.name).split(".")[0] for a in node.names)
    return stored, loaded


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_no_cpu_cell_depends_on_a_gpu_cell(name):
    defined_by_cpu, defined_only_by_gpu = set(), set()
    for cell in _cells(name):
        if cell.cell_type != "code":
            continue
        stored, loaded = _names(cell.source)
        if "gpu" in cell.metadata.get("tags", []):
            defined_only_by_gpu |= stored - defined_by_cpu
            continue
        needs = (loaded - stored) & defined_only_by_gpu
        assert not needs, (f"a CPU cell of {name} uses {sorted(needs)}, defined only in a gpu "
                           f"cell:\n{cell.source}")
        defined_by_cpu |= stored
        defined_only_by_gpu -= stored



# --- on the GPU -----------------------------------------------------------------------------------


@pytest.mark.gpu
def test_v6_passes_the_seeds_own_check():
    from rmsnorm_lessons.core import compare, reference

    B, T, C = 8, 1024, 1024
    rng = np.random.default_rng(1)
    inp = rng.uniform(-1, 1, (B, T, C)).astype(np.float32)
    weight = rng.uniform(-1, 1, C).astype(np.float32)
    dout = rng.uniform(-1, 1, (B, T, C)).astype(np.float32)
    _, rstd = reference.forward(inp, weight, dtype=np.float32)
    ref_dinp, ref_dweight = reference.backward(dout, inp, weight, rstd, dtype=np.float32)
    dinp, dweight = rl.run("v6_last_block", *(bf16.to_bf16(a) for a in (dout, inp, weight)),
                                rstd)
    a = compare.compare(dinp, ref_dinp, 1e-1, 0.079, name="dinp")
    b = compare.compare(dweight, ref_dweight, 5e-1, 0.079, name="dweight")
    assert a.ok and b.ok, f"{a}\n{b}"


@pytest.mark.gpu
def test_v6_counter_reads_zero_after_every_launch():
    from rmsnorm_lessons.core import gpu, reference

    N, C = 1031, 1024
    p = reference.random_problem(N, C, bf16.bfloat16, seed=2)
    drv = gpu.driver()
    for _ in range(3):
        rl.run("v6_last_block", p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                    p["dweight"])
        counter = np.ones(1, np.uint32)
        drv.memcpy_dtoh(counter, launch.launcher("v6_last_block", C).scratch("scratch"))
        assert counter[0] == 0


@pytest.mark.gpu
def test_v4_accumulator_readback_is_what_dweight_adds():
    # lesson 07 reads v4's fp32 sums from the launcher's scratch: they must be this call's sums
    from rmsnorm_lessons.core import gpu, reference

    N, C = 4099, 1600
    p = reference.random_problem(N, C, bf16.bfloat16, seed=3)
    _, dweight = rl.run("v4_vec_bf16", p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                             p["dweight"])
    accum = np.empty(C, np.float32)
    gpu.driver().memcpy_dtoh(accum, launch.launcher("v4_vec_bf16", C).scratch("dweight_accum"))
    expect = bf16.to_bf16(bf16.from_bf16(p["dweight"]) + accum)
    assert np.array_equal(bf16.bits(dweight), bf16.bits(expect))
    _, grad = reference.backward(p["dout"], p["inp"], p["weight"], p["rstd"])
    np.testing.assert_allclose(accum, grad, rtol=1e-3, atol=1e-2)


@pytest.mark.gpu
def test_v5_dweight_is_bitwise_repeatable():
    from rmsnorm_lessons.core import reference

    p = reference.random_problem(4096, 1024, bf16.bfloat16, seed=4)
    first = rl.run("v5_two_pass", p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                        p["dweight"])[1]
    for _ in range(4):
        again = rl.run("v5_two_pass", p["dout"], p["inp"], p["weight"], p["rstd"], p["dinp"],
                            p["dweight"])[1]
        assert np.array_equal(bf16.bits(again), bf16.bits(first))
