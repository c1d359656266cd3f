"""``make room-test N=30``: a room of N learners on this machine, end to end, then nothing left.

1. builds or reuses the learner environment (hub/learner-env.sh), then runs from it;
2. starts the hub the way ``make hub`` does (hub/run.py: TLS with the room's self-signed
   certificate, every learner's server on its own origin NAME.localhost, each learner's memory
   and CPU in a cgroup of their own), with N fresh learners ``room<hex>01`` ... and an instructor,
   in a folder of its own under /tmp (state, student edition, GPU turn);
3. lets the learners in, all at once by default (``--at-once`` fewer): each logs in with the
   password on the sheet, waits for their server, opens lesson 01 and runs its set-up cell, its
   first NumPy cell and its first check in their own kernel (hub/room_client.py), and the check's
   verdict must reach their verdicts file; the instructor's login must land on the dashboard and
   show all N;
4. stops the hub, removes the accounts and homes (``--remove-accounts``) and the folder, and says
   ``room: N of N learners served``, the time to the last learner ready and the machine's peak
   memory. Exit status 0 only when every learner was served and nothing was left behind.

Run as root (``sudo make room-test N=30``); ``ROOM_ARGS="--at-once 10"`` passes options.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import accounts  # noqa: E402
import tls  # noqa: E402

GiB = 1024 ** 3


def used_memory() -> int:
    """Bytes in use on this machine (MemTotal - MemAvailable)."""
    info = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, value = line.split(":", 1)
        info[key] = int(value.split()[0]) * 1024
    return info["MemTotal"] - info["MemAvailable"]


class Peak(threading.Thread):
    """The most memory in use on the machine while it runs, sampled twice a second."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak = used_memory()
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.wait(0.5):
            self.peak = max(self.peak, used_memory())


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(log: Path, pattern: str, proc, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace"), re.M)
        if found:
            return found
        if proc.poll() is not None:
            raise RuntimeError(f"the hub exited ({proc.returncode}):\n{_tail(log)}")
        time.sleep(0.5)
    raise TimeoutError(f"the hub did not print {pattern!r} within {timeout:.0f} s:\n{_tail(log)}")


def _tail(log: Path, n: int = 30) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if "is ignored" not in ln]
    return "\n".join(lines[-n:])


def _group_peak(log_text: str) -> int | None:
    """The learners' groups' peak memory together (the room's memory folder, v1 or v2)."""
    m = re.search(r"hub: limits per learner: cgroup v\d.*, in (.+)$", log_text, re.M)
    if not m:
        return None
    base = Path(m.group(1).split(", ")[0])
    for f in ("memory.max_usage_in_bytes", "memory.peak"):
        try:
            return int((base / f).read_text())
        except (OSError, ValueError):
            continue
    return None


async def _room(hub: str, names, passwords, context, at_once: int, timeout: float):
    import room_client

    gate = asyncio.Semaphore(at_once)

    start = time.monotonic()

    async def one(name):
        async with gate:
            r = await room_client.learner(hub, name, passwords[name], context, timeout)
        print(f"room: {name} at {time.monotonic() - start:.0f} s: "
              + (r["error"] or f"ready, lesson 01's check said {r['verdict']}"), flush=True)
        return r
    return await asyncio.gather(*(one(n) for n in names))


def _stop(proc, log: Path) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # run.py stops the hub, its servers and the proxy
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever of the hub's session is left
    except ProcessLookupError:
        pass


def served(result: dict, home: Path) -> str | None:
    """Why ``result``'s learner was not served (None: served): their check's verdict must be in
    their verdicts file, as the dashboard reads it."""
    if result["error"]:
        return result["error"]
    try:
        lines = (home / ".rmsnorm-lessons" / "verdicts.jsonl").read_text().splitlines()
    except OSError as exc:
        return f"no verdicts file ({exc.strerror})"
    if not any(json.loads(line).get("status") == result["verdict"] for line in lines):
        return f"the verdict {result['verdict']} is not in their verdicts file"
    return None


def _progress(env_dir: Path, state: Path, n: int) -> bool:
    """hub/README.md's command, as written there: every learner's notebooks, each as its learner,
    the instructor left out."""
    cmd = [str(env_dir / "bin" / "python"), "-m", "rmsnorm_lessons", "progress", "--room",
           str(state), "--jobs", "2"]
    print(f"room: {' '.join(cmd)}", flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    summary = [ln for ln in r.stdout.splitlines() if ln.startswith("room: ")]
    print("\n".join(summary) or r.stderr[-1000:], flush=True)
    return r.returncode == 0 and bool(summary) and summary[0].startswith(
        f"room: {n} learner(s), 0 refused")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--learners", type=int, default=30, help="how many learners (N)")
    ap.add_argument("--at-once", type=int, default=None,
                    help="learners logging in at the same moment, the rest behind them (default: "
                         "all of them, a room arriving at 9:00; the hub starts their servers in "
                         "turn)")
    ap.add_argument("--mem-limit", default="2G", help="each learner's memory (the hub's limit)")
    ap.add_argument("--cpu-limit", default="1", help="each learner's CPU cores")
    ap.add_argument("--timeout", type=float, default=900, help="seconds for each learner")
    ap.add_argument("--progress", action="store_true",
                    help="then run hub/README.md's progress --room command over the room (every "
                         "lesson of every learner: minutes a learner)")
    args = ap.parse_args(argv)
    args.at_once = args.learners if args.at_once is None else args.at_once
    os.umask(0o022)  # what the learners reach is readable by all, whatever the caller's umask
    if args.learners < 1 or args.at_once < 1:
        print("room-test: --learners and --at-once must be at least 1", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("room-test: run as root (sudo make room-test): the hub creates the learners' "
              "accounts", file=sys.stderr)
        return 2
    env_dir = Path(os.environ.get("HUB_ENV", ROOT / "build" / "hub" / "env")).resolve()
    try:
        import tornado  # noqa: F401 - the learners' client is JupyterHub's tornado
    except ImportError:
        r = subprocess.run([str(HERE / "learner-env.sh")], env={**os.environ,
                                                                "HUB_ENV": str(env_dir)})
        if r.returncode != 0 or os.environ.get("ROOM_TEST_REEXEC"):
            return r.returncode or 2
        os.environ["ROOM_TEST_REEXEC"] = "1"
        python = str(env_dir / "bin" / "python")
        os.execv(python, [python, str(Path(__file__).resolve()), *(argv or sys.argv[1:])])
    return run_room(args, env_dir)


def run_room(args, env_dir: Path) -> int:
    tag = secrets.token_hex(2)
    width = max(2, len(str(args.learners)))
    names = [f"room{tag}{i:0{width}d}" for i in range(1, args.learners + 1)]
    instructor = f"room{tag}i"
    work = Path(tempfile.mkdtemp(prefix=f"rmsnorm-room-{tag}-"))
    os.chmod(work, 0o755)  # the learners reach the student edition and the GPU turn in it
    state, log = work / "state", work / "hub.log"
    port = _free_port()
    peak = Peak()
    before = peak.peak
    peak.start()
    t0 = time.monotonic()
    cmd = [sys.executable, str(HERE / "run.py"), "--port", str(port), "--learners",
           ",".join(names), "--instructor", instructor, "--state", str(state),
           "--student", str(work / "student"), "--gpu-lock", str(work / "gpu-lock"),
           "--env", str(env_dir), "--mem-limit", args.mem_limit, "--cpu-limit", args.cpu_limit]
    with open(log, "w") as out:
        hub = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    results, board, why_not, groups, first, hub_ready = [], "", {}, None, None, None
    progress_ok = not args.progress
    try:
        url = _wait_for(log, r"^hub: ready at (https://\S+)$", hub, 600).group(1)
        _wait_for(log, r"the instructor's view of the room", hub, 60)
        hub_ready = time.monotonic() - t0
        print(f"room: the hub answered at {url} after {hub_ready:.0f} s; {args.learners} learners "
              f"log in, {args.at_once} at a time", flush=True)
        sheet = accounts.read_sheet(state)
        said = re.search(r"instructor's password \(generated now.*\): (\S+)$", log.read_text(),
                         re.M)
        context = tls.trusting(state / tls.CERT)
        first = time.monotonic()
        results = asyncio.run(_room(url, names, sheet, context, args.at_once, args.timeout))
        import room_client

        board = asyncio.run(room_client.dashboard(
            url, url.replace("://", "://dashboard--service.") + "services/dashboard/", instructor,
            said.group(1) if said else "", context))
        groups = _group_peak(log.read_text())
        for r in results:
            why_not[r["name"]] = served(r, Path(f"/home/{r['name']}"))
            if why_not[r["name"]] is None and f'data-learner="{r["name"]}"' not in board:
                why_not[r["name"]] = "not on the instructor's dashboard"
        if args.progress:
            progress_ok = _progress(env_dir, state, args.learners)
    except Exception as exc:  # noqa: BLE001 - the clean-up below runs whatever failed
        print(f"room: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    finally:
        _stop(hub, log)
        peak.stopped.set()
        removal = subprocess.run([sys.executable, str(HERE / "run.py"), "--state", str(state),
                                  "--learners", ",".join(names), "--instructor", instructor,
                                  "--remove-accounts"], capture_output=True, text=True)
        left = [n for n in [*names, instructor] if accounts.user_exists(n)
                or Path(f"/home/{n}").exists()]
        ok = [r for r in results if r["name"] in why_not and why_not[r["name"]] is None]
        passed = (len(ok) == args.learners and not left and removal.returncode == 0
                  and progress_ok)
        saved = ROOT / "build" / "hub" / f"room-test-{tag}.log"
        if not passed:  # kept only to say why: the hub's log
            saved.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log, saved)
        shutil.rmtree(work, ignore_errors=True)
    for r in results:
        if r not in ok:
            print(f"room: {r['name']}: {why_not.get(r['name']) or r['error']}", flush=True)
    ready = [r["ready_at"] - first for r in results if r["ready_at"] is not None and first]
    print(f"room: {len(ok)} of {args.learners} learners served over TLS, each on its own origin "
          f"(https://NAME.localhost:{port}/)", flush=True)
    if ready and hub_ready is not None:
        print(f"room: the last learner ready {max(ready):.0f} s after the first login "
              f"({args.at_once} at a time; the hub itself answered {hub_ready:.0f} s after "
              "its start)", flush=True)
    extra = f"; the learners' groups at most {groups / GiB:.1f} GiB together" if groups else ""
    print(f"room: peak memory {peak.peak / GiB:.1f} GiB in use on this machine, "
          f"{(peak.peak - before) / GiB:.1f} GiB above the {before / GiB:.1f} GiB before the hub"
          f"{extra}", flush=True)
    print(f"room: removed {args.learners + 1 - len(left)} accounts and their homes, the state, "
          f"the certificate, the student edition and the learners' groups ({work})"
          + ("" if passed else f"; kept the hub's log for why: {saved}"), flush=True)
    if left or removal.returncode != 0:
        print(f"room: LEFT BEHIND: {', '.join(left) or removal.stdout[-500:]}", flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
