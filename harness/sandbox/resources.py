"""The parent's watch over a sandboxed child's resources: processes, memory, bytes on disk.

RLIMIT_NPROC does not bind root, RLIMIT_AS cannot be set under CUDA (a CUDA process reserves
terabytes of address space), and files written into the directories the child shares with the
parent outlive it; so the parent counts, in a thread of its own, every `POLL_INTERVAL_S`:

- the child's processes: its first process and every descendant (in a pid namespace an orphan
  is reparented to the namespace's init, a descendant); without a pid namespace also every
  process of its session (an orphan there, unless it also left the session with setsid);
- their memory: the sum of each one's resident anonymous and shared memory (`RssAnon` and
  `RssShmem` of /proc/PID/status, readable whatever the process does and cheap), where pages
  shared after a fork count in each process; so a sum over the limit is looked at again by
  proportional shares (`Pss_Anon` and `Pss_Shmem` of /proc/PID/smaps_rollup, a walk of the page
  tables), which count each shared page once (a process that loaded torch holds about 143 MiB of
  RssAnon, and each fork of it read as much again: ten sleeping forks "held" 1.5 GiB);
- bytes in the watched directories (allocated blocks, and at least one block per entry, so that
  a flood of empty files counts too), per group of directories, walked fd-relative at any depth;
  not while the child is stopped (another child is timed: `ResourceWatch.paused`).

Above a limit it kills the child's process group and each process it found (SIGKILL) and keeps
the reason, which the supervisor reports as `crashed`; so too after an OOM kill in the child's
memory cgroup (`kernel_problem`), whose reason the supervisor reads from the group. Between two looks a process can do a lot:
what the limits bound is what it keeps, not what it does within a fifth of a second.
"""

from __future__ import annotations

import os
import signal
import stat
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

POLL_INTERVAL_S = 0.2
BLOCK_BYTES = 4096
MIB = 1024**2


def _format_bytes(count: int) -> str:
    return f"{count / MIB:.0f} MiB"


def child_processes(root_pid: int, *, whole_session: bool) -> list[int]:
    """`root_pid` and its descendants, read from /proc/PID/task/TID/children (a few files, not a
    scan of /proc: in a pid namespace every orphan is reparented to the namespace's init, a
    descendant); with `whole_session` also every process of its session, which takes a scan of
    /proc (outside a pid namespace an orphan is reparented out of the tree)."""
    pending = [root_pid, *(_session_members(root_pid) if whole_session else [])]
    found: set[int] = set()
    while pending:
        pid = pending.pop()
        if pid in found:
            continue
        children = direct_children(pid)
        if children is None:
            continue
        found.add(pid)
        pending += children
    return sorted(found)


def direct_children(pid: int) -> list[int] | None:
    """The children of `pid` (those of each of its threads, /proc/PID/task/TID/children); None when
    `pid` is gone."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    found = []
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children", "rb") as children:
                found += [int(child) for child in children.read().split()]
        except (OSError, ValueError):
            continue
    return found


SESSION_ID = 3  # a field of /proc/PID/stat after the command's ")"


def processes_where(field: int, value: int) -> list[int]:
    """The processes whose /proc stat `field` (SESSION_ID) is `value`."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    if int(stat.read().rsplit(b")", 1)[1].split()[field]) == value:
                        found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _session_members(session_id: int) -> list[int]:
    return processes_where(SESSION_ID, session_id)


def resident_bytes(pids: Iterable[int]) -> int:
    """The sum of the processes' RssAnon and RssShmem: cheap (no walk of page tables), but a page
    that forked processes share copy-on-write counts once in each (`proportional_bytes` does not)."""
    return sum(_proc_fields(pid, "status", ("RssAnon:", "RssShmem:")) or 0 for pid in pids)


def proportional_bytes(pids: Iterable[int]) -> int:
    """The sum of the processes' Pss_Anon and Pss_Shmem (/proc/PID/smaps_rollup): each page shared
    by several processes counted once in all, so a worker forked after the candidate loaded torch
    holds only what it wrote since. A kernel without these fields: RssAnon and RssShmem."""
    total = 0
    for pid in pids:
        share = _proc_fields(pid, "smaps_rollup", ("Pss_Anon:", "Pss_Shmem:"))
        total += (share if share is not None else _proc_fields(pid, "status", ("RssAnon:", "RssShmem:"))) or 0
    return total


def _proc_fields(pid: int, name: str, fields: tuple[str, ...]) -> int | None:
    """The sum in bytes of the `fields` (kB) of /proc/PID/`name`; None when none is there or the
    process is gone."""
    found = None
    try:
        with open(f"/proc/{pid}/{name}", encoding="ascii", errors="replace") as lines:
            for line in lines:
                if line.startswith(fields):
                    found = (found or 0) + int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return found


def tree_bytes(roots: Iterable[Path], stop_above: int | None = None) -> int:
    """Bytes allocated under the directories (symbolic links not followed; each entry at least
    one block); stops counting once above `stop_above`. The walk is fd-relative (`_folder_bytes`):
    a path's length and a folder's depth never hide bytes."""
    total = 0
    for root in roots:
        total += _folder_bytes(root, None if stop_above is None else stop_above - total)
        if stop_above is not None and total > stop_above:
            break
    return total


_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _folder_bytes(root: Path, stop_above: int | None) -> int:
    """`tree_bytes` of one directory: iterative, with one open descriptor at a time. It goes down
    through openat(name, O_NOFOLLOW) and back up through `..`, which must be the folder it came
    from (device and inode): a child that moves folders under the walk ends this look early (the
    next one walks again), never sends it outside the directory."""
    try:
        current = os.open(root, _FOLDER)
    except OSError:
        return 0
    total = 0
    facts = os.fstat(current)
    path = [(facts.st_dev, facts.st_ino)]  # the folders from the root down to `current`
    below: list[list[str]] = []  # per folder of `path`, the folders under it still to walk
    try:
        while True:
            folders = []
            try:
                entries = os.scandir(current)
            except OSError:
                entries = None
            if entries is not None:
                with entries:
                    for entry in entries:
                        try:
                            info = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        total += max(info.st_blocks * 512, BLOCK_BYTES)
                        if stop_above is not None and total > stop_above:
                            return total
                        if stat.S_ISDIR(info.st_mode):
                            folders.append(entry.name)
            below.append(folders)
            while True:  # to the next folder not walked yet: down into one, or up a level
                if below[-1]:
                    try:
                        deeper = os.open(below[-1].pop(), _FOLDER, dir_fd=current)
                    except OSError:
                        continue
                    os.close(current)
                    current = deeper
                    facts = os.fstat(current)
                    path.append((facts.st_dev, facts.st_ino))
                    break
                below.pop()
                path.pop()
                if not path:
                    return total
                upper = os.open("..", _FOLDER, dir_fd=current)
                os.close(current)
                current = upper
                facts = os.fstat(current)
                if (facts.st_dev, facts.st_ino) != path[-1]:
                    return total
    except OSError:
        return total
    finally:
        os.close(current)


@dataclass(frozen=True)
class WatchedDirectories:
    """Directories whose bytes together may not pass `limit`; `setting` names the limit."""

    paths: tuple[Path, ...]
    limit: int
    setting: str
    what: str


class ResourceWatch:
    """A thread that watches one child (see the module) until `stop`; `problem` says why it
    killed the child, or is None."""

    def __init__(
        self,
        root_pid: int,
        *,
        whole_session: bool,
        max_processes: int,
        memory_bytes: int,
        directories: list[WatchedDirectories],
        kernel_problem: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.root_pid = root_pid
        self.whole_session = whole_session
        self.max_processes = max_processes
        self.memory_bytes = memory_bytes
        self.directories = directories
        self.kernel_problem = kernel_problem  # a limit the kernel enforced (an OOM kill in the group)
        self.problem: str | None = None
        # set while the child is stopped (ChildProcess.stop: another child is timed): its files
        # cannot change, and walking them would take the CPU from the timed one
        self.paused = False
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"watch-{root_pid}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def check(self) -> tuple[str | None, list[int]]:
        """(what is over its limit or None, the child's processes)."""
        pids = child_processes(self.root_pid, whole_session=self.whole_session)
        if len(pids) > self.max_processes:
            return f"{len(pids)} processes, over the limit of {self.max_processes} (max_processes)", pids
        memory = resident_bytes(pids)
        if memory > self.memory_bytes:  # pages shared copy-on-write counted once each: look closer
            memory = proportional_bytes(pids)
        if memory > self.memory_bytes:
            held = _format_bytes(memory)
            return (
                f"{held} of memory held, over the limit of {_format_bytes(self.memory_bytes)} (memory_bytes)",
                pids,
            )
        for group in [] if self.paused else self.directories:
            used = tree_bytes(group.paths, stop_above=group.limit)
            if used > group.limit:
                over = f"over the limit of {_format_bytes(group.limit)} ({group.setting})"
                return f"more than {_format_bytes(group.limit)} in {group.what}, {over}", pids
        return None, pids

    def _watch(self) -> None:
        while not self._stopped.wait(POLL_INTERVAL_S):
            try:
                problem, pids = self.check()
            except OSError:  # what the child made or ended under this look: the next one looks again
                continue
            if problem is None and self.kernel_problem() is None:
                continue
            self.problem = problem  # None: the kernel's reason, which the supervisor reads
            for kill, target in [(os.killpg, self.root_pid), *((os.kill, pid) for pid in pids)]:
                try:
                    kill(target, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            return
