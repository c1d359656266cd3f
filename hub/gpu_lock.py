"""The room's GPU turn: one timing at a time on the shared GPU, in the order asked (a hub service).

Thirty learners timing at once measure each other. So every timing in the course (the timing loop
and the tuning check: :mod:`rmsnorm_lessons` takes its turn where ``RMSNORM_LESSONS_GPU_LOCK``
names this service's socket, which the hub sets for every learner's server) first asks here for
the GPU, waits its turn in a queue (told who is ahead), times, and gives the turn back. A turn
that another learner was not waiting for costs nothing; one that was, waits a few seconds.

The protocol, one JSON object per line over a Unix socket (``gpu.sock`` in this service's folder,
which everyone can reach: the learners' processes connect to it):

* the client sends ``{"what": "timing"}`` (a few words for the queue's line);
* while it waits: ``{"ahead": [{"name": "ada", "what": "tuning check", "for_s": 12}], ...}``
  each time the queue ahead of it changes;
* its turn: ``{"granted": LEASE, "max_s": 120}``; it holds the GPU until it sends
  ``{"release": true}`` (answered with ``{"released": LEASE, "intact": true, "held_s": ...}``)
  or closes the socket (a kernel that died gives its turn back);
* a turn held longer than ``max_s`` is taken back: ``{"expired": LEASE}``, the next one goes, and
  that lease is not counted as a quiet GPU;
* ``{"status": true}`` instead of ``what``: the queue, then the socket closes (the dashboard).

Who asks is the kernel's word (the socket's peer credentials), never the client's. Each turn
given back in time is appended to ``grants.jsonl`` (lease, uid, name, start and end): the
dashboard ranks a tuning score only when its lease is there, for that learner, ended in time.
An account may hold at most :data:`PER_UID` places in the queue (a flood of connections from one
learner cannot push the room back).

Runs as ``nobody`` (hub/jupyterhub_config.py): it needs its folder and nothing else.
Standard library only.
"""
from __future__ import annotations

import asyncio
import json
import os
import pwd
import secrets
import socket
import stat
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SOCKET, GRANTS = "gpu.sock", "grants.jsonl"
#: the record of turns is cut back to its last half past this size (a learner taking turns in a
#: loop cannot fill the disk; some 20,000 turns are kept)
GRANTS_MAX = 8 << 20
MAX_HOLD_S = 120.0
PER_UID = 2
LINE_MAX = 1024
HELLO_S = 10.0


def peer_uid(writer) -> int:
    sock = writer.get_extra_info("socket")
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def account(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


def _words(text, limit: int = 40) -> str:
    """A short, printable label from what a client sent (shown to the room in the queue)."""
    text = "".join(c for c in str(text) if c.isprintable())
    return text[:limit] or "timing"


@dataclass(eq=False)
class Turn:
    uid: int
    name: str
    what: str
    writer: asyncio.StreamWriter
    lease: str = field(default_factory=lambda: secrets.token_hex(8))
    asked: float = field(default_factory=time.time)
    granted: float | None = None
    go: asyncio.Event = field(default_factory=asyncio.Event)


class Room:
    def __init__(self, folder, max_hold_s: float = MAX_HOLD_S, per_uid: int = PER_UID):
        self.folder = Path(folder)
        self.max_hold_s = max_hold_s
        self.per_uid = per_uid
        self.queue: list[Turn] = []
        self.connections: dict[int, int] = {}

    def snapshot(self, upto: Turn | None = None) -> list[dict]:
        now = time.time()
        out = []
        for t in self.queue:
            if t is upto:
                break
            since = t.granted if t.granted is not None else t.asked
            out.append({"name": t.name, "what": t.what, "holds": t.granted is not None,
                        "for_s": round(now - since)})
        return out

    async def _send(self, turn: Turn, message: dict) -> None:
        try:
            turn.writer.write((json.dumps(message) + "\n").encode())
            await turn.writer.drain()
        except (ConnectionError, RuntimeError):
            pass

    async def _moved(self) -> None:
        """The queue changed: the head gets the GPU, everyone else hears who is ahead."""
        if self.queue and self.queue[0].granted is None:
            head = self.queue[0]
            head.granted = time.time()
            head.go.set()
            await self._send(head, {"granted": head.lease, "max_s": self.max_hold_s})
        for i, t in enumerate(self.queue[1:], 1):
            await self._send(t, {"ahead": self.snapshot(upto=t), "position": i})

    def _record(self, turn: Turn, how: str) -> None:
        entry = {"lease": turn.lease, "uid": turn.uid, "name": turn.name, "what": turn.what,
                 "start": turn.granted, "end": time.time(), "how": how}
        path = self.folder / GRANTS
        try:
            with open(path, "a") as f:
                f.write(json.dumps(entry) + "\n")
            if path.stat().st_size > GRANTS_MAX:
                with open(path, "rb") as f:
                    f.seek(-GRANTS_MAX // 2, os.SEEK_END)
                    kept = f.read().split(b"\n", 1)[-1]
                tmp = path.with_name(f".{GRANTS}.tmp")
                tmp.write_bytes(kept)
                os.replace(tmp, path)
        except OSError as exc:
            print(f"gpu-lock: could not record a turn: {exc}", file=sys.stderr, flush=True)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        uid = peer_uid(writer)
        self.connections[uid] = self.connections.get(uid, 0) + 1
        turn = None
        try:
            if self.connections[uid] > 2 * self.per_uid:
                return
            try:
                hello = json.loads(await asyncio.wait_for(reader.readline(), HELLO_S))
            except (asyncio.TimeoutError, ValueError, asyncio.LimitOverrunError):
                return
            if not isinstance(hello, dict):
                return
            if hello.get("status"):
                writer.write((json.dumps({"queue": self.snapshot()}) + "\n").encode())
                await writer.drain()
                return
            name = account(uid)
            if sum(t.uid == uid for t in self.queue) >= self.per_uid:
                writer.write((json.dumps({"refused": f"{name} has {self.per_uid} places in the "
                                          "queue already (another kernel of yours)"}) + "\n")
                             .encode())
                await writer.drain()
                return
            turn = Turn(uid, name, _words(hello.get("what", "")), writer)
            self.queue.append(turn)
            await self._moved()
            await self._hold(turn, reader)
        except (ConnectionError, ValueError, asyncio.LimitOverrunError):
            pass
        finally:
            if turn is not None and turn in self.queue:
                if turn.granted is not None:
                    self._record(turn, "closed")
                self.queue.remove(turn)
                await self._moved()
            self.connections[uid] -= 1
            writer.close()

    async def _hold(self, turn: Turn, reader) -> None:
        """Wait for the turn, then for its release (or its end: closed, or held too long). One
        read of the socket is pending at a time."""
        reading = asyncio.ensure_future(reader.readline())
        try:
            while True:
                if turn.granted is None:
                    go = asyncio.ensure_future(turn.go.wait())
                    await asyncio.wait({reading, go}, return_when=asyncio.FIRST_COMPLETED)
                    go.cancel()
                    if not reading.done():
                        continue
                else:
                    left = turn.granted + self.max_hold_s - time.time()
                    await asyncio.wait({reading}, timeout=max(left, 0))
                    if not reading.done():
                        self._record(turn, "expired")
                        self.queue.remove(turn)
                        await self._send(turn, {"expired": turn.lease})
                        await self._moved()
                        return
                data = reading.result()
                if not data:  # closed: the finally of serve gives the turn back
                    return
                reading = asyncio.ensure_future(reader.readline())
                message = json.loads(data)
                if isinstance(message, dict) and message.get("release") and turn.granted:
                    held = time.time() - turn.granted
                    self._record(turn, "released")
                    self.queue.remove(turn)
                    await self._send(turn, {"released": turn.lease, "intact": True,
                                            "held_s": round(held, 3)})
                    await self._moved()
                    return
        finally:
            reading.cancel()


def grants(folder) -> list[dict]:
    """The turns given back in time (``how`` released), as recorded (the dashboard's source)."""
    out = []
    try:  # the file itself, never through a link (the dashboard reading it is root)
        fd = os.open(Path(folder) / GRANTS, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return out
            text = f.read(GRANTS_MAX + 4096).decode(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            g = json.loads(line)
        except ValueError:
            continue
        if isinstance(g, dict) and g.get("how") == "released":
            out.append(g)
    return out


def status(folder, timeout: float = 2.0) -> list[dict] | None:
    """The queue now (None where the service does not answer)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(Path(folder) / SOCKET))
            s.sendall(b'{"status": true}\n')
            data = s.makefile().readline()
        return json.loads(data)["queue"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


async def _main(folder: Path, max_hold_s: float) -> None:
    room = Room(folder, max_hold_s)
    path = folder / SOCKET
    if path.is_socket():
        path.unlink()
    server = await asyncio.start_unix_server(room.serve, path=str(path), limit=LINE_MAX)
    os.chmod(path, 0o666)  # every learner's process may ask for a turn
    print(f"gpu-lock: serving {path} (a turn at most {max_hold_s:g} s)", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    folder = Path(os.environ.get("RMSNORM_HUB_GPU_LOCK_DIR", "."))
    max_hold = float(os.environ.get("RMSNORM_HUB_GPU_LOCK_MAX_S", MAX_HOLD_S))
    os.umask(0o022)
    asyncio.run(_main(folder, max_hold))


if __name__ == "__main__":
    main()
