"""Which namespaces a sandboxed child gets: the strongest level this system grants (user, network,
IPC, pid and mount namespaces through `unshare`), probed once per process and device (in the
background while the parent imports torch: `start_isolation_probe`) and kept on disk under a
fingerprint of what decides it, so that later commands skip the probe."""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from harness.sandbox.workspace import PROBE_DIR_PREFIX, python_environment

PROBE_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class IsolationLevel:
    name: str
    prefix: tuple[str, ...]
    full: bool  # mount + pid namespaces: the child hides, remounts read-only, forks an init, locks


# --ipc: SysV segments, message queues and semaphores and POSIX message queues of the child are
# its own (gone with its last process); none of the host's or another child's can be named.
UNSHARE_FULL = ("--net", "--ipc", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc")
ISOLATION_LEVELS = (
    IsolationLevel("user+net+ipc+pid+mount", ("unshare", "--user", "--map-root-user", *UNSHARE_FULL), True),
    IsolationLevel("net+ipc+pid+mount", ("unshare", *UNSHARE_FULL), True),
    IsolationLevel("user+net+ipc", ("unshare", "--user", "--map-root-user", "--net", "--ipc"), False),
    IsolationLevel("net+ipc", ("unshare", "--net", "--ipc"), False),
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
    # every level has --ipc: its probe fails unless the child's IPC namespace is not this one
    own_ipc = os.stat("/proc/self/ns/ipc").st_ino if os.path.exists("/proc/self/ns/ipc") else None
    other_ipc = f"import os, sys; sys.exit(os.stat('/proc/self/ns/ipc').st_ino == {own_ipc})"
    for level in ISOLATION_LEVELS:
        with tempfile.TemporaryDirectory(prefix=f"{PROBE_DIR_PREFIX}{os.getpid()}-") as scratch:
            if level.full:
                for name in ("hidden", "writable"):
                    Path(scratch, name).mkdir()
                Path(scratch, "hidden", "secret").write_text("x")
                command = [*level.prefix, sys.executable, "-m", "harness.sandbox.child", "--probe", scratch]
                command += ["--probe-cuda"] if device == "cuda" else []
                command += ["--probe-ipc", str(own_ipc)] if own_ipc is not None else []
            else:
                code = "; ".join(
                    [*([other_ipc] if own_ipc is not None else []), *([use_cuda] if device == "cuda" else [])]
                )
                command = [*level.prefix, sys.executable, "-c", code or "pass"]
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
            env=python_environment(),
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


def level_was_kept(device: str) -> bool:
    """Whether `device`'s level in this process was read from the disk (not probed here)."""
    return device in _levels_from_cache
