"""Where a sandboxed child works and what it may see: its private io and working directories
(and those of killed parents, removed), the shared buffer for timed outputs, the environment it
starts with, the directories hidden from it (the store's, handed in as paths through
`SandboxLimits.hidden_paths`, and the shared temporary and cache roots), and the bytecode its
imports need."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

from harness.config import DB_DIR, get_settings, sqlite_directory
from harness.errors import HarnessError
from harness.sandbox.limits import SandboxLimits

KEPT_ENVIRONMENT = (
    "PATH",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "TORCH_CUDA_ARCH_LIST",
    "CC",
    "CXX",
    "MAX_JOBS",
    "LANG",
    "LC_ALL",
    "TZ",
)
MIN_SHM_FREE_BYTES = 2 * 1024**3
IO_DIR_PREFIX = "harness-io-"  # then the parent's pid: harness-io-<pid>-<random>
WORKDIR_PREFIX = "run-"  # in work_root(), the same way
PROBE_DIR_PREFIX = "harness-probe-"  # the isolation probe's scratch directory, the same way


def create_shared_memory(name: str) -> int:
    """A memfd shared with a child (harness.sandbox.transfer.SharedBuffer): its timed outputs
    (`harness-timed-output`) or its inputs (`harness-inputs`). The parent grows it; shrinking is
    sealed, and so are the seals (the child cannot add F_SEAL_GROW and keep the parent from
    growing it), so that no mapping of it ever loses its pages. Torch-free, like the rest of the
    spawn."""
    import fcntl

    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    return fd


def remove_tree(
    path: str | os.PathLike, *, dir_fd: int | None = None, give_up_after_s: float | None = None
) -> str | None:
    """Remove `path` (relative to the directory open as `dir_fd`, when given) and everything
    under it; never raises. Returns None when it is gone (or never was), else why not.

    A child made what is in there: any depth (shutil.rmtree recurses, and a chain of a few
    thousand folders raises RecursionError, which is no OSError), any name, folders without
    permissions, links. So the walk is iterative and fd-relative, with a constant number of
    descriptors: it goes down through `openat(name, O_NOFOLLOW)` and back up through `..`, checked
    to be the folder it came from (device and inode), so a path's length never matters and no link
    is followed; a folder it cannot read is given its owner's permissions (through an O_PATH
    descriptor, never by name) and tried once more. With `give_up_after_s` it stops after that
    long (a child still running can make folders as fast as they are removed)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    path = os.fspath(path)
    parent, name = os.path.split(path.rstrip("/")) if dir_fd is None else ("", path)
    opened_parent = None
    try:
        if dir_fd is None:
            opened_parent = dir_fd = os.open(parent or ".", flags)
        deadline = None if give_up_after_s is None else time.monotonic() + give_up_after_s
        return _remove_tree_at(dir_fd, name, flags, deadline)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    finally:
        if opened_parent is not None:
            os.close(opened_parent)


def _open_directory(dir_fd: int, name: str, flags: int) -> int:
    """`name` in `dir_fd` as a directory descriptor, with read, write and search permission for
    its owner (given through an O_PATH descriptor or the open one: the name is never followed)."""
    try:
        opened = os.open(name, flags, dir_fd=dir_fd)
    except PermissionError:
        handle = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            os.chmod(f"/proc/self/fd/{handle}", 0o700)
        finally:
            os.close(handle)
        opened = os.open(name, flags, dir_fd=dir_fd)
    mode = os.fstat(opened).st_mode
    if mode & 0o700 != 0o700:  # its entries can be removed only with write and search permission
        os.fchmod(opened, (mode | 0o700) & 0o7777)
    return opened


def _remove_tree_at(top_fd: int, top_name: str, flags: int, deadline: float | None) -> str | None:
    import stat

    try:
        facts = os.stat(top_name, dir_fd=top_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(facts.st_mode):
        os.unlink(top_name, dir_fd=top_fd)
        return None
    # the folders from the top down to the current one: (name in its parent, device, inode)
    path: list[tuple[str, int, int]] = [(top_name, facts.st_dev, facts.st_ino)]
    current = _open_directory(top_fd, top_name, flags)
    problem = None
    try:
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise OSError("gave up: the tree grew as fast as it was removed")
            below = None
            with os.scandir(current) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            if below is None:
                                below = entry.name
                        else:
                            os.unlink(entry.name, dir_fd=current)
                    except FileNotFoundError:
                        continue
            if below is not None:
                try:
                    facts = os.stat(below, dir_fd=current, follow_symlinks=False)
                    if not stat.S_ISDIR(facts.st_mode):
                        continue  # replaced meanwhile: the next look unlinks it
                    if facts.st_dev != path[-1][1]:
                        raise OSError(f"a mount point at depth {len(path)}")
                    deeper = _open_directory(current, below, flags)
                except FileNotFoundError:
                    continue
                os.close(current)
                current = deeper
                path.append((below, facts.st_dev, facts.st_ino))
                continue
            name = path.pop()[0]
            if not path:
                os.close(current)
                current = None
                os.rmdir(top_name, dir_fd=top_fd)
                return None
            upper = os.open("..", flags, dir_fd=current)
            facts = os.fstat(upper)
            os.close(current)
            current = upper
            if (facts.st_dev, facts.st_ino) != path[-1][1:]:
                raise OSError("a folder was moved during the removal")
            os.rmdir(name, dir_fd=current)
    except OSError as exc:
        problem = f"{top_name}: {exc.strerror or exc}"
    finally:
        if current is not None:
            os.close(current)
    return problem


def make_io_dir() -> Path:
    """A fresh private directory for one child's files: in /dev/shm when it is writable and has
    room (a container's default 64 MiB would end a large copy with SIGBUS), else in the
    temporary directory."""
    shm = Path("/dev/shm")
    root = None
    if shm.is_dir() and os.access(shm, os.W_OK):
        stats = os.statvfs(shm)
        if stats.f_bavail * stats.f_frsize >= MIN_SHM_FREE_BYTES:
            root = shm
    return Path(tempfile.mkdtemp(prefix=f"{IO_DIR_PREFIX}{os.getpid()}-", dir=root))


@cache
def remove_files_of_dead_parents() -> None:
    """Once per process: remove the io, work and probe directories (`make_io_dir`,
    `ChildProcess.workdir`, `_probe_isolation`) of harness processes that were killed before they
    could (SIGKILL, a lost node): those, of this user, named after a pid that no longer runs on
    this host."""
    from harness.environment import process_is_gone

    _remove_harness_dirs(process_is_gone, "a dead harness process's files")


def remove_files_of_this_process() -> None:
    """Remove what is left of this process's own io, work and probe directories: for the very end
    of a command, once every child is stopped. Ctrl-C or SIGTERM while a child was being made
    (its directories made, the child not yet in the hands of whoever closes it) left them behind
    until the next command's `remove_files_of_dead_parents`."""
    own = os.getpid()
    _remove_harness_dirs(lambda pid: pid == own, "this process's files")


def _remove_harness_dirs(select: Callable[[int], bool], what: str) -> None:
    temporary = tempfile.gettempdir()
    roots = [
        ("/dev/shm", IO_DIR_PREFIX),
        (temporary, IO_DIR_PREFIX),
        (temporary, PROBE_DIR_PREFIX),
        (work_root(), WORKDIR_PREFIX),
    ]
    for root, prefix in roots:
        try:
            entries = [entry for entry in os.scandir(root) if entry.name.startswith(prefix)]
        except OSError:
            continue
        for entry in entries:
            pid, dash, _ = entry.name.removeprefix(prefix).partition("-")  # mkdtemp's own names have no dash
            try:
                mine = (
                    entry.is_dir(follow_symlinks=False)
                    and entry.stat(follow_symlinks=False).st_uid == os.geteuid()
                )
            except OSError:
                continue
            if mine and dash and pid.isdigit() and select(int(pid)):
                problem = remove_tree(entry.path)
                if problem is not None:  # left as it is: it stops nothing
                    print(f"warning: could not remove {what}: {problem}", file=sys.stderr)


# What a child imports besides the candidate (see `warm_bytecode`).
CHILD_IMPORTS = "import torch, torch.nn.functional, triton, harness.sandbox.child, harness.sandbox.transfer"


@cache
def warm_bytecode(optimized: bool) -> None:
    """Children never write bytecode (PYTHONDONTWRITEBYTECODE, read-only mounts), and CPU children
    run with -O, for which Python keeps separate bytecode (*.opt-1.pyc) that an installation
    usually lacks. Where the bytecode of torch is missing (an image built with
    PYTHONDONTWRITEBYTECODE, seen on the H200 machine: every process compiled torch from source,
    seconds each), each child would compile it again. Once per process, import the child's
    libraries in a process of our own, with nothing of a candidate in it, as any `python` run
    does: Python writes the bytecode next to the sources where it may (silently not where it may
    not). Later harness processes read it too."""
    import importlib.util

    spec = importlib.util.find_spec("torch")  # not imported: the parent may not have imported it yet
    if spec is None or not spec.origin:
        return
    if Path(importlib.util.cache_from_source(spec.origin, optimization=1 if optimized else "")).exists():
        return
    env = python_environment()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        subprocess.run(
            [sys.executable, *(["-O"] if optimized else []), "-c", CHILD_IMPORTS],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        pass


def python_environment() -> dict[str, str]:
    """The kept variables (PATH, CUDA's) and a PYTHONPATH that finds the harness package."""
    env = {key: os.environ[key] for key in KEPT_ENVIRONMENT if key in os.environ}
    env.setdefault("PATH", "/usr/bin:/bin")
    # The harness package first, then whatever the parent's PYTHONPATH adds (packages installed
    # with `pip --target`, as on a machine whose image lacks some of them).
    parts = [
        str(Path(__file__).resolve().parents[2]),
        *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)),
    ]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


def _needed_paths() -> list[Path]:
    """Directories the child must still see: the interpreter, its libraries, the harness (each as
    resolved and, where a symbolic link leads there, as named)."""
    named = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).parent}
    named.add(Path(__file__).resolve().parents[2])
    named.update(Path(entry).absolute() for entry in sys.path if entry and Path(entry).is_dir())
    return list({*named, *(path.resolve() for path in named)})


def work_root() -> Path:
    """Where the children's working directories are made (one per evaluation)."""
    root = Path(tempfile.gettempdir(), f"harness-sandbox-{os.getuid()}")
    root.mkdir(mode=0o700, exist_ok=True)
    return root


def hidden_directories(limits: SandboxLimits) -> list[str]:
    """Store directories and shared temporary/cache roots. A root that holds something the child
    needs to run (a virtualenv under /tmp, a checkout beside the store) is hidden all the same:
    `visible_paths` are bound back into it, read-only. A shared root that is itself such a path
    stays visible, read-only; a store's directory never does: HarnessError (fail closed)."""
    settings = get_settings()
    stores = [sqlite_directory(settings.db), *limits.hidden_paths]
    candidates = [*stores, DB_DIR, tempfile.gettempdir(), "/tmp", work_root(), "/dev/shm", settings.cache_dir]
    needed = _needed_paths()
    hidden: list[str] = []
    for candidate in candidates:
        if candidate is None:
            continue
        path = Path(candidate).resolve()
        if path == Path("/") or not path.is_dir() or str(path) in hidden:
            continue
        if any(path == need or path == need.resolve() for need in needed):
            if candidate in stores:
                raise HarnessError(
                    f"the store's folder {path} is also a folder the sandbox must show (the interpreter, "
                    "its libraries or the harness): it cannot be hidden; move the store to a folder of its own"
                )
            continue
        hidden.append(str(path))
    return hidden


def visible_paths(hidden: list[str]) -> list[str]:
    """The paths the child needs that lie under a hidden directory (bound back, read-only)."""
    roots = [Path(path) for path in hidden]
    found = {
        str(need) for need in _needed_paths() if any(root in need.parents for root in roots) and need.is_dir()
    }
    return sorted(found)


# the per-code caches a candidate's child writes (its kernels, extensions and compiled graphs),
# each keyed inside by what its entries depend on (Triton: the kernel's source, options, target
# and version; torch's extensions: their sources; Inductor: the graph)
CODE_CACHE_KINDS = ("triton", "torch_extensions", "inductor")
SEED_CACHE_BYTES = 256 * 1024**2  # a parent's caches copied into a child's only up to this size


def code_cache_dirs(code_sha256: str) -> tuple[Path, ...]:
    """The per-code caches of the candidate whose code hashes to `code_sha256`, in the settings'
    cache directory: Triton's, torch's extensions', Inductor's (CODE_CACHE_KINDS, in that order)."""
    root = Path(get_settings().cache_dir)
    return tuple(root / kind / code_sha256 for kind in CODE_CACHE_KINDS)


def seed_code_caches(code_sha256: str, from_sha256: str, max_bytes: int = SEED_CACHE_BYTES) -> int:
    """Copy the per-code caches of `from_sha256` (a revision's parent) into those of `code_sha256`
    where the latter are still empty, so that kernels, extensions and graphs a child shares byte
    for byte with its parent are not compiled again (issue 31); each cache's own keys decide what
    is reused, as they do across runs of one candidate. A copy, never a link: what the child then
    writes stays its own. Only folders and regular files (owned by this user, one link each) are
    copied, walking without following links: a link planted in the parent's cache is not followed
    by this process, which sees what the sandbox hides. A source over `max_bytes` in all copies
    nothing; a cache that cannot be read whole is left out (the others still copied). Returns the
    bytes copied."""
    from harness.sandbox.resources import tree_bytes

    if from_sha256 == code_sha256:
        return 0
    sources = code_cache_dirs(from_sha256)
    if tree_bytes([s for s in sources if s.is_dir()], stop_above=max_bytes) > max_bytes:
        return 0
    copied = 0
    for source, target in zip(sources, code_cache_dirs(code_sha256), strict=True):
        if not source.is_dir() or (target.is_dir() and any(target.iterdir())):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".seed-", dir=target.parent))
        try:
            size = _copy_regular_tree(source, staging, max_bytes - copied)
        except OSError:
            remove_tree(staging)
            continue
        if target.is_dir() and not any(target.iterdir()):
            target.rmdir()
        try:
            staging.rename(target)  # whole or not at all
        except OSError:
            remove_tree(staging)
            continue
        copied += size
    return copied


_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _copy_regular_tree(source: Path, target: Path, max_bytes: int) -> int:
    """Folders and regular files (this user's, one link each: `open_exported`) of `source` into
    `target`, walked through descriptors, each folder opened O_NOFOLLOW relative to the one above
    it, so that a child swapping a folder for a link meanwhile sends the walk nowhere; anything
    else is left out. Returns bytes; OSError past `max_bytes` (a running child may still be
    writing there), or where a folder cannot be opened."""
    import stat

    from harness.sandbox.files import open_exported

    copied = 0
    top = os.open(source, _FOLDER)
    stack = [(top, os.scandir(top), target)]  # the folders from `source` down, each open
    try:
        while stack:
            folder, entries, into = stack[-1]
            entry = next(entries, None)
            if entry is None:
                entries.close()
                os.close(folder)
                stack.pop()
                continue
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                below = os.open(entry.name, _FOLDER, dir_fd=folder)
                try:
                    (into / entry.name).mkdir(mode=0o700)
                    stack.append((below, os.scandir(below), into / entry.name))
                except OSError:
                    os.close(below)
                    raise
            elif stat.S_ISREG(info.st_mode):
                try:
                    descriptor = open_exported(folder, entry.name)  # swapped meanwhile: left out
                except ValueError:
                    continue
                with os.fdopen(descriptor, "rb") as reading, open(into / entry.name, "xb") as writing:
                    while chunk := reading.read(1 << 20):
                        writing.write(chunk)
                        copied += len(chunk)
                        if copied > max_bytes:
                            raise OSError(f"more than {max_bytes} bytes to copy")
    finally:
        for folder, entries, _ in stack:
            entries.close()
            os.close(folder)
    return copied
