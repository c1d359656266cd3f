"""A throwaway git repository holding this checkout's files as git sees them (tracked, and new files
git would track), committed: for tests that run `make` targets in it and then ask `git status`
whether anything tracked changed, without touching this checkout or its work/ folder."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_GIT = ["git", "-c", "user.name=test", "-c", "user.email=test@localhost",
        "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"]


def git(repo: Path, *args: str) -> str:
    p = subprocess.run([*_GIT, "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"git {' '.join(args)}: {p.stderr}"
    return p.stdout


def copy_checkout(dest: Path) -> Path:
    files = git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    dest.mkdir(parents=True, exist_ok=True)
    for rel in filter(None, files):
        src = ROOT / rel
        if not src.is_file():  # deleted in the working tree, not yet committed
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "the checkout as git sees it")
    return dest


def status(repo: Path) -> str:
    """``git status --porcelain`` (untracked files too): empty when nothing changed."""
    return git(repo, "status", "--porcelain", "--untracked-files=all")
