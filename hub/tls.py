"""The room's TLS: the certificate the proxy serves (hub/run.py, JupyterHub's ssl_cert/ssl_key).

Either the instructor's own pair (``--ssl-cert``/``--ssl-key``: a certificate a browser trusts, for
the room's host name and its subdomains), or, by default, a self-signed pair made for this room
with ``openssl`` and kept in the hub's state folder (root's alone): ``room-cert.pem`` and
``room-key.pem``, valid :data:`DAYS` days, for the room's host name, each learner's and each
service's subdomain (JupyterHub's per-user origins) and the listening address. A browser warns
about a self-signed certificate; what makes it safe to go on is the certificate's SHA-256
fingerprint, which hub/run.py prints for the instructor to write on the board and each learner
compares with the one their browser shows. The pair is kept across starts (the fingerprint on the
board stays right) while it names everything the room needs and has more than a day left.

Standard library and the ``openssl`` command only: run.py runs from the system's Python.
"""
from __future__ import annotations

import datetime
import hashlib
import ipaddress
import json
import os
import shutil
import socket
import ssl
import stat
import subprocess
from pathlib import Path

CERT, KEY, ABOUT = "room-cert.pem", "room-key.pem", "room-cert.json"
DAYS = 30
#: a kept pair is made afresh once it has less than this left
MARGIN = datetime.timedelta(days=1)


def fingerprint(cert_path) -> str:
    """The SHA-256 fingerprint of a PEM certificate, as browsers show it: ``3A:0F:...`` (32
    pairs)."""
    der = ssl.PEM_cert_to_DER_cert(Path(cert_path).read_text())
    return ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())


def served_fingerprint(host: str, port: int, server_name: str, timeout: float = 5) -> str:
    """The SHA-256 fingerprint of the certificate served at ``host``:``port`` for ``server_name``
    (SNI), not verified: what the caller compares with the one it expects."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection((host, port), timeout=timeout) as raw:
        with context.wrap_socket(raw, server_hostname=server_name) as tls:
            der = tls.getpeercert(binary_form=True)
    return ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())


def names_for(host: str, subdomains=(), ip: str = "") -> list[str]:
    """What the room's certificate must name: the host, each of ``subdomains`` under it (the
    learners' and services' origins), the wildcard ``*.host``, and ``ip`` unless it is every
    interface (0.0.0.0, ::)."""
    names = [host, *(f"{s}.{host}" for s in subdomains)]
    if subdomains:
        names.append(f"*.{host}")
    if ip and ip not in ("0.0.0.0", "::"):
        names.append(ip)
    return list(dict.fromkeys(names))


def _san(names) -> str:
    parts = []
    for n in names:
        try:
            parts.append(f"IP:{ipaddress.ip_address(n)}")
        except ValueError:
            parts.append(f"DNS:{n}")
    return ",".join(parts)


def check_given(cert, key) -> None:
    """A ValueError saying what is wrong with the instructor's pair: both or neither, regular
    files, the key readable by its owner alone (it is the room's secret), and the two matching."""
    if bool(cert) != bool(key):
        raise ValueError("--ssl-cert and --ssl-key go together: give both, or neither (a "
                         "self-signed pair is then made for the room)")
    for what, path in (("--ssl-cert", cert), ("--ssl-key", key)):
        try:
            info = os.stat(path)
        except OSError as exc:
            raise ValueError(f"{what} {path}: {exc.strerror}") from None
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{what} {path} is not a regular file")
    info = os.stat(key)
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(f"--ssl-key {key} can be read by others (mode "
                         f"{stat.S_IMODE(info.st_mode):o}): it is the room's secret, chmod 600 it")
    if info.st_uid != os.geteuid():
        raise ValueError(f"--ssl-key {key} belongs to uid {info.st_uid}, not to you: its owner "
                         "can read it")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"--ssl-cert {cert} and --ssl-key {key} are not a certificate and its "
                         f"key ({exc})") from None


def _kept(state: Path, names) -> bool:
    """Whether the pair in ``state`` names every one of ``names`` and has more than a day left."""
    try:
        about = json.loads((state / ABOUT).read_text())
        until = datetime.datetime.fromisoformat(about["until"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    now = datetime.datetime.now(datetime.timezone.utc)
    return ((state / CERT).is_file() and (state / KEY).is_file()
            and set(names) <= set(about.get("names", [])) and until - now > MARGIN)


def self_signed(state, host: str, names) -> tuple[Path, Path, bool]:
    """The room's self-signed pair in ``state`` (kept, or made now for ``names``, the first of
    which is its subject): ``(cert, key, made_now)``. RuntimeError where openssl fails."""
    state = Path(state)
    cert, key = state / CERT, state / KEY
    if _kept(state, names):
        return cert, key, False
    if shutil.which("openssl") is None:
        raise RuntimeError("openssl is missing (apt-get install openssl): it makes the room's "
                           "certificate; or give your own with --ssl-cert and --ssl-key")
    tmp_key = state / f".{KEY}.{os.getpid()}"
    tmp_cert = state / f".{CERT}.{os.getpid()}"
    fd = os.open(tmp_key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # private from the start
    os.close(fd)
    subject = f"/CN={host}"[:64]
    r = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", str(DAYS), "-subj", subject, "-keyout", str(tmp_key),
         "-out", str(tmp_cert), "-addext", f"subjectAltName={_san(names)}",
         "-addext", "basicConstraints=critical,CA:FALSE",
         "-addext", "extendedKeyUsage=serverAuth"],
        capture_output=True, text=True)
    if r.returncode != 0:
        tmp_key.unlink(missing_ok=True)
        tmp_cert.unlink(missing_ok=True)
        raise RuntimeError(f"openssl could not make the room's certificate: {r.stderr.strip()}")
    os.chmod(tmp_key, 0o600)
    os.chmod(tmp_cert, 0o644)
    os.replace(tmp_key, key)
    os.replace(tmp_cert, cert)
    until = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=DAYS))
    about = {"names": list(names), "until": until.isoformat(timespec="seconds")}
    (state / ABOUT).write_text(json.dumps(about, indent=1) + "\n")
    return cert, key, True


def trusting(cert) -> ssl.SSLContext:
    """A client context that trusts ``cert`` (the room's own certificate) and checks host
    names."""
    context = ssl.create_default_context(cafile=str(cert))
    context.check_hostname = True
    return context
