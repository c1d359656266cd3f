"""Whose notebooks ``progress`` runs, and as whom: the notebooks and folders named on its command
line, or a room (``--room``): the workshop hub's state folder (the room's learners, as the hub
wrote them in :data:`ROOM`; the instructor is not one of them), or a folder of homes (each
``DIR/NAME`` holding lesson notebooks, in ``DIR/NAME/rmsnorm-lessons`` or in ``DIR/NAME``).

A learner's notebooks run as the owner of their folder, never as root for someone else's
(:func:`_run_as`).
"""
from __future__ import annotations

import json
import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from ..course import registry

#: the folder of a learner's home the hub copies the student edition into (hub/jupyterhub_config.py)
ROOM_FOLDER = "rmsnorm-lessons"
#: in the hub's state folder: the room's learners and instructor (hub/run.py writes it)
ROOM = "room.json"


@dataclass
class Learner:
    name: str
    folder: Path
    notebooks: list[Path]
    uid: int | None = None  # run as this account; None: as whoever runs progress
    gid: int | None = None
    refused: str | None = None  # why this learner's notebooks are not run


def lesson_notebooks(folder: Path) -> list[Path]:
    """The registry's lesson notebooks present in ``folder``, in course order."""
    return [folder / lesson.notebook for lesson in registry.LESSONS
            if (folder / lesson.notebook).is_file()]


def _account(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


def _run_as(learner: Learner, owner: int, room: bool) -> None:
    """Who runs ``learner``'s notebooks: the owner of their folder. Root runs them for nobody: in a
    room a root-owned learner is refused; outside one, root's own notebooks run as root."""
    me = os.geteuid()
    if room and owner == 0:
        learner.refused = (f"{learner.folder} is owned by root: progress runs a learner's "
                           f"notebooks as the owner of their folder, never as root")
    elif owner == me:
        learner.uid = None
    elif me != 0:
        learner.refused = (f"{learner.folder} is owned by {_account(owner)} (uid {owner}): only "
                           f"root can run notebooks as another user")
    else:
        try:
            learner.uid, learner.gid = owner, pwd.getpwuid(owner).pw_gid
        except KeyError:
            learner.refused = (f"{learner.folder} is owned by uid {owner}, which has no account "
                               f"here to run its notebooks as")


def from_paths(paths) -> list[Learner]:
    """Learners of notebooks and folders named on the command line (a folder: its lesson notebooks),
    one per owner of the notebooks' folders. ValueError for a path that is missing or no notebook.
    A root-owned folder counts as its notebook's owner's: root runs no other user's notebook."""
    by_owner: dict[int, Learner] = {}
    for p in map(Path, paths):
        if p.is_dir():
            found = lesson_notebooks(p)
            if not found:
                first, last = registry.LESSONS[0].notebook, registry.LESSONS[-1].notebook
                raise ValueError(f"{p}: a folder without lesson notebooks (looked for {first} ... "
                                 f"{last})")
        elif p.is_file():
            if p.suffix != ".ipynb":
                raise ValueError(f"{p}: not a notebook (.ipynb)")
            found = [p]
        else:
            raise ValueError(f"{p}: no such notebook or folder")
        for nb in found:
            folder = nb.resolve().parent
            owner = folder.stat().st_uid or nb.lstat().st_uid  # a link: its maker's
            learner = by_owner.get(owner)
            if learner is None:
                learner = by_owner[owner] = Learner(_account(owner), folder, [])
                _run_as(learner, owner, room=False)
            if nb not in learner.notebooks:
                learner.notebooks.append(nb)
    return list(by_owner.values())


def from_hub(state) -> list[Learner]:
    """The learners of the hub whose state folder is ``state`` (its :data:`ROOM`), each with the
    lesson notebooks in their home's ``rmsnorm-lessons``, run as the owner of the home: exactly
    the room's learners, never the instructor, never another home."""
    try:
        room = json.loads((Path(state) / ROOM).read_text())
        names = [str(n) for n in room["learners"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--room {state}: the hub's {ROOM} there cannot be read ({exc})") \
            from None
    learners = []
    for name in names:
        try:
            home = Path(pwd.getpwnam(name).pw_dir)
        except KeyError:
            learner = Learner(name, Path("/nonexistent"), [], refused="no such account here")
            learners.append(learner)
            continue
        learner = Learner(name, home, lesson_notebooks(home / ROOM_FOLDER))
        _run_as(learner, home.stat().st_uid, room=True)
        if not learner.notebooks and not learner.refused:
            learner.refused = f"no lesson notebooks in {home / ROOM_FOLDER} (not logged in yet?)"
        learners.append(learner)
    return learners


def from_room(room) -> list[Learner]:
    """The hub's learners where ``room`` is its state folder (:func:`from_hub`); else one learner
    per subfolder of ``room`` holding lesson notebooks (in ``SUB/rmsnorm-lessons``, else in
    ``SUB``), run as the owner of ``SUB``."""
    room = Path(room)
    if not room.is_dir():
        raise ValueError(f"--room {room}: not a folder")
    if (room / ROOM).is_file():
        return from_hub(room)
    learners = []
    for sub in sorted(p for p in room.iterdir() if not p.name.startswith(".")):
        if sub.is_symlink() or not sub.is_dir():
            continue
        try:
            found = lesson_notebooks(sub / ROOM_FOLDER) or lesson_notebooks(sub)
        except PermissionError:
            found = []
        if not found:
            continue
        learner = Learner(sub.name, sub, found)
        _run_as(learner, sub.stat().st_uid, room=True)
        learners.append(learner)
    if not learners:
        raise ValueError(f"--room {room}: no subfolder holds lesson notebooks (looked in each "
                         f"{room}/NAME/{ROOM_FOLDER} and {room}/NAME)")
    return learners
