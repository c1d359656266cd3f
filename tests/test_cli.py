"""The command line (CPU): info and inspect work without a GPU; check and bench say in one sentence
why not."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rmsnorm_lessons import __version__, cli
from rmsnorm_lessons.core import devices, gpu, ladder

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-m", "rmsnorm_lessons", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_info_says_what_works_here():
    p = _cli("info")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for field in ("python", "numpy", "pycuda", "nvcc", "GPU", "works here:", "versions"):
        assert field in out, f"info does not print {field!r}:\n{out}"
    assert "compiling every kernel" in out  # nvcc is present wherever the tests run
    assert ", ".join(ladder.VERSIONS) in out
    if not gpu.available():
        assert "GPU        none usable:" in out
        assert "not here:   launching kernels" in out
    assert "Traceback" not in p.stderr
    assert "target     " in out
    if not gpu.available():
        p = _cli("info", "--bandwidth")
        assert "copy       not measured: it needs a GPU" in p.stdout


def test_info_names_the_build_target(monkeypatch):
    monkeypatch.setenv("RMSNORM_ARCH", "compute_75")
    assert ("target     compute_75 ($RMSNORM_ARCH=compute_75): PTX the driver compiles"
            in _cli("info").stdout)
    monkeypatch.setenv("RMSNORM_ARCH", "sm_75")  # --arch's spelling: the same code path
    assert "target     compute_75 ($RMSNORM_ARCH=sm_75)" in _cli("info").stdout


@pytest.mark.parametrize("command", [["info"], ["inspect", "v1_naive"], ["check", "v1_naive"],
                                     ["bench", "v1_naive", "--shapes", "8x8"]])
def test_a_bad_rmsnorm_arch_is_one_message_and_exit_2_from_every_command(monkeypatch, command):
    monkeypatch.setenv("RMSNORM_ARCH", "garbage")
    p = _cli(*command)
    assert p.returncode == 2 and p.stdout == "", (p.stdout, p.stderr)
    assert p.stderr.splitlines() == [
        f"{command[0]}: RMSNORM_ARCH='garbage' is not an architecture the course builds for: "
        f"{devices.spellings()}"]


def test_an_unknown_version_is_named_with_a_path_relative_to_the_package():
    p = _cli("inspect", "v9_nope")
    assert p.returncode == 2
    missing = "/".join(("kernels", "v9_nope.cu"))  # a path that must not exist
    assert p.stderr.startswith(f"inspect: no kernel file {missing}; known: "), p.stderr
    assert os.sep + "kernels" not in p.stderr and "v1_naive" in p.stderr


def test_inspect_takes_the_switchs_spelling():
    p = _cli("inspect", "v1_naive", "--arch", "compute_75")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("rmsnorm_backward_v1 (sm_75):")


def test_inspect_prints_resources_without_a_gpu():
    p = _cli("inspect", "v1_naive", "--arch", "sm_90")
    assert p.returncode == 0, p.stderr
    assert all(word in p.stdout for word in ("rmsnorm_backward_v1 (sm_90):", "registers", "spills"))
    assert "dynamic shared memory at C=4096: 0 B" in p.stdout


def test_inspect_shared_memory_figure():
    p = _cli("inspect", "v6_last_block", "--C", "1024")
    assert p.returncode == 0, p.stderr
    assert "dynamic shared memory at C=1024: 23552 B (block of 512 threads)" in p.stdout


def test_inspect_unknown_version_is_one_sentence():
    p = _cli("inspect", "v9_missing")
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("inspect: "), p.stderr
    # names what was asked and what exists
    assert "v9_missing" in lines[0] and "v1_naive" in lines[0]


@pytest.mark.skipif(gpu.available(), reason="a GPU is here: check and bench run for real")
@pytest.mark.parametrize("command", ["check", "bench"])
def test_gpu_commands_exit_3_with_one_sentence(command):
    p = _cli(command)
    assert p.returncode == cli.EXIT_NO_GPU == 3, (p.stdout, p.stderr)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"{command}: needs a GPU. ")
    assert "Traceback" not in p.stderr and p.stdout == ""


def test_usage_errors():
    p = _cli()
    assert p.returncode == 2 and "command" in p.stderr


def _one_line_usage_error(p, *words):
    """Exit 2, one line on stderr naming what was wrong, nothing on stdout, no traceback."""
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert p.returncode == cli.EXIT_USAGE == 2, (p.returncode, p.stdout, p.stderr)
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# each is refused before any GPU work: the same message and code on a GPU machine
@pytest.mark.parametrize("args, words", [
    (["inspect", "v6_last_block", "--C", "-8"], ["--C", "'-8'", "at least 1"]),
    (["inspect", "v6_last_block", "--C", "wide"], ["--C", "not a whole number"]),
    (["inspect", "v6_last_block", "--arch", "banana"], ["--arch", "'banana'", "sm_90"]),
    (["inspect", "v6_last_block", "--arch", "sm_10"], ["--arch", "'sm_10'", "sm_90"]),
    (["inspect", "v6_last_block", "--C", "100"], ["--C 100", "multiple of 8"]),
    (["inspect", "v6_last_block", "--C", "1000000"],
     ["--C 1000000", "no GPU allows a block more than"]),
    (["inspect", "v6_last_block", "--C", "20480", "--arch", "sm_86"],
     ["--C 20480", "sm_86 gives a block at most"]),
    (["bench", "--shapes", "4096"], ["--shapes", "'4096'", "NxC"]),
    (["check", "--shapes", "7x776,4096x0"], ["--shapes", "'4096x0'", "at least 1"]),
    (["bench", "--repeats", "0"], ["--repeats", "at least 1"]),
    (["bench", "--peer", "cuDNN"], ["--peer", "'cuDNN'", "Quack kernel"]),
    (["bench", "--json", "/nonexistent-folder/bench.json"], ["--json", "does not exist"]),
    (["check", "v9_missing"], ["v9_missing", "v1_naive"]),
    (["bench", "v9_missing", "--shapes", "8x8"], ["v9_missing", "v7_fast"]),
    (["frobnicate"], ["frobnicate", "info"]),
    (["check", "--shapes", "3000000000x8"], ["--shapes", "'3000000000x8'", "below 2**31"]),
    (["bench", "--shapes", "8x2000000000"], ["--shapes", "C at most 2**30"]),
    (["inspect", "v6_last_block", "--arch", "sm_75a"], ["--arch", "'sm_75a'", "from sm_90 also"]),
    (["inspect", "v7_fast", "--arch", "sm_80", "--C", "32768"],
     ["--C 32768", "cluster", "needs sm_90 or newer"]),
    (["inspect", "v7_fast", "--arch", "sm_75", "--C", "16384"],
     ["--C 16384", "65536 B a block may have on sm_75", "C <= 16128"]),
])
def test_bad_arguments_are_one_line_exit_2(args, words):
    _one_line_usage_error(_cli(*args), *words)


def test_program_name_and_version():
    p = _cli("--version")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"python -m rmsnorm_lessons {__version__}", p.stdout
    # the console script: argparse's name is what the user typed
    code = ("import sys; sys.argv[0] = '/somewhere/bin/rmsnorm-lessons'; from rmsnorm_lessons.cli "
            "import main; "
            "raise SystemExit(main(sys.argv[1:]))")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for args, stream in ((["--version"], "stdout"),
                         (["inspect", "--C", "-8", "v1_naive"], "stderr")):
        p = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env,
                           capture_output=True, text=True)
        text = getattr(p, stream)
        assert text.startswith("rmsnorm-lessons"), (args, p.stdout, p.stderr)
        assert "python -m" not in text


@pytest.mark.parametrize("command", [None, "info", "check", "bench", "inspect"])
def test_help_is_plain_text_and_explains_every_option(command):
    p = _cli(*([command] if command else []), "--help")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for markup in ("``", ":func:", ":class:", ":mod:", "%(", "%%"):
        assert markup not in out, f"raw markup {markup!r} in the help:\n{out}"
    assert "exit codes:" in out and "3  the command needs a GPU" in out
    # every option and positional has its sentence: on its line after two spaces, or on the next
    # line
    lines = out.split("exit codes:")[0].splitlines()
    for k, line in enumerate(lines):
        m = re.match(r"^  (-[-\w]+|[a-z]\w*)\b(.*)$", line)
        if m and m.group(1) != "command":  # the list of commands follows it
            explained = re.search(r"\S\s{2,}\S", line.strip()) \
                or (k + 1 < len(lines) and lines[k + 1].startswith(" " * 8))
            assert explained, f"{m.group(1)} has no help:\n{out}"


def test_closed_pipe_is_quiet():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run(f"{sys.executable} -m rmsnorm_lessons info | head -1", shell=True, cwd=ROOT,
                       env=env, capture_output=True, text=True, executable="/bin/bash", timeout=120)
    assert p.stdout.startswith("python ") and len(p.stdout.splitlines()) == 1, p.stdout
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr


def test_compile_error_is_one_line(tmp_path):
    import shutil

    from rmsnorm_lessons.core import build

    kernels = tmp_path / "kernels"
    shutil.copytree(build.kernel_dir(), kernels)
    (kernels / "broken.cu").write_text('extern "C" __global__ void broken(float *x) { x[0] = '
                                       'undefined_name; }\n')
    env = dict(os.environ, RMSNORM_LESSONS_KERNELS=str(kernels))
    env["PYTHONPATH"] = str(ROOT)
    p = subprocess.run([sys.executable, "-m", "rmsnorm_lessons", "inspect", "broken"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=120)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert p.returncode == cli.EXIT_FAILED == 1, (p.stdout, p.stderr)
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("inspect: ") and "undefined_name" in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_info_claims_compiling_only_with_kernel_sources(tmp_path):
    env = dict(os.environ, RMSNORM_LESSONS_KERNELS=str(tmp_path), PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "rmsnorm_lessons", "info"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "compiling every kernel" not in p.stdout and "kernels    MISSING" in p.stdout
    assert "compiling" in next(l for l in p.stdout.splitlines() if l.startswith("not here:"))


# named versions and named shapes: every pair must be runnable, said before any GPU work, each pair
# named
@pytest.mark.parametrize("command", ["check", "bench"])
def test_shapes_a_named_version_cannot_run_are_refused_first(command):
    p = _cli(command, "--shapes", "100x7,64x70000,32x64", "v7_fast", "v2_warp")
    assert p.returncode == cli.EXIT_USAGE, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert "--shapes holds shapes these versions cannot run" in lines[0]
    assert any("v7_fast at 100x7" in line and "multiple of 8" in line for line in lines[1:])
    assert any("v7_fast at 64x70000" in line and "65536" in line for line in lines[1:])
    assert not any("v2_warp" in line or "32x64" in line for line in lines[1:])  # those run
    # 8 MB of shared memory a block: no GPU has it
    p = _cli(command, "v6_last_block", "--shapes", "8x1000000")
    assert p.returncode == cli.EXIT_USAGE, (p.returncode, p.stderr)
    assert "v6_last_block at 8x1000000" in p.stderr, p.stderr
    assert "no GPU allows a block more than" in p.stderr


def test_student_says_what_is_wrong_with_its_folder_or_its_notebooks(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    _one_line_usage_error(_cli("student", str(a_file)), str(a_file), "is a file, not a folder")
    _one_line_usage_error(_cli("student", str(tmp_path / "out"), str(ROOT / "README.md")),
                          "README.md is not a notebook")
    assert not (tmp_path / "out").exists()  # nothing written before the sources were read
    _one_line_usage_error(_cli("student"), "required: out")


def test_a_sweep_skips_what_a_version_cannot_take(monkeypatch, capsys):
    """``check`` with no version named runs every version at every shape it can take and says which
    it skipped and why (here without a GPU: the check itself is stood in for)."""
    from rmsnorm_lessons.core import compare
    from rmsnorm_lessons.speed import bench

    checked = []
    monkeypatch.setattr(cli.gpu, "require", lambda: None)

    def runnable(version, N, C):
        if version == "v3_smem":
            raise ValueError("v3_smem at C=20000 needs more shared memory than this GPU has")
    monkeypatch.setattr(bench, "runnable", runnable)

    def fake_check(version, N, C, seed=0):
        checked.append(version)
        ok = type("Cmp", (), {"rel_l2_error": 0.0, "max_abs_error": 0.0})()
        return type("Report", (), {"ok": True, "dinp": ok, "dweight": ok})()
    monkeypatch.setattr(compare, "check_version", fake_check)
    assert cli.main(["check", "--shapes", "8x20000"]) == 0
    out = capsys.readouterr().out
    assert "skip v3_smem" in out and "needs more shared memory" in out
    assert "v3_smem" not in checked and "v7_fast" in checked and "0 failed" in out
