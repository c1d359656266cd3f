"""The course's command line: what works here, checks, timings and resource reports of the
kernels."""
from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy

from . import bench_command
from .core import build, compare, devices, gpu, ladder, validate
from .core.gpu import GpuUnavailable
from .inspection import occupancy, sass
from .speed import bench, peers


def _info(args) -> int:
    print(f"python     {platform.python_version()} ({sys.executable})")
    print(f"numpy      {numpy.__version__}, ml_dtypes {ml_dtypes.__version__}")
    try:
        import pycuda  # lazy: reported when present, needed only to launch kernels

        print(f"pycuda     {pycuda.VERSION_TEXT}")
    except ImportError:
        print("pycuda     not installed (only needed to launch kernels)")
    nvcc = build.find_nvcc()
    found = build.nvcc_version() + ' at ' + nvcc if nvcc else 'NOT FOUND: compiling is impossible'
    print(f"nvcc       {found}")
    for tool in ("nvdisasm",):
        print(f"{tool:<11}{build.find_tool(tool) or 'not found (SASS listings unavailable)'}")
    reason = gpu.why_unavailable()
    if reason is None:
        f = gpu.facts()
        d = f.driver_version
        print(f"GPU        {f.name}, {f.arch}, {f.multiprocessors} SMs, "
              f"{f.total_memory / 2**30:.0f} GiB, L2 {f.l2_bytes / 2**20:.0f} MiB, shared memory "
              f"per block {f.shared_memory_per_block // 1024} KiB "
              f"({f.shared_memory_per_block_optin // 1024} KiB opt-in), CUDA driver "
              f"{d // 1000}.{d % 1000 // 10}")
        if args.bandwidth:
            print(f"copy       {gpu.copy_bandwidth():.0f} GB/s device-to-device (read + write)")
    else:
        print(f"GPU        none usable: {reason}")
        if args.bandwidth:
            print("copy       not measured: it needs a GPU")
    target = build.target_arch()  # a bad $RMSNORM_ARCH was refused before the command ran
    given = os.environ.get(build.ARCH_ENV)
    print(f"target     {target} (${build.ARCH_ENV}={given}): PTX the driver compiles" if target
          else f"target     the GPU's own architecture (${build.ARCH_ENV} unset)")
    sources = (build.kernel_dir() / "common.cuh").is_file()  # the .cu files (shipped in the wheel)
    if not sources:
        print(f"kernels    MISSING: no kernel sources in {build.kernel_dir()}")
    compiles = bool(nvcc) and sources
    works = ["reference math", "plots"]
    if compiles:
        works += ["compiling every kernel", "resource reports (inspect)"]
    if reason is None and compiles:
        works += ["launching, checking and timing kernels"]
    print("works here: " + ", ".join(works))
    if reason is not None or not compiles:
        print("not here:   "
              + ", ".join((["launching kernels"] if reason else [])
                          + ([] if compiles else ["compiling"])))
    print(f"versions   {', '.join(ladder.VERSIONS)}")
    return 0


# exit codes (also in --help)
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_GPU = 0, 1, 2, 3
EPILOG = """exit codes:
  0  done
  1  a check found wrong results, or nvcc / a CUDA tool failed
  2  usage error: an unknown command, version or option, or a bad value
  3  the command needs a GPU and none is usable here (info says why)"""


def _shapes(text: str):
    """argparse type of --shapes: comma-separated NxC with positive N and C."""
    shapes = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", item)
        if not m:
            raise argparse.ArgumentTypeError(f"{item.strip()!r} is not NxC (rows x channels, e.g. "
                                             f"4096x768)")
        n, c = int(m.group(1)), int(m.group(2))
        if n < 1 or c < 1:
            raise argparse.ArgumentTypeError(f"{item.strip()!r}: N and C must be at least 1")
        if n > validate.MAX_N or c > validate.MAX_C:
            raise argparse.ArgumentTypeError(f"{item.strip()!r}: N must be below 2**31 and C at "
                                             "most 2**30 (the kernels index them with int)")
        shapes.append((n, c))
    return shapes


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _arch(text: str) -> str:
    """argparse type of --arch: the spellings $RMSNORM_ARCH takes (devices.parse_arch), built as
    the GPU's own code: compute_XY is inspected as sm_XY (what a GPU of that arch compiles the
    PTX to), which this nvcc must build for."""
    try:
        text = devices.parse_arch(text, "--arch").replace("compute_", "sm_")
    except devices.ArchError as exc:
        raise argparse.ArgumentTypeError(str(exc).split("=", 1)[1]) from None
    nvcc = build.find_nvcc()
    if nvcc:
        try:
            out = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True,
                                 timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        known = re.findall(r"sm_\d+", out)
        if known and re.sub(r"a$", "", text) not in known:
            raise argparse.ArgumentTypeError(f"{text!r}: this nvcc builds for {', '.join(known)}")
    return text


def _output_path(text: str) -> str:
    """argparse type of --json and --plot: a file in a folder that exists."""
    folder = Path(text).expanduser().resolve().parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: the folder {folder} does not exist")
    return text


def _versions(args, shapes=()) -> list[str]:
    """The versions asked for (all by default), each checked against the ladder before any GPU work;
    where both versions and shapes were named, every version must take every shape (its rule on C,
    the shared memory it needs), or it is a usage error naming each pair that cannot run. Unnamed, a
    sweep skips the shapes a version cannot take."""
    names = args.versions or list(ladder.VERSIONS)
    for name in names:
        ladder.get(name)  # ValueError naming the versions: a usage error
    if args.versions and shapes:
        refused = []
        for name in names:
            spec = ladder.get(name)
            for N, C in shapes:
                try:
                    validate.size(spec, N, C)
                    validate.shared_memory(spec, C, spec.block_size)
                except ValueError as exc:
                    refused.append(f"{name} at {N}x{C}: {exc}")
        if refused:
            raise ValueError("--shapes holds shapes these versions cannot run:\n  "
                             + "\n  ".join(refused))
    return names


def _check(args) -> int:
    versions = _versions(args, args.shapes or ())
    gpu.require()
    shapes = args.shapes or [(1, 8), (7, 776), (129, 1600), (1000, 2048), (4096, 768)]
    failed = 0
    for v in versions:
        spec = ladder.get(v)
        for N, C in shapes:
            if C % spec.c_multiple:
                continue
            if not args.versions:  # a sweep: skip what this version cannot take, saying why
                try:
                    bench.runnable(v, N, C)
                except ValueError as exc:
                    print(f"skip {v:<15} N={N:<6} C={C:<6} {exc}")
                    continue
            report = compare.check_version(v, N, C, seed=N * 31 + C)
            print(f"{'ok  ' if report.ok else 'FAIL'} {v:<15} N={N:<6} C={C:<6} dinp rel "
                  f"{report.dinp.rel_l2_error:.2e} max {report.dinp.max_abs_error:.2e} | dweight "
                  f"rel {report.dweight.rel_l2_error:.2e} max {report.dweight.max_abs_error:.2e}")
            if not report.ok:
                print(report)
                failed += 1
    print(f"{failed} failed")
    return 1 if failed else 0


def _bench(args) -> int:
    versions = _versions(args, args.shapes or ()) if args.versions else None
    return bench_command.run(args, versions)


def _inspect_width_error(name: str, arch: str, C: int) -> str | None:
    """Why a version cannot launch at width ``C`` on ``arch`` (its rule on C, the shared memory a
    block of it needs against what the arch gives a block), or None; None also for a file of
    kernels/ (no plan)."""
    try:
        spec = ladder.get(name)
    except (ValueError, TypeError):
        return None
    limits = occupancy.LIMITS.get(arch)
    try:
        validate.size(spec, 1, C)
        need = validate.shared_memory(spec, C, spec.block_size)
        if limits is not None:  # the launch an arch GPU would get (v7 picks its path by arch)
            need = max(launch.shared for launch in ladder.plan(
                spec, 1 << 20, C, occupancy.device_like(arch)))
    except ValueError as exc:
        return str(exc)
    if limits is not None and need > limits.shared_per_block_optin:
        return (f"{spec.name} at C={C} needs {need} bytes of dynamic shared memory per block; "
                f"{arch} gives a block at most {limits.shared_per_block_optin}")
    return None


def _inspect(args) -> int:
    name = args.version
    why = _inspect_width_error(name, args.arch, args.C)
    if why is not None:
        print(f"inspect: --C {args.C}: {why}", file=sys.stderr)
        return EXIT_USAGE
    try:
        print(occupancy.report(name, args.arch, C=args.C))
    except FileNotFoundError as exc:  # neither a version nor a file of kernels/
        print(f"inspect: {exc}; versions: {', '.join(ladder.VERSIONS)}", file=sys.stderr)
        return EXIT_USAGE
    except build.CompileError as exc:  # a kernel that does not build: nvcc's first error, one line
        print(f"inspect: {_first_error(exc)}", file=sys.stderr)
        return EXIT_FAILED
    if args.ptx:
        print(sass.ptx(name, args.arch))
    if args.sass:
        try:
            print(sass.sass(name, args.arch, marked=True))
        except sass.ToolMissing as exc:
            print(f"inspect: no SASS listing: {exc}", file=sys.stderr)
            return EXIT_FAILED
    return 0


def _first_error(exc: Exception) -> str:
    if isinstance(exc, build.CompileError):
        return exc.first()
    lines = [l.strip() for l in str(exc).splitlines() if l.strip()]
    return lines[0] if lines else type(exc).__name__


def _prog() -> str:
    """The name the user typed: the console script, or ``python -m rmsnorm_lessons``."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name.startswith("rmsnorm-lessons") else "python -m rmsnorm_lessons"


class _Formatter(argparse.RawDescriptionHelpFormatter):
    pass


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, exit code 2."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _student(args) -> int:
    from .course import registry, student  # lazy: only this subcommand needs them

    sources = args.notebooks or [registry.notebook_dir()]
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"OUT {args.out} is a file, not a folder to write the notebooks into")
    try:
        written, kept = student.write_edition(sources, out, instructor=args.instructor,
                                              overwrite=args.overwrite)
    except OSError as exc:  # a folder that cannot be made or written
        raise ValueError(f"cannot write the edition to {args.out}: {exc.strerror or exc}") from exc
    edition = "instructor" if args.instructor else "student"
    how = ("as they are (solutions in)" if args.instructor else
           "solutions replaced by their skeletons, what would show an answer cleared, GPU "
           "outputs labelled with the card and date that made them")
    print(f"wrote the {edition} edition of {len(written)} notebook(s) to {args.out}: {how}"
          + (f"; kept {len(kept)} already there (--overwrite replaces them)" if kept else ""))
    return 0


def _progress(args) -> int:
    from .workshop import progress  # lazy: the run needs nbclient

    return progress.main(args.notebooks, room=args.room, jobs=args.jobs, python=args.python,
                         timeout=args.timeout)


def main(argv=None) -> int:
    from . import __version__

    parser = _Parser(prog=_prog(), description=__doc__, epilog=EPILOG, formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")

    def command(name, help, description):
        return sub.add_parser(name, help=help, description=description, epilog=EPILOG,
                              formatter_class=_Formatter)

    versions_help = f"versions of the ladder (default: all): {', '.join(ladder.VERSIONS)}"
    p = command("info", "what works here: GPU, driver, PyCUDA, nvcc (no GPU needed)",
                "Print what works on this machine: Python, PyCUDA, nvcc, nvdisasm, the GPU (no GPU "
                "needed).")
    p.add_argument("--bandwidth", action="store_true",
                   help="also measure the copy bandwidth (needs a GPU)")
    p.set_defaults(func=_info)
    def versions_and_shapes(p, shapes_help):
        p.add_argument("versions", nargs="*", help=versions_help)
        p.add_argument("--shapes", type=_shapes, metavar="NxC[,NxC...]", help=shapes_help)

    p = command("check", "every version against the float64 reference on a shape sweep (GPU)",
                "Run versions on a sweep of shapes and compare with the NumPy float64 reference "
                "(needs a GPU).")
    versions_and_shapes(p, "shapes to check, rows x channels, comma-separated, e.g. "
                           "7x776,4096x768 (default: 1x8, 7x776, 129x1600, 1000x2048, 4096x768)")
    p.set_defaults(func=_check)
    p = command("bench", "time versions: ms, GB/s, %% of the copy bandwidth (GPU)",
                "Time versions with CUDA events: milliseconds, GB/s and the share of the copy "
                "bandwidth (needs a GPU).")
    versions_and_shapes(p, "shapes to time, rows x channels, comma-separated (default: the "
                           "benchmark's sweep)")
    p.add_argument("--repeats", type=_positive_int, default=50, metavar="R",
                   help="rounds timed per version and shape, each a burst of launches back to "
                        "back; the median round is reported (default: 50)")
    p.add_argument("--json", type=_output_path, metavar="PATH",
                   help="write every row here (name, N, C, ms, GB/s, %% of copy, speedup over v6)")
    p.add_argument("--peers", action=argparse.BooleanOptionalAction, default=None,
                   help="also PyTorch eager, torch.compile and Liger-Kernel (default: on where "
                        "torch imports)")
    p.add_argument("--peer", action="append", choices=peers.ALL_PEERS, metavar="NAME",
                   dest="peer_names",
                   help="time this peer (repeat for several) instead of the default three; also: "
                        + ", ".join(peers.EXTRA_PEERS) + " (Quack needs quack-kernels)")
    p.add_argument("--overwrite", action=argparse.BooleanOptionalAction, default=None,
                   help="also time versions that offer it in overwrite mode, dinp = (default: as "
                        "--peers)")
    p.add_argument("--ceiling", action=argparse.BooleanOptionalAction, default=True,
                   help="also time the same-bytes ceiling (an elementwise kernel moving v7's "
                        "bytes) at each shape and mode, and report %% of it (default: on)")
    p.add_argument("--plot", type=_output_path, metavar="PATH",
                   help="save a picture of GB/s against the copy line here (PNG)")
    p.set_defaults(func=_bench)
    p = command("inspect", "registers, shared memory, spills, PTX/SASS of a version (no GPU)",
                "Compile a version (or a file of kernels/) with nvcc and report registers, shared "
                "memory, spills and occupancy; optionally its PTX or SASS (no GPU needed).")
    p.add_argument("version",
                   help="a version of the ladder or the name of a file of kernels/ (without .cu)")
    p.add_argument("--arch", type=_arch, default="sm_90",
                   help="GPU architecture to compile for, e.g. sm_80 (A100), sm_90 (H100/H200) "
                        "(default: sm_90)")
    p.add_argument("--C", type=_positive_int, default=4096,
                   help="channels per row, for the launch (dynamic shared memory) and the "
                        "occupancy (default: 4096)")
    p.add_argument("--sass", action="store_true",
                   help="also print the SASS listing (needs nvdisasm)")
    p.add_argument("--ptx", action="store_true", help="also print the PTX")
    p.set_defaults(func=_inspect)
    p = sub.add_parser("student",
                       help="write the student edition (solutions out, skeletons in)",
                       description="Write the student edition of the lessons into OUT. A lesson "
                                   "already in OUT is kept (a learner's work), unless --overwrite.")
    p.add_argument("out", help="folder to write the notebooks into")
    p.add_argument("notebooks", nargs="*", default=[],
                   help="notebooks, or folders of lessons (default: the course's lessons)")
    p.add_argument("--instructor", action="store_true",
                   help="copy the instructor edition as it is (solutions in) instead")
    p.add_argument("--overwrite", action="store_true", help="replace notebooks already in OUT")
    p.set_defaults(func=_student)
    from .workshop.progress import (  # no nbclient needed to parse the arguments
        ROOM_FOLDER,
        default_jobs,
    )

    p = sub.add_parser(
        "progress",
        help="run learners' notebooks: each exercise's verdict, per learner and for a room",
        description="Run learners' notebooks (each as its learner: the owner of its folder, "
                    "never as root for someone else) and print every exercise's verdict, PASS, "
                    "NOT YET or NOT VERIFIED, a table per learner and, for a room, a summary. A "
                    "line per finished notebook goes to stderr. Exit 1 when a notebook could not "
                    "be run or a learner was refused.")
    p.add_argument("notebooks", nargs="*", default=[],
                   help="notebooks, or folders (a folder: the lesson notebooks in it); "
                        "default: the course's")
    p.add_argument("--room", metavar="DIR",
                   help=f"the workshop hub's state folder (build/hub/state: the room's learners, "
                        f"not the instructor), or a folder whose every subfolder DIR/NAME "
                        f"holding lesson notebooks (in DIR/NAME/{ROOM_FOLDER}, where the hub "
                        f"puts them, or in DIR/NAME) is the learner NAME, run as the owner of "
                        f"DIR/NAME. A folder root owns is refused")
    p.add_argument("--jobs", type=_positive_int, default=None, metavar="N",
                   help=f"notebooks run at once (default: the CPU count, {default_jobs()} here)")
    p.add_argument("--python", metavar="PATH",
                   help="the interpreter that runs the notebooks (default: this one; a "
                        "relative path is made absolute); as root for a room it must be one "
                        "every learner can run, e.g. the hub's build/hub/env/bin/python")
    p.add_argument("--timeout", type=_positive_int, default=900,
                   help="seconds a cell may run (default: 900)")
    p.set_defaults(func=_progress)
    args = parser.parse_args(argv)
    try:  # one rule for $RMSNORM_ARCH, before any command reads it (devices.parse_arch)
        devices.target_arch()
    except devices.ArchError as exc:
        print(f"{args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        code = args.func(args)
        sys.stdout.flush()
        return code
    # the reader closed the pipe (rmsnorm-lessons info | head -1): stop quietly
    except BrokenPipeError:
        try:  # Python would report the failed flush at exit: point stdout at /dev/null first
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 141  # 128 + SIGPIPE, what a shell reports for a tool stopped by a closed pipe
    except GpuUnavailable as exc:
        print(f"{args.command}: needs a GPU. {exc}", file=sys.stderr)
        return EXIT_NO_GPU
    except ValueError as exc:
        print(f"{args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except build.CompileError as exc:
        print(f"{args.command}: {_first_error(exc)}", file=sys.stderr)
        return EXIT_FAILED

