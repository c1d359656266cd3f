"""The room's GPU turn (hub/gpu_lock.py), served in this process on a socket in a temporary folder:
one holder at a time in the order asked, the queue told who is ahead, a turn given back by a
release or by a closed socket, a turn held too long taken back and not recorded as quiet, and one
account's flood of requests refused."""
from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest

from test_hub_tls import _load

gpu_lock = _load("gpu_lock")


def _serve(folder, per_uid: int):
    """The service on a loop of its own thread; returns a function that stops it."""
    loop = asyncio.new_event_loop()
    room = gpu_lock.Room(folder, max_hold_s=1.5, per_uid=per_uid)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(asyncio.start_unix_server(
        room.serve, path=str(folder / gpu_lock.SOCKET), limit=gpu_lock.LINE_MAX), loop).result(10)

    async def close():
        server.close()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()

    def stop():
        asyncio.run_coroutine_threadsafe(close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    return stop


@pytest.fixture
def service(tmp_path):
    """Every client here is this test's uid: a room where one account may queue 10 times."""
    stop = _serve(tmp_path, per_uid=10)
    yield tmp_path
    stop()


@pytest.fixture
def strict(tmp_path):
    stop = _serve(tmp_path, per_uid=gpu_lock.PER_UID)
    yield tmp_path
    stop()


def _until(predicate, timeout: float = 5):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "not within 5 s"
        time.sleep(0.05)


class Client:
    def __init__(self, folder, what="timing"):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(str(folder / gpu_lock.SOCKET))
        self.lines = self.sock.makefile()
        self.send({"what": what})

    def send(self, message):
        self.sock.sendall((json.dumps(message) + "\n").encode())

    def read(self):
        line = self.lines.readline()
        return json.loads(line) if line else None

    def until(self, key):
        """The next message with ``key``, past the queue's updates (each change sends one)."""
        while True:
            message = self.read()
            if message is None or key in message:
                return message

    def close(self):
        self.lines.close()  # the socket's file holds it open too
        self.sock.close()


def test_one_turn_at_a_time_in_order_and_the_queue_says_who_is_ahead(service):
    first = Client(service, "tuning check")
    lease = first.read()["granted"]
    second = Client(service, "bench")
    ahead = second.read()
    assert ahead["position"] == 1 and [(a["what"], a["holds"]) for a in ahead["ahead"]] == \
        [("tuning check", True)]
    third = Client(service, "x" * 500 + "\x1b[2J")  # a label is short and printable
    assert [a["what"] for a in third.read()["ahead"]] == ["tuning check", "bench"]
    queue = gpu_lock.status(service)
    assert [q["what"] for q in queue] == ["tuning check", "bench", "x" * 40]
    first.send({"release": True})
    released = first.read()
    assert released["released"] == lease and released["intact"]
    assert "granted" in second.until("granted")
    assert [a["what"] for a in third.until("ahead")["ahead"]] == ["bench"]  # moved up
    second.close()  # a kernel that dies gives its turn back
    assert "granted" in third.until("granted")
    third.send({"release": True})
    assert third.read()["intact"]
    recorded = gpu_lock.grants(service)
    assert [g["lease"] for g in recorded][0] == lease and len(recorded) == 2  # closed: not counted
    assert all(g["end"] >= g["start"] for g in recorded)


def test_a_turn_held_too_long_is_taken_back_and_not_counted(service):
    slow = Client(service)
    lease = slow.read()["granted"]
    waiting = Client(service)
    waiting.read()
    t0 = time.monotonic()
    assert slow.read() == {"expired": lease}
    assert 1.0 < time.monotonic() - t0 < 5
    assert "granted" in waiting.until("granted")
    waiting.close()
    assert all(g["lease"] != lease for g in gpu_lock.grants(service))
    assert any(json.loads(line)["how"] == "expired"
               for line in (service / gpu_lock.GRANTS).read_text().splitlines())


def test_one_account_cannot_flood_the_queue(strict):
    mine = [Client(strict) for _ in range(gpu_lock.PER_UID)]
    assert "granted" in mine[0].read()
    extra = Client(strict)
    assert "another kernel of yours" in extra.read()["refused"]
    assert len(gpu_lock.status(strict)) == gpu_lock.PER_UID
    for c in mine:
        c.close()
    _until(lambda: gpu_lock.status(strict) == [])
    assert "granted" in Client(strict).read()  # its places are free again


def test_garbage_is_dropped_without_harm(service):
    bad = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bad.connect(str(service / gpu_lock.SOCKET))
    bad.sendall(b"[" * 5000 + b"\n")  # past the line limit
    bad.settimeout(5)
    assert bad.recv(100) == b""  # closed, nothing queued
    assert gpu_lock.status(service) == []
    ok = Client(service)
    assert "granted" in ok.read()


def test_the_record_of_turns_stays_bounded_and_is_read_as_itself(service, monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_lock, "GRANTS_MAX", 4096)
    for _ in range(60):  # a learner taking turns in a loop
        c = Client(service)
        c.read()
        c.send({"release": True})
        c.read()
        c.close()
    size = (service / gpu_lock.GRANTS).stat().st_size
    assert size <= 4096 and len(gpu_lock.grants(service)) >= 10
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret").write_text('{"how": "released", "lease": "root-only"}\n')
    (elsewhere / gpu_lock.GRANTS).symlink_to(elsewhere / "secret")
    assert gpu_lock.grants(elsewhere) == []  # a link is not followed
