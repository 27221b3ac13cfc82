"""A control group per sandboxed child (`ChildCgroups`), where the kernel lets this process make
one: memory (its limit counts tmpfs, memfd and SysV pages as well as resident memory), pids (every
task, threads included), an equal CPU weight per child, and the freezer that stops a whole tree at
once. cgroup v2 is used where its controllers are delegated to this process's cgroup, v1 where its
hierarchies are mounted and writable (as on root machines with the hybrid layout); each mechanism
is probed on its own and a missing one falls back to the parent's watch (harness.sandbox.resources)
and to signals. `describe` says which applied.

Layout in each hierarchy used: `<this process's cgroup>/harness-<pidns>-<pid>-<token>` holds the limits;
where the hierarchy also freezes, it has two leaves, `worker` (where the child starts: everything
the candidate runs) and `init` (where `freeze` moves the namespace's `unshare` and init first, so
that a parent killed during another child's timing is still noticed and the sandbox still ends)."""

from __future__ import annotations

import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_PREFIX = "harness-"  # then the parent's pid namespace (inode), its pid and a random token
MECHANISMS = ("memory", "pids", "cpu", "freezer")
CPU_SHARES = 1024  # v1: the default weight of a group, the same for every child
CPU_WEIGHT = 100  # v2: likewise
FREEZE_WAIT_S = 1.0  # at most, for the kernel to report the whole group frozen


@dataclass(frozen=True)
class Hierarchy:
    version: int  # 1 or 2
    base: Path  # this process's own cgroup in it: children are made here
    controllers: frozenset[str]


def _own_paths() -> dict[str, str]:
    """Controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        if line.count(":") < 2:
            continue
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def find_hierarchies() -> list[Hierarchy]:
    """The cgroup hierarchies mounted here (v2 first), each at this process's own cgroup."""
    own = _own_paths()
    found: list[Hierarchy] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        if "-" not in fields[6:]:
            continue
        separator = fields.index("-", 6)
        fstype, options = fields[separator + 1], fields[separator + 3].split(",")
        root, point = fields[3], fields[4].encode().decode("unicode_escape")
        if fstype == "cgroup2":
            path = own.get("")
            controllers_file = "cgroup.controllers"
        elif fstype == "cgroup":
            names = [name for name in options if name in ("memory", "pids", "cpu", "freezer")]
            if not names:
                continue
            path = own.get(names[0])
            controllers_file = None
        else:
            continue
        if path is None or not (path == root or path.startswith(root.rstrip("/") + "/")):
            continue  # this process's cgroup is not under this mount (another namespace's view)
        base = Path(point, path[len(root) :].lstrip("/")) if root != "/" else Path(point, path.lstrip("/"))
        if not base.is_dir():
            continue
        if controllers_file is None:
            found.append(Hierarchy(1, base, frozenset(names)))
        else:
            try:
                available = frozenset(Path(base, controllers_file).read_text().split())
            except OSError:
                continue
            base, available = _v2_base(Path(point), base, available)
            found.append(Hierarchy(2, base, available | {"freezer"}))  # v2 freezes any cgroup
    return sorted(found, key=lambda hierarchy: -hierarchy.version)


def _v2_base(point: Path, own: Path, available: frozenset[str]) -> tuple[Path, frozenset[str]]:
    """Where the children's v2 groups are made, with the controllers they get: this process's own
    cgroup when it enables (or can enable) the limits' controllers for its children, else the
    nearest ancestor under the mount that already does and where a group can be made. A cgroup
    that holds processes itself cannot enable controllers for children (the "no internal
    processes" rule): so it was in the H200's container, where the harness's own cgroup held the
    command's shell beside it and only the root enabled memory, pids and cpu."""
    wanted = {"memory", "pids", "cpu"} & available
    if not wanted or all(_enable_v2(Hierarchy(2, own, available), name) for name in wanted):
        return own, available
    for ancestor in own.parents:
        if ancestor != point and point not in ancestor.parents:
            break
        try:
            enabled = frozenset(Path(ancestor, "cgroup.subtree_control").read_text().split())
        except OSError:
            continue
        if wanted <= enabled and os.access(ancestor, os.W_OK):
            return ancestor, enabled
    return own, available


def _write(path: Path, value: str) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return False
    try:
        os.write(fd, value.encode())
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _enable_v2(hierarchy: Hierarchy, controller: str) -> bool:
    """Whether `controller` applies to v2 cgroups made under `hierarchy.base` (enabled there
    now if it can be: not where this cgroup holds processes itself, the "no internal processes"
    rule)."""
    control = hierarchy.base / "cgroup.subtree_control"
    try:
        if controller in control.read_text().split():
            return True
    except OSError:
        return False
    return _write(control, f"+{controller}")


@dataclass
class ChildCgroups:
    """One child's cgroups (see the module). `leaves`: the cgroup.procs files the child is placed
    in between fork and exec (`place`); `groups`: every directory made, deepest first."""

    name: str
    mechanisms: dict[str, int] = field(default_factory=dict)  # mechanism -> cgroup version
    groups: list[Path] = field(default_factory=list)
    leaves: list[Path] = field(default_factory=list)
    tops: dict[str, Path] = field(default_factory=dict)  # mechanism -> the limits' directory
    freezer_leaf: Path | None = None
    init_leaf: Path | None = None
    frozen: bool = False
    problem: str | None = None  # a limit the kernel enforced, read before removal
    memory_bytes: int = 0
    max_tasks: int = 0

    def describe(self) -> str:
        if not self.mechanisms:
            return "no cgroups (the parent's watch)"
        parts = [f"{name} v{version}" for name, version in self.mechanisms.items()]
        return "cgroups: " + ", ".join(parts)

    def place(self) -> None:
        """Between fork and exec: move this process into every leaf (no allocation to speak of)."""
        pid = str(os.getpid())
        for leaf in self.leaves:
            _write(leaf, pid)

    def keep_placed(self, pid: int) -> None:
        """After the spawn: keep only the groups that hold `pid` (a write that failed between fork
        and exec leaves its mechanism to the watch and signals), removing the others, empty."""
        for leaf in list(self.leaves):
            if str(pid) in _read(leaf).split():
                continue
            top = leaf.parent.parent if leaf.parent.name == "worker" else leaf.parent
            self.leaves.remove(leaf)
            for mechanism in [name for name, path in self.tops.items() if path == top]:
                self.mechanisms.pop(mechanism)
                self.tops.pop(mechanism)
            if top == getattr(self.freezer_leaf, "parent", None):
                self.freezer_leaf = self.init_leaf = None
            for group in [group for group in self.groups if group == top or top in group.parents]:
                self.groups.remove(group)
                try:
                    group.rmdir()
                except OSError:
                    pass

    def drop_all(self) -> None:
        """The child could not be placed: use none of it (the watch and signals apply)."""
        self.remove()
        self.mechanisms.clear()
        self.freezer_leaf = self.init_leaf = None

    # the freezer

    def freeze(self, exempt: list[int], *, wait: bool = True) -> bool:
        """Freeze the worker leaf, after moving `exempt` (unshare and the init: harness code that
        must keep watching the parent) to the init leaf; with `wait`, until it is frozen
        (`wait_frozen`). False without a freezer."""
        if self.freezer_leaf is None:
            return False
        for pid in exempt:
            if str(pid) in _read(self.freezer_leaf / "cgroup.procs").split():
                _write(self.init_leaf / "cgroup.procs", str(pid))
        for pid in _read(self.init_leaf / "cgroup.procs").split():
            if int(pid) not in exempt:  # a worker forked by the init after it was moved
                _write(self.freezer_leaf / "cgroup.procs", pid)
        version = self.mechanisms["freezer"]
        if version == 1:
            done = _write(self.freezer_leaf / "freezer.state", "FROZEN")
        else:
            done = _write(self.freezer_leaf / "cgroup.freeze", "1")
        self.frozen = done
        if wait:
            self.wait_frozen()
        return done

    def wait_frozen(self) -> None:
        """Wait (at most FREEZE_WAIT_S) until the kernel has frozen every task of the leaf; at
        once when nothing was frozen. Several children frozen together are asked first and
        waited for after (`ChildPool.others_stopped`), so that their waits overlap."""
        deadline = time.monotonic() + FREEZE_WAIT_S  # the kernel freezes each task in turn
        while self.frozen and time.monotonic() < deadline and not self._is_frozen():
            time.sleep(0.001)

    def _is_frozen(self) -> bool:
        if self.mechanisms["freezer"] == 1:
            return _read(self.freezer_leaf / "freezer.state").strip() == "FROZEN"
        return _counts(self.freezer_leaf / "cgroup.events").get("frozen") == 1

    def frozen_pids(self) -> set[int]:
        if self.freezer_leaf is None:
            return set()
        return {int(pid) for pid in _read(self.freezer_leaf / "cgroup.procs").split()}

    def thaw(self) -> None:
        if self.freezer_leaf is None or not self.frozen:
            return
        if self.mechanisms["freezer"] == 1:
            _write(self.freezer_leaf / "freezer.state", "THAWED")
        else:
            _write(self.freezer_leaf / "cgroup.freeze", "0")
        self.frozen = False

    # the end

    def pids(self) -> set[int]:
        pids: set[int] = set()
        for group in self.groups:
            pids.update(int(pid) for pid in _read(group / "cgroup.procs").split())
        return pids

    def read_problem(self) -> str | None:
        """What the kernel stopped (an OOM kill in the memory group, a fork over pids.max), kept in
        `problem`; None when nothing."""
        if self.problem is not None:
            return self.problem
        self.problem = self.memory_problem()
        pids = self.tops.get("pids")
        if self.problem is None and pids is not None and _counts(pids / "pids.events").get("max", 0) > 0:
            self.problem = f"a fork refused: tasks over the limit of {self.max_tasks} (max_tasks)"
        return self.problem

    def memory_problem(self) -> str | None:
        """The memory group's OOM kill, if the kernel made one (None when none, or no memory
        group). A kill of any of the child's processes ends the whole child (the watch polls
        this): an OOM-killed helper process leaves the candidate waiting on it to the timeout."""
        memory = self.tops.get("memory")
        if memory is None:
            return None
        events = memory / ("memory.oom_control" if self.mechanisms["memory"] == 1 else "memory.events")
        counts = _counts(events)
        if counts.get("oom_kill", 0) == 0 and counts.get("oom", 0) == 0:
            return None
        limit = f"{self.memory_bytes / 1024**2:.0f} MiB"
        return f"memory (resident, tmpfs, memfd, shared) over the limit of {limit} (memory_bytes)"

    def kill(self) -> None:
        """SIGKILL every process in the child's groups (v2: cgroup.kill; else frozen, killed, thawed,
        until none is left)."""
        self.read_problem()
        for mechanism, top in self.tops.items():
            if self.mechanisms[mechanism] == 2 and (top / "cgroup.kill").exists():
                _write(top / "cgroup.kill", "1")
        for _ in range(50):
            pids = self.pids()
            if not pids:
                break
            if self.freezer_leaf is not None:
                self.freeze([])
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            self.thaw()
            time.sleep(0.02)

    def remove(self) -> None:
        """Kill what is left and remove every directory (retried while the killed processes exit)."""
        self.thaw()
        self.kill()
        for group in self.groups:
            for _ in range(100):
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
        self.groups.clear()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _counts(path: Path) -> dict[str, int]:
    counts = {}
    for line in _read(path).splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            counts[key] = int(value)
    return counts


def make_child_cgroups(*, memory_bytes: int, max_tasks: int) -> ChildCgroups:
    """The cgroups of one child: each mechanism in the first hierarchy (v2, then v1) where this
    process can make a group and set it; those that fail are left out (see `describe`)."""
    remove_groups_of_dead_parents()
    name = f"{CGROUP_PREFIX}{_pid_namespace()}-{os.getpid()}-{secrets.token_hex(6)}"
    result = ChildCgroups(name, memory_bytes=memory_bytes, max_tasks=max_tasks)
    settings = {
        "memory": {1: [("memory.limit_in_bytes", str(memory_bytes))], 2: [("memory.max", str(memory_bytes))]},
        "pids": {1: [("pids.max", str(max_tasks))], 2: [("pids.max", str(max_tasks))]},
        "cpu": {1: [("cpu.shares", str(CPU_SHARES))], 2: [("cpu.weight", str(CPU_WEIGHT))]},
        "freezer": {1: [], 2: []},
    }
    optional = {  # swap would otherwise let memory past the limit
        "memory": {1: [("memory.memsw.limit_in_bytes", str(memory_bytes))], 2: [("memory.swap.max", "0")]}
    }
    tops: dict[Path, Path] = {}  # hierarchy base -> its group
    for mechanism in MECHANISMS:
        for hierarchy in find_hierarchies():
            if mechanism not in hierarchy.controllers:
                continue
            if hierarchy.version == 2 and mechanism != "freezer" and not _enable_v2(hierarchy, mechanism):
                continue
            top = tops.get(hierarchy.base)
            if top is None:
                top = hierarchy.base / result.name
                try:
                    top.mkdir()
                except OSError:
                    continue
                tops[hierarchy.base] = top
                result.groups.insert(0, top)
            if not all(_write(top / name, value) for name, value in settings[mechanism][hierarchy.version]):
                continue
            for name, value in optional.get(mechanism, {}).get(hierarchy.version, []):
                if (top / name).exists():
                    _write(top / name, value)
            result.mechanisms[mechanism] = hierarchy.version
            result.tops[mechanism] = top
            break
    for top in list(tops.values()):
        if top not in result.tops.values():
            try:
                top.rmdir()
            except OSError:
                pass
            result.groups.remove(top)
            continue
        if result.tops.get("freezer") == top:
            worker, init = top / "worker", top / "init"
            try:
                worker.mkdir()
                init.mkdir()
            except OSError:
                result.mechanisms.pop("freezer")
                result.tops.pop("freezer")
            else:
                result.groups[:0] = [worker, init]
                result.freezer_leaf, result.init_leaf = worker, init
                result.leaves.append(worker / "cgroup.procs")
                continue
        result.leaves.append(top / "cgroup.procs")
    if not result.mechanisms:
        result.remove()
    return result


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def remove_groups_of_dead_parents() -> None:
    """Kill and remove the groups of harness processes of this pid namespace that were killed
    before they could (a group named after another namespace's pid is left alone)."""
    from harness.environment import process_is_gone

    namespace = f"{_pid_namespace()}-"
    for hierarchy in find_hierarchies():
        try:
            entries = [entry for entry in os.scandir(hierarchy.base) if entry.name.startswith(CGROUP_PREFIX)]
        except OSError:
            continue
        for entry in entries:
            rest = entry.name.removeprefix(CGROUP_PREFIX)
            if not rest.startswith(namespace):
                continue
            pid, dash, _ = rest.removeprefix(namespace).partition("-")
            if not (dash and pid.isdigit()) or int(pid) == os.getpid() or not process_is_gone(int(pid)):
                continue
            top = Path(entry.path)
            leaves = [Path(sub.path) for sub in os.scandir(top) if sub.is_dir()]
            stale = ChildCgroups(entry.name, groups=[*leaves, top])
            if (top / "worker").is_dir():
                stale.freezer_leaf, stale.init_leaf = top / "worker", top / "init"
                stale.mechanisms["freezer"] = hierarchy.version
                stale.frozen = True
            stale.remove()
