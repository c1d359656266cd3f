"""Start the workshop hub here, in one command: ``make hub``
(``make hub HUB_ARGS="--learners 20 --ip 0.0.0.0 --host hub.example.org"``).

1. checks what it needs: root (the hub starts each learner's server as that learner), ``useradd``,
   configurable-http-proxy (on PATH, or installed with npm into build/hub/node on first use), the
   room's host name (each learner's server is served at its own origin, LEARNER.HOST) and the
   machine's cgroups (each learner's memory and CPU are limited: hub/limits.py);
2. builds or reuses the learner environment (hub/learner-env.sh, a venv every user can run);
3. writes the student edition once for this start (``python -m rmsnorm_lessons student``, from the
   learner environment), which the hub copies into each learner's home at their first login;
4. TLS: the instructor's certificate (``--ssl-cert``/``--ssl-key``) or a self-signed one made for
   the room (hub/tls.py), whose fingerprint it prints for the learners to compare;
5. starts JupyterHub with hub/jupyterhub_config.py, prints the URL and the room once it answers, and
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

Whatever the caller's umask, what the learners must read (their environment, the student edition,
the GPU turn's folder) is made readable by all, and what is secret (the state, the passwords, the
key) is made private by explicit modes: the process runs with umask 022.
"""
from __future__ import annotations

import http.client
import os
import pwd
import secrets
import signal
import socket
import ssl
import stat
import shutil
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
import limits  # noqa: E402
import tls  # noqa: E402
from options import (find_proxy, forget_names, instructor_password, origins,  # noqa: E402,F401
                     parser, room)

SERVICE_USER = os.environ.get("RMSNORM_HUB_SERVICE_USER", "nobody")


def _free_port(ip: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def _fail(message: str) -> int:
    print(f"hub: {message}", file=sys.stderr, flush=True)
    return 2


def _reachable(path: Path) -> str | None:
    """The first folder above ``path`` that other users cannot enter (None: all can)."""
    for folder in path.parents:
        if folder.stat().st_mode & stat.S_IXOTH == 0:
            return str(folder)
    return None


def student_edition(env_dir: Path, student: Path) -> str | None:
    """Write the student edition to ``student`` with the learner environment's Python, readable
    by all; what is wrong, or None."""
    shutil.rmtree(student, ignore_errors=True)
    subprocess.run([str(env_dir / "bin" / "python"), "-m", "rmsnorm_lessons", "student",
                    str(student)], check=True, cwd=ROOT)
    for path in [student, *student.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    closed = _reachable(student)
    if closed:
        return (f"the student edition {student} is out of the learners' reach: {closed} is not "
                "searchable by others (--student elsewhere, or chmod o+x it)")
    return None


def lock_folder(folder: Path) -> str | None:
    """The GPU turn's folder: the service's (``nobody``), readable by all; what is wrong, or
    None."""
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    user = pwd.getpwnam(SERVICE_USER)
    os.chown(folder, user.pw_uid, user.pw_gid)
    os.chmod(folder, 0o755)
    closed = _reachable(folder / "gpu.sock")
    if closed:
        return (f"the GPU turn's folder {folder} is out of the learners' reach: {closed} is not "
                "searchable by others (--gpu-lock elsewhere)")
    return None


def certificate(args, state: Path, where, learners) -> tuple[str, str, str]:
    """``(cert, key, lines to print)``: the instructor's pair, or the room's self-signed one."""
    if args.ssl_cert:
        cert, key = str(Path(args.ssl_cert).resolve()), str(Path(args.ssl_key).resolve())
        return cert, key, (f"hub: TLS with {cert}; its SHA-256 fingerprint is "
                           f"{tls.fingerprint(cert)}")
    names = tls.names_for(where.host, where.subdomains(learners), args.ip)
    cert, key, made = tls.self_signed(state, where.host, names)
    return str(cert), str(key), (
        f"hub: TLS with a self-signed certificate {'made now' if made else 'made earlier'} for "
        f"this room ({cert}). Its SHA-256 fingerprint, to write on the board:\n\n"
        f"    {tls.fingerprint(cert)}\n\n"
        "hub: each learner's browser warns that it does not know this certificate; they go on "
        "only if the fingerprint it shows (the warning's details, or the address bar's "
        "certificate viewer) is this one. Anything else: someone is in between.")


def gpu_memory_line(mode: str) -> str:
    return {
        "shared": "hub: GPU memory per learner: not limited. Time-slicing (--gpu-mode shared) has "
                  "no per-process or per-user device-memory limit in NVIDIA's driver, and no "
                  "cgroup covers GPU memory: one learner can take it all (hub/gpu-sharing.md)",
        "mps": "hub: GPU memory per learner: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT in each server's "
               "environment, which a learner can change for their own processes; the MPS "
               "daemon's own limit is set by the admin (hub/gpu-sharing.md)",
        "mig": "hub: GPU memory per learner: the MIG instance each learner's server is pointed "
               "at (CUDA_VISIBLE_DEVICES, which a learner can change), shared by the learners "
               "pointed at it (hub/gpu-sharing.md)",
    }[mode]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _through_proxy(port: int, where) -> bool:
    """The hub answers through the proxy, at the room's address (the proxy's route to it is in)."""
    if where.scheme == "https":  # which certificate it serves is checked apart
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/hub/api/", headers={"Host": f"{where.host}:{port}"})
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def main(argv=None) -> int:
    os.umask(0o022)  # modes below are explicit where they matter; the rest is readable by all
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    learners = room(args.learners)
    try:
        chosen = instructor_password(args)
        accounts.check_request(learners, args.instructor, chosen, args.reset_password)
    except ValueError as exc:
        return _fail(str(exc))

    if args.passwords_only:  # no accounts, no hub: the hashes for a hub elsewhere (Kubernetes)
        state = Path(args.state).resolve()
        state.mkdir(parents=True, exist_ok=True)
        os.chmod(state, 0o700)
        try:
            sheet, generated = accounts.prepare_passwords(
                state, learners, args.instructor, chosen, reset=args.reset_password)
        except ValueError as exc:
            return _fail(str(exc))
        print(f"hub: hashes in {state / accounts.PASSWORDS}; the learners' sheet "
              f"(also in {state / accounts.SHEET}):\n{sheet}", flush=True)
        if generated:
            print(f"hub: the instructor's password (shown once): {generated}", flush=True)
        return 0
    if os.geteuid() != 0:
        return _fail("run as root: the hub creates the learners' accounts and starts each "
                     "learner's server as that learner (sudo make hub)")
    state = Path(args.state).resolve()
    if args.remove_accounts:
        refused = accounts.remove_accounts(state, learners + [args.instructor])
        return 1 if refused else 0
    try:  # the hub chmods, seeds and stops the processes of its accounts: only its own
        accounts.check_owned(state, [*learners, args.instructor])
        where = origins(args, learners)
        if args.ssl_cert or args.ssl_key:
            tls.check_given(args.ssl_cert, args.ssl_key)
        # SystemdSpawner puts each server in a unit with MemoryMax and CPUQuota itself
        room_limits = None if args.no_limits or args.spawner == "systemd" else limits.detect(
            limits.parse_size(args.mem_limit), limits.parse_cpus(args.cpu_limit),
            tag=f"{args.port}")
    except ValueError as exc:
        return _fail(str(exc))
    if not shutil.which("useradd"):
        return _fail("useradd is missing (apt-get install passwd)")
    proxy = find_proxy()
    if proxy is None:
        return _fail("configurable-http-proxy is missing and npm could not install it "
                     "(apt-get install npm, then npm install -g configurable-http-proxy)")

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
    accounts.record_room(state, learners, args.instructor)
    # the student edition is copied into each home by the learner's own process (not as root), so
    # it lives outside the private state folder, readable by everyone: it holds no secret
    student = Path(args.student).resolve()
    lock_dir = Path(args.gpu_lock).resolve()
    wrong = student_edition(env_dir, student) or lock_folder(lock_dir)
    if wrong:
        return _fail(wrong)
    cert = key = ""
    if not args.plain_http:
        try:
            cert, key, said = certificate(args, state, where, learners)
        except RuntimeError as exc:
            return _fail(str(exc))

    hub_port = _free_port()
    env = dict(os.environ)
    env.update({
        "RMSNORM_HUB_IP": args.ip, "RMSNORM_HUB_PORT": str(args.port),
        "RMSNORM_HUB_HUB_PORT": str(hub_port), "RMSNORM_HUB_PROXY_API_PORT": str(_free_port()),
        "RMSNORM_HUB_PROXY": proxy, "RMSNORM_HUB_STATE": str(state),
        "RMSNORM_HUB_ENV": str(env_dir),
        "RMSNORM_HUB_STUDENT": str(student), "RMSNORM_HUB_LEARNERS": ",".join(learners),
        "RMSNORM_HUB_INSTRUCTOR": args.instructor, "RMSNORM_HUB_FORMER": ",".join(former),
        "RMSNORM_HUB_CULL_TIMEOUT": str(args.cull_timeout),
        "RMSNORM_HUB_MEM_LIMIT": args.mem_limit, "RMSNORM_HUB_GPU_MODE": args.gpu_mode,
        "RMSNORM_HUB_SPAWNER": args.spawner, "RMSNORM_HUB_DASHBOARD_PORT": str(_free_port()),
        "RMSNORM_HUB_SCHEME": where.scheme, "RMSNORM_HUB_HOST": where.host,
        "RMSNORM_HUB_PER_USER": "1" if where.per_user else "",
        "RMSNORM_HUB_SSL_CERT": cert, "RMSNORM_HUB_SSL_KEY": key,
        "RMSNORM_HUB_LIMITS": room_limits.to_env() if room_limits else "",
        "RMSNORM_HUB_CPU_LIMIT": args.cpu_limit, "RMSNORM_HUB_GPU_LOCK_DIR": str(lock_dir),
        "RMSNORM_HUB_ADMIN_TOKEN": admin_token,
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
    api = f"http://127.0.0.1:{hub_port}/"  # the hub itself, behind the proxy
    deadline = time.monotonic() + 120
    ready = False
    while not ready and hub.poll() is None and time.monotonic() < deadline:
        ready = _answers(f"{api}hub/api/")
        if not ready:
            time.sleep(0.5)
    if ready and cert:  # the proxy serves the room's certificate, not something else's
        seen = None
        while hub.poll() is None and time.monotonic() < deadline and seen is None:
            try:
                seen = tls.served_fingerprint("127.0.0.1", args.port, where.host)
            except OSError:
                time.sleep(0.5)
        ready = seen == tls.fingerprint(cert)
        if seen is not None and not ready:
            print(f"hub: port {args.port} serves a certificate with fingerprint {seen}, not the "
                  "room's: is something else listening there?", file=sys.stderr, flush=True)
    while ready and hub.poll() is None and not _through_proxy(args.port, where):
        if time.monotonic() > deadline:
            ready = False
        time.sleep(0.5)
    if not ready and hub.poll() is None:
        print(f"hub: no answer at {where.url()} within 120 s; still waiting (the log above says "
              "why)", flush=True)
    if ready:
        left = forget_names(api, admin_token, forget)
        accounts.keep_removed(state, left)  # cleared once forgotten; what failed is tried again
        if left:
            print(f"hub: could not delete the hub's records of {', '.join(left)}; their old tokens "
                  "may still work (tried again at the next start)", file=sys.stderr, flush=True)
        if cert:
            print(said, flush=True)
        else:
            print("hub: PLAIN HTTP (--plain-http): passwords and notebooks cross the network "
                  "unencrypted", flush=True)
        print("hub: limits per learner: " + (
            room_limits.describe() if room_limits else
            f"a systemd unit each, MemoryMax {args.mem_limit} and CPUQuota {args.cpu_limit} "
            "core(s) (--spawner systemd)" if args.spawner == "systemd" else
            "none (--no-limits): one learner can take the machine's memory"), flush=True)
        print(gpu_memory_line(args.gpu_mode), flush=True)
        print(f"hub: GPU turns: one timing at a time, queued ({lock_dir}/gpu.sock, named by "
              "RMSNORM_LESSONS_GPU_LOCK in every learner's server)", flush=True)
        print(f"hub: ready at {where.url()}", flush=True)
        print(f"hub: learners {', '.join(learners)}; instructor (admin) {args.instructor}. "
              f"Ctrl+C stops the hub.", flush=True)
        if where.per_user:
            print(f"hub: each learner's JupyterLab has its own origin, "
                  f"{where.learner(learners[0])} for {learners[0]}", flush=True)
    # shown whether or not the hub answered: a generated password exists only as a hash after this
    print(f"hub: the learners' passwords, to print and hand out (also in {state / accounts.SHEET}, "
          f"readable by root only):\n{sheet}", flush=True)
    if generated is not None:
        print(f"hub: the instructor's password (generated now, shown only this once; "
              f"--instructor-password-file sets another): {generated}", flush=True)
    if ready:
        print(f"hub: the instructor's view of the room: {where.service('dashboard')} (the "
              "instructor's login lands there)", flush=True)
    if not where.per_user:
        print("hub: every server shares this address (--one-origin): a page a learner serves "
              "from their server can act as whoever opens it. Open no learner's server while "
              "logged in as the instructor (hub/README.md, Security).", flush=True)
    print("hub: this terminal shows the passwords: keep its output out of files others can read.",
          flush=True)
    try:
        while True:
            try:
                return hub.wait()
            except KeyboardInterrupt:
                stop(None, None)
    finally:
        if room_limits:
            room_limits.release_all()


if __name__ == "__main__":
    sys.exit(main())
