"""``python -m rmsnorm_lessons progress`` (CPU): arguments, folders, exit codes, the tables, and a
room of two real Linux accounts whose notebooks run as their learners, never as root.

The notebooks here are tiny stand-ins named as lessons: their "checks" are a class in the notebook
that prints a verdict with the uid it ran as, so a run takes a kernel's start-up, not a lesson's.
"""
from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from rmsnorm_lessons.course import registry
from rmsnorm_lessons.workshop import progress

ROOT = Path(__file__).resolve().parent.parent
FIRST = registry.LESSONS[0]  # 00_setup
EXERCISES = len(FIRST.exercises)
SECOND = registry.LESSONS[1]  # 01_rmsnorm_math: one

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")


def _cell(source: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": source}


def tiny_notebook(path: Path, lesson: registry.Lesson, verdicts: list[str]) -> Path:
    """A notebook named as ``lesson`` whose check calls print ``verdicts`` (one per exercise, in
    order) followed by the uid and home the kernel ran as; a verdict None leaves that call out.
    Exercises past the verdicts given (the end-of-lesson questions) print "PASS: answered"."""
    module = f"lesson{lesson.number}"
    verdicts = list(verdicts) + ["PASS: answered"] * (len(lesson.exercises) - len(verdicts))
    checks = "\n".join(
        f"    @staticmethod\n    def {name.split('.')[1]}(*args):\n"
        f"        return {v!r} + f' (uid {{os.getuid()}} home {{os.path.expanduser(\"~\")}})'"
        for name, v in zip(lesson.exercises, verdicts))
    calls = "\n".join(f"print({module}.{name.split('.')[1]}(1))"
                      for name, v in zip(lesson.exercises, verdicts) if v is not None)
    nb = {"nbformat": 4, "nbformat_minor": 5,
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                      "language": "python"}},
          "cells": [_cell(f"import os\nclass {module}:\n{checks}"), _cell(calls)]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb))
    return path


def _cli(*args, env=None, cwd=ROOT, timeout=300):
    env = dict(os.environ if env is None else env)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + rest)
    return subprocess.run([sys.executable, "-m", "rmsnorm_lessons", "progress", *map(str, args)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


# --- arguments, before anything runs --------------------------------------------------------------


@pytest.mark.parametrize("args,message", [
    (["/no/such/notebook.ipynb"], "no such notebook or folder"),
    (["{tmp}"], "a folder without lesson notebooks"),
    (["{tmp}/notes.txt"], "not a notebook (.ipynb)"),
    (["--room", "{tmp}/none"], "not a folder"),
    (["--room", "{tmp}/empty"], "no subfolder holds lesson notebooks"),
    (["--room", "{tmp}", "{tmp}/x.ipynb"], "not both"),
    (["--jobs", "0", "{tmp}"], "must be at least 1"),
    (["--python", "/no/such/python", "{tmp}/lesson/00_setup.ipynb"], "no such interpreter"),
])
def test_bad_arguments_exit_2_with_a_message(tmp_path, args, message):
    (tmp_path / "notes.txt").write_text("not a notebook")
    (tmp_path / "empty").mkdir()
    tiny_notebook(tmp_path / "lesson" / FIRST.notebook, FIRST, ["PASS: ok", "PASS: ok"])
    p = _cli(*[a.format(tmp=tmp_path) for a in args])
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_missing_packages_are_named_with_the_extra(tmp_path):
    # a Python that hides nbclient: progress says what is missing and how to install it, exit 1
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\nclass _Hide:\n    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'nbclient':\n            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _Hide())\n")
    tiny_notebook(tmp_path / "n" / FIRST.notebook, FIRST, ["PASS: ok", "PASS: ok"])
    path = os.pathsep.join([str(hide), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    p = _cli(tmp_path / "n", env=env)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "nbclient" in p.stderr and "rmsnorm-lessons[progress]" in p.stderr, p.stderr


def test_folders_mean_their_lesson_notebooks(tmp_path):
    folder = tmp_path / "alice"
    tiny_notebook(folder / FIRST.notebook, FIRST, ["PASS: ok", "PASS: ok"])
    # not a lesson: left out of the folder's notebooks
    tiny_notebook(folder / "scratch.ipynb", FIRST, ["PASS: ok", "PASS: ok"])
    (learner,) = progress.from_paths([folder])
    assert learner.notebooks == [folder / FIRST.notebook]
    assert learner.name == pwd.getpwuid(os.geteuid()).pw_name and learner.uid is None
    # a notebook named on the command line is run whatever its name
    (learner,) = progress.from_paths([folder / "scratch.ipynb", folder])
    assert [p.name for p in learner.notebooks] == ["scratch.ipynb", FIRST.notebook]


def test_room_finds_learners_in_the_hub_folder_or_their_own(tmp_path):
    tiny_notebook(tmp_path / "ann" / progress.ROOM_FOLDER / SECOND.notebook, SECOND, ["PASS: ok"])
    tiny_notebook(tmp_path / "bob" / FIRST.notebook, FIRST, ["PASS: ok", "PASS: ok"])
    (tmp_path / "carl" / "other").mkdir(parents=True)  # no lessons: no learner
    tiny_notebook(tmp_path / ".hidden" / FIRST.notebook, FIRST, ["PASS: ok", "PASS: ok"])
    found = progress.from_room(tmp_path)
    assert [(l.name, [p.name for p in l.notebooks]) for l in found] == [
        ("ann", [SECOND.notebook]), ("bob", [FIRST.notebook])]
    if os.geteuid() == 0:  # these folders are root's: a room never runs them
        assert all("never as root" in l.refused for l in found)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs notebooks as another uid")
def test_a_folder_of_a_uid_without_account_is_refused(tmp_path):
    uid = next(u for u in range(64000, 65000) if not _has_account(u))
    folder = tmp_path / "orphan"
    tiny_notebook(folder / FIRST.notebook, FIRST, ["PASS: ok", "PASS: ok"])
    os.chown(folder, uid, uid)
    (learner,) = progress.from_paths([folder])
    assert learner.refused and "has no account" in learner.refused
    os.chown(folder, 0, 0)


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def test_the_hub_seeds_the_folder_progress_looks_in():
    config = (ROOT / "hub" / "jupyterhub_config.py").read_text()
    assert re.search(rf'^SEED_DIR = "{re.escape(progress.ROOM_FOLDER)}"', config, re.M)
    # and writes the room where progress --room <state> reads it
    accounts = (ROOT / "hub" / "accounts.py").read_text()
    assert re.search(rf'^ROOM = "{re.escape(progress.ROOM)}"', accounts, re.M)


def test_registry_exercises_give_the_rows():
    # every exercise of the lesson gets a row, one the notebook does not call is NOT YET
    nb = {"cells": [_cell("print(lesson00.check_bytes(1))")]}
    nb["cells"][0]["outputs"] = [{"output_type": "stream", "name": "stdout",
                                  "text": "PASS: 4 bytes\n"}]
    rows = [(r.exercise, r.status, r.message) for r in progress.verdicts(nb, FIRST.stem)]
    uncalled = "(the notebook does not call it)"
    assert rows == [("lesson00.check_grid", "NOT YET", uncalled),
                    ("lesson00.check_bytes", "PASS", "4 bytes")] + [
        (name, "NOT YET", uncalled) for name in FIRST.exercises[2:]]


# --- running: the table, the exit code ------------------------------------------------------------


def test_table_rows_carry_the_learner_and_failures_exit_1(tmp_path):
    folder = tmp_path / "work"
    tiny_notebook(folder / FIRST.notebook, FIRST, ["PASS: grid", "NOT YET: bytes"])
    broken = folder / SECOND.notebook
    broken.write_text("{ not json")
    p = _cli(folder, "--jobs", "2")
    assert p.returncode == 1, p.stdout + p.stderr
    me = pwd.getpwuid(os.geteuid()).pw_name
    rows = [ln.split() for ln in p.stdout.splitlines() if ln.strip()]
    assert all(r[0] == me for r in rows), p.stdout
    assert rows[0][1:4] == [FIRST.stem, "lesson00.check_grid", "PASS"]
    assert rows[1][1:5] == [FIRST.stem, "lesson00.check_bytes", "NOT", "YET"]
    assert f"uid {os.geteuid()}" in p.stdout
    k = EXERCISES  # the end-of-lesson questions pass (tiny_notebook)
    assert rows[k][:2] == [me, FIRST.stem]
    assert f"total: {k - 1} PASS, 1 NOT YET, 0 NOT VERIFIED of {k}" in " ".join(rows[k])
    unread = rf"{SECOND.stem}\s+could not be run: could not read the notebook"
    assert re.search(unread, p.stdout), p.stdout
    assert f"{me}" in rows[-1][0] and "1 notebook(s) could not be run" in " ".join(rows[-1])
    # a line per finished notebook on stderr
    assert len(re.findall(r"^\[\d/2\] ", p.stderr, re.M)) == 2, p.stderr


def test_all_notebooks_run_exit_0(tmp_path):
    path = tiny_notebook(tmp_path / FIRST.notebook, FIRST, ["PASS: grid", None])
    p = _cli(path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "lesson00.check_bytes" in p.stdout and "(the notebook does not call it)" in p.stdout


def test_a_process_the_notebook_leaves_behind_does_not_hold_the_run(tmp_path):
    path = tiny_notebook(tmp_path / FIRST.notebook, FIRST, ["PASS: grid", "PASS: bytes"])
    nb = json.loads(path.read_text())
    # inherits the kernel's stdout and stderr, and outlives the kernel
    nb["cells"].append(_cell("import subprocess\nleft = subprocess.Popen(['sleep', '120'])"))
    path.write_text(json.dumps(nb))
    p = _cli(path, timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"total: {EXERCISES} PASS, 0 NOT YET, 0 NOT VERIFIED of {EXERCISES}" in p.stdout


def test_a_forged_or_broken_reply_is_a_failed_run():
    good = progress.REPLY + json.dumps({"uid": 5, "results": [["a", "b", "PASS", "m"]]})
    assert progress._reply(f"noise\n{good}\n")["uid"] == 5
    for bad in ("{not json", json.dumps({"results": [["a", "b", "MAYBE", "m"]]}),
                json.dumps({"results": [["a", "b"]]}), json.dumps([1, 2])):
        assert progress._reply(f"{progress.REPLY}{bad}\n") is None, bad
    assert progress._reply("no reply at all") is None


def test_a_forged_prediction_row_is_a_failed_run():
    row = ["02_naive", "02.v1_ms", "PREDICTED", 0.5, "ms 0.8 vs 0.4 (2.0x higher)"]
    good = {"uid": 5, "results": [], "predictions": [row]}
    (seen,) = progress._reply(progress.REPLY + json.dumps(good))["predictions"]
    assert (seen.key, seen.status, seen.error, seen.detail) == (
        "02.v1_ms", "PREDICTED", 0.5, "ms 0.8 vs 0.4 (2.0x higher)")
    assert progress._reply(progress.REPLY + json.dumps({"uid": 5, "results": []})) is not None
    for bad in ([row[:4]], [row[:2] + ["PASS"] + row[3:]], [row[:3] + ["0.5"] + row[4:]],
                [row[:3] + [-1] + row[4:]], [row[:3] + [True] + row[4:]], "x", 3):
        forged = progress.REPLY + json.dumps(dict(good, predictions=bad))
        assert progress._reply(forged) is None, bad


def _guessing_notebook(path: Path) -> Path:
    """Lesson 00 stand-in with two predictions: one written and measured, one left as ``...``."""
    path = tiny_notebook(path, FIRST, ["PASS: grid", "PASS: bytes"])
    nb = json.loads(path.read_text())
    nb["cells"] += [_cell("import rmsnorm_lessons as rl"),
                    _cell("mine = rl.predict.guess('00.copy_ms', ms=0.8, bound='latency')"),
                    _cell("rl.predict.versus(mine, ms=0.4, bound='memory', why='it streams')"),
                    _cell("later = rl.predict.guess('00.grid_ms', ms=...)"),
                    _cell("rl.predict.versus(later, ms=1.25)"),
                    _cell("rl.predict.guess('00.never_ms', us=3)")]
    path.write_text(json.dumps(nb))
    return path


def test_predictions_get_a_row_each_and_a_total_with_the_median_error(tmp_path):
    path = _guessing_notebook(tmp_path / FIRST.notebook)
    p = _cli(path)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = {ln.split()[2]: ln.split(None, 3)[3] for ln in p.stdout.splitlines()
            if len(ln.split()) > 3 and ln.split()[2].startswith("predict.")}
    assert rows == {
        "predict.00.copy_ms": "PREDICTED     ms: guess 0.8 / measured 0.4 / gap 2.0x higher; "
                              "bound: guess latency / measured memory / gap you said latency; "
                              "it is memory",
        "predict.00.grid_ms": "NOT PREDICTED ms: guess - / measured 1.25 / gap not guessed",
        "predict.00.never_ms": "PREDICTED     guess 3 us / measured - (not measured here)",
    }, p.stdout
    total = [ln for ln in p.stdout.splitlines() if re.search(r"^\S+\s+total: ", ln)]
    assert total and total[-1].endswith("2 of 3 predictions written, median error 100 %"), total


def test_a_saved_measurement_is_set_beside_the_learners_own_guess(tmp_path):
    # no GPU: the %%gpu cell shows the H200's saved output, whose gap (the author's guess, 0.9) is
    # replayed with this learner's guess (0.2) beside the saved measurement (0.5)
    from rmsnorm_lessons.core import gpu
    from rmsnorm_lessons.course import predict

    author = {"key": "00.copy_ms", "status": "PREDICTED", "error": 0.8, "why": "it streams",
              "measured": {"ms": 0.5}, "rows": [["ms", "0.9", "0.5", "80 % higher"]]}
    path = tiny_notebook(tmp_path / FIRST.notebook, FIRST, ["PASS: grid", "PASS: bytes"])
    nb = json.loads(path.read_text())
    nb["metadata"]["rmsnorm_lessons"] = {"device": "NVIDIA H200", "date": "2026-12-02"}
    measure = _cell("%%gpu\nrl.predict.versus(mine, ms=0.4, why='it streams')")
    measure["outputs"] = [{"output_type": "display_data", "metadata": {}, "data": {
        "text/plain": "00.copy_ms: your guess beside ... 0.9 ...", predict.GAP_MIME: author}}]
    nb["cells"] += [_cell("import rmsnorm_lessons as rl\nrl.notebook.setup()"),
                    _cell("mine = rl.predict.guess('00.copy_ms', ms=0.2)"), measure]
    path.write_text(json.dumps(nb))
    p = _cli(path)
    assert p.returncode == 0, p.stdout + p.stderr
    [row] = [ln for ln in p.stdout.splitlines() if "predict.00.copy_ms" in ln]
    measured = "0.5" if gpu.why_unavailable() else "0.4"  # saved, or measured here
    ratio = "2.5x" if measured == "0.5" else "2.0x"
    assert row.endswith(f"PREDICTED     ms: guess 0.2 / measured {measured} / gap {ratio} "
                        f"lower"), row


def test_the_room_summary_counts_predictions():
    from rmsnorm_lessons.workshop.predictions import Seen

    learner = progress.Learner("ann", Path("/nowhere"), [Path("/nowhere/x.ipynb")])
    seen = [Seen("02.a", True, "1 ms", "ms 1 vs 2 (2.0x lower)", 0.5),
            Seen("02.b", True, "1 ms", "ms 1 vs 4 (4.0x lower)", 0.75),
            Seen("02.c", True, "1 ms", "ms 1 vs 1 (within 10 %)", 0.0),
            Seen("02.d")]
    outcome = progress.Outcome(learner, learner.notebooks[0], predictions=seen)
    lines = progress.summary([learner], [outcome])
    assert lines[2].endswith("3 of 4 predictions written, median error 50 %"), lines
    assert progress.table(learner, [outcome])[-1].endswith(
        "total: 0 PASS, 0 NOT YET, 0 NOT VERIFIED of 0; 3 of 4 predictions written, "
        "median error 50 %")


# --- a room of two real accounts ------------------------------------------------------------------


def _shared_python(tmp: Path) -> Path | None:
    """An interpreter every account can run, with this environment's packages and this checkout: a
    venv of the system's Python (same minor version) whose .pth adds this environment's
    site-packages. The test's own interpreter may live under a home other accounts cannot enter
    (pyenv in /root)."""
    import site
    import sysconfig

    base = Path("/usr/bin") / f"python{sys.version_info.major}.{sys.version_info.minor}"
    if not base.exists():
        return None
    env = tmp / "shared-env"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    purelib = Path(subprocess.run([str(env / "bin" / "python"), "-c",
                                   "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    mine = site.getsitepackages() + [sysconfig.get_paths()["purelib"]]
    mine = [p for p in mine if Path(p).is_dir()]
    purelib.joinpath("rmsnorm_shared.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in dict.fromkeys(mine)))
    return env / "bin" / "python"


@pytest.fixture
def two_learners():
    """A room folder with two fresh accounts' homes in it, and a folder beside it for the shared
    interpreter; both outside pytest's tmp (mode 0700, closed to the accounts). Removed
    afterwards."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to make two accounts")
    base = Path(tempfile.mkdtemp(prefix="roomt-"))
    os.chmod(base, 0o755)
    room = base / "home"
    room.mkdir()
    names = [f"roomt{uuid.uuid4().hex[:6]}{k}" for k in (1, 2)]
    made = []
    try:
        for name in names:
            subprocess.run(["useradd", "--create-home", "--home-dir", str(room / name),
                            "--shell", "/bin/sh", "-K", "HOME_MODE=0700", name],
                           check=True, capture_output=True, timeout=60)
            made.append(name)
        yield base, room, names
    finally:
        for name in made:
            subprocess.run(["userdel", "--remove", name], capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


def test_room_runs_each_learner_as_that_learner_never_as_root(two_learners):
    base, room, names = two_learners
    python = _shared_python(base)
    if python is None:
        pytest.skip("no system Python of this version to make an interpreter every account can run")
    for k, name in enumerate(names):
        account = pwd.getpwnam(name)
        folder = room / name / progress.ROOM_FOLDER
        verdicts = ["PASS: grid", "NOT YET: bytes" if k else "PASS: bytes"]
        tiny_notebook(folder / FIRST.notebook, FIRST, verdicts)
        for path in (folder, folder / FIRST.notebook):
            os.chown(path, account.pw_uid, account.pw_gid)
    # a root-owned "learner" beside them: refused, the others still run
    tiny_notebook(room / "rootowned" / FIRST.notebook, FIRST, ["PASS: grid", "PASS: bytes"])
    p = _cli("--room", room, "--python", python, "--jobs", "2", cwd=base, timeout=600)
    out = p.stdout
    print(out, p.stderr)
    assert p.returncode == 1, out + p.stderr  # 1: the root-owned folder was refused
    assert re.search(r"^rootowned\s+refused: .*never as root", out, re.M), out
    for k, name in enumerate(names):
        account = pwd.getpwnam(name)
        mine = [ln for ln in out.splitlines() if ln.startswith(name)]
        assert mine, out + p.stderr
        ran_as = set(re.findall(r"\(uid (\d+) home (\S+)\)", "\n".join(mine)))
        assert ran_as == {(str(account.pw_uid), account.pw_dir)}, mine
        assert "uid 0 " not in "\n".join(mine)
        total = f"{EXERCISES} PASS, 0 NOT YET" if k == 0 else f"{EXERCISES - 1} PASS, 1 NOT YET"
        assert re.search(rf"^{name}\s+total: {total}, 0 NOT VERIFIED of {EXERCISES}$", out,
                         re.M), out
    room_line = r"^room: 3 learner\(s\), 1 refused, 2 notebook\(s\) run, 0 could not be run"
    assert re.search(room_line, out, re.M), out
    assert "lesson00.check_grid 2" in out and "lesson00.check_bytes 1" in out


def test_the_hub_s_room_leaves_the_instructor_out_with_a_relative_python(two_learners):
    """hub/README.md's command: ``progress --room <the hub's state>`` takes the room's learners
    from the hub's room.json (the instructor, whose home holds lessons too, is left out), and an
    interpreter named by a relative path still runs in each learner's folder."""
    base, room, names = two_learners
    python = _shared_python(base)
    if python is None:
        pytest.skip("no system Python of this version to make an interpreter every account can run")
    learner, instructor = names
    for name in names:
        account = pwd.getpwnam(name)
        folder = room / name / progress.ROOM_FOLDER
        tiny_notebook(folder / FIRST.notebook, FIRST, ["PASS: grid", "PASS: bytes"])
        for path in (folder, folder / FIRST.notebook):
            os.chown(path, account.pw_uid, account.pw_gid)
    state = base / "state"
    state.mkdir(mode=0o700)
    (state / progress.ROOM).write_text(json.dumps({"learners": [learner],
                                                   "instructor": instructor}))
    p = _cli("--room", "state", "--python", os.path.relpath(python, base), "--jobs", "1",
             cwd=base, timeout=600)
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    assert re.search(r"^room: 1 learner\(s\), 0 refused, 1 notebook\(s\) run, 0 could not be "
                     r"run", out, re.M), out
    assert re.search(rf"^{learner}\s+total: {EXERCISES} PASS", out, re.M), out
    assert instructor not in out + p.stderr
