"""The hub's accounts (hub/accounts.py, hub/run.py --remove-accounts): passwords nobody can claim at
the door, and removal of the accounts the hub created only. The account tests create real Linux
accounts (root only), named ``hubt<hex>...``, and remove them."""
from __future__ import annotations

import importlib.util
import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HUB = ROOT / "hub"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"hub_{name}", HUB / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


accounts = _load("accounts")
root_only = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("useradd"),
    reason="creating accounts needs root and useradd")


def test_generated_passwords_log_in_and_nothing_else_does(tmp_path):
    sheet, generated = accounts.prepare_passwords(tmp_path, ["ada", "grace"], "teach")
    given = accounts.read_sheet(tmp_path)
    assert set(given) == {"ada", "grace"} and given["ada"] != given["grace"]
    assert given["ada"] in sheet and given["grace"] in sheet and generated not in sheet
    assert stat.S_IMODE((tmp_path / accounts.SHEET).stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / accounts.PASSWORDS).stat().st_mode) == 0o600
    assert given["ada"] not in (tmp_path / accounts.PASSWORDS).read_text()  # hashes only
    assert accounts.check_login(tmp_path, "ada", given["ada"])
    assert accounts.check_login(tmp_path, "teach", generated)
    for name, guess in [("ada", given["grace"]), ("teach", "teach"), ("teach", "password"),
                        ("teach", ""), ("teach", given["ada"]), ("nobody", given["ada"]), ("", ""),
                        ("ada", None)]:
        assert not accounts.check_login(tmp_path, name, guess), (name, guess)


def test_a_second_start_keeps_the_passwords_and_adds_new_learners(tmp_path):
    _, generated = accounts.prepare_passwords(tmp_path, ["ada"], "teach")
    first = accounts.read_sheet(tmp_path)
    _, again = accounts.prepare_passwords(tmp_path, ["ada", "linus"], "teach")
    assert again is None  # the instructor's is shown once, when it is made
    second = accounts.read_sheet(tmp_path)
    assert second["ada"] == first["ada"] and "linus" in second
    assert accounts.check_login(tmp_path, "teach", generated)
    accounts.prepare_passwords(tmp_path, ["ada"], "teach", instructor_password="a-new-secret")
    assert accounts.check_login(tmp_path, "teach", "a-new-secret")
    assert not accounts.check_login(tmp_path, "teach", generated)


def test_bad_instructor_settings_are_refused(tmp_path):
    with pytest.raises(ValueError, match="at least 8"):
        accounts.prepare_passwords(tmp_path, ["ada"], "teach", instructor_password="short")
    with pytest.raises(ValueError, match="also in the list"):
        accounts.prepare_passwords(tmp_path, ["ada", "teach"], "teach")


def test_password_hashes():
    stored = accounts.hash_password("k7mp-2xqr-9dzf")
    assert accounts.verify_password("k7mp-2xqr-9dzf", stored)
    assert not accounts.verify_password("k7mp-2xqr-9dzF", stored)
    assert not accounts.verify_password("x", "md5$00$00")
    assert not accounts.verify_password("x", "garbage")
    pw = accounts.generate_password()
    assert len(pw) == 14 and set(pw) <= set(accounts.ALPHABET + "-")


def _exists(name: str) -> bool:
    return subprocess.run(["id", name], capture_output=True).returncode == 0


@root_only
def test_removal_touches_only_the_accounts_the_hub_created(tmp_path):
    tag = secrets.token_hex(3)
    theirs, ours, instructor = f"hubt{tag}p", f"hubt{tag}c", f"hubt{tag}i"
    state = tmp_path / "state"
    state.mkdir()
    try:
        subprocess.run(["useradd", "--create-home", theirs], check=True)
        home = Path(f"/home/{theirs}")
        (home / "work.txt").write_text("someone's work")
        accounts.create_account(state, ours)
        assert _exists(ours) and stat.S_IMODE(Path(f"/home/{ours}").stat().st_mode) == 0o700
        assert set(accounts.created_accounts(state)) == {ours}
        with pytest.raises(ValueError, match="exists already"):
            accounts.create_account(state, theirs)
        # the command line an instructor types, with the pre-existing account in the room
        r = subprocess.run([sys.executable, str(HUB / "run.py"), "--state", str(state),
                            "--learners", f"{theirs},{ours}", "--instructor", instructor,
                            "--remove-accounts"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, r
        assert f"refusing to remove the account {theirs}" in r.stdout, r.stdout
        assert f"removed the account {ours}" in r.stdout, r.stdout
        assert not _exists(ours) and not Path(f"/home/{ours}").exists()
        assert _exists(theirs) and (home / "work.txt").read_text() == "someone's work"
        assert accounts.created_accounts(state) == {}
    finally:
        for name in (theirs, ours, instructor):
            if _exists(name):
                subprocess.run(["userdel", "--remove", name], capture_output=True)


@root_only
def test_a_name_reused_by_another_account_is_not_removed(tmp_path):
    name = f"hubt{secrets.token_hex(3)}r"
    try:
        accounts.create_account(tmp_path, name)
        subprocess.run(["userdel", "--remove", name], check=True, capture_output=True)
        uid = str(60000 + secrets.randbelow(5000))
        subprocess.run(["useradd", "--create-home", "--uid", uid, name], check=True)
        said = []
        assert accounts.remove_accounts(tmp_path, [name], log=said.append) == [name]
        assert _exists(name) and "the hub created uid" in said[0]
    finally:
        if _exists(name):
            subprocess.run(["userdel", "--remove", name], capture_output=True)


def test_passwords_only_writes_hashes_and_sheet_for_a_hub_elsewhere(tmp_path):
    state = tmp_path / "state"
    r = subprocess.run([sys.executable, str(HUB / "run.py"), "--passwords-only",
                        "--state", str(state), "--learners", "ada,grace", "--instructor", "teach"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    given = accounts.read_sheet(state)
    assert set(given) == {"ada", "grace"} and given["ada"] in r.stdout
    generated = r.stdout.split("shown once): ")[1].split()[0]
    assert accounts.check_login(state, "teach", generated)
    assert not accounts.check_login(state, "teach", "teach")
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    r = subprocess.run([sys.executable, str(HUB / "run.py"), "--passwords-only",
                        "--state", str(state), "--learners", "ada,teach", "--instructor", "teach"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "also in" in r.stderr


@pytest.mark.parametrize("learners,instructor,match", [
    (["Ada"], "teach", r"lower-case Unix user names.*'Ada'"),
    (["ada", "grace hopper"], "teach", r"'grace hopper'"),
    (["ada", "../x"], "teach", r"'\.\./x'"),
    (["ada"], "Teach", r"'Teach'"),
    (["ada", "ada"], "teach", r"given twice: ada"),
    (["ada", "teach"], "teach", r"also in the list"),
])
def test_names_the_room_cannot_use_are_refused(tmp_path, learners, instructor, match):
    with pytest.raises(ValueError, match=match):
        accounts.prepare_passwords(tmp_path, learners, instructor)
    assert not (tmp_path / accounts.PASSWORDS).exists()


def test_a_deleted_sheet_keeps_every_password(tmp_path):
    accounts.prepare_passwords(tmp_path, ["ada", "bob"], "teach")
    given = accounts.read_sheet(tmp_path)
    (tmp_path / accounts.SHEET).unlink()  # handed out, then deleted, as the docstring allows
    sheet, _ = accounts.prepare_passwords(tmp_path, ["ada", "bob", "cy"], "teach")
    for name in ("ada", "bob"):
        assert accounts.check_login(tmp_path, name, given[name])
        assert re.search(rf"name: {name} +password: {re.escape(accounts.KEPT)}", sheet)
    new = accounts.read_sheet(tmp_path)["cy"]
    assert new != accounts.KEPT and accounts.check_login(tmp_path, "cy", new)


def test_reset_password_replaces_one_learner_s(tmp_path):
    accounts.prepare_passwords(tmp_path, ["ada", "bob"], "teach")
    old = accounts.read_sheet(tmp_path)
    accounts.prepare_passwords(tmp_path, ["ada", "bob"], "teach", reset=["bob"])
    new = accounts.read_sheet(tmp_path)
    assert new["ada"] == old["ada"] and new["bob"] != old["bob"]
    assert not accounts.check_login(tmp_path, "bob", old["bob"])
    assert accounts.check_login(tmp_path, "bob", new["bob"])
    with pytest.raises(ValueError, match="not in the room: cy"):
        accounts.prepare_passwords(tmp_path, ["ada", "bob"], "teach", reset=["cy"])


def test_a_name_dropped_from_the_room_loses_its_password_and_is_former(tmp_path):
    _, first = accounts.prepare_passwords(tmp_path, ["ada", "bob"], "teach")
    old = accounts.read_sheet(tmp_path)
    assert accounts.former_names(tmp_path, ["ada", "bob", "teach"]) == []
    _, second = accounts.prepare_passwords(tmp_path, ["ada"], "boss")
    assert not accounts.check_login(tmp_path, "bob", old["bob"])  # dropped: no password
    assert not accounts.check_login(tmp_path, "teach", first)  # the former instructor's too
    assert accounts.check_login(tmp_path, "boss", second)
    assert accounts.check_login(tmp_path, "ada", old["ada"])
    assert accounts.former_names(tmp_path, ["ada", "boss"]) == ["bob", "teach"]
    assert set(accounts.read_sheet(tmp_path)) == {"ada"}


def _run_py(*args, **kw):
    return subprocess.run([sys.executable, str(HUB / "run.py"), *args], capture_output=True,
                          text=True, timeout=60, **kw)


def test_the_instructor_password_never_comes_from_the_command_line(tmp_path):
    state = tmp_path / "state"
    r = _run_py("--passwords-only", "--state", str(state), "--learners", "ada",
                "--instructor-password", "a long secret")
    assert r.returncode == 2 and "ps lists the command line" in r.stderr
    assert "--instructor-password-file" in r.stderr and not state.exists()
    secret = tmp_path / "secret"
    secret.write_text("a long secret\n")
    os.chmod(secret, 0o644)
    r = _run_py("--passwords-only", "--state", str(state), "--learners", "ada",
                "--instructor-password-file", str(secret))
    assert r.returncode == 2 and "can be read by others (mode 644): chmod 600 it" in r.stderr
    os.chmod(secret, 0o600)
    r = _run_py("--passwords-only", "--state", str(state), "--learners", "ada",
                "--instructor-password-file", str(secret))
    assert r.returncode == 0, r.stderr
    assert accounts.check_login(state, "instructor", "a long secret")
    assert "a long secret" not in r.stdout
    r = _run_py("--passwords-only", "--state", str(state), "--learners", "Ada,bob")
    assert r.returncode == 2 and "lower-case Unix user names" in r.stderr and "'Ada'" in r.stderr


@root_only
def test_a_password_file_root_does_not_own_or_a_link_is_refused(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("a long secret\n")
    os.chmod(secret, 0o600)
    os.chown(secret, 65534, 65534)  # nobody's: its owner could read what root writes into it
    r = _run_py("--passwords-only", "--state", str(tmp_path / "s"), "--learners", "ada",
                "--instructor-password-file", str(secret))
    assert r.returncode == 2 and "belongs to uid 65534, not to you" in r.stderr
    os.chown(secret, 0, 0)
    link = tmp_path / "link"
    link.symlink_to(secret)
    r = _run_py("--passwords-only", "--state", str(tmp_path / "s"), "--learners", "ada",
                "--instructor-password-file", str(link))
    assert r.returncode == 2 and "--instructor-password-file" in r.stderr


@pytest.fixture
def hub_account(tmp_path):
    """An account the hub created in the state ``tmp_path``, removed (its processes first)
    after the test."""
    name = f"hubt{secrets.token_hex(3)}k"
    accounts.create_account(tmp_path, name)
    try:
        yield name
    finally:
        if _exists(name):
            accounts.end_processes(tmp_path, name)
            subprocess.run(["userdel", "--remove", name], capture_output=True)


def _start_as(name: str, *argv: str) -> int:
    """Start ``argv`` as ``name`` in a session of its own (it outlives nothing it belongs to);
    return the account's uid once the job runs."""
    subprocess.Popen(["runuser", "-u", name, "--", "setsid", *argv], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    uid = accounts.pwd.getpwnam(name).pw_uid
    for _ in range(50):
        if accounts._pids_of(uid):
            return uid
        time.sleep(0.1)
    raise AssertionError(f"the job {argv} did not start as {name}")


@root_only
def test_end_processes_leaves_nothing_of_an_account_running(tmp_path, hub_account):
    uid = _start_as(hub_account, "sleep", "600")
    assert accounts.end_processes(tmp_path, hub_account) == 0 and accounts._pids_of(uid) == []
    with pytest.raises(ValueError, match="root"):
        accounts.end_processes(tmp_path, "root")


def test_a_removed_name_is_forgotten_once_at_the_next_start(tmp_path):
    accounts.record_removed(tmp_path, ["ada"])
    accounts.record_removed(tmp_path, ["bob", "ada"])
    assert accounts.removed_names(tmp_path) == ["ada", "bob"]
    accounts.keep_removed(tmp_path, ["bob"])  # ada forgotten, bob's deletion failed
    assert accounts.removed_names(tmp_path) == ["bob"]
    accounts.keep_removed(tmp_path, [])
    assert accounts.removed_names(tmp_path) == []


@root_only
def test_accounts_the_hub_did_not_create_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"daemon \(uid 1\).*choose other names"):
        accounts.check_owned(tmp_path, ["daemon", "hubt-no-such-name"])
    accounts.check_owned(tmp_path, ["hubt-no-such-name"])  # missing: the hub creates it


def test_a_fifo_as_the_password_file_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    r = _run_py("--passwords-only", "--state", str(tmp_path / "s"), "--learners", "ada",
                "--instructor-password-file", str(fifo))
    assert r.returncode == 2 and "is not a regular file" in r.stderr


@root_only
def test_a_process_that_stops_its_uid_s_newcomers_is_ended_too(tmp_path, hub_account):
    """A learner's daemon that SIGSTOPs every new process of its uid escaped a killer running as
    that uid; root signals each process itself."""
    stopper = ("import os, signal, time\nme = os.getpid(); seen = set(os.listdir('/proc'))\n"
               "while True:\n    for p in os.listdir('/proc'):\n"
               "        if p.isdigit() and p not in seen and int(p) != me:\n"
               "            try:\n                os.kill(int(p), signal.SIGSTOP)\n"
               "            except OSError:\n                pass\n"
               "    seen = set(os.listdir('/proc')); time.sleep(0.001)\n")
    uid = _start_as(hub_account, "python3", "-c", stopper)
    assert accounts.end_processes(tmp_path, hub_account) == 0 and accounts._pids_of(uid) == []


@root_only
def test_processes_of_an_account_the_hub_did_not_create_are_left_alone(tmp_path):
    with pytest.raises(ValueError, match="daemon: not an account this hub created"):
        accounts.end_processes(tmp_path, "daemon")
