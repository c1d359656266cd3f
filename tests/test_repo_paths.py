"""Every repository path the repository's own text names exists (CPU).

A path is a word starting with one of the repository's folders (kernels, tools, lab, notebooks,
rmsnorm_lessons, results) followed by ``/``, in the Markdown, Python, CUDA, shell and notebook files
and the Makefile that git tracks or would track. A glob (``notebooks/*.ipynb``) must match
something; a placeholder component (``results/<name>/...``, ``kernels/{name}.cu``) stands for any
name: the part before it must exist. A path inside another (``/abs/.../kernels/x``,
``https://.../tools/x``) is not one.
"""
import glob
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("kernels", "tools", "lab", "notebooks", "rmsnorm_lessons", "results")
SUFFIXES = (".md", ".py", ".cu", ".cuh", ".ipynb", ".sh")
PATH = re.compile(r"(?<![\w./<>{}$-])(?:%s)/[\w.*?<>{}/-]*" % "|".join(FOLDERS))
PLACEHOLDER = re.compile(r"<[^<>/]*>|\{[^{}/]*\}")
#: files outside the repository that its text once pointed to (the project's design notes, its
# shared folder)
OUTSIDE = ("DESIGN.md", "../shared/")


def _text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others",
                              "--exclude-standard"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    files = [ROOT / f for f in out.splitlines() if f.endswith(SUFFIXES) or Path(f).name
             == "Makefile"]
    # a file deleted in the work tree is still in the index; this file's examples name missing paths
    # on purpose
    return [f for f in files if f.is_file() and f.resolve() != Path(__file__).resolve()]


def _clean(token: str) -> str:
    token = token.rstrip(".-")  # the end of a sentence, a dash after a path
    while token and token[-1] in ">}" and token.count(token[-1]) > token.count("<" if token[-1]
                                                                               == ">" else "{"):
        token = token[:-1].rstrip(".-")
    return token


def exists(token: str) -> bool:
    """Whether the repository has what ``token`` (a path from its root) names."""
    parts = token.rstrip("/").split("/")
    for i, part in enumerate(parts):
        if PLACEHOLDER.search(part):
            return (ROOT.joinpath(*parts[:i])).is_dir()
    if any(c in token for c in "*?"):
        return bool(glob.glob(str(ROOT / token)))
    return (ROOT / token).exists()


def references():
    """(file, line number, path) for every repository path named in the text files."""
    for f in _text_files():
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            for m in PATH.finditer(line):
                yield f.relative_to(ROOT).as_posix(), n, _clean(m.group(0))


def test_every_path_the_repository_names_exists():
    missing = [f"{f}:{n}: {token}" for f, n, token in references() if not exists(token)]
    assert not missing, "paths that do not exist:\n" + "\n".join(missing)


def test_nothing_points_outside_the_repository():
    found = [f"{f.relative_to(ROOT).as_posix()}:{n}: {what}" for f in _text_files()
             for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1)
             for what in OUTSIDE if what in line]
    assert not found, "references to files users do not have:\n" + "\n".join(found)


@pytest.mark.parametrize("token, expected", [
    ("lab/README.md", True), ("lab/no_such_file.py", False), ("notebooks/*.ipynb", True),
    ("notebooks/*.nothing", False), ("results/<name>/MANIFEST.json", True),
    ("no_such_folder/<name>/x", False), ("kernels/{name}.cu", True), ("tools/", True),
])
def test_exists_reads_globs_and_placeholders(token, expected):
    assert exists(token) is expected
