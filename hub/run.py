"""Start the workshop hub here, in one command: ``make hub``
(``make hub HUB_ARGS="--learners 20 --ip 0.0.0.0"``).

1. checks what it needs: root (the hub starts each learner's server as that learner), ``useradd``,
   and configurable-http-proxy (on PATH, or installed with npm into build/hub/node on first use);
2. builds or reuses the learner environment (hub/learner-env.sh, a venv every user can run);
3. writes the student edition once for this start (``python -m rmsnorm_lessons student``), which the
   hub copies into each learner's home at their first login;
4. starts JupyterHub with hub/jupyterhub_config.py, prints the URL and the room once it answers, and
   stays in the foreground until Ctrl+C (which stops the learners' servers and the proxy too).

Before the hub starts, every learner without a password gets a generated one: the sheet of names and
passwords is printed and written to ``<state>/password-sheet.txt`` (mode 0600, root's), for the
instructor to hand out. The instructor's password is read from ``--instructor-password-file`` (a
file only root can read) or typed at ``--set-instructor-password``'s prompt, never from the command
line (which every user sees in ``ps``); else it is generated on the first start and printed once.
A name dropped from ``--learners`` loses its password and is blocked by the hub (its sessions end).

The learners' Unix accounts are created by the hub at start-up and recorded in
``<state>/created-accounts.json``; they stay after it stops (their homes hold the learners' work).
``--remove-accounts`` deletes the recorded accounts of the room and their homes, refuses any other
(naming it), and exits.
"""
from __future__ import annotations

import argparse
import getpass
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import accounts  # noqa: E402 - hub/accounts.py, beside this file

NODE_PREFIX = ROOT / "build" / "hub" / "node"


def _free_port(ip: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def room(spec: str) -> list[str]:
    """``20`` -> learner01..learner20; ``ada,grace`` -> those names."""
    spec = spec.strip()
    if spec.isdigit():
        n = int(spec)
        width = max(2, len(str(n)))
        return [f"learner{i:0{width}d}" for i in range(1, n + 1)]
    return [n.strip() for n in spec.split(",") if n.strip()]


def instructor_password(args) -> str | None:
    """The instructor's password from a root-only file, a prompt, or the environment; None: keep
    the one the state holds (or generate one). A ValueError says what is wrong."""
    if args.instructor_password is not None:
        raise ValueError("--instructor-password would show the password to every user of this "
                         "machine (ps lists the command line): put it in a file only root can "
                         "read and pass --instructor-password-file FILE, or use "
                         "--set-instructor-password to type it")
    if args.instructor_password_file:
        path = Path(args.instructor_password_file)
        try:  # the file itself, not a link, checked as opened (a FIFO would block a plain open)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise ValueError(f"--instructor-password-file {path}: {exc.strerror}") from None
        with os.fdopen(fd) as f:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ValueError(f"--instructor-password-file {path} is not a regular file")
            if info.st_uid != os.geteuid():
                raise ValueError(f"--instructor-password-file {path} belongs to uid {info.st_uid}, "
                                 "not to you: its owner can read it")
            if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise ValueError(f"--instructor-password-file {path} can be read by others (mode "
                                 f"{stat.S_IMODE(info.st_mode):o}): chmod 600 it")
            lines = f.read().splitlines()
        return lines[0] if lines else ""
    if args.set_instructor_password:
        first = getpass.getpass("the instructor's password: ")
        if getpass.getpass("again: ") != first:
            raise ValueError("the two passwords typed differ")
        return first
    return os.environ.get("RMSNORM_HUB_INSTRUCTOR_PASSWORD")


def find_proxy(install: bool = True) -> str | None:
    """configurable-http-proxy: on PATH, in build/hub/node, or installed there with npm."""
    local = NODE_PREFIX / "node_modules" / ".bin" / "configurable-http-proxy"
    for candidate in (shutil.which("configurable-http-proxy"), local):
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    if install and shutil.which("npm"):
        print(f"hub: installing configurable-http-proxy with npm into {NODE_PREFIX}", flush=True)
        NODE_PREFIX.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix",
                            str(NODE_PREFIX),
                            "configurable-http-proxy@^4.6"], stdout=sys.stdout, stderr=sys.stderr)
        if r.returncode == 0 and os.access(local, os.X_OK):
            return str(local)
    return None


def forget_names(url: str, token: str, names) -> list[str]:
    """Delete the hub's users ``names`` (their API tokens and cookies go with them), through the
    REST API with run.py's own service token; returns the names that could not be deleted."""
    left = []
    for name in names:
        request = urllib.request.Request(f"{url}hub/api/users/{name}", method="DELETE",
                                         headers={"Authorization": f"token {token}"})
        try:
            urllib.request.urlopen(request, timeout=30).close()
        except urllib.error.HTTPError as exc:
            if exc.code != 404:  # 404: the hub never knew the name
                left.append(name)
        except (urllib.error.URLError, OSError):
            left.append(name)
    return left


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ip", default="127.0.0.1",
                    help="where learners connect (0.0.0.0: every interface)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--subdomain-host", default="", metavar="URL",
                    help="give each learner's server its own origin, https://NAME.<host> "
                         "(needs wildcard DNS and a certificate; hub/README.md, Security)")
    ap.add_argument("--learners", default="2",
                    help="a count (learner01..) or comma-separated names")
    ap.add_argument("--instructor", default="instructor", help="the admin account")
    ap.add_argument("--instructor-password", help=argparse.SUPPRESS)  # refused: ps shows it
    ap.add_argument("--instructor-password-file", metavar="FILE",
                    help="a file only root can read whose first line is the instructor's password "
                         "(default: kept, or generated and printed once)")
    ap.add_argument("--set-instructor-password", action="store_true",
                    help="type the instructor's password at a prompt")
    ap.add_argument("--reset-password", action="append", default=[], metavar="NAME",
                    help="give this learner a new password (repeat for several)")
    ap.add_argument("--state", default=str(ROOT / "build" / "hub" / "state"),
                    help="the hub's database, cookie secret and passwords (root's alone)")
    ap.add_argument("--student", default=str(ROOT / "build" / "hub" / "student"),
                    help="where the student edition is written for the learners to copy (readable "
                         "by everyone)")
    ap.add_argument("--env", default=os.environ.get("HUB_ENV", str(ROOT / "build" / "hub" / "env")),
                    help="the learner environment (hub/learner-env.sh builds it)")
    ap.add_argument("--cull-timeout", type=int, default=3600,
                    help="seconds idle before a server is stopped")
    ap.add_argument("--mem-limit", default="8G",
                    help="memory per learner (enforced with --spawner systemd)")
    ap.add_argument("--gpu-mode", choices=["shared", "mps", "mig"], default="shared",
                    help="how learners share the GPU (hub/gpu-sharing.md)")
    ap.add_argument("--spawner", choices=["local", "systemd"], default="local")
    ap.add_argument("--remove-accounts", action="store_true",
                    help="delete the room's accounts and homes, exit")
    ap.add_argument("--passwords-only", action="store_true",
                    help="write the passwords and the sheet into --state, print the sheet, exit "
                         "(Zero to JupyterHub: hub/kubernetes.md)")
    args = ap.parse_args(argv)
    learners = room(args.learners)
    try:
        chosen = instructor_password(args)
        accounts.check_request(learners, args.instructor, chosen, args.reset_password)
    except ValueError as exc:
        print(f"hub: {exc}", file=sys.stderr)
        return 2

    if args.passwords_only:  # no accounts, no hub: the hashes for a hub elsewhere (Kubernetes)
        state = Path(args.state).resolve()
        state.mkdir(parents=True, exist_ok=True)
        os.chmod(state, 0o700)
        try:
            sheet, generated = accounts.prepare_passwords(
                state, learners, args.instructor, chosen, reset=args.reset_password)
        except ValueError as exc:
            print(f"hub: {exc}", file=sys.stderr)
            return 2
        print(f"hub: hashes in {state / accounts.PASSWORDS}; the learners' sheet "
              f"(also in {state / accounts.SHEET}):\n{sheet}", flush=True)
        if generated:
            print(f"hub: the instructor's password (shown once): {generated}", flush=True)
        return 0
    if os.geteuid() != 0:
        print("hub: run as root: the hub creates the learners' accounts and starts each learner's "
              "server as that learner (sudo make hub)", file=sys.stderr)
        return 2
    state = Path(args.state).resolve()
    if args.remove_accounts:
        refused = accounts.remove_accounts(state, learners + [args.instructor])
        return 1 if refused else 0
    try:  # the hub chmods, seeds and stops the processes of its accounts: only its own
        accounts.check_owned(state, [*learners, args.instructor])
    except ValueError as exc:
        print(f"hub: {exc}", file=sys.stderr)
        return 2
    if not shutil.which("useradd"):
        print("hub: useradd is missing (apt-get install passwd)", file=sys.stderr)
        return 2
    proxy = find_proxy()
    if proxy is None:
        print("hub: configurable-http-proxy is missing and npm could not install it "
              "(apt-get install npm, then npm install -g configurable-http-proxy)", file=sys.stderr)
        return 2

    env_dir = Path(args.env).resolve()
    r = subprocess.run([str(HERE / "learner-env.sh")], env={**os.environ, "HUB_ENV": str(env_dir)})
    if r.returncode != 0:
        return r.returncode

    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o700)
    former = accounts.former_names(state, [*learners, args.instructor])
    for name in former:  # what a dropped learner left running ends with their place in the room
        if accounts.hub_created(state, name) and accounts.end_processes(state, name):
            print(f"hub: some processes of {name} (no longer in the room) would not end",
                  file=sys.stderr)
    # names whose hub record (tokens, cookies) goes at this start: dropped, or removed since
    forget = sorted(set(former) | set(accounts.removed_names(state)))
    admin_token = secrets.token_hex(32)
    sheet, generated = accounts.prepare_passwords(state, learners, args.instructor, chosen,
                                                  reset=args.reset_password)
    # the student edition is copied into each home by the learner's own process (not as root), so
    # it lives outside the private state folder, readable by everyone: it holds no secret
    student = Path(args.student).resolve()
    shutil.rmtree(student, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "rmsnorm_lessons", "student", str(student)], check=True,
                   cwd=ROOT)
    for path in [student, *student.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    for folder in student.parents:  # each learner must be able to reach it
        if folder.stat().st_mode & stat.S_IXOTH == 0:
            print(f"hub: the student edition {student} is out of the learners' reach: {folder} is "
                  "not searchable by others (--student elsewhere, or chmod o+x it)",
                  file=sys.stderr)
            return 2

    env = dict(os.environ)
    env.update({
        "RMSNORM_HUB_IP": args.ip, "RMSNORM_HUB_PORT": str(args.port),
        "RMSNORM_HUB_HUB_PORT": str(_free_port()), "RMSNORM_HUB_PROXY_API_PORT": str(_free_port()),
        "RMSNORM_HUB_PROXY": proxy, "RMSNORM_HUB_STATE": str(state),
        "RMSNORM_HUB_ENV": str(env_dir),
        "RMSNORM_HUB_STUDENT": str(student), "RMSNORM_HUB_LEARNERS": ",".join(learners),
        "RMSNORM_HUB_INSTRUCTOR": args.instructor, "RMSNORM_HUB_FORMER": ",".join(former),
        "RMSNORM_HUB_CULL_TIMEOUT": str(args.cull_timeout),
        "RMSNORM_HUB_MEM_LIMIT": args.mem_limit, "RMSNORM_HUB_GPU_MODE": args.gpu_mode,
        "RMSNORM_HUB_SPAWNER": args.spawner, "RMSNORM_HUB_DASHBOARD_PORT": str(_free_port()),
        "RMSNORM_HUB_SUBDOMAIN_HOST": args.subdomain_host, "RMSNORM_HUB_ADMIN_TOKEN": admin_token,
        # the proxy's token, shared by the hub and the proxy it starts
        "CONFIGPROXY_AUTH_TOKEN": os.environ.get("CONFIGPROXY_AUTH_TOKEN") or os.urandom(16).hex(),
    })
    env.pop("RMSNORM_HUB_INSTRUCTOR_PASSWORD", None)  # the hub reads the hashes, never the password
    # the hub runs from the learner environment too (hub/requirements.txt): one set of JupyterHub
    # packages
    cmd = [str(env_dir / "bin" / "python"), "-m", "jupyterhub", "-f",
           str(HERE / "jupyterhub_config.py")]
    hub = subprocess.Popen(cmd, cwd=state, env=env)

    def stop(signum, frame):
        if hub.poll() is None:
            hub.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    host = "127.0.0.1" if args.ip in ("0.0.0.0", "") else args.ip
    url = f"http://{host}:{args.port}/"
    deadline = time.monotonic() + 120
    ready = False
    while not ready and hub.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}hub/api/", timeout=5) as resp:
                ready = resp.status == 200
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    if not ready and hub.poll() is None:
        print(f"hub: no answer at {url} within 120 s; still waiting (the log above says why)",
              flush=True)
    if ready:
        left = forget_names(url, admin_token, forget)
        accounts.keep_removed(state, left)  # cleared once forgotten; what failed is tried again
        if left:
            print(f"hub: could not delete the hub's records of {', '.join(left)}; their old tokens "
                  "may still work (tried again at the next start)", file=sys.stderr, flush=True)
        shown = (url if args.ip not in ("0.0.0.0", "")
                 else f"http://<this machine's address>:{args.port}/")
        print(f"hub: ready at {shown}", flush=True)
        print(f"hub: learners {', '.join(learners)}; instructor (admin) {args.instructor}. "
              f"Ctrl+C stops the hub.", flush=True)
    # shown whether or not the hub answered: a generated password exists only as a hash after this
    print(f"hub: the learners' passwords, to print and hand out (also in {state / accounts.SHEET}, "
          f"readable by root only):\n{sheet}", flush=True)
    if generated is not None:
        print(f"hub: the instructor's password (generated now, shown only this once; "
              f"--instructor-password-file sets another): {generated}", flush=True)
    if ready:
        print(f"hub: the instructor's view of the room: {shown}services/dashboard/", flush=True)
    if not args.subdomain_host:
        print("hub: every server shares this address: a page a learner serves from their server "
              "can act as whoever opens it. Open no learner's server while logged in as the "
              "instructor; for a room of strangers use --subdomain-host (hub/README.md, Security). "
              "This terminal shows the passwords: keep its output out of files others can read.",
              flush=True)
    while True:
        try:
            return hub.wait()
        except KeyboardInterrupt:
            stop(None, None)


if __name__ == "__main__":
    sys.exit(main())
