"""The room's address, origins and TLS (hub/options.py, hub/tls.py), without a hub: the
self-signed certificate a room gets by default, the instructor's own pair, the host name the
learners' origins hang from, and the refusals that say what to give instead.
tests/test_hub.py serves a room with them, in Chromium."""
from __future__ import annotations

import http.server
import importlib.util
import os
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

HUB = Path(__file__).resolve().parent.parent / "hub"


def _load(name: str):
    sys.path.insert(0, str(HUB))
    try:
        spec = importlib.util.spec_from_file_location(f"hub_{name}", HUB / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses look their module up
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(HUB))


tls, options = _load("tls"), _load("options")
needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is missing")


def _args(**kw):
    base = dict(ip="127.0.0.1", port=8000, host="", one_origin=False, subdomain_host=None,
                plain_http=False, ssl_cert=None, ssl_key=None)
    return SimpleNamespace(**{**base, **kw})


def _serve(cert, key):
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _trusted(cert, port: int, name: str) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        try:
            tls.trusting(cert).wrap_socket(raw, server_hostname=name).close()
            return True
        except ssl.SSLCertVerificationError:
            return False


@needs_openssl
def test_a_room_gets_a_self_signed_certificate_for_its_origins(tmp_path):
    where = options.origins(_args(), ["ada", "grace"])
    names = tls.names_for(where.host, where.subdomains(["ada", "grace"]), "127.0.0.1")
    assert names[:3] == ["localhost", "ada.localhost", "grace.localhost"]
    assert "dashboard--service.localhost" in names and "127.0.0.1" in names
    cert, key, made = tls.self_signed(tmp_path, where.host, names)
    assert made and stat.S_IMODE(key.stat().st_mode) == 0o600
    printed = tls.fingerprint(cert)
    assert len(printed.split(":")) == 32 and printed == printed.upper()
    server = _serve(cert, key)
    try:
        port = server.server_address[1]
        assert tls.served_fingerprint("127.0.0.1", port, "localhost") == printed
        for name in ("localhost", "ada.localhost", "dashboard--service.localhost", "127.0.0.1"):
            assert _trusted(cert, port, name), name
        assert not _trusted(cert, port, "mallory.localhost")  # named, not a wildcard's guess
    finally:
        server.shutdown()
    # kept while it names the room: the fingerprint on the board stays right ...
    assert tls.self_signed(tmp_path, where.host, names[:2]) == (cert, key, False)
    assert tls.fingerprint(cert) == printed
    # ... and made afresh for a learner it does not name
    _, _, again = tls.self_signed(tmp_path, where.host, names + ["linus.localhost"])
    assert again and tls.fingerprint(cert) != printed


@needs_openssl
def test_the_instructor_s_own_pair_is_checked(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cert, key, _ = tls.self_signed(tmp_path / "a", "localhost", ["localhost"])
    other_cert, _, _ = tls.self_signed(tmp_path / "b", "localhost", ["localhost"])
    tls.check_given(str(cert), str(key))
    with pytest.raises(ValueError, match="go together"):
        tls.check_given(str(cert), None)
    with pytest.raises(ValueError, match="not a certificate and its key"):
        tls.check_given(str(other_cert), str(key))
    with pytest.raises(ValueError, match="No such file"):
        tls.check_given(str(tmp_path / "missing.pem"), str(key))
    os.chmod(key, 0o644)
    with pytest.raises(ValueError, match=r"can be read by others \(mode 644\)"):
        tls.check_given(str(cert), str(key))


def test_origins_of_a_room():
    local = options.origins(_args(), ["ada"])
    assert (local.scheme, local.host, local.per_user) == ("https", "localhost", True)
    assert local.url() == "https://localhost:8000/"
    assert local.learner("ada") == "https://ada.localhost:8000/user/ada/"
    assert local.service("dashboard") == \
        "https://dashboard--service.localhost:8000/services/dashboard/"
    room = options.origins(_args(ip="0.0.0.0", host="Hub.Example.org.", port=443), ["ada"])
    assert room.url("ada") == "https://ada.hub.example.org/"
    one = options.origins(_args(ip="10.0.0.5", one_origin=True, plain_http=True), ["x_y"])
    assert one.learner("x_y") == "http://10.0.0.5:8000/user/x_y/" and one.subdomains(["a"]) == []


@pytest.mark.parametrize("kw,learners,match", [
    (dict(ip="0.0.0.0"), ["ada"], r"--host NAME .*--one-origin"),
    (dict(ip="0.0.0.0", host="10.0.0.5"), ["ada"], r"an address has no subdomains"),
    (dict(host="bad host"), ["ada"], r"--host 'bad host'"),
    (dict(), ["ada", "x_y", "end-", "two--dash"], r"host-name labels.*x_y, end-, two--dash"),
    (dict(subdomain_host="https://h"), ["ada"], r"now the default.*--host NAME"),
    (dict(plain_http=True, ssl_cert="c"), ["ada"], r"choose one"),
])
def test_origins_refused_say_what_to_give(kw, learners, match):
    with pytest.raises(ValueError, match=match):
        options.origins(_args(**kw), learners)


def test_plain_http_says_why_not():
    r = subprocess.run([sys.executable, str(HUB / "run.py"), "--help"], capture_output=True,
                       text=True, timeout=60)
    text = " ".join(r.stdout.split())
    assert r.returncode == 0 and "--plain-http" in text
    assert "readable (and changeable) by anyone on it" in text
    assert "self-signed by default" in text
