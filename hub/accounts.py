"""The room's accounts: passwords the instructor hands out, the Unix accounts the hub created.

Shared by hub/run.py (which writes the passwords before the hub starts, and removes accounts after
the workshop) and hub/jupyterhub_config.py (whose authenticator checks a login against the hashes
and records each account it creates). Standard library only: run.py runs from the project's Python,
the hub from the learner environment.

In the hub's state folder (mode 0700, root's):

* ``passwords.json``: ``{name: "scrypt$<salt hex>$<hash hex>"}``, what the hub checks a login
  against;
* ``password-sheet.txt``: the learners' names and passwords in plain text, the sheet the instructor
  prints and hands out (mode 0600; the hub does not need it, and it may be deleted once handed out);
* ``created-accounts.json``: ``{name: {"uid": ..., "home": ...}}``, every Unix account the hub
  created, and so the only accounts ``--remove-accounts`` deletes;
* ``known-names.json``: every name that has been in a room of this state, so that a name dropped
  from the room is known as a former one (the hub blocks it: its sessions and admin rights end);
* ``room.json``: this start's learners and instructor (what ``progress --room <state>`` runs).

The hashes follow the room: a name dropped from it loses its password (added back later, it gets a
new one), and the instructor's is the current instructor's alone.

Nobody chooses a password at the door: a name without a hash cannot log in, so nobody can claim an
account by being the first to type its name.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import pwd
import re
import secrets
import signal
import subprocess
import time
from pathlib import Path

PASSWORDS = "passwords.json"
SHEET = "password-sheet.txt"
CREATED = "created-accounts.json"
KNOWN = "known-names.json"
#: a name the room can use: a portable Unix user name in lower case, which is what JupyterHub makes
#: of every login name (two names differing only in case would be one account)
NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
#: what the sheet shows for a password handed out at an earlier start (only its hash is kept)
KEPT = "(as handed out before; --reset-password NAME gives a new one)"
#: letters and digits nobody misreads on a printed sheet (no 0/o, 1/l/i)
ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"
MIN_PASSWORD = 8
#: useradd, not Debian's adduser: the home is private from the start (mode 0700)
USERADD = ["useradd", "--create-home", "--shell", "/bin/bash", "-K", "HOME_MODE=0700"]
_SCRYPT = {"n": 2 ** 14, "r": 8, "p": 1}


def generate_password(groups: int = 3, size: int = 4) -> str:
    """``k7mp-2xqr-9dzf``: 12 characters of 31 (59 bits), easy to copy from paper."""
    return "-".join("".join(secrets.choice(ALPHABET) for _ in range(size)) for _ in range(groups))


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, **_SCRYPT)
    return f"scrypt${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str | None) -> bool:
    if not stored or not isinstance(password, str):
        return False
    try:
        kind, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        got = hashlib.scrypt(password.encode(), salt=bytes.fromhex(salt), **_SCRYPT)
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got.hex(), digest)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return data


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (mode 0600) by a rename, so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def load_hashes(state) -> dict:
    return _read_json(Path(state) / PASSWORDS)


def check_login(state, name: str, password: str) -> bool:
    """True when ``password`` is ``name``'s (hashes read afresh: run.py may have changed them)."""
    return verify_password(password, load_hashes(state).get(name))


def check_names(learners, instructor: str) -> None:
    """A ValueError naming every name the room cannot use: not a lower-case Unix user name
    (:data:`NAME`), given twice, or the instructor's among the learners'."""
    bad = [n for n in [*learners, instructor] if not isinstance(n, str) or not NAME.fullmatch(n)]
    if bad:
        raise ValueError(f"names must be lower-case Unix user names (a letter or _, then letters, "
                         f"digits, _ or -, at most 32): {', '.join(map(repr, bad))}")
    twice = sorted({n for n in learners if list(learners).count(n) > 1})
    if twice:
        raise ValueError(f"names given twice: {', '.join(twice)}")
    if instructor in learners:
        raise ValueError(f"the instructor {instructor!r} is also in the list of learners")


def check_request(learners, instructor: str, instructor_password: str | None = None,
                  reset=()) -> None:
    """A ValueError saying what is wrong with a room (:func:`check_names`), the instructor's new
    password or the names to give new passwords; checked before anything is written."""
    check_names(learners, instructor)
    unknown = sorted(set(reset) - set(learners))
    if unknown:
        raise ValueError(f"--reset-password names someone not in the room: {', '.join(unknown)}")
    if instructor_password is not None and len(instructor_password) < MIN_PASSWORD:
        raise ValueError(f"the instructor's password must have at least {MIN_PASSWORD} characters")


def prepare_passwords(state, learners, instructor: str, instructor_password: str | None = None,
                      reset=()):
    """Give every learner without a password a generated one (and each of ``reset`` a new one), and
    the instructor theirs; the password of a name no longer in the room is dropped.

    ``instructor_password``: set it (at least :data:`MIN_PASSWORD` characters); None keeps the one
    the state holds for this instructor, or generates one where there is none. Returns ``(sheet,
    new_instructor_password)``: the learners' sheet as text (also written to ``password-sheet.txt``,
    mode 0600; a password handed out at an earlier start whose sheet is gone reads :data:`KEPT`)
    and the instructor's password where it was generated now (to print once), else None.
    """
    state = Path(state)
    check_request(learners, instructor, instructor_password, reset)
    room = {*learners, instructor}
    hashes = {n: h for n, h in load_hashes(state).items() if n in room}
    record_known(state, room)
    sheet_path = state / SHEET
    plain = {n: p for n, p in _read_sheet(sheet_path).items() if n in hashes and p != KEPT}
    for name in learners:
        if name not in hashes or name in reset:
            plain[name] = generate_password()
            hashes[name] = hash_password(plain[name])
        plain.setdefault(name, KEPT)
    generated = None
    if instructor_password is not None:
        hashes[instructor] = hash_password(instructor_password)
    elif instructor not in hashes:
        generated = generate_password(groups=4)
        hashes[instructor] = hash_password(generated)
    _write_private(state / PASSWORDS, json.dumps(hashes, indent=1) + "\n")
    sheet = render_sheet({n: plain[n] for n in learners})
    _write_private(sheet_path, sheet)
    return sheet, generated


def render_sheet(passwords: dict) -> str:
    width = max([8] + [len(n) for n in passwords])
    lines = ["rmsnorm-lessons workshop: your account (cut along the lines, one strip per learner)",
             ""]
    for name, password in passwords.items():
        lines += ["-" * (width + 30), f"name: {name:<{width}}  password: {password}"]
    return "\n".join(lines + ["-" * (width + 30), ""])


def _read_sheet(path: Path) -> dict:
    """``{name: password}`` from a sheet :func:`render_sheet` wrote ({} where there is none)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    found = {}
    for line in text.splitlines():
        if line.startswith("name: ") and "  password: " in line:
            name, password = line[len("name: "):].split("  password: ", 1)
            found[name.strip()] = password.strip()
    return found


def read_sheet(state) -> dict:
    return _read_sheet(Path(state) / SHEET)


def record_known(state, names) -> None:
    """Add ``names`` to the names this state has had in a room (:data:`KNOWN`)."""
    known = set(_read_json(Path(state) / KNOWN).get("names", []))
    if not set(names) <= known:
        _write_private(Path(state) / KNOWN,
                       json.dumps({"names": sorted(known | set(names))}, indent=1) + "\n")


REMOVED = "removed-names.json"
#: the room as this start has it, for ``rmsnorm_lessons progress --room <state>`` (its learners;
#: the instructor is not one)
ROOM = "room.json"


def record_room(state, learners, instructor: str) -> None:
    _write_private(Path(state) / ROOM, json.dumps({"learners": list(learners),
                                                   "instructor": instructor}, indent=1) + "\n")


def removed_names(state) -> list[str]:
    """Names whose account was removed: the hub deletes its own record of them (tokens, cookies)
    at its next start, so a name given to someone new later starts from nothing."""
    return sorted(_read_json(Path(state) / REMOVED).get("names", []))


def keep_removed(state, names) -> None:
    """The record :func:`removed_names` reads holds exactly ``names`` (none: no file)."""
    path = Path(state) / REMOVED
    if names:
        _write_private(path, json.dumps({"names": sorted(set(names))}, indent=1) + "\n")
    elif path.exists():
        path.unlink()


def record_removed(state, names) -> None:
    keep_removed(state, set(removed_names(state)) | set(names))


def hub_created(state, name: str) -> bool:
    """Whether the account ``name`` exists and is one this hub created (recorded with its uid):
    the only accounts the hub chmods, seeds, stops the processes of or removes."""
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return False
    return created_accounts(state).get(name, {}).get("uid") == uid


def check_owned(state, names) -> None:
    """A ValueError naming every account that exists but that this hub did not create (with the
    same uid): the hub chmods, seeds and stops the processes of its accounts, which it must never
    do to a system account or to someone's own login."""
    foreign = [f"{name} (uid {pwd.getpwnam(name).pw_uid})" for name in names
               if user_exists(name) and not hub_created(state, name)]
    if foreign:
        raise ValueError("these accounts exist and were not created by this hub (per "
                         f"{Path(state) / CREATED}): {', '.join(foreign)}; the hub makes and owns "
                         "its accounts, so choose other names")


def former_names(state, room) -> list[str]:
    """The names that were in a room of this state and are not in ``room`` now."""
    return sorted(set(_read_json(Path(state) / KNOWN).get("names", [])) - set(room))


def user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def created_accounts(state) -> dict:
    return _read_json(Path(state) / CREATED)


def create_account(state, name: str) -> None:
    """``useradd`` the account (home 0700) and record it as the hub's. An existing account is
    refused: it is not the hub's to create, nor ever to remove."""
    if user_exists(name):
        raise ValueError(f"the account {name} exists already: the hub creates only missing "
                         "accounts")
    r = subprocess.run(USERADD + [name], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"useradd {name} failed ({r.returncode}): {r.stderr.strip()}")
    record_created(state, name)


def record_created(state, name: str) -> None:
    user = pwd.getpwnam(name)
    created = created_accounts(state)
    created[name] = {"uid": user.pw_uid, "home": user.pw_dir}
    _write_private(Path(state) / CREATED, json.dumps(created, indent=1) + "\n")


def _pids_of(uid: int) -> list[int]:
    """The live processes of ``uid`` (zombies are dead already: their parent reaps them)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):  # gone meanwhile
            continue
        if state not in (b"Z", b"X"):
            found.append(int(entry.name))
    return found


def end_processes(state, name: str, rounds: int = 10) -> int:
    """Stop, then kill, every process of the account ``name`` (a server's leftovers: a learner's
    ``setsid`` job outlives the server, keeps the GPU and blocks ``userdel``). Root signals each
    process itself: stopped first, all of them, so none can fork or stop the killer, then killed.
    Only an account this hub created (:func:`hub_created`, never root's); returns how many
    processes are left (0: none)."""
    if not user_exists(name):
        return 0
    if not hub_created(state, name):
        raise ValueError(f"refusing to end the processes of {name}: not an account this hub "
                         "created")
    uid = pwd.getpwnam(name).pw_uid
    for _ in range(rounds):
        pids = _pids_of(uid)
        if not pids:
            return 0
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        time.sleep(0.05)
    return len(_pids_of(uid))


def remove_accounts(state, names, log=print) -> list[str]:
    """Delete (``userdel --remove``) each of ``names`` that the hub created, as recorded in the
    state with the same uid; return the names refused (an account the hub did not create: its home
    may be someone's). Names without an account are skipped."""
    state = Path(state)
    created = created_accounts(state)
    refused = []
    for name in names:
        if not user_exists(name):
            created.pop(name, None)
            continue
        record = created.get(name)
        uid = pwd.getpwnam(name).pw_uid
        if record is None or record.get("uid") != uid:
            why = ("not created by this hub" if record is None
                   else f"uid {uid}, the hub created uid {record['uid']}")
            log(f"hub: refusing to remove the account {name} ({why}, per {state / CREATED})")
            refused.append(name)
            continue
        left = end_processes(state, name)  # userdel refuses an account with processes
        if left:
            log(f"hub: {left} process(es) of {name} would not end")
        r = subprocess.run(["userdel", "--remove", name], capture_output=True, text=True)
        if r.returncode not in (0, 12):  # 12: the home could not be removed (already gone)
            log(f"hub: userdel {name} failed ({r.returncode}): {r.stderr.strip()}")
            refused.append(name)
            continue
        created.pop(name)
        record_removed(state, [name])
        log(f"hub: removed the account {name} and its home")
    if state.is_dir():
        _write_private(state / CREATED, json.dumps(created, indent=1) + "\n")
        # a removed account's password goes with it
        gone = set(names) - set(refused)
        hashes = load_hashes(state)
        if gone & set(hashes):
            _write_private(state / PASSWORDS, json.dumps(
                {n: h for n, h in hashes.items() if n not in gone}, indent=1) + "\n")
        sheet = {n: p for n, p in read_sheet(state).items() if n not in gone}
        if (state / SHEET).exists():
            _write_private(state / SHEET, render_sheet(sheet))
    return refused
