"""The README's benchmark is what tools/readme_bench.py renders from the bench.json it names
(CPU)."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("readme_bench",
                                                  ROOT / "tools" / "readme_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_benchmark_is_rendered_from_its_bench_json(tool):
    source = tool.readme_source()
    assert (ROOT / source).is_file(), (f"README.md's bench:start marker names {source}, which does "
                                       f"not exist")
    assert tool.readme_block() == tool.render(source), (
        f"README.md's benchmark differs from what {source} gives: run python tools/readme_bench.py "
        f"--write")


def test_the_published_bench_has_a_manifest_and_a_plot(tool):
    source = ROOT / tool.readme_source()
    run = tool._run_of(source)
    assert run["device"] and run["date"] and run["command"]
    assert (source.parent / "bench.png").is_file()
    assert "bench.png" in run["produced"]


def _row(name, N, C, ms, tensors):
    nbytes = tensors * N * C * 2 + 4 * N + 3 * C * 2
    gbps = nbytes / (ms * 1e-3) / 1e9
    return dict(name=name, N=N, C=C, ms=ms, bytes=nbytes, gbps=gbps, copy_gbps=4000.0,
                percent_of_copy=100 * gbps / 4000.0)


def test_render_bolds_the_fastest_of_those_moving_the_same_bytes(tool, tmp_path):
    rows = [_row("v6_last_block", 8192, 1024, 0.10, 4), _row("v7_fast", 8192, 1024, 0.040, 4),
            _row("v7_fast (dinp=)", 8192, 1024, 0.045, 3),
            _row("torch.compile", 8192, 1024, 0.050, 3)]
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "bench.json").write_text(json.dumps(rows))
    (folder / "MANIFEST.json").write_text(json.dumps({"runs": [dict(
        command="python -m rmsnorm_lessons bench --repeats 30 --json bench.json",
        produced=["bench.json"],
        device="NVIDIA X", date="2027-01-02T10:00:00+00:00", packages={})]}))
    text = tool.render(folder / "bench.json")
    assert "Measured on one NVIDIA X on 2027-01-02" in text and "median of 30 launches" in text
    assert "copy bandwidth 4000 GB/s" in text
    assert "| 8192x1024 | 0.1000 (" in text
    assert "| 0.0400 (" in text  # v7_fast accumulates: faster, but not on the same bytes
    assert "| **0.0450** (" in text
    assert "![" not in text  # no bench.png beside it
    assert "1.11x over the fastest of them" in " ".join(text.split())


def test_render_gives_both_yardsticks_and_names_every_peer_with_its_version(tool, tmp_path):
    """With the same-bytes ceilings in the run: each cell says % of copy / % of the ceiling of its
    mode, the ceilings are a yardstick, not a column, the peers are named with the versions the run
    recorded, and a noisy row is marked."""
    N, C = 16384, 4096  # one of the large shapes: the summary gives v7's share of the ceiling there
    rows = [_row("v6_last_block", N, C, 0.20, 4), _row("v7_fast", N, C, 0.080, 4),
            _row("v7_fast (dinp=)", N, C, 0.060, 3),
            _row("torch.compile max-autotune", N, C, 0.100, 3),
            _row("Quack kernel", N, C, 0.064, 3), _row("stream ceiling", N, C, 0.072, 4),
            _row("stream ceiling (dinp=)", N, C, 0.054, 3)]
    ceiling = {4: rows[5]["gbps"], 3: rows[6]["gbps"]}
    for r, t in zip(rows[:5], (4, 4, 3, 3, 3)):
        r["percent_of_ceiling"] = 100 * r["gbps"] / ceiling[t]
    rows[3]["noisy"] = True
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "bench.json").write_text(json.dumps(rows))
    (folder / "MANIFEST.json").write_text(json.dumps({"runs": [dict(
        command="python -m rmsnorm_lessons bench --json bench.json", produced=["bench.json"],
        device="NVIDIA X",
        date="2027-01-02", packages={"torch": "2.11.0", "quack-kernels": "0.6.5",
                                     "nvidia-cutlass-dsl": "4.8.1"})]}))
    text = tool.render(folder / "bench.json")
    header = next(line for line in text.splitlines() if line.startswith("| N x C"))
    assert "stream ceiling" not in header and "Quack kernel" in header
    v7_over = rows[2]
    assert (f"| **0.0600** ({v7_over['percent_of_copy']:.0f} / "
            f"{v7_over['percent_of_ceiling']:.0f} %) |") in text
    assert f"({rows[3]['percent_of_copy']:.0f} / {rows[3]['percent_of_ceiling']:.0f} %) ~ |" in text
    flat = " ".join(text.split())
    assert "same-bytes ceiling" in flat and "`~`" in flat
    assert "PyTorch 2.11.0 `torch.compile` (`max-autotune-no-cudagraphs`)" in flat
    assert "Quack 0.6.5 (CUTLASS DSL 4.8.1): its kernel alone, without the dweight sum" in flat
    assert (f"{rows[1]['percent_of_ceiling']:.0f} % of the same-bytes ceiling accumulating, "
            f"{v7_over['percent_of_ceiling']:.0f} % overwriting") in flat


def test_render_says_when_the_run_timed_bursts(tool, tmp_path):
    rows = [dict(_row("v7_fast", 8192, 1024, 0.040, 4), burst=4),
            dict(_row("torch eager", 8192, 1024, 0.1, 3), burst=4)]
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "bench.json").write_text(json.dumps(rows))
    (folder / "MANIFEST.json").write_text(json.dumps({"runs": [dict(
        command="python -m rmsnorm_lessons bench --json bench.json", produced=["bench.json"],
        device="NVIDIA X", date="2027-01-02T10:00:00+00:00", packages={})]}))
    text = " ".join(tool.render(folder / "bench.json").split())
    assert ("median of 50 bursts of 4 launches back to back, each burst behind an untimed launch "
            "of its kind") in text


def test_render_names_the_run_and_claims_only_its_peers(tool, tmp_path):
    """The sentences name the commit the run measured and the folder with its files, and the summary
    says which peers it beat: each one this run timed, by name, never 'every peer'."""
    rows = [_row("v6_last_block", 8192, 1024, 0.10, 4), _row("v7_fast", 8192, 1024, 0.040, 4),
            _row("v7_fast (dinp=)", 8192, 1024, 0.045, 3),
            _row("torch.compile", 8192, 1024, 0.050, 3),
            _row("v6_last_block", 1024, 4096, 0.02, 4), _row("v7_fast", 1024, 4096, 0.010, 4),
            _row("v7_fast (dinp=)", 1024, 4096, 0.012, 3),
            _row("torch.compile", 1024, 4096, 0.011, 3)]
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "bench.json").write_text(json.dumps(rows))
    run = dict(command="python -m rmsnorm_lessons bench --json bench.json", produced=["bench.json"],
               device="NVIDIA X", date="2027-01-02", commit="0123456789abcdef", dirty=True,
               packages={})
    (folder / "MANIFEST.json").write_text(json.dumps({"runs": [run]}))
    flat = " ".join(tool.render(folder / "bench.json").split())
    assert "the code of commit 0123456 with local changes" in flat
    assert ("faster than each peer it timed (`torch.compile` in its default mode) at one of two "
            "shapes"
            in flat), flat
    assert "every peer" not in flat
    assert f"Every file of this run is in `{folder.as_posix()}/`" in flat
    run.update(dirty=False)
    (folder / "MANIFEST.json").write_text(json.dumps({"runs": [run]}))
    assert "commit 0123456," in " ".join(tool.render(folder / "bench.json").split())


def test_the_readme_keeps_no_figures_outside_the_rendered_run():
    """Between the rendered block and the next heading there are no measured figures (ms, %, GB/s)
    from other runs: the README's benchmark is one table from one run."""
    import re

    text = (ROOT / "README.md").read_text()
    after = text.split("<!-- bench:end -->", 1)[1].split("\n## ", 1)[0]
    assert not re.search(r"\d\s*(ms|%|GB/s)\b", after), after
    assert text.count("<!-- bench:start") == 1
