"""JupyterHub for a workshop of the course on one GPU machine: ``make hub`` (hub/run.py) starts it.

Read hub/README.md first. In short:

* Accounts: the room is a list of learner names plus one instructor (an admin). Each name is a local
  Unix account, created by the hub at start-up where it is missing (``useradd``, home mode 0700) and
  recorded in the state folder (hub/accounts.py). A login is checked against the password hashes
  hub/run.py wrote before the hub started (generated for the learners, the instructor's own): nobody
  chooses a password at the door, so nobody can claim someone else's name.
* Servers: LocalProcessSpawner runs each learner's JupyterLab as that Unix user, with the learner
  environment (hub/learner-env.sh: a venv every user can run, the course installed in it).
* Seeding: before a learner's first server starts, the student edition (written once per hub start
  by hub/run.py with ``python -m rmsnorm_lessons student``) is copied into ``~/rmsnorm-lessons``,
  owned by the learner. Later logins leave the folder alone: the learner's work stays theirs.
* The instructor's view: the ``dashboard`` service (hub/dashboard.py, admins only) shows every
  learner's verdicts (``~/.rmsnorm-lessons/verdicts.jsonl``, written by their checks) at
  ``/services/dashboard/``.
* Culling: jupyterhub-idle-culler runs as a hub service and stops servers idle for
  RMSNORM_HUB_CULL_TIMEOUT seconds (default 3600).
* Limits: each learner's memory and CPU in a cgroup of their own (hub/limits.py, found by
  hub/run.py), their process count (RLIMIT_NPROC), thread counts; GPU sharing is in
  hub/gpu-sharing.md, and timings take turns on the GPU (the gpu-lock service, hub/gpu_lock.py).
* Origins and TLS: the proxy serves TLS (hub/tls.py) and each learner's server its own origin,
  https://NAME.HOST (JupyterHub's subdomain_host); the dashboard has its own too. The instructor
  has no server of their own here: their login lands on the dashboard.

Everything is configured through RMSNORM_HUB_* environment variables, which hub/run.py sets from its
command line; the defaults below are for running this file by hand.
"""
import asyncio
import os
import pwd
import resource
import subprocess
import sys
from pathlib import Path

from jupyterhub.auth import LocalAuthenticator
from jupyterhub.spawner import LocalProcessSpawner

c = get_config()  # noqa: F821 - defined by JupyterHub when it loads this file

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import accounts  # noqa: E402 - hub/accounts.py, beside this file
import limits  # noqa: E402 - hub/limits.py


def _env(name, default):
    return os.environ.get(f"RMSNORM_HUB_{name}", default)


STATE = Path(_env("STATE", ROOT / "build" / "hub" / "state")).resolve()
LEARNER_ENV = Path(_env("ENV", ROOT / "build" / "hub" / "env")).resolve()
STUDENT = Path(_env("STUDENT", ROOT / "build" / "hub" / "student")).resolve()
LEARNERS = [n.strip() for n in _env("LEARNERS", "learner01,learner02").split(",") if n.strip()]
INSTRUCTOR = _env("INSTRUCTOR", "instructor").strip()
accounts.check_names(LEARNERS, INSTRUCTOR)
ROOM = {*LEARNERS, INSTRUCTOR}
# names that were in an earlier room of this state: blocked, so their sessions, tokens and admin
# rights end (JupyterHub revokes a blocked user's admin flag and roles at start-up)
FORMER = sorted({n.strip() for n in _env("FORMER", "").split(",") if n.strip()} - ROOM)
SEED_DIR = "rmsnorm-lessons"  # the folder in each learner's home
CULL_TIMEOUT = int(_env("CULL_TIMEOUT", "3600"))
MEM_LIMIT = _env("MEM_LIMIT", "8G")
MAX_PROCS = int(_env("MAX_PROCS", "4096"))  # processes + threads per learner (RLIMIT_NPROC)
THREADS = _env("THREADS", "4")  # OpenMP/BLAS threads per kernel
GPU_MODE = _env("GPU_MODE", "shared")  # shared (time-slicing) | mps | mig
GPU_LOCK_DIR = Path(_env("GPU_LOCK_DIR", ROOT / "build" / "hub" / "gpu-lock")).resolve()
STATE.mkdir(parents=True, exist_ok=True)
os.chmod(STATE, 0o700)

# --------------------------------------------------------------------------------------------------
# the hub and its proxy

c.JupyterHub.ip = _env("IP", "127.0.0.1")
c.JupyterHub.port = int(_env("PORT", "8000"))
SCHEME = _env("SCHEME", "https")
HOST = _env("HOST", "localhost")
PER_USER = bool(_env("PER_USER", "1"))
# each server on its own origin (https://NAME.HOST:PORT): otherwise every learner's server shares
# the hub's origin, and a page a learner serves from theirs can act as whoever opens it (README)
if PER_USER:
    c.JupyterHub.subdomain_host = f"{SCHEME}://{HOST}:{c.JupyterHub.port}"
    # the hub's cookies bound to its own host, out of reach of a learner's subdomain
    c.JupyterHub.cookie_host_prefix_enabled = SCHEME == "https"
if PER_USER:  # the dashboard's own origin, as JupyterHub names a service's subdomain
    from jupyterhub.utils import subdomain_hook_idna

    DASHBOARD_URL = (f"{SCHEME}://{subdomain_hook_idna('dashboard', HOST, 'service')}:"
                     f"{c.JupyterHub.port}/services/dashboard/")
else:
    DASHBOARD_URL = "/services/dashboard/"


def landing(handler) -> str:
    """Where a login goes: the instructor to the dashboard; a learner ("") to their server."""
    user = handler.current_user
    return DASHBOARD_URL if user is not None and user.name == INSTRUCTOR else ""


c.JupyterHub.default_url = landing
if _env("SSL_CERT", ""):  # the proxy serves TLS (hub/run.py: the room's certificate)
    c.JupyterHub.ssl_cert = _env("SSL_CERT", "")
    c.JupyterHub.ssl_key = _env("SSL_KEY", "")
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(_env("HUB_PORT", "8081"))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{int(_env('PROXY_API_PORT', '8001'))}"
c.ConfigurableHTTPProxy.command = [_env("PROXY", "configurable-http-proxy")]
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(STATE / "jupyterhub.pid")
# stop every learner's server when the hub stops (the default, said out loud: a workshop ends)
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True

# --------------------------------------------------------------------------------------------------
# accounts: the room's names, local Unix users, passwords handed out by the instructor


class RoomAuthenticator(LocalAuthenticator):
    """A login is the name and the password hub/run.py generated (or the instructor set); every
    listed name gets a Unix user, and the users the hub creates are recorded (only those are ever
    removed)."""

    async def authenticate(self, handler, data):
        name = str((data or {}).get("username", "")).strip().lower()  # accounts are lower case
        if name in ROOM and accounts.check_login(STATE, name, (data or {}).get("password", "")):
            return {"name": name, "admin": name == INSTRUCTOR}
        self.log.warning("refused a login as %r: wrong password or not in the room", name)
        return None

    async def refresh_user(self, user, handler=None):
        """Every few minutes and before a server starts: a name no longer in the room must log in
        again (and cannot); the room's instructor alone is an admin."""
        if user.name not in ROOM:
            return False
        return {"name": user.name, "admin": user.name == INSTRUCTOR}

    def add_system_user(self, user):
        accounts.create_account(STATE, user.name)

    def delete_user(self, user):
        """hub/run.py deletes the hub's record of a removed or dropped name (its tokens and
        cookies go with it); a name of this room stays allowed: its new holder logs in afresh."""
        if user.name not in ROOM:
            super().delete_user(user)


c.JupyterHub.authenticator_class = RoomAuthenticator
c.Authenticator.allowed_users = set(LEARNERS)
c.Authenticator.admin_users = {INSTRUCTOR}
# only this room: not every name JupyterHub's database remembers from earlier starts
c.Authenticator.allow_existing_users = False
c.Authenticator.blocked_users = set(FORMER)
c.Authenticator.refresh_pre_spawn = True
c.Authenticator.auth_refresh_age = 60
c.LocalAuthenticator.create_system_users = True

# --------------------------------------------------------------------------------------------------
# the learners' servers


def _rlimits(spawner):
    """What the kernel enforces for every process a learner's server starts (set as root, before the
    switch to the learner's uid, so the learner cannot raise them)."""
    limits = [(resource.RLIMIT_NPROC, MAX_PROCS), (resource.RLIMIT_CORE, 0)]

    def apply():
        for what, value in limits:
            resource.setrlimit(what, (value, value))
    return apply


class WorkshopSpawner(LocalProcessSpawner):
    """LocalProcessSpawner whose processes start with the workshop's rlimits (hub/README.md), and
    with none of the hub's own files: stdin, stdout and stderr are /dev/null (a server that kept
    the hub's terminal could read what the instructor types there; one writing to a file of
    root's could fill the disk past any quota). The server's own log goes to a file in the
    learner's home, opened by the learner's shell (SERVER_LOG)."""

    cgroup_files: list = []  # set by the pre-spawn hook: the learner's groups (hub/limits.py)

    def make_preexec_fn(self, name):
        setuid = super().make_preexec_fn(name)
        rlimits = _rlimits(self)
        groups = list(self.cgroup_files)

        def preexec():
            limits.Limits.join(groups)  # as root, before the switch: the learner cannot leave
            rlimits()
            setuid()
        return preexec

    async def start(self):
        """Start the server once fewer than SPAWN_AT_ONCE others are starting, and hold that place
        until it listens: thirty servers starting at once on two cores each take longer than the
        hub waits, and all fail together (a room test at 9:00: 0 of 30); in turn, each starts in
        seconds."""
        self.popen_kwargs = {**self.popen_kwargs, "stdin": subprocess.DEVNULL,
                             "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        async with _spawn_gate():
            ip, port = await super().start()
            deadline = asyncio.get_running_loop().time() + self.http_timeout
            while asyncio.get_running_loop().time() < deadline and self.proc.poll() is None:
                try:  # listening: the slow part of its start is over
                    _, writer = await asyncio.open_connection(ip or "127.0.0.1", port)
                    writer.close()
                    break
                except OSError:
                    await asyncio.sleep(0.5)
            return ip, port


LIMITS = limits.from_env(_env("LIMITS", ""))  # None: --no-limits
SPAWNER = _env("SPAWNER", "local")
# a workshop machine with systemd: mem_limit and cpu_limit become cgroup limits
if SPAWNER == "systemd":
    # pip install jupyterhub-systemdspawner
    c.JupyterHub.spawner_class = "systemdspawner.SystemdSpawner"
    c.SystemdSpawner.dynamic_users = False
    c.SystemdSpawner.isolate_tmp = True
    c.SystemdSpawner.isolate_devices = False  # the learners need /dev/nvidia*
    c.Spawner.cpu_limit = float(_env("CPU_LIMIT", "4"))
else:
    c.JupyterHub.spawner_class = WorkshopSpawner

#: servers starting at the same moment (the rest wait their turn, on the spawn page)
SPAWN_AT_ONCE = max(2, int(_env("SPAWN_AT_ONCE", str(os.cpu_count() or 2))))
_GATE = []


def _spawn_gate() -> asyncio.Semaphore:
    if not _GATE:  # made on the hub's own event loop, at the first start
        _GATE.append(asyncio.Semaphore(SPAWN_AT_ONCE))
    return _GATE[0]


SERVER_LOG = ".jupyterhub-server.log"  # in the learner's home: theirs, like any file they write
# the shell runs as the learner (the spawner switches uid first) and opens the log in their home
c.Spawner.cmd = ["/bin/sh", "-c", f'exec "$@" >>"$HOME/{SERVER_LOG}" 2>&1', "server",
                 str(LEARNER_ENV / "bin" / "jupyterhub-singleuser")]
c.Spawner.notebook_dir = "~"
# JupyterLab for a room: no extension installs from the learners, no news pop-ups
c.Spawner.args = ["--LabApp.extension_manager=readonly", "--LabApp.news_url=None",
                  "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
c.Spawner.default_url = f"/lab/tree/{SEED_DIR}"
# the learner environment first; nothing of the hub's own environment (its venv, PYTHONPATH) leaks
# in
c.Spawner.env_keep = ["LANG", "LC_ALL", "CUDA_HOME"]
environment = {
    "PATH": f"{LEARNER_ENV / 'bin'}:/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin",
    "OMP_NUM_THREADS": THREADS,
    "OPENBLAS_NUM_THREADS": THREADS,
    "MKL_NUM_THREADS": THREADS,
    "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    # each check's verdict is recorded here, for the instructor's dashboard (verdicts.py)
    "RMSNORM_LESSONS_VERDICTS": "~/.rmsnorm-lessons/verdicts.jsonl",
    # timings take turns on the GPU (hub/gpu_lock.py)
    "RMSNORM_LESSONS_GPU_LOCK": str(GPU_LOCK_DIR / "gpu.sock"),
}
if GPU_MODE == "mps":
    # clients of NVIDIA's MPS daemon (started by the admin, hub/gpu-sharing.md): at most this share
    # of the SMs and this much device memory per learner's process
    environment["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = _env("MPS_THREAD_PERCENTAGE", "10")
    environment["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={_env('MPS_MEM_LIMIT', '6G')}"
c.Spawner.environment = environment
# advertised to the server (MEM_LIMIT, shown by jupyter-resource-usage)
c.Spawner.mem_limit = MEM_LIMIT  # enforced by the learner's cgroup (LIMITS)
# a start includes its wait for a place among the servers starting (SPAWN_AT_ONCE): a room
# arriving together queues there
c.Spawner.start_timeout = 900
c.Spawner.http_timeout = 120
# a stopped server frees its place: no named servers, one JupyterLab per learner
c.JupyterHub.allow_named_servers = False

MIG_DEVICES = [d.strip() for d in _env("MIG_DEVICES", "").split(",") if d.strip()]


#: run by the learner's own uid: copy the student edition into the home unless it is there already
SEED = """import os, shutil, sys
source, target = sys.argv[1:3]
if not os.path.lexists(target):
    shutil.copytree(source, target, symlinks=True)
"""


SEED_TIMEOUT_S = 60


async def as_learner(user, code: str, *args: str, timeout: float = SEED_TIMEOUT_S):
    """Run Python ``code`` as ``user`` (a pwd entry), off the hub's event loop, with no terminal
    and a clean environment: its exit code, or None where it was killed after ``timeout`` seconds
    (a learner can stop their own process: it must not stall the hub)."""
    # no pipes: a process of the learner's could take one and pour gigabytes into the hub
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-c", code, *args, user=user.pw_uid, group=user.pw_gid,
        extra_groups=[], cwd=user.pw_dir, umask=0o077, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={"HOME": user.pw_dir, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    try:
        return await asyncio.wait_for(proc.wait(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return None


async def seed_home(spawner):
    """Before a server starts: the learner's home is private, and holds the student edition after
    the first login. The hub (root) only makes the home and sets its mode; the copy is made by a
    process of the learner's own uid, so nothing the learner does in their home (a link, a folder
    swapped mid-copy) can turn root's writes or chowns onto another file. Then the learner's
    cgroups, with the room's limits, for the server's first process to join."""
    if spawner.user.name == INSTRUCTOR:  # an admin's server would be the room's softest target
        raise RuntimeError("the instructor has no JupyterLab on this hub: the room's dashboard is "
                           f"at {DASHBOARD_URL}")
    if not accounts.hub_created(STATE, spawner.user.name):  # hub/run.py refuses others at start
        raise RuntimeError(f"the account {spawner.user.name} was not created by this hub: it is "
                           "left alone")
    user = pwd.getpwnam(spawner.user.name)
    home = Path(user.pw_dir)
    if not home.is_dir():
        home.mkdir(mode=0o700, parents=True)
        os.chown(home, user.pw_uid, user.pw_gid)
    os.chmod(home, 0o700)
    if not STUDENT.is_dir():
        raise RuntimeError(f"no student edition at {STUDENT}: start the hub with hub/run.py "
                           f"(make hub)")
    target = home / SEED_DIR
    there = os.path.lexists(target)
    code = await as_learner(user, SEED, str(STUDENT), str(target))
    if code != 0:
        raise RuntimeError(f"copying the student edition into {target} as {spawner.user.name} "
                           f"failed ({'stopped after 60 s' if code is None else f'exit {code}'})")
    if not there:
        spawner.log.info("seeded %s with the student edition from %s", target, STUDENT)
    if LIMITS is not None:
        spawner.cgroup_files = await asyncio.to_thread(LIMITS.prepare, spawner.user.name)
    if GPU_MODE == "mig" and MIG_DEVICES:
        # one MIG instance per learner, in the order of the room's list (several learners per
        # instance when there are more learners than instances)
        i = LEARNERS.index(spawner.user.name) if spawner.user.name in LEARNERS else 0
        spawner.environment = {**spawner.environment,
                               "CUDA_VISIBLE_DEVICES": MIG_DEVICES[i % len(MIG_DEVICES)]}


c.Spawner.pre_spawn_hook = seed_home


async def end_leftovers(spawner):
    """After a server stops: nothing of the learner's keeps running (a ``setsid`` job would keep
    the GPU, and block the account's removal)."""
    try:
        left = await asyncio.to_thread(accounts.end_processes, STATE, spawner.user.name)
    except Exception:  # noqa: BLE001 - a stop goes on; the log says why
        spawner.log.exception("ending %s's leftover processes failed", spawner.user.name)
        return
    if left:
        spawner.log.warning("%d process(es) of %s would not end", left, spawner.user.name)
    elif LIMITS is not None:
        LIMITS.release(spawner.user.name)


c.Spawner.post_stop_hook = end_leftovers

# --------------------------------------------------------------------------------------------------
# idle servers are stopped; the instructor's view of the room

DASHBOARD_PORT = int(_env("DASHBOARD_PORT", "8002"))
SERVICE_USER = _env("SERVICE_USER", "nobody")
c.JupyterHub.services = [{
    # one timing at a time on the GPU: a queue behind a Unix socket every learner can reach
    "name": "gpu-lock",
    "command": [sys.executable, str(HERE / "gpu_lock.py")],
    "user": SERVICE_USER,  # its folder (hub/run.py made it the service user's) and nothing else
    "environment": {"RMSNORM_HUB_GPU_LOCK_DIR": str(GPU_LOCK_DIR),
                    "RMSNORM_HUB_GPU_LOCK_MAX_S": _env("GPU_LOCK_MAX_S", "120")},
}, {
    "name": "idle-culler",
    "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={CULL_TIMEOUT}",
                "--cull-every=60"],
    "user": SERVICE_USER,  # it needs its API token, not root
}, {
    # runs as root, like the hub: it reads every learner's verdicts in their private home
    "name": "dashboard",
    "url": f"http://127.0.0.1:{DASHBOARD_PORT}",
    "command": [sys.executable, str(HERE / "dashboard.py")],
    "environment": {"RMSNORM_HUB_LEARNERS": ",".join(LEARNERS),
                    "RMSNORM_HUB_INSTRUCTOR": INSTRUCTOR,
                    "RMSNORM_HUB_GPU_LOCK_DIR": str(GPU_LOCK_DIR)},
    "oauth_no_confirm": True,
    "display": True,
}]
if _env("ADMIN_TOKEN", ""):  # hub/run.py's own token: it deletes former names' records
    c.JupyterHub.services.append({"name": "room-admin", "api_token": _env("ADMIN_TOKEN", "")})
c.JupyterHub.load_roles = [{
    "name": "room-admin",
    "description": "delete the records of names no longer in the room",
    "scopes": ["list:users", "delete:users"],
    "services": ["room-admin"] if _env("ADMIN_TOKEN", "") else [],
}, {
    "name": "idle-culler",
    "description": "stop learners' servers that have been idle",
    "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
    "services": ["idle-culler"],
}, {
    # the admin role has access:services already; said out loud, and for the instructor by name
    "name": "room-dashboard",
    "description": "open the instructor's view of the room",
    "scopes": ["access:services!service=dashboard"],
    "users": [INSTRUCTOR],
}]
