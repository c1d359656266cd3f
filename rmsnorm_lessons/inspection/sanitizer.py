"""compute-sanitizer on one call of a rung, in a child Python process, and what its report says.

compute-sanitizer runs a whole program, so :func:`run` starts a child Python (``python -m
rmsnorm_lessons.core.child --job FILE``, :func:`rmsnorm_lessons.core.child.run_job`) under it. The
child gets the rung pickled (a learner's rung lives only in the parent) and calls it once through
``rl.kernels.run`` on random inputs. The parent reads the report: :func:`parse_summary`
for the totals, :func:`entries` for the findings (an error line and its details, the host backtrace
dropped). ``kernel_check.sanitize`` (a learner's kernel) and ``tools/sanitize.py`` (every version)
use this module; lesson 13 shows its reports.

Kernels are built with ``-lineinfo`` (``build.NVCC_FLAGS``), so a finding names the source line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..core import build, child

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
#: what each tool looks for (lesson 13's table)
FINDS = {
    "memcheck": "out-of-bounds and misaligned accesses to global, shared and local memory",
    "racecheck": "shared-memory hazards: two threads of a block touch one address, at least one "
                 "writes, and "
                 "no barrier orders them",
    "synccheck": "barriers and warp syncs that not all the threads they need reach (divergent "
                 "barriers)",
    "initcheck": "reads of device memory nothing has written",
}
ERROR_EXIT = 86  # the exit code compute-sanitizer returns when it found errors (--error-exitcode)
PREFIX = "========="

_ERRORS = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?")
_RACES = re.compile(r"RACECHECK SUMMARY:\s*(\d+)\s+hazards?\s+displayed\s+"
                    r"\((\d+)\s+errors?,\s*(\d+)\s+warnings?\)")


class ToolMissing(RuntimeError):
    pass


def find() -> str | None:
    """The compute-sanitizer executable (it comes with the CUDA toolkit), or None."""
    return build.find_tool("compute-sanitizer")


def parse_summary(output: str):
    """``(errors, warnings)`` from compute-sanitizer's output, or None when it printed no summary.

    errors is the last ``ERROR SUMMARY`` count (at least racecheck's error count); warnings is
    racecheck's warning count (hazards it judges benign), else 0.
    """
    found = _ERRORS.findall(output)
    races = _RACES.findall(output)
    if not found and not races:
        return None
    errors = int(found[-1]) if found else 0
    warnings = 0
    if races:
        errors = max(errors, int(races[-1][1]))
        warnings = int(races[-1][2])
    return errors, warnings


_SKIP = re.compile(r"^(COMPUTE-SANITIZER|ERROR SUMMARY|RACECHECK SUMMARY|Saved host backtrace|Host "
                   r"Frame|"
                   r"Target application returned|Program hit|LEAK SUMMARY|Process did not "
                   r"terminate)")


def entries(output: str) -> list[list[str]]:
    """The findings of a report, each a list of lines without the ``=========`` prefix: the line
    that names the error, then its indented details (where, which thread, which address); host
    frames and summaries left out."""
    found: list[list[str]] = []
    skipping = False
    for raw in output.splitlines():
        if not raw.startswith(PREFIX):
            continue
        line = raw[len(PREFIX):]
        text = line.strip()
        if not text:
            continue
        indented = line.startswith("  ")
        if not indented:
            skipping = bool(_SKIP.match(text))
            if not skipping:
                found.append([text])
        elif found and not skipping and not _SKIP.match(text) and not text.startswith("#"):
            found[-1].append(text)
        elif _SKIP.match(text):
            skipping = True
    return found


def _shape_of(entry: list[str]) -> str:
    """An entry's first line with numbers and addresses blanked: entries that differ only in where
    group."""
    return re.sub(r"0x[0-9a-fA-F]+|\(\d+,\d+,\d+\)|\d+", "#", entry[0])


@dataclass
class Report:
    """One compute-sanitizer run: the tool, what it ran, its exit code and its whole output."""

    tool: str
    what: str
    returncode: int | None
    output: str

    @property
    def summary(self):
        return parse_summary(self.output)

    @property
    def errors(self) -> int | None:
        s = self.summary
        return None if s is None else s[0]

    @property
    def entries(self) -> list[list[str]]:
        return entries(self.output)

    def kinds(self) -> list[tuple[str, int]]:
        """``(first line of an entry, how many entries look like it)``, most frequent first."""
        counts: dict[str, list] = {}
        for e in self.entries:
            counts.setdefault(_shape_of(e), [e[0], 0])[1] += 1
        return sorted(((first, n) for first, n in counts.values()), key=lambda t: -t[1])

    def sentence(self) -> str:
        """What the tool found, in one sentence."""
        if self.returncode is None:
            return f"{self.tool} did not finish in time on {self.what}"
        n = self.errors
        if n is None:
            tail = " ".join(self.output.strip().splitlines()[-3:])[-300:]
            return f"{self.tool} did not finish (exit {self.returncode}) on {self.what}: {tail}"
        if n == 0:
            return f"{self.tool} found no error on {self.what}"
        kinds = self.kinds()
        shown = "; ".join(f"{first} (x{k})" if k > 1 else first for first, k in kinds[:3])
        more = f"; and {len(kinds) - 3} other kinds" if len(kinds) > 3 else ""
        # the tool's summary and the findings it prints need not agree (it may print one per
        # thread and count fewer): say both rather than one number that the list contradicts
        listed = sum(k for _, k in kinds)
        count = (f"{n} error(s)" if listed in (0, n) else
                 f"{n} error(s) in its summary, {listed} finding(s) in its report,")
        return f"{self.tool} reports {count} on {self.what}: {shown}{more}"

    def key_lines(self, entries: int = 2, width: int = 150) -> str:
        """The first ``entries`` findings as the tool printed them (long lines cut at ``width``)."""
        out = []
        for e in self.entries[:entries]:
            out += [e[0]] + ["    " + ln for ln in e[1:]]
        return "\n".join(ln if len(ln) <= width else ln[:width - 3] + "..." for ln in out)

    def __str__(self) -> str:
        lines = self.key_lines()
        return self.sentence() + (("\n" + lines) if lines else "")


# --------------------------------------------------------------------------------------------------
# the run: the rung rebuilt in a child (rmsnorm_lessons.core.child), under compute-sanitizer

child_spec = child.rung_spec  # what the child needs to rebuild a rung


def wrapper(exe: str, tool: str, print_limit: int = 50) -> list[str]:
    """``compute-sanitizer --tool TOOL ...``: errors exit with ERROR_EXIT, only the child is
    checked."""
    if tool not in TOOLS:
        raise ValueError(f"tool must be one of {', '.join(TOOLS)}, not {tool!r}")
    return [exe, "--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--target-processes",
            "application-only", "--print-limit", str(print_limit)]


def command(exe: str, tool: str, child_argv: list[str], print_limit: int = 50) -> list[str]:
    """``compute-sanitizer --tool TOOL ... CHILD`` (:func:`wrapper` in front of ``child_argv``)."""
    return [*wrapper(exe, tool, print_limit), *child_argv]


def run_command(cmd: list[str], tool: str, what: str, timeout: float = 600) -> Report:
    """Run a sanitizer command line (:func:`command`) as a child: its :class:`Report`."""
    done = child.run(cmd, timeout=timeout)
    return Report(tool, what, done.returncode, done.stdout if done.timed_out else done.output)


def run(rung, tool: str, shape=(129, 776), timeout: float = 600) -> Report:
    """compute-sanitizer's ``tool`` on one call of ``rung`` at ``shape`` (N, C; C rounded down to
    the rung's multiple), in a child process (:func:`rmsnorm_lessons.core.child.run_job`: any rung,
    a learner's too, whatever its plan).

    Raises :class:`ToolMissing` where compute-sanitizer is not installed."""
    exe = find()
    if exe is None:
        raise ToolMissing("compute-sanitizer was not found on PATH, under CUDA_HOME or in "
                          "/usr/local/cuda/bin; it comes with the CUDA toolkit (and needs a GPU)")
    N, C = shape
    C = C - C % rung.c_multiple or rung.c_multiple
    done, _ = child.run_job("rmsnorm_lessons.core.child:call_rung", dict(rung=rung, N=N, C=C),
                            wrapper(exe, tool), timeout)
    return Report(tool, f"{rung.name} at N={N}, C={C}", done.returncode,
                  done.stdout if done.timed_out else done.output)


_WHERE = re.compile(r"\bin (\S+?):(\d+)\b")


def lines_of(entry: list[str], stem: str) -> list[int]:
    """The source lines an entry names in the file ``stem`` (a learner's text is named with
    ``#line 1 "stem"``, so memcheck says ``in stem:12``), in the order it names them."""
    found = []
    for line in entry:
        for file, number in _WHERE.findall(line):
            name = Path(file).name
            if name == stem or Path(name).stem == stem:
                found.append(int(number))
    return found
