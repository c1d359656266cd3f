"""Each learner's memory and CPU, enforced by the kernel: one control group (cgroup) per learner.

hub/jupyterhub_config.py's spawner makes the learner's group before their server starts
(:meth:`Limits.prepare`, as root), and the server's first process joins it before it drops to the
learner's uid (:meth:`Limits.join`, in the spawner's preexec): every process the learner starts
after that (JupyterLab, kernels, terminals, a ``setsid`` job) is in the group, and a learner cannot
leave it (moving a process needs write access to the groups' files, which are root's).

* **memory**: the group's limit (``--mem-limit``). A learner who allocates past it meets the
  kernel's OOM killer inside their own group: the largest of *their* processes is killed (their
  kernel, as a rule), nobody else's. No swap either (the machine may have none; where it has some,
  the limit covers memory and swap together).
* **CPU**: at most ``--cpu-limit`` cores' worth of time (a CFS quota), and an equal share when the
  machine is busy (every learner's group has the same weight, however many processes it holds).

Which cgroups: version 2 where the machine has it with the memory and cpu controllers
(``/sys/fs/cgroup`` or ``/sys/fs/cgroup/unified``); else version 1's memory and cpu hierarchies.
hub/run.py says at start which one the room uses. Neither: the hub refuses to start unless
``--no-limits`` is given.

Where: version 1 nests the room's groups inside the hub's own group of each hierarchy (so whatever
limits the machine puts on the hub covers its learners too); version 2 puts them at the top of the
hierarchy (a version 2 group that holds processes, as the hub's does, cannot have child groups with
memory or cpu limits). The room's folder is ``rmsnorm-hub-<tag>``; a learner's is its name.

GPU memory is not here: no cgroup controller covers it, and NVIDIA's driver has no per-process or
per-user device-memory limit outside MIG and MPS (hub/gpu-sharing.md).

Standard library only: hub/run.py (system Python) and the hub (learner environment) both use it.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)?", re.I)


def parse_size(text: str) -> int:
    """``8G`` / ``512M`` / ``1.5G`` / ``1073741824`` -> bytes (K, M, G, T: powers of 1024)."""
    m = SIZE.fullmatch(str(text).strip())
    if not m:
        raise ValueError(f"--mem-limit {text!r}: a size such as 8G, 512M or 1073741824")
    value = float(m.group(1)) * 1024 ** ("KMGT".find(m.group(2).upper()) + 1 if m.group(2) else 0)
    if value < 64 * 1024 ** 2:
        raise ValueError(f"--mem-limit {text!r}: at least 64M (a JupyterLab server alone needs "
                         "about 100M)")
    return int(value)


def parse_cpus(text) -> float:
    try:
        cpus = float(text)
    except (TypeError, ValueError):
        cpus = float("nan")
    if not 0.05 <= cpus <= 1024:
        raise ValueError(f"--cpu-limit {text!r}: cores per learner, a number from 0.05 up")
    return cpus


def _mounts(mountinfo: str) -> list[tuple[str, str, set]]:
    """``(mount point, fs type, super options)`` of each cgroup mount in /proc/self/mountinfo."""
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((fields[4], tail[0], set(tail[2].split(","))))
    return found


def _own_group(controller: str, proc_cgroup: str) -> str:
    """The hub's own group in the v1 hierarchy of ``controller`` (from /proc/self/cgroup)."""
    for line in proc_cgroup.splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return path
    return "/"


@dataclass
class Limits:
    """The room's groups: ``version`` 1 or 2, ``bases`` the room's folder in each hierarchy used
    (v2: one; v1: the memory one and the cpu one)."""
    version: int
    bases: list = field(default_factory=list)
    memory: int = 0
    cpus: float = 0.0

    def describe(self) -> str:
        where = ", ".join(str(b) for b in self.bases)
        return (f"cgroup v{self.version}: {self.memory / 1024 ** 3:.2g} GiB of memory (no swap) "
                f"and {self.cpus:g} core(s) per learner, in {where}")

    def to_env(self) -> str:
        """One line for the hub's environment (:func:`from_env` reads it back)."""
        return "|".join([str(self.version), str(self.memory), repr(self.cpus),
                         *map(str, self.bases)])

    def groups(self, name: str) -> list[Path]:
        return [base / name for base in self.bases]

    def prepare(self, name: str) -> list[str]:
        """Make ``name``'s group(s) with the room's limits (as root, before the server starts);
        the files its first process writes its pid into (:meth:`join`)."""
        quota = int(self.cpus * PERIOD_US)
        joins = []
        for group in self.groups(name):
            group.mkdir(mode=0o755, exist_ok=True)
            if self.version == 2:
                _write(group / "memory.max", self.memory)
                if (group / "memory.swap.max").exists():
                    _write(group / "memory.swap.max", 0)
                _write(group / "cpu.max", f"{quota} {PERIOD_US}")
            elif (group / "memory.limit_in_bytes").exists():
                # memory + swap (memsw) may never be below memory alone: raise it first, lower it
                # last; memsw equal to memory is no swap
                files = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
                files = [f for f in files if (group / f).exists()]
                try:
                    for f in files:
                        _write(group / f, self.memory)
                except OSError:
                    for f in reversed(files):
                        _write(group / f, self.memory)
            else:
                _write(group / "cpu.cfs_period_us", PERIOD_US)
                _write(group / "cpu.cfs_quota_us", quota)
            joins.append(str(group / "cgroup.procs"))
        return joins

    @staticmethod
    def join(files) -> None:
        """In the server's first process, before it becomes the learner: join the groups."""
        pid = str(os.getpid())
        for f in files:
            with open(f, "w") as out:
                out.write(pid)

    def peak(self, name: str) -> int | None:
        """The most memory ``name``'s group has used (bytes; None where the kernel does not say)."""
        for group in self.groups(name):
            for f in ("memory.max_usage_in_bytes", "memory.peak"):
                try:
                    return int((group / f).read_text())
                except (OSError, ValueError):
                    continue
        return None

    def ooms(self, name: str) -> int:
        """How many of ``name``'s processes the OOM killer ended inside their group."""
        for group in self.groups(name):
            for f, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
                try:
                    for line in (group / f).read_text().splitlines():
                        k, _, v = line.partition(" ")
                        if k == key:
                            return int(v)
                except (OSError, ValueError):
                    continue
        return 0

    def release(self, name: str) -> None:
        """Remove ``name``'s groups once their processes are gone (a group with processes
        stays)."""
        for group in self.groups(name):
            try:
                group.rmdir()
            except OSError:
                pass

    def release_all(self) -> None:
        for base in self.bases:
            if base.is_dir():
                for group in base.iterdir():
                    if group.is_dir():
                        self.release(group.name)
                try:
                    base.rmdir()
                except OSError:
                    pass


def from_env(text: str) -> Limits | None:
    """The :class:`Limits` hub/run.py found (:meth:`Limits.to_env`); None for "" (no limits)."""
    if not text:
        return None
    version, memory, cpus, *bases = text.split("|")
    return Limits(int(version), [Path(b) for b in bases], int(memory), float(cpus))


def _write(path: Path, value) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def detect(memory: int, cpus: float, tag: str, root: Path = CGROUP, mountinfo: str | None = None,
           proc_cgroup: str | None = None) -> Limits:
    """The room's :class:`Limits` on this machine, its folders made: cgroup v2 where it has the
    memory and cpu controllers, else v1's memory and cpu hierarchies. A ValueError says what is
    missing."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    if proc_cgroup is None:
        proc_cgroup = Path("/proc/self/cgroup").read_text()
    mounts = _mounts(mountinfo)
    folder = f"rmsnorm-hub-{tag}"
    for point, kind, _ in mounts:
        if kind != "cgroup2":
            continue
        top = Path(point)
        try:
            controllers = set((top / "cgroup.controllers").read_text().split())
        except OSError:
            continue
        if not {"memory", "cpu"} <= controllers:
            continue
        enabled = set((top / "cgroup.subtree_control").read_text().split())
        try:
            if not {"memory", "cpu"} <= enabled:
                _write(top / "cgroup.subtree_control", "+memory +cpu")
            base = top / folder
            base.mkdir(mode=0o755, exist_ok=True)
            _write(base / "cgroup.subtree_control", "+memory +cpu")
        except OSError as exc:
            raise ValueError(f"cgroup v2 at {top} has memory and cpu, but the hub cannot give "
                             f"its learners groups of their own there ({exc.strerror}); run the "
                             "hub outside a container, or --no-limits") from None
        return Limits(2, [base], memory, cpus)
    v1 = {}
    for point, kind, options in mounts:
        if kind == "cgroup":
            for controller in ("memory", "cpu"):
                if controller in options and controller not in v1:
                    v1[controller] = Path(point) / _own_group(controller, proc_cgroup).lstrip("/")
    if set(v1) == {"memory", "cpu"}:
        bases = [v1["memory"] / folder, v1["cpu"] / folder]
        for base in bases:
            try:
                base.mkdir(mode=0o755, exist_ok=True)
            except OSError as exc:
                raise ValueError(f"cgroup v1: cannot make {base} ({exc.strerror}): the hub must "
                                 "run as root, with the hierarchy writable, or --no-limits") \
                    from None
        try:  # the room's limits count its learners' groups (always so on recent kernels)
            if (bases[0] / "memory.use_hierarchy").read_text().strip() != "1":
                _write(bases[0] / "memory.use_hierarchy", 1)
        except OSError:
            pass
        return Limits(1, bases, memory, cpus)
    have = sorted({f"{kind}:{','.join(sorted(o & {'memory', 'cpu'})) or '-'}"
                   for _, kind, o in mounts}) or ["no cgroup mounts"]
    raise ValueError("this machine has neither cgroup v2 with the memory and cpu controllers nor "
                     f"cgroup v1 memory and cpu hierarchies (found: {', '.join(have)}): the hub "
                     "cannot limit each learner's memory and CPU; --no-limits starts it without "
                     "them (one learner can then take the machine's memory)")
