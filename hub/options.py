"""hub/run.py's command line: the options, and what each one's value means for the room (names,
the instructor's password, the room's address and origins, the proxy). Standard library only."""
from __future__ import annotations

import argparse
import getpass
import ipaddress
import os
import re
import shutil
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NODE_PREFIX = ROOT / "build" / "hub" / "node"
#: a learner's name that is its own origin's first label, unchanged (JupyterHub's subdomain hook
#: rewrites a name with "--", "_" or a trailing "-" into a hashed label)
DNS_NAME = re.compile(r"[a-z](?:[a-z0-9-]*[a-z0-9])?")
HOST = re.compile(r"(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]*[a-z0-9])?")
#: the services whose pages the instructor opens (each its own origin with per-user origins)
SERVICES = ("dashboard",)
PLAIN_HTTP_HELP = (
    "serve plain HTTP, no TLS: every password, cookie and notebook then crosses the network "
    "readable (and changeable) by anyone on it. Only for a hub nobody else can reach (--ip "
    "127.0.0.1 on your own machine); a room gets TLS, self-signed by default")
ONE_ORIGIN_HELP = (
    "serve every learner's server under the hub's one address (/user/NAME/) instead of its own "
    "origin (NAME.HOST): a page a learner's server serves can then act as whoever opens it, the "
    "instructor included (hub/README.md, Security). For a machine without wildcard DNS only")


def parser(doc: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--ip", default="127.0.0.1",
                    help="where learners connect (0.0.0.0: every interface)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--host", default="", metavar="NAME",
                    help="the room's host name: the hub at https://NAME:PORT/, each learner's "
                         "server at https://LEARNER.NAME:PORT/ (NAME and *.NAME must resolve to "
                         "this machine); default localhost where --ip is a loopback address")
    ap.add_argument("--one-origin", action="store_true", help=ONE_ORIGIN_HELP)
    ap.add_argument("--subdomain-host", help=argparse.SUPPRESS)  # was: now --host, by default
    ap.add_argument("--ssl-cert", metavar="FILE",
                    help="the room's certificate (PEM), for NAME and *.NAME; default: a "
                         "self-signed one made for the room, its fingerprint printed")
    ap.add_argument("--ssl-key", metavar="FILE", help="its key (root's, mode 600)")
    ap.add_argument("--plain-http", action="store_true", help=PLAIN_HTTP_HELP)
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
                    help="the hub's database, cookie secret, passwords and certificate (root's "
                         "alone)")
    ap.add_argument("--student", default=str(ROOT / "build" / "hub" / "student"),
                    help="where the student edition is written for the learners to copy (readable "
                         "by everyone)")
    ap.add_argument("--gpu-lock", default=str(ROOT / "build" / "hub" / "gpu-lock"), metavar="DIR",
                    help="the room's GPU turn: its socket and record of turns (reachable by "
                         "everyone; hub/gpu_lock.py)")
    ap.add_argument("--env", default=os.environ.get("HUB_ENV", str(ROOT / "build" / "hub" / "env")),
                    help="the learner environment (hub/learner-env.sh builds it)")
    ap.add_argument("--cull-timeout", type=int, default=3600,
                    help="seconds idle before a server is stopped")
    ap.add_argument("--mem-limit", default="8G",
                    help="memory per learner, enforced (cgroups): past it, the OOM killer ends "
                         "the largest of that learner's processes")
    ap.add_argument("--cpu-limit", default="4", help="CPU cores per learner, enforced (cgroups)")
    ap.add_argument("--no-limits", action="store_true",
                    help="start without per-learner memory and CPU limits (a machine without "
                         "cgroups): one learner can then take the machine's memory")
    ap.add_argument("--gpu-mode", choices=["shared", "mps", "mig"], default="shared",
                    help="how learners share the GPU (hub/gpu-sharing.md)")
    ap.add_argument("--spawner", choices=["local", "systemd"], default="local")
    ap.add_argument("--remove-accounts", action="store_true",
                    help="delete the room's accounts and homes, exit")
    ap.add_argument("--passwords-only", action="store_true",
                    help="write the passwords and the sheet into --state, print the sheet, exit "
                         "(Zero to JupyterHub: hub/kubernetes.md)")
    return ap


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


def _loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return ip == "localhost"


@dataclass(frozen=True)
class Origins:
    """Where the room is served: ``scheme``, ``host`` (the room's host name), ``port``, and
    whether each learner's server (and each service) has its own origin (``per_user``)."""
    scheme: str
    host: str
    port: int
    per_user: bool

    def url(self, sub: str = "") -> str:
        netloc = f"{sub}.{self.host}" if sub else self.host
        default = {"https": 443, "http": 80}[self.scheme]
        port = "" if self.port == default else f":{self.port}"
        return f"{self.scheme}://{netloc}{port}/"

    def learner(self, name: str) -> str:
        return f"{self.url(name if self.per_user else '')}user/{name}/"

    def service(self, name: str) -> str:
        return f"{self.url(f'{name}--service' if self.per_user else '')}services/{name}/"

    def subdomains(self, learners) -> list[str]:
        """The names under the host that the room's certificate must cover."""
        if not self.per_user:
            return []
        return [*learners, *(f"{s}--service" for s in SERVICES)]


def origins(args, learners) -> Origins:
    """The room's :class:`Origins` from the command line; a ValueError says what is missing."""
    if args.subdomain_host:
        raise ValueError("--subdomain-host is now the default (each learner's server on its own "
                         "origin): give the room's host name with --host NAME")
    if args.plain_http and (args.ssl_cert or args.ssl_key):
        raise ValueError("--plain-http with --ssl-cert/--ssl-key: choose one")
    host = (args.host or "").strip().lower().rstrip(".")
    if not host:
        if _loopback(args.ip):
            host = "localhost"
        elif args.one_origin:
            host = args.ip if args.ip not in ("0.0.0.0", "::", "") else ""
        if not host:
            raise ValueError(
                f"--ip {args.ip} serves the room to other machines: give the room's host name "
                "with --host NAME (NAME and *.NAME resolve to this machine: a wildcard DNS "
                "record, or a dnsmasq line address=/NAME/<this machine's address>; hub/README.md), "
                "or --one-origin to serve everyone under one address")
    if not HOST.fullmatch(host) and not _is_ip(host):
        raise ValueError(f"--host {host!r}: a host name (letters, digits, '-' and '.')")
    per_user = not args.one_origin
    if per_user:
        if _is_ip(host):
            raise ValueError(f"--host {host}: an address has no subdomains for the learners' "
                             "origins: give a host name, or --one-origin")
        odd = [n for n in learners if not DNS_NAME.fullmatch(n) or "--" in n]
        if odd:
            raise ValueError("each learner's server is served at NAME." + host + ", so names "
                             "must be host-name labels (a letter, then letters, digits or single "
                             f"'-', not ending in '-'): {', '.join(odd)}; or --one-origin")
    return Origins("http" if args.plain_http else "https", host, args.port, per_user)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False
