"""A turn on a shared GPU: in a workshop room, one timing at a time.

Thirty learners timing at once on one GPU measure each other. Where :data:`ENV` names the room's
queue (the workshop hub sets it in every learner's server: hub/gpu_lock.py), every timing
(:func:`rmsnorm_lessons.speed.timing.time_interleaved`, and so every bench cell) and the tuning
check take the GPU in turn: they ask the queue, print who is ahead while they wait, time, and give
the turn back. A timing that got its turn is *alone*; one that could not (the queue did not answer,
refused a third place, or took the turn back because it was held too long) is still made, and
marked as measured while the GPU was *shared*. Outside a room (:data:`ENV` unset) nothing waits and
nothing is marked.

Turns nest: inside a held turn (the tuning check's), a timing takes no second one.
Standard library only.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

#: the room's queue: a Unix socket's path (unset: no room, no turns)
ENV = "RMSNORM_LESSONS_GPU_LOCK"
CONNECT_S = 5.0
#: while waiting, the same queue is said again at most this often
SAY_EVERY_S = 10.0


@dataclass
class Turn:
    """What a timing got: ``lease`` (the queue's id of the turn; None: no turn), ``shared`` (True:
    measured while the GPU may have been shared), ``waited_s``."""
    what: str
    lease: str | None = None
    shared: bool = False
    waited_s: float = 0.0

    @property
    def room(self) -> bool:
        """Whether a room's queue was asked (outside a room a timing is neither alone nor
        shared)."""
        return self.lease is not None or self.shared

    @property
    def alone(self) -> bool:
        return self.lease is not None and not self.shared

    def mark(self) -> str:
        """``"alone"``, ``"shared"`` or ``""`` (no room): how a timing was measured."""
        return "alone" if self.alone else ("shared" if self.shared else "")


_local = threading.local()


def in_room() -> bool:
    """Whether a room's queue is named here (:data:`ENV`)."""
    return bool(os.environ.get(ENV, "").strip())


def held() -> Turn | None:
    """The turn this thread holds now, if any."""
    return getattr(_local, "turn", None)


def _ahead_line(ahead: list) -> str:
    parts = []
    for a in ahead:
        name, what = str(a.get("name", "?"))[:32], str(a.get("what", ""))[:40]
        state = f"holding it {a.get('for_s', 0)} s" if a.get("holds") else "waiting"
        parts.append(f"{name} ({what}, {state})")
    return ", ".join(parts)


def _wait(sock, lines, turn: Turn, log) -> None:
    """Read the queue until the turn comes (or is refused); say who is ahead while waiting."""
    start, said, last = time.monotonic(), None, 0.0
    while True:
        line = lines.readline()
        if not line:
            print(f"GPU turn: the room's queue closed the connection: timing anyway, marked as "
                  f"measured while the GPU was shared", file=log, flush=True)
            turn.shared = True
            return
        message = json.loads(line)
        if "granted" in message:
            turn.lease = str(message["granted"])
            turn.waited_s = time.monotonic() - start
            if said is not None:
                print(f"GPU turn: yours after {turn.waited_s:.0f} s ({turn.what})", file=log,
                      flush=True)
            return
        if "refused" in message:
            print(f"GPU turn: refused ({message['refused']}): timing anyway, marked as measured "
                  "while the GPU was shared", file=log, flush=True)
            turn.shared = True
            return
        if "ahead" in message:
            names = [a.get("name") for a in message["ahead"]]
            if names != said or time.monotonic() - last > SAY_EVERY_S:
                print(f"GPU turn: {len(names)} ahead of you for the room's GPU: "
                      f"{_ahead_line(message['ahead'])}", file=log, flush=True)
                said, last = names, time.monotonic()


def _give_back(sock, lines, turn: Turn, log) -> None:
    try:
        sock.sendall(b'{"release": true}\n')
        reply = json.loads(lines.readline() or "{}")
    except (OSError, ValueError):
        reply = {}
    if not reply.get("intact"):
        turn.shared = True
        print("GPU turn: the room took the turn back before this timing ended (held past its "
              "limit): it is marked as measured while the GPU was shared", file=log, flush=True)


@contextmanager
def turn(what: str = "timing", log=None):
    """Hold the room's GPU for the block; yields the :class:`Turn` (re-entrant: inside a held
    turn, that one). Waits as long as the queue says (Ctrl+C or the kernel's interrupt stops the
    wait); a queue that cannot be reached leaves the timing to run, marked shared."""
    log = log or sys.stdout
    mine = held()
    if mine is not None:
        yield mine
        return
    current = Turn(what)
    path = os.environ.get(ENV, "").strip()
    if not path:
        yield current
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lines = None
    try:
        try:
            sock.settimeout(CONNECT_S)
            sock.connect(path)
            sock.sendall((json.dumps({"what": what}) + "\n").encode())
            sock.settimeout(None)  # the queue may be long: waiting is the point
            lines = sock.makefile("r", encoding="utf-8")
            _wait(sock, lines, current, log)
        except (OSError, ValueError) as exc:
            print(f"GPU turn: the room's queue at {path} does not answer ({exc}): timing anyway, "
                  "marked as measured while the GPU was shared", file=log, flush=True)
            current.shared = True
        _local.turn = current
        try:
            yield current
        finally:
            _local.turn = None
            if current.lease is not None and lines is not None:
                _give_back(sock, lines, current, log)
    finally:
        if lines is not None:
            lines.close()
        sock.close()
