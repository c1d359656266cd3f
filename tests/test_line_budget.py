"""The line budget (CPU): no source file over 450 lines, no line of code over 100 characters.

Source files are the Python, CUDA and shell files git tracks (or would track) in rmsnorm_lessons/,
kernels/, tests/, tools/ and hub/. A file over the budget may be listed, with its counts, in
tests/line_budget_allowed.txt (empty now: every file keeps the budget): such a file may shrink
but not grow, and its line leaves the list once the file is within the budget (the test says
so). Notebooks, Markdown and data are not counted.
"""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("rmsnorm_lessons", "kernels", "tests", "tools", "hub")
SUFFIXES = (".py", ".cu", ".cuh", ".sh")
MAX_LINES = 450
MAX_WIDTH = 100
ALLOWED = Path(__file__).with_name("line_budget_allowed.txt")


def source_files() -> list[str]:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others",
                              "--exclude-standard", "--", *FOLDERS],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return sorted(f for f in out.splitlines() if f.endswith(SUFFIXES) and (ROOT / f).is_file())


def counts(path: str) -> tuple[int, int]:
    """(lines, lines over MAX_WIDTH characters) of a file."""
    lines = (ROOT / path).read_text(errors="replace").splitlines()
    return len(lines), sum(len(line) > MAX_WIDTH for line in lines)


def allowed() -> dict[str, tuple[int, int]]:
    """path -> (lines, long lines) it may have at most, from tests/line_budget_allowed.txt."""
    out = {}
    for n, line in enumerate(ALLOWED.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        assert len(fields) == 3 and all(f.isdigit() for f in fields[1:]), \
            f"{ALLOWED.name}:{n}: want 'PATH LINES LONG_LINES', got {line!r}"
        assert fields[0] not in out, f"{ALLOWED.name}:{n}: {fields[0]} is listed twice"
        out[fields[0]] = (int(fields[1]), int(fields[2]))
    return out


def test_every_source_file_keeps_the_budget():
    allow = allowed()
    over = []
    for path in source_files():
        lines, long_lines = counts(path)
        cap_lines, cap_long = allow.get(path, (MAX_LINES, 0))
        if lines > max(cap_lines, MAX_LINES) or long_lines > cap_long:
            over.append(f"{path}: {lines} lines (at most {max(cap_lines, MAX_LINES)}), "
                        f"{long_lines} lines over {MAX_WIDTH} characters (at most {cap_long})")
    assert not over, "over the line budget (split the file, break the lines):\n" + "\n".join(over)


def test_the_allowed_list_holds_only_files_still_over_the_budget():
    files = set(source_files())
    stale = []
    for path, (cap_lines, cap_long) in allowed().items():
        if path not in files:
            stale.append(f"{path}: no such source file")
            continue
        lines, long_lines = counts(path)
        if lines <= MAX_LINES and long_lines == 0:
            stale.append(f"{path}: within the budget now")
        elif long_lines < cap_long or MAX_LINES < lines < cap_lines:
            stale.append(f"{path}: lower its counts to {lines} {long_lines}")
    assert not stale, f"update {ALLOWED.relative_to(ROOT)}:\n" + "\n".join(stale)
