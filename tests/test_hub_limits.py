"""Each learner's memory and CPU (hub/limits.py): which cgroups a machine offers, what the hub
writes into a learner's group, and, as root on this machine, that a learner's process allocating
without bound is ended inside its own group while another learner's work goes on.
tests/test_hub.py does the same to a learner's kernel in JupyterLab."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from test_hub_tls import _load

limits = _load("limits")
PYTHON = "/usr/bin/python3"  # every account can run it (pyenv's under /root cannot)
NOBODY = 65534


def test_sizes_and_cores():
    assert limits.parse_size("8G") == 8 << 30 and limits.parse_size("512M") == 512 << 20
    assert limits.parse_size("1.5g") == 3 << 29 and limits.parse_size("1073741824") == 1 << 30
    for bad in ("8 gigs", "", "-1G", "10M"):
        with pytest.raises(ValueError, match="--mem-limit"):
            limits.parse_size(bad)
    assert limits.parse_cpus("0.5") == 0.5
    for bad in ("0", "none", None):
        with pytest.raises(ValueError, match="--cpu-limit"):
            limits.parse_cpus(bad)


V2 = "30 1 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
V1 = ("31 25 0:27 / /sys/fs/cgroup/memory rw shared:5 - cgroup cgroup rw,memory\n"
      "32 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw shared:6 - cgroup cgroup rw,cpu,cpuacct\n"
      "33 25 0:29 / /sys/fs/cgroup/unified rw shared:7 - cgroup2 cgroup2 rw\n")


def _tree(root: Path, mountinfo: str) -> str:
    """A stand-in cgroup filesystem under ``root``: the mounts of ``mountinfo``, moved there."""
    out = mountinfo.replace("/sys/fs/cgroup", str(root))
    for line in out.splitlines():
        Path(line.split()[4]).mkdir(parents=True, exist_ok=True)
    return out


def test_cgroup_v2_is_preferred_and_written_as_v2(tmp_path):
    info = _tree(tmp_path, V2)
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory\n")
    room = limits.detect(1 << 30, 1.5, "8000", mountinfo=info, proc_cgroup="0::/hub\n")
    assert room.version == 2 and room.bases == [tmp_path / "rmsnorm-hub-8000"]
    assert (room.bases[0] / "cgroup.subtree_control").read_text() == "+memory +cpu"
    (room.bases[0] / "ada").mkdir()
    (room.bases[0] / "ada" / "memory.swap.max").write_text("max")
    joins = room.prepare("ada")
    group = room.bases[0] / "ada"
    assert joins == [str(group / "cgroup.procs")]
    assert (group / "memory.max").read_text() == str(1 << 30)
    assert (group / "memory.swap.max").read_text() == "0"
    assert (group / "cpu.max").read_text() == "150000 100000"
    assert limits.from_env(room.to_env()) == room and limits.from_env("") is None


def test_cgroup_v1_where_v2_lacks_the_controllers(tmp_path):
    info = _tree(tmp_path, V1)
    (tmp_path / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    own = "4:memory:/session\n2:cpu,cpuacct:/\n0::/\n"
    (tmp_path / "memory" / "session").mkdir()
    room = limits.detect(2 << 30, 1, "9", mountinfo=info, proc_cgroup=own)
    memory, cpu = room.bases
    assert room.version == 1
    assert memory == tmp_path / "memory" / "session" / "rmsnorm-hub-9"  # inside the hub's own
    assert cpu == tmp_path / "cpu,cpuacct" / "rmsnorm-hub-9"
    for base, files in ((memory, ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")),
                        (cpu, ("cpu.cfs_period_us", "cpu.cfs_quota_us"))):
        (base / "ada").mkdir()
        for f in files:
            (base / "ada" / f).write_text("-1")
    room.prepare("ada")
    assert (memory / "ada" / "memory.limit_in_bytes").read_text() == str(2 << 30)
    assert (memory / "ada" / "memory.memsw.limit_in_bytes").read_text() == str(2 << 30)
    assert (cpu / "ada" / "cpu.cfs_quota_us").read_text() == "100000"
    assert "cgroup v1" in room.describe() and "2 GiB" in room.describe()


def test_no_cgroups_no_start_without_saying_so(tmp_path):
    info = _tree(tmp_path, "33 25 0:29 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n")
    (tmp_path / "unified" / "cgroup.controllers").write_text("hugetlb\n")
    with pytest.raises(ValueError, match=r"cannot limit each learner's .*--no-limits"):
        limits.detect(1 << 30, 1, "x", mountinfo=info, proc_cgroup="0::/\n")


def _machine_limits():
    if os.geteuid() != 0:
        return None, "creating cgroups needs root"
    if not os.access(PYTHON, os.X_OK) or shutil.which("runuser") is None:
        return None, f"{PYTHON} or runuser is missing"
    try:
        return limits.detect(200 << 20, 1, f"test{os.getpid()}"), None
    except ValueError as exc:
        return None, str(exc)


def _start_in(room, name: str, code: str) -> subprocess.Popen:
    files = room.prepare(name)

    def preexec():
        room.join(files)
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    return subprocess.Popen([PYTHON, "-c", code], preexec_fn=preexec, cwd="/",
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_learner_allocating_without_bound_is_stopped_and_the_other_goes_on():
    room, why = _machine_limits()
    if room is None:
        pytest.skip(why)
    greedy = "b = []\nwhile True:\n    b.append(bytearray(16 << 20))"
    steady = ("import time\nt = time.time()\nx = [bytearray(8 << 20) for _ in range(4)]\n"
              "while time.time() - t < 4:\n    sum(range(10000))\nprint('done', len(x))")
    try:
        other = _start_in(room, "other", steady)
        time.sleep(0.5)
        hog = _start_in(room, "hog", greedy)
        assert hog.wait(timeout=60) == -9, hog.communicate()  # SIGKILL: the OOM killer's
        out, err = other.communicate(timeout=60)
        assert other.returncode == 0 and "done 4" in out, err
        assert room.ooms("hog") >= 1 and room.ooms("other") == 0
        assert room.peak("hog") <= 200 << 20
    finally:
        for p in ("hog", "other"):
            room.release(p)
        room.release_all()
    assert not any(base.exists() for base in room.bases)
