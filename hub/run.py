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
instructor to hand out. The instructor's password is ``--instructor-password`` (or
``RMSNORM_HUB_INSTRUCTOR_PASSWORD``), else generated on the first start and printed once.

The learners' Unix accounts are created by the hub at start-up and recorded in
``<state>/created-accounts.json``; they stay after it stops (their homes hold the learners' work).
``--remove-accounts`` deletes the recorded accounts of the room and their homes, refuses any other
(naming it), and exits.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ip", default="127.0.0.1",
                    help="where learners connect (0.0.0.0: every interface)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--learners", default="2",
                    help="a count (learner01..) or comma-separated names")
    ap.add_argument("--instructor", default="instructor", help="the admin account")
    ap.add_argument("--instructor-password",
                    default=os.environ.get("RMSNORM_HUB_INSTRUCTOR_PASSWORD"),
                    help="the instructor's password (default: kept, or generated and printed once)")
    ap.add_argument("--state", default=str(ROOT / "build" / "hub" / "state"),
                    help="the hub's database, cookie secret, passwords, student edition")
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

    if args.passwords_only:  # no accounts, no hub: the hashes for a hub elsewhere (Kubernetes)
        state = Path(args.state).resolve()
        state.mkdir(parents=True, exist_ok=True)
        os.chmod(state, 0o700)
        try:
            sheet, instructor_password = accounts.prepare_passwords(
                state, learners, args.instructor, args.instructor_password)
        except ValueError as exc:
            print(f"hub: {exc}", file=sys.stderr)
            return 2
        print(f"hub: hashes in {state / accounts.PASSWORDS}; the learners' sheet "
              f"(also in {state / accounts.SHEET}):\n{sheet}", flush=True)
        if instructor_password:
            print(f"hub: the instructor's password (shown once): {instructor_password}", flush=True)
        return 0
    if os.geteuid() != 0:
        print("hub: run as root: the hub creates the learners' accounts and starts each learner's "
              "server as that learner (sudo make hub)", file=sys.stderr)
        return 2
    state = Path(args.state).resolve()
    if args.remove_accounts:
        refused = accounts.remove_accounts(state, learners + [args.instructor])
        return 1 if refused else 0
    if args.instructor in learners:
        print(f"hub: the instructor {args.instructor} is also in --learners", file=sys.stderr)
        return 2
    chosen = args.instructor_password
    if chosen is not None and len(chosen) < accounts.MIN_PASSWORD:
        print(f"hub: --instructor-password must have at least {accounts.MIN_PASSWORD} characters",
              file=sys.stderr)
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
    sheet, instructor_password = accounts.prepare_passwords(state, learners, args.instructor,
                                                            args.instructor_password)
    student = state / "student"
    shutil.rmtree(student, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "rmsnorm_lessons", "student", str(student)], check=True,
                   cwd=ROOT)

    env = dict(os.environ)
    env.update({
        "RMSNORM_HUB_IP": args.ip, "RMSNORM_HUB_PORT": str(args.port),
        "RMSNORM_HUB_HUB_PORT": str(_free_port()), "RMSNORM_HUB_PROXY_API_PORT": str(_free_port()),
        "RMSNORM_HUB_PROXY": proxy, "RMSNORM_HUB_STATE": str(state),
        "RMSNORM_HUB_ENV": str(env_dir),
        "RMSNORM_HUB_STUDENT": str(student), "RMSNORM_HUB_LEARNERS": ",".join(learners),
        "RMSNORM_HUB_INSTRUCTOR": args.instructor,
        "RMSNORM_HUB_CULL_TIMEOUT": str(args.cull_timeout),
        "RMSNORM_HUB_MEM_LIMIT": args.mem_limit, "RMSNORM_HUB_GPU_MODE": args.gpu_mode,
        "RMSNORM_HUB_SPAWNER": args.spawner, "RMSNORM_HUB_DASHBOARD_PORT": str(_free_port()),
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
        shown = (url if args.ip not in ("0.0.0.0", "")
                 else f"http://<this machine's address>:{args.port}/")
        print(f"hub: ready at {shown}", flush=True)
        print(f"hub: learners {', '.join(learners)}; instructor (admin) {args.instructor}. "
              f"Ctrl+C stops the hub.", flush=True)
    # shown whether or not the hub answered: a generated password exists only as a hash after this
    print(f"hub: the learners' passwords, to print and hand out (also in {state / accounts.SHEET}, "
          f"readable by root only):\n{sheet}", flush=True)
    if instructor_password is not None:
        print(f"hub: the instructor's password (generated now, shown only this once; "
              f"--instructor-password sets another): {instructor_password}", flush=True)
    if ready:
        print(f"hub: the instructor's view of the room: {shown}services/dashboard/", flush=True)
    while True:
        try:
            return hub.wait()
        except KeyboardInterrupt:
            stop(None, None)


if __name__ == "__main__":
    sys.exit(main())
