"""``make room-test``: a room of learners on this machine, end to end (hub/room_test.py), here with
a few learners (``RMSNORM_ROOM_N``, default 6) so that CI's slow run stays short; the workshop's
own figure comes from ``sudo make room-test N=30`` (hub/README.md quotes it).

It must say ``room: N of N learners served``, exit 0, and leave no account, home, cgroup or
folder of the room behind. Skipped, with the reason, where the hub cannot run (as
tests/test_hub.py).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_hub import _proxy_reason

ROOT = Path(__file__).resolve().parent.parent
N = int(os.environ.get("RMSNORM_ROOM_N", "6"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="the room test must run as root: it creates local accounts"),
    pytest.mark.skipif(not (shutil.which("useradd") and shutil.which("userdel")),
                       reason="useradd/userdel missing"),
    pytest.mark.skipif(shutil.which("make") is None or shutil.which("openssl") is None,
                       reason="make or openssl is missing"),
    pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK),
                       reason="/usr/bin/python3 is missing: the learners need a Python every "
                              "user can run"),
    pytest.mark.skipif(_proxy_reason() is not None, reason=_proxy_reason() or ""),
]


def test_a_room_of_learners_is_served_and_nothing_is_left():
    r = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "room-test", f"N={N}",
                        f"HUB_PY={sys.executable}"],
                       capture_output=True, text=True, timeout=1800)
    out = r.stdout + r.stderr
    print("\n".join(ln for ln in out.splitlines() if ln.startswith("room:")))
    assert r.returncode == 0, out[-3000:]
    assert f"room: {N} of {N} learners served over TLS" in out
    assert re.search(r"room: the last learner ready \d+ s after the first login", out)
    tag = re.search(r"room: (room[0-9a-f]{4})\d+ at", out).group(1)
    left = [line.split(":")[0] for line in Path("/etc/passwd").read_text().splitlines()
            if line.startswith(tag)]
    assert not left and not list(Path("/home").glob(f"{tag}*")), left
    assert not list(Path("/tmp").glob(f"rmsnorm-room-{tag[4:]}-*"))
    port = re.search(r"https://NAME\.localhost:(\d+)/", out).group(1)
    groups = [g for depth in range(5)
              for g in Path("/sys/fs/cgroup").glob("*/" * depth + f"rmsnorm-hub-{port}")]
    assert not groups, groups
