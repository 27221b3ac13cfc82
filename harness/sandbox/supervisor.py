"""The parent side of the sandbox: start a child per evaluation, talk to it, enforce limits.

`ChildProcess` is one sandboxed child serving a sequence of requests; `evaluate` uses one to
check a candidate on a shape set. How it defends itself (docs/runner.md has the full account):

- a fresh process (`python -m harness.sandbox.child`) in a new session, in a temporary working
  directory with the candidate as submission.py and the task's shim as task.py;
- a scrubbed environment: no HARNESS_* values, no store URL, no secrets; HOME and TMPDIR in the
  working directory; Triton, torch-extension and TorchInductor caches kept across runs, keyed by
  the code's sha256 (a re-evaluation, `--force` included, compiles nothing twice);
- where `unshare` works, new user, network, pid and mount namespaces (detected once, falling back
  silently; the result records what was used); resource limits (file size, core dumps, CPU time,
  process count, address space on the CPU) set between fork and exec, and the parent's watch of
  the child's processes, memory and directories (harness.sandbox.resources);
- messages over two private pipes with a per-run token, never over stdout; the candidate's output
  goes to a pipe whose last 64 KiB are kept;
- a deadline for the import/compile phase, one per call and one for the whole evaluation; on
  expiry the whole process group is killed with SIGKILL.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import json
import os
import resource
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from time import monotonic
from typing import Literal
from urllib.parse import unquote

from pydantic import BaseModel, ValidationError
from typing_extensions import Self

from harness.config import DB_DIR, get_settings
from harness.errors import HarnessError
from harness.sandbox.protocol import (
    MAX_MESSAGE_BYTES,
    REPLY,
    CallDone,
    CallSeed,
    CheckReply,
    CheckRequest,
    Hello,
    ImportFailed,
    InitStatus,
    IsolationPlan,
    Message,
    Ready,
    SeedWanted,
    Shutdown,
    Started,
    TimeReply,
    TimeRequest,
    encode,
)
from harness.sandbox.resources import (
    PARENT_PID,
    ResourceWatch,
    WatchedDirectories,
    processes_where,
    tree_bytes,
)
from harness.tasks import TaskSpec
from harness.tasks.spec import deterministic_environment
from harness.timing import StoppingRule

LOG_TAIL_BYTES = 64 * 1024
REASON_LOG_TAIL_CHARS = 300
SHUTDOWN_GRACE_S = 5.0
PROBE_TIMEOUT_S = 20.0
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


class SandboxLimits(BaseModel):
    """Limits of one evaluation. `from_settings()` takes the time limits from the settings."""

    startup_timeout_s: float = 120.0  # spawn until torch is imported in the child
    import_timeout_s: float = 300.0
    call_timeout_s: float = 120.0
    # the parent's time waiting on the child, summed over the evaluation (ChildProcess.spent_s)
    evaluation_timeout_s: float = 1200.0
    cpu_time_s: int = 4 * 3600
    file_size_bytes: int = 8 * 1024**3
    # RLIMIT_AS per process on the CPU; all processes' resident memory, watched by the parent
    memory_bytes: int = 16 * 1024**3
    extra_processes: int = 1024  # RLIMIT_NPROC above the user's current count (not for root)
    max_processes: int = 256  # the child's processes (not threads), watched by the parent
    # each private tmpfs (the working directory, the hidden /tmp and /dev/shm); the working and
    # exchange directories on the host, watched by the parent
    disk_bytes: int = 1024**3
    code_cache_bytes: int = 1024**3  # the per-code caches after the run (`ChildProcess.trim_caches`)
    isolation: Literal["auto", "none"] = "auto"
    hidden_paths: list[str] = []  # more directories to hide (a store's directory)
    check_all_autotune_configs: bool | None = None  # None: on the CPU only
    max_checked_autotune_configs: int = 16  # per shape: config 0 and a sample of the rest
    # Keep Triton's autotuning results with the compiled kernels (per code sha256), so that a
    # re-evaluation (the leaderboard phase after the benchmark phase, --force) times the config
    # chosen the first time instead of benchmarking every config again. Off by default: each
    # evaluation then tunes afresh, as a fresh process on GPU MODE's runners does.
    cache_autotuning: bool = False

    @classmethod
    def from_settings(cls, **overrides: object) -> SandboxLimits:
        """Time and resource limits from the settings; HARNESS_SANDBOX_ISOLATION=none turns the namespaces off
        (an escape hatch for a machine where they break the GPU); HARNESS_CACHE_AUTOTUNING=1 keeps
        Triton's autotuning results (`cache_autotuning`)."""
        settings = get_settings()
        names = (
            "import_timeout_s",
            "call_timeout_s",
            "evaluation_timeout_s",
            "max_checked_autotune_configs",
            "memory_bytes",
            "max_processes",
            "disk_bytes",
            "code_cache_bytes",
        )
        values = {name: getattr(settings, name) for name in names}
        isolation = os.environ.get("HARNESS_SANDBOX_ISOLATION")
        if isolation:
            if isolation not in ("auto", "none"):
                raise HarnessError(f"HARNESS_SANDBOX_ISOLATION={isolation!r}: use auto or none")
            values["isolation"] = isolation
        cache_autotuning = os.environ.get("HARNESS_CACHE_AUTOTUNING")
        if cache_autotuning:
            if cache_autotuning not in ("0", "1"):
                raise HarnessError(f"HARNESS_CACHE_AUTOTUNING={cache_autotuning!r}: use 0 or 1")
            values["cache_autotuning"] = cache_autotuning == "1"
        values.update({key: value for key, value in overrides.items() if value is not None})
        return cls(**values)


def child_key(code_sha256: str, task: str, device: str, limits: SandboxLimits) -> tuple[str, str, str, str]:
    """What a sandboxed child is made for: the same candidate, task, device and limits."""
    return (code_sha256, task, device, limits.model_dump_json())


# Children made for an evaluation before its Evaluator exists, by `child_key`; the Evaluator of
# the same candidate takes its child from here (harness.sandbox.evaluation):
# - kept: ready, kept after a passing evaluation for the candidate's next phase (`keep_child`);
# - early: spawned by `start_children_early` while the parent imports torch, not yet ready.
kept_children: dict[tuple[str, str, str, str], ChildProcess] = {}
early_children: dict[tuple[str, str, str, str], ChildProcess] = {}


# Every child spawned and not yet closed, so that a timing phase can stop all the others
# (`others_stopped`); the lock lets one timing phase run at a time in this process.
live_children: set[ChildProcess] = set()
_timing_lock = threading.Lock()


def start_children_early(wanted: list[tuple[bytes, TaskSpec, str, SandboxLimits]]) -> None:
    """Spawn a child for each (code, task, device, limits) that has no kept or early child yet,
    without waiting: they import torch and their candidates while the caller imports torch
    itself and sets up the evaluations that will take them. A child that dies at once is left
    for its evaluation to start again (and to record why)."""
    for code, task, device, limits in wanted:
        key = child_key(hashlib.sha256(code).hexdigest(), task.name, device, limits)
        if key in kept_children or key in early_children:
            continue
        child = ChildProcess(code, task, device=device, limits=limits, code_sha256=key[0])
        try:
            child.spawn()
        except ChildFailure:
            child.close()
            continue
        early_children[key] = child


def close_waiting_children() -> None:
    """Stop every kept or early child that no evaluation took (asked together, then waited for)."""
    children = [*kept_children.values(), *early_children.values()]
    kept_children.clear()
    early_children.clear()
    for child in children:
        child.request_shutdown()
    for child in children:
        child.close()


atexit.register(close_waiting_children)


@contextmanager
def others_stopped(child: ChildProcess) -> Iterator[None]:
    """Stop every other live child (`ChildProcess.stop`) for the duration, then resume them: no
    other candidate (kept, spawned early, waiting for its turn in a group) runs while `child` is
    timed."""
    others = [other for other in list(live_children) if other is not child]
    try:
        for other in others:
            other.stop()
        yield
    finally:
        for other in others:
            other.resume()


class ChildFailure(Exception):
    """The child timed out, died, or broke the protocol; it is gone when this is raised."""

    def __init__(self, status: Literal["timeout", "crashed"], reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


# --- isolation ------------------------------------------------------------------------------


@dataclass(frozen=True)
class IsolationLevel:
    name: str
    prefix: tuple[str, ...]
    full: bool  # mount + pid namespaces: the child hides, remounts read-only, forks an init, locks


UNSHARE_FULL = ("--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc")
ISOLATION_LEVELS = (
    IsolationLevel("user+net+pid+mount", ("unshare", "--user", "--map-root-user", *UNSHARE_FULL), True),
    IsolationLevel("net+pid+mount", ("unshare", *UNSHARE_FULL), True),
    IsolationLevel("user+net", ("unshare", "--user", "--map-root-user", "--net"), False),
    IsolationLevel("net", ("unshare", "--net"), False),
)
NO_ISOLATION = IsolationLevel("none", (), False)


ISOLATION_CACHE = "isolation-levels.json"  # in the cache directory: fingerprint -> level name
USERNS_SYSCTLS = (  # what decides whether unprivileged user namespaces are granted
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
)
_isolation_levels: dict[str, IsolationLevel] = {}
_levels_from_cache: dict[str, str] = {}  # device -> the fingerprint its level was read under
_isolation_lock = threading.Lock()


def isolation_fingerprint(device: str) -> str | None:
    """A digest of what decides which namespaces a child gets (this boot, the kernel and its user
    namespace settings, the user, unshare, the interpreter; on a GPU, the GPUs and the driver),
    read without starting anything; None when some of it cannot be read (then nothing is kept)."""
    from harness.environment import BOOT_ID_FILE, gpu_fingerprint

    try:
        boot_id = BOOT_ID_FILE.read_text().strip()
    except OSError:
        return None
    sysctls = {}
    for path in USERNS_SYSCTLS:
        try:
            sysctls[path] = Path(path).read_text().strip()
        except OSError:
            sysctls[path] = None
    facts = {
        "device": device,
        "boot_id": boot_id,
        "kernel": os.uname().release,
        "sysctls": sysctls,
        "uid": os.getuid(),
        "unshare": shutil.which("unshare"),
        "python": sys.executable,
        "levels": [(level.name, level.prefix) for level in ISOLATION_LEVELS],
    }
    if device == "cuda":
        facts["gpus"] = gpu_fingerprint("")
        if facts["gpus"] is None:
            return None
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def detect_isolation(device: str = "cpu") -> IsolationLevel:
    """The strongest level whose namespaces this system grants, tried once per process and
    device: the full levels run the child's own probe (hide, remount read-only, fork an init,
    lock); for cuda every level must also run a CUDA kernel inside its namespaces (a process that
    imports torch and starts CUDA: seconds on a GPU machine). The answer is kept on disk under
    `isolation_fingerprint`, so later commands skip the probe; a kept level that then fails to
    start a child is dropped (`forget_kept_isolation`). A caller that comes while another thread
    probes (`start_isolation_probe`) waits for its answer."""
    from harness.environment import read_kept, write_kept

    with _isolation_lock:
        if device in _isolation_levels:
            return _isolation_levels[device]
        fingerprint = isolation_fingerprint(device)
        name = read_kept(ISOLATION_CACHE).get(fingerprint) if fingerprint else None
        level = next((level for level in (*ISOLATION_LEVELS, NO_ISOLATION) if level.name == name), None)
        if level is not None:
            _levels_from_cache[device] = fingerprint
        else:
            level = _probe_isolation(device)
            if fingerprint is not None:
                write_kept(ISOLATION_CACHE, {**read_kept(ISOLATION_CACHE), fingerprint: level.name})
        _isolation_levels[device] = level
        return level


def forget_kept_isolation(device: str) -> bool:
    """Drop a level that was read from the disk for `device` (in this process and on disk);
    True when there was one: a child that failed before its first message may have failed
    because the system no longer grants those namespaces."""
    from harness.environment import read_kept, write_kept

    with _isolation_lock:
        fingerprint = _levels_from_cache.pop(device, None)
        if fingerprint is None:
            return False
        _isolation_levels.pop(device, None)
        kept = read_kept(ISOLATION_CACHE)
        kept.pop(fingerprint, None)
        write_kept(ISOLATION_CACHE, kept)
        return True


def start_isolation_probe(device: str) -> None:
    """Start `detect_isolation(device)` in a background thread now (the probe is a child
    process: the thread only waits), so that it runs while this process imports torch, opens the
    store and claims its runs; the first child's spawn then finds the answer ready or waits for
    it. Nothing when the settings turn isolation off."""
    if os.environ.get("HARNESS_SANDBOX_ISOLATION") == "none" or device in _isolation_levels:
        return
    threading.Thread(target=detect_isolation, args=(device,), name="isolation-probe", daemon=True).start()


def _probe_isolation(device: str) -> IsolationLevel:
    if shutil.which("unshare") is None:
        return NO_ISOLATION
    use_cuda = "import torch; torch.ones(1, device='cuda').add_(1); torch.cuda.synchronize()"
    for level in ISOLATION_LEVELS:
        with tempfile.TemporaryDirectory(prefix=f"{PROBE_DIR_PREFIX}{os.getpid()}-") as scratch:
            if level.full:
                for name in ("hidden", "writable"):
                    Path(scratch, name).mkdir()
                Path(scratch, "hidden", "secret").write_text("x")
                command = [*level.prefix, sys.executable, "-m", "harness.sandbox.child", "--probe", scratch]
                command += ["--probe-cuda"] if device == "cuda" else []
            else:
                command = [*level.prefix, sys.executable, "-c", use_cuda if device == "cuda" else "pass"]
            done = _run_probe(command, PROBE_TIMEOUT_S * (3 if device == "cuda" else 1))
            if done is not None and done[0] == 0 and (not level.full or done[1].strip() == b"ok"):
                return level
    return NO_ISOLATION


_probes: set[subprocess.Popen] = set()


def _run_probe(command: list[str], timeout_s: float) -> tuple[int, bytes] | None:
    """(exit code, stdout) of one probe process, or None when it could not start or timed out.
    Each probe leads its own process group, so that `_stop_probes` can end it."""
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_python_environment(),
            start_new_session=True,
        )
    except OSError:
        return None
    _probes.add(process)
    try:
        stdout, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_probe(process)
        process.wait()
        return None
    finally:
        _probes.discard(process)
    return process.returncode, stdout


def _kill_probe(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@atexit.register
def _stop_probes() -> None:
    """At exit (a command with nothing to evaluate, an error, Ctrl-C): end a probe still running
    in the background and let its thread remove its scratch directory."""
    for process in list(_probes):
        _kill_probe(process)
    for thread in threading.enumerate():
        if thread.name == "isolation-probe":
            thread.join(timeout=5)


MIN_SHM_FREE_BYTES = 2 * 1024**3
IO_DIR_PREFIX = "harness-io-"  # then the parent's pid: harness-io-<pid>-<random>
WORKDIR_PREFIX = "run-"  # in work_root(), the same way
PROBE_DIR_PREFIX = "harness-probe-"  # the isolation probe's scratch directory, the same way


def create_shared_output() -> int:
    """The memfd a child puts its timed outputs in (harness.sandbox.transfer.SharedBuffer): the
    parent grows it; shrinking is sealed, and so are the seals (the child cannot add F_SEAL_GROW
    and keep the parent from growing it). Torch-free, like the rest of the spawn."""
    import fcntl

    fd = os.memfd_create("harness-timed-output", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    return fd


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
                mine = entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_uid == os.geteuid()
            except OSError:
                continue
            if mine and dash and pid.isdigit() and process_is_gone(int(pid)):
                shutil.rmtree(entry.path, ignore_errors=True)


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
    env = _python_environment()
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


def _python_environment() -> dict[str, str]:
    """The kept variables (PATH, CUDA's) and a PYTHONPATH that finds the harness package."""
    env = {key: os.environ[key] for key in KEPT_ENVIRONMENT if key in os.environ}
    env.setdefault("PATH", "/usr/bin:/bin")
    # The harness package first, then whatever the parent's PYTHONPATH adds (packages installed
    # with `pip --target`, as on a machine whose image lacks some of them).
    parts = [str(Path(__file__).resolve().parents[2]), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


def sqlite_directory(url: str | None) -> str | None:
    """The directory of a SQLite store, to hide from the child; None for other URLs."""
    if not url or not url.startswith("sqlite:///"):
        return None
    path = unquote(url.removeprefix("sqlite:///").split("?", 1)[0])
    return str(Path(path).resolve().parent) if path and path != ":memory:" else None


def _needed_paths() -> list[Path]:
    """Directories the child must still see: the interpreter, its libraries, the harness."""
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent}
    paths.add(Path(__file__).resolve().parents[2])
    paths.update(Path(entry).resolve() for entry in sys.path if entry and Path(entry).is_dir())
    return list(paths)


def work_root() -> Path:
    """Where the children's working directories are made (one per evaluation)."""
    root = Path(tempfile.gettempdir(), f"harness-sandbox-{os.getuid()}")
    root.mkdir(mode=0o700, exist_ok=True)
    return root


def _hidden_directories(limits: SandboxLimits) -> list[str]:
    """Store directories and shared temporary/cache roots, except any that hold something the
    child needs to run (a virtualenv under /tmp stays visible, read-only)."""
    settings = get_settings()
    candidates = [DB_DIR, sqlite_directory(settings.db), *limits.hidden_paths]
    candidates += [tempfile.gettempdir(), "/tmp", work_root(), "/dev/shm", settings.cache_dir]
    needed = _needed_paths()
    hidden: list[str] = []
    for candidate in candidates:
        if candidate is None:
            continue
        path = Path(candidate).resolve()
        if path == Path("/") or not path.is_dir() or str(path) in hidden:
            continue
        if any(path == need or path in need.parents for need in needed):
            continue
        hidden.append(str(path))
    return hidden


# --- the child process ----------------------------------------------------------------------


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _resource_limits(limits: SandboxLimits, device: str):
    """The preexec_fn: resource limits for the child, set between fork and exec. The address
    space is limited on the CPU only: CUDA reserves terabytes of it (the parent's
    `ResourceWatch` bounds resident memory on every device)."""
    nproc = None
    if os.getuid() != 0:
        tasks = 0
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    if entry.stat().st_uid == os.getuid():
                        tasks += len(os.listdir(f"/proc/{entry.name}/task"))
                except OSError:
                    continue
        nproc = tasks + limits.extra_processes

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_bytes, limits.file_size_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_time_s, limits.cpu_time_s + 5))
        if device == "cpu":
            resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        if nproc is not None:
            _soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
            if hard == resource.RLIM_INFINITY or nproc < hard:
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return apply


class ChildProcess:
    """One sandboxed child running one candidate; it serves requests until `close()`.

    Use it as a context manager: `start()` (import phase; or `spawn()` now and `wait_ready()`
    later, so that several children import at once), then any number of `check()` calls
    (a timing request fits the same way: send, wait with a deadline, validate the reply).
    Every method that waits raises `ChildFailure` when the child times out, dies or breaks the
    protocol; the child is killed by then.
    """

    def __init__(self, code: bytes, task: TaskSpec, *, device: str, limits: SandboxLimits, code_sha256: str):
        self.task = task
        self.device = device
        self.limits = limits
        self.token = secrets.token_hex(16)
        self.level = NO_ISOLATION if limits.isolation == "none" else detect_isolation(device)
        self.level_was_kept = limits.isolation != "none" and device in _levels_from_cache
        self.next_id = 0
        self.log = bytearray()
        self.log_total = 0
        self.proc: subprocess.Popen | None = None
        self.buffer = b""
        self.status_fd: int | None = None
        # the shared buffer for timed outputs (create_shared_output), its size as this parent set
        # it, and the parent's mapping of it (a transfer.SharedBuffer, made by whoever reads first)
        self.output_fd: int | None = None
        self.shared_bytes = 0
        self.shared_reader = None
        self.shutdown_requested = False
        self.startup_s: float | None = None
        self.ready: Ready | ImportFailed | None = None
        # The parent's time waiting on this child in the current evaluation (`_receive`), against
        # limits.evaluation_timeout_s; an evaluation that adopts a kept child sets it to 0.
        self.spent_s = 0.0
        self.watch: ResourceWatch | None = None
        self.caches_trimmed: str | None = None  # why `trim_caches` removed the per-code caches
        self.stopped_pids: list[int] = []  # stopped by another child's timing phase (`stop`)
        self.pauses: list[tuple[float, float]] = []  # (from, to) on the parent's clock, ended pauses
        self.paused_at: float | None = None
        settings = get_settings()
        self.triton_cache = Path(settings.cache_dir, "triton", code_sha256)
        self.extensions_cache = Path(settings.cache_dir, "torch_extensions", code_sha256)
        self.inductor_cache = Path(settings.cache_dir, "inductor", code_sha256)
        self.caches = (self.triton_cache, self.extensions_cache, self.inductor_cache)
        for cache_dir in self.caches:
            cache_dir.mkdir(parents=True, exist_ok=True)
        remove_files_of_dead_parents()
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-", dir=work_root()))
        (self.workdir / "tmp").mkdir()
        (self.workdir / "submission.py").write_bytes(code)
        (self.workdir / "task.py").write_bytes(task.shim_file.read_bytes())
        (self.workdir / "reference.py").write_bytes(task.reference_file.read_bytes())
        if task.utils_file is not None:  # what a GPU MODE reference imports beside task.py
            (self.workdir / "utils.py").write_bytes(task.utils_file.read_bytes())
        self.io_dir = make_io_dir()
        # Files the child wrote are opened by name in this descriptor's directory (see
        # transfer.open_exported): never through a path the child could have replaced.
        self.io_fd: int | None = os.open(self.io_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)

    # lifecycle

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def environment(self) -> dict[str, str]:
        env = _python_environment()
        env.update(
            HOME=str(self.workdir),
            TMPDIR=str(self.workdir / "tmp"),
            XDG_CACHE_HOME=str(self.workdir / ".cache"),
            PYTHONNOUSERSITE="1",
            PYTHONDONTWRITEBYTECODE="1",
            TRITON_CACHE_DIR=str(self.triton_cache),
            TORCH_EXTENSIONS_DIR=str(self.extensions_cache),
            TORCHINDUCTOR_CACHE_DIR=str(self.inductor_cache),
        )
        env.update(deterministic_environment(self.task))  # the reference candidate runs ref_kernel
        if self.limits.cache_autotuning:
            env["TRITON_CACHE_AUTOTUNING"] = "1"  # in the Triton cache above (not under the interpreter)
        if self.device == "cpu":
            env["TRITON_INTERPRET"] = "1"
            # One intra-op thread: host-clock times stay stable when children, the parent and
            # other work share a few cores (an OpenMP barrier that waits on a descheduled
            # thread costs a whole time slice, turning 0.01 ms into 20 ms).
            env["OMP_NUM_THREADS"] = "1"
        return env

    def start(self) -> Ready | ImportFailed:
        """Spawn the child; wait until it has imported torch (startup_timeout_s), then until it has
        imported the candidate (import_timeout_s)."""
        self.spawn()
        return self.wait_ready()

    def spawn(self) -> None:
        """Start the child and send it `Hello`, without waiting: it goes on to import torch and the
        candidate while the parent spawns others (`wait_ready` collects its answer). The startup
        deadline runs from here."""
        request_read, self.request_fd = os.pipe()
        self.reply_fd, reply_write = os.pipe()
        self.output_fd = create_shared_output()
        output_for_child = os.dup(self.output_fd)
        child_fds = [request_read, reply_write, output_for_child]
        arguments = [
            "--request-fd", str(request_read), "--reply-fd", str(reply_write), "--output-fd", str(output_for_child)
        ]
        status_write = None
        if self.level.full:
            self.status_fd, status_write = os.pipe()
            child_fds.append(status_write)
            arguments += ["--status-fd", str(status_write)]
        # -O on the CPU: CUDA-only wrappers assert `is_cuda` on their inputs; the interpreter
        # runs their kernels on CPU tensors all the same. The parent checks every answer.
        flags = ["-O"] if self.device == "cpu" else []
        warm_bytecode(bool(flags))
        command = [
            *self.level.prefix,
            sys.executable,
            *flags,
            "-u",
            "-m",
            "harness.sandbox.child",
            *arguments,
        ]
        self.started = monotonic()
        try:
            self.proc = self._popen(command, child_fds)
        except OSError as exc:
            self._blame_kept_isolation(str(exc))
            raise HarnessError(f"could not start a sandboxed child: {exc}") from None
        finally:
            for fd in child_fds:
                os.close(fd)
        live_children.add(self)
        self.log_thread = threading.Thread(target=self._drain_log, daemon=True)
        self.log_thread.start()
        self.watch = ResourceWatch(
            self.proc.pid,
            whole_session=not self.level.full,
            max_processes=self.limits.max_processes,
            memory_bytes=self.limits.memory_bytes,
            directories=[
                WatchedDirectories(
                    (self.workdir, self.io_dir), self.limits.disk_bytes, "disk_bytes", "the working directories"
                ),
                WatchedDirectories(
                    self.caches, self.limits.code_cache_bytes, "code_cache_bytes", "the per-code caches"
                ),
            ],
        )
        self.watch.start()
        plan = IsolationPlan()
        if self.level.full:
            plan = IsolationPlan(
                mount=True,
                pid_init=True,
                lock=True,
                hidden=_hidden_directories(self.limits),
                private=[str(self.workdir)],
                tmpfs_bytes=self.limits.disk_bytes,
                writable=[
                    str(self.io_dir),
                    str(self.triton_cache),
                    str(self.extensions_cache),
                    str(self.inductor_cache),
                ],
            )
        hello = Hello(
            token=self.token,
            device=self.device,
            entry_point=self.task.entry_point,
            unpacked_entry_points=self.task.unpacked_entry_points,
            output_index=self.task.output_index,
            input_indices=self.task.input_indices,
            generator_takes_device=self.task.generator_takes_device,
            workdir=str(self.workdir),
            io_dir=str(self.io_dir),
            isolation=plan,
        )
        self._send(hello, "startup")

    def _popen(self, command: list[str], child_fds: list[int]) -> subprocess.Popen:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            env=self.environment(),
            pass_fds=child_fds,
            start_new_session=True,
            # Only setrlimit calls run between fork and exec (no locks, no allocation to speak of).
            preexec_fn=_resource_limits(self.limits, self.device),  # noqa: PLW1509
        )

    def _blame_kept_isolation(self, reason: str) -> None:
        """A child that could not start or died before its first message ran none of the
        candidate's code. When its isolation level was read from the disk, the system may no
        longer grant it: drop it and raise HarnessError (nothing is recorded; the next command
        probes afresh)."""
        if self.level_was_kept and forget_kept_isolation(self.device):
            raise HarnessError(
                f"a sandboxed child did not start under the kept isolation level {self.level.name} "
                f"({reason}); the kept level is dropped: run the command again"
            )

    def wait_ready(self) -> Ready | ImportFailed:
        """After `spawn`: wait until the child has imported torch (`Started`, due startup_timeout_s
        after the spawn; `startup_s` is that wait on the parent's clock), then until it has
        imported the candidate (`Ready` or `ImportFailed`, due import_timeout_s after `Started`).
        Children started together wait in threads, each on its own pipes and deadlines."""
        try:
            self._receive(self.started, self.limits.startup_timeout_s, "startup", (Started,))
        except ChildFailure as failure:
            self._blame_kept_isolation(failure.reason)
            raise
        self.startup_s = monotonic() - self.started
        self.ready = self._receive(
            monotonic(), self.limits.import_timeout_s, "import/compile", (Ready, ImportFailed)
        )
        return self.ready

    @property
    def serving(self) -> bool:
        """Started, ready, not asked to stop and still running: it can serve another evaluation."""
        return (
            isinstance(self.ready, Ready)
            and not self.shutdown_requested
            and self.proc is not None
            and self.proc.poll() is None
        )

    def request_shutdown(self) -> None:
        """Ask a running child to stop, without waiting for it (`close` waits): the children of a
        group then exit (and free their CUDA contexts) at the same time."""
        if self.proc is None or self.shutdown_requested or self.proc.poll() is not None:
            return
        self.shutdown_requested = True
        try:
            self._send(Shutdown(), "shutdown")
        except ChildFailure:
            pass  # already gone; close() finds it so

    def kill_group(self) -> None:
        """SIGKILL the child's process group and nothing else (safe from another thread: a thread
        waiting in `wait_ready` then sees the pipe close and ends)."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def processes(self) -> list[int]:
        """The child and every process descended from it (in a pid namespace, every process of
        the sandbox: orphans are reparented to its init; a new session or process group does not
        leave the tree), from the parent pids in /proc."""
        if self.proc is None:
            return []
        children: dict[int, list[int]] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
        tree, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo += children.get(pid, [])
        return tree

    def _init_pids(self) -> list[int]:
        """`unshare` and the init it forked (the pid namespace's pid 1): the first two levels of
        the child's tree under full isolation."""
        if self.proc is None:
            return []
        return [self.proc.pid, *processes_where(PARENT_PID, self.proc.pid)]

    def stop(self) -> None:
        """SIGSTOP every process of the child (its threads with it), again until no new one
        appears: while another child is timed, this one runs nothing on the CPU and launches
        nothing on the GPU. Its deadlines stand still meanwhile (`_paused_s`)."""
        if self.proc is None or self.proc.poll() is not None or self.paused_at is not None:
            return
        self.paused_at = monotonic()
        # Under full isolation the first process is `unshare` and its child the init of the pid
        # namespace, both harness code: they are left running, so that a parent killed meanwhile
        # is still seen by the init (its status pipe closes), which ends the namespace and with it
        # every stopped process. Stopped, they would wait for a SIGCONT that never comes.
        exempt = set(self._init_pids()) if self.level.full else set()
        stopped: set[int] = set()
        for _ in range(20):
            new = [pid for pid in self.processes() if pid not in stopped and pid not in exempt]
            if not new:
                break
            for pid in new:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except (ProcessLookupError, PermissionError):
                    pass
                stopped.add(pid)
        self.stopped_pids = sorted(stopped)

    def resume(self) -> None:
        """SIGCONT what `stop` stopped."""
        if self.paused_at is None:
            return
        for pid in self.stopped_pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass
        self.pauses.append((self.paused_at, monotonic()))
        self.paused_at, self.stopped_pids = None, []

    def _paused_s(self, since: float) -> float:
        """Seconds this child was stopped since `since` (a deadline from then moves by as much)."""
        now = monotonic()
        spans = [*self.pauses, *([(self.paused_at, now)] if self.paused_at is not None else [])]
        return sum(max(0.0, end - max(start, since)) for start, end in spans)

    def new_request_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def ask(self, request: Message, reply_type: type, *, timeout_s: float, phase: str):
        """Send one request (it has an `id` from `new_request_id`) and wait at most `timeout_s`
        for its reply, which must be a `reply_type` with the same id. `phase` names the request
        in a failure's reason ("call on smoke[2]")."""
        self._send(request, phase)
        return self._receive(monotonic(), timeout_s, phase, (reply_type,), request.id)

    def check(
        self, shape: dict, seed: int, *, autotune_config: int | None, phase: str, forget_tuning: bool = False
    ) -> CheckReply:
        """One call of the entry point on the given shape, limited to call_timeout_s (with
        `forget_tuning`, the autotuners forget their choices first: CheckRequest)."""
        request = CheckRequest(
            id=self.new_request_id(),
            shape=shape,
            seed=seed,
            autotune_config=autotune_config,
            forget_tuning=forget_tuning,
        )
        return self.ask(request, CheckReply, timeout_s=self.limits.call_timeout_s, phase=phase)

    def time(
        self,
        shape: dict,
        *,
        seed_for: Callable[[int], int],
        rule: StoppingRule,
        warmup_calls: int,
        warmup_s: float,
        autotune_config: int | None,
        on_output: Callable[[CallDone], None],
        phase: str,
        output_bytes: int = 0,
    ) -> TimeReply:
        """Warm up and time the entry point on one shape (harness.timing in the child), while every
        other child of this process is stopped (`others_stopped`).

        The child asks for each call's seed in turn (calls 0, 1, 2 ..., warm-up included) and
        gets `seed_for(k)`. Every timed call's output is exported to the shared buffer (grown to
        `output_bytes` first; harness.sandbox.transfer) or, when it does not fit, to
        `timed_output_name(id, k)`, and handed to `on_output` as soon as the call is over, before the next call's seed is
        sent. Every message is due within call_timeout_s of the one before it, so a hanging call
        is killed like one in `check`. `call_wall_ms` maps each timed call to the parent's own
        time from sending its seed to hearing that its output is in its file: the call, and
        everything the child did for it (inputs, NaN fill, flush, export), lies in between."""
        with _timing_lock, others_stopped(self):
            self.call_wall_ms: dict[int, float] = {}
            seed_sent_at: dict[int, float] = {}
            if self.output_fd is not None and output_bytes > self.shared_bytes:
                os.ftruncate(self.output_fd, output_bytes)  # grows it: shrinking is sealed
                self.shared_bytes = output_bytes
            request = TimeRequest(
                id=self.new_request_id(),
                shape=shape,
                shared_output_bytes=self.shared_bytes,
                warmup_calls=warmup_calls,
                warmup_s=warmup_s,
                min_runs=rule.min_runs,
                max_runs=rule.max_runs,
                max_rel_err=rule.max_rel_err,
                budget_s=rule.budget_s,
                autotune_config=autotune_config,
            )
            self._send(request, phase)
            # The child decides when warm-up and timing end by its own clock, which the candidate can
            # replace: the whole phase also has a deadline on the parent's clock, generous enough for
            # any honest run (warm-up and budget, four times over, and two whole calls).
            phase_limit_s = 4 * (warmup_s + rule.budget_s) + 2 * self.limits.call_timeout_s
            phase_deadline = monotonic() + phase_limit_s
            next_index = 0
            phase_timeout = f"{phase} ran past the phase's limit of {phase_limit_s:g} s on the parent's clock"
            while True:
                now = monotonic()
                if now >= phase_deadline:
                    raise self._fail("timeout", phase_timeout)
                try:
                    message = self._receive(
                        now,
                        min(self.limits.call_timeout_s, phase_deadline - now),
                        phase,
                        (SeedWanted, CallDone, TimeReply),
                        request.id,
                    )
                except ChildFailure as failure:
                    if failure.status == "timeout" and monotonic() >= phase_deadline:
                        raise ChildFailure("timeout", phase_timeout) from None
                    raise
                if isinstance(message, TimeReply):
                    return message
                if isinstance(message, SeedWanted):
                    if message.index != next_index:
                        raise self._fail("crashed", f"protocol violation during {phase}: calls out of order")
                    next_index += 1
                    seed = seed_for(message.index)
                    seed_sent_at[message.index] = monotonic()
                    self._send(CallSeed(id=request.id, index=message.index, seed=seed), phase)
                else:
                    if message.index not in seed_sent_at or message.index in self.call_wall_ms:
                        raise self._fail("crashed", f"protocol violation during {phase}: an output for no call")
                    self.call_wall_ms[message.index] = (monotonic() - seed_sent_at[message.index]) * 1e3
                    on_output(message)

    def output_name(self, request_id: int) -> str:
        """The name (in `io_fd`'s directory) of the file the child exports a checked call's output to."""
        return f"output-{request_id}.bin"

    def timed_output_name(self, request_id: int, index: int) -> str:
        return f"timed-{request_id}-{index}.bin"

    def discard_files(self) -> None:
        """Remove whatever the child left in its io directory (a directory it made included),
        through `io_fd`: nothing outside it, whatever the child replaced."""
        for name in os.listdir(self.io_fd):
            try:
                os.unlink(name, dir_fd=self.io_fd)
            except IsADirectoryError:
                shutil.rmtree(name, dir_fd=self.io_fd, ignore_errors=True)
            except FileNotFoundError:
                pass

    def close(self) -> None:
        """Ask the child to stop, then kill whatever is left of its process group; remove its files."""
        if self.proc is not None and self.proc.poll() is None and self.paused_at is None:
            try:
                if not self.shutdown_requested:
                    self._send(Shutdown(), "shutdown")
                self.proc.wait(timeout=SHUTDOWN_GRACE_S)
            except (ChildFailure, subprocess.TimeoutExpired):
                pass
        self._kill()
        if self.shared_reader is not None:
            self.shared_reader.close()
            self.shared_reader = None
        fds = (getattr(self, "request_fd", None), getattr(self, "reply_fd", None), self.status_fd, self.io_fd)
        for fd in (*fds, self.output_fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.request_fd = self.reply_fd = self.status_fd = self.io_fd = self.output_fd = None
        shutil.rmtree(self.workdir, ignore_errors=True)
        shutil.rmtree(self.io_dir, ignore_errors=True)
        self.trim_caches()

    def trim_caches(self) -> str | None:
        """Remove this code's per-code caches when they hold more than limits.code_cache_bytes
        (what an earlier run or this one left, between the watch's looks or after it); returns
        (and keeps in `caches_trimmed`) why, or None."""
        limit = self.limits.code_cache_bytes
        if self.caches_trimmed is None and tree_bytes(self.caches, stop_above=limit) > limit:
            for cache_dir in self.caches:
                shutil.rmtree(cache_dir, ignore_errors=True)
            self.caches_trimmed = (
                f"left more than {limit / 1024**2:.0f} MiB in its per-code caches, over the limit "
                "(code_cache_bytes): the caches were removed"
            )
        return self.caches_trimmed

    def log_tail(self, chars: int = LOG_TAIL_BYTES) -> str:
        text = bytes(self.log).decode("utf-8", errors="replace")
        return text[-chars:]

    # internals

    def _drain_log(self) -> None:
        stream = self.proc.stdout
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                return
            self.log_total += len(chunk)
            self.log += chunk
            if len(self.log) > LOG_TAIL_BYTES:
                del self.log[: len(self.log) - LOG_TAIL_BYTES]

    def _kill(self) -> None:
        live_children.discard(self)
        if self.proc is None:
            return
        # Its whole process tree while it runs (its pid is still its own then): a process the
        # candidate moved to a new session has left the group, not the tree.
        pids = self.processes() if self.proc.poll() is None else []
        for pid in [*pids, -self.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.proc.wait()
        if self.watch is not None:
            self.watch.stop()
        self.log_thread.join(timeout=5)

    def _fail(self, status: Literal["timeout", "crashed"], reason: str) -> ChildFailure:
        self._kill()
        tail = self.log_tail(REASON_LOG_TAIL_CHARS).strip().splitlines()
        if status == "crashed" and tail:
            reason = f"{reason}; last output: {tail[-1][:200]}"
        return ChildFailure(status, reason)

    def _send(self, message: Message, phase: str) -> None:
        data = memoryview(encode(message))
        try:
            while data:
                written = os.write(self.request_fd, data)
                data = data[written:]
        except (BrokenPipeError, OSError):
            raise self._fail("crashed", self._exit_reason(phase)) from None

    def _exit_reason(self, phase: str) -> str:
        """How the candidate's process ended, from the pid-namespace init or from waitpid."""
        try:
            self.proc.wait(timeout=SHUTDOWN_GRACE_S)
        except subprocess.TimeoutExpired:
            self._kill()
        if self.watch is not None and self.watch.problem is not None:
            return f"killed by the parent during {phase}: {self.watch.problem}"
        status = self._init_status()
        if status is not None and status.signal is not None:
            return f"killed by {_signal_name(status.signal)} during {phase}"
        if status is not None:
            return f"exited with code {status.exit_code} during {phase}"
        code = self.proc.returncode
        if code < 0:
            return f"killed by {_signal_name(-code)} during {phase}"
        return f"exited with code {code} during {phase}"

    def _init_status(self) -> InitStatus | None:
        if self.status_fd is None:
            return None
        os.set_blocking(self.status_fd, False)
        try:
            data = os.read(self.status_fd, 4096)
        except BlockingIOError:
            return None
        try:
            return InitStatus.model_validate_json(data.split(b"\n", 1)[0])
        except ValidationError:
            return None

    def _receive(
        self,
        since: float,
        limit_s: float,
        phase: str,
        expected: tuple[type, ...],
        request_id: int | None = None,
    ):
        """The next reply, due `limit_s` after `since`: one of `expected`, with the run's token,
        answering `request_id`. The wait from `since` counts against the evaluation's deadline
        (`spent_s`), which may end it first."""
        try:
            return self._receive_within(since, limit_s, phase, expected, request_id)
        finally:
            self.spent_s += monotonic() - since - self._paused_s(since)  # stopped time is not its own

    def _receive_within(
        self,
        since: float,
        limit_s: float,
        phase: str,
        expected: tuple[type, ...],
        request_id: int | None,
    ):
        evaluation_left_s = self.limits.evaluation_timeout_s - self.spent_s
        deadline = since + min(limit_s, evaluation_left_s)
        while b"\n" not in self.buffer:
            remaining = deadline + self._paused_s(since) - monotonic()
            if remaining <= 0 and evaluation_left_s < limit_s:
                raise self._fail(
                    "timeout",
                    f"{phase} ran past the evaluation's deadline: {self.limits.evaluation_timeout_s:g} s "
                    "of waiting on the child in all (evaluation_timeout_s)",
                )
            if remaining <= 0:
                raise self._fail("timeout", f"{phase} exceeded {limit_s:g} s")
            readable, _, _ = select.select([self.reply_fd], [], [], min(remaining, 0.5))
            if not readable:
                if self.proc.poll() is not None and not select.select([self.reply_fd], [], [], 0)[0]:
                    raise self._fail("crashed", self._exit_reason(phase))
                continue
            chunk = os.read(self.reply_fd, 65536)
            if not chunk:
                raise self._fail("crashed", self._exit_reason(phase))
            self.buffer += chunk
            if len(self.buffer) > MAX_MESSAGE_BYTES:
                raise self._fail(
                    "crashed", f"protocol violation during {phase}: a message over {MAX_MESSAGE_BYTES} bytes"
                )
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            reply = REPLY.validate_json(line)
        except ValidationError:
            raise self._fail("crashed", f"protocol violation during {phase}: a malformed message") from None
        if not hmac.compare_digest(reply.token, self.token):
            raise self._fail(
                "crashed", f"protocol violation during {phase}: a message with a wrong token (forged?)"
            )
        if not isinstance(reply, expected) or getattr(reply, "id", request_id) != request_id:
            raise self._fail(
                "crashed", f"protocol violation during {phase}: an unexpected {reply.type} message"
            )
        return reply
