"""The sandboxed child: `python -m harness.sandbox.child --request-fd R --reply-fd W [--status-fd S]`.

Started by `harness.sandbox.supervisor` in a fresh process (and, where the system allows, fresh
namespaces). In order, before any of the candidate's code runs:

1. marks its pipes close-on-exec, so that no program the candidate starts inherits them;
2. reads `Hello` (the per-run token and the plan) from the request pipe;
3. isolation (`IsolationPlan`): hides the store and the shared temporary directories under
   empty tmpfs mounts, moves its working directory into a tmpfs of its own (each of a fixed
   size), remounts every other file system read-only except its own directories,
   forks so that a small init stays pid 1 of the pid namespace (it reports the worker's exit on
   the status pipe; when it exits, the kernel kills whatever the candidate left behind), and
   enters a nested user and mount namespace so that the candidate cannot undo the mounts;
4. imports torch, says `Started`, imports the candidate (`submission.py` in the working
   directory), and answers `Ready` or `ImportFailed`;
5. serves requests in order until `Shutdown` or the end of the pipe.

The child never imports or calls the task's reference module (generate_input, ref_kernel,
check_implementation run only in the parent; reference.py and utils.py lie beside the submission
only because GPU MODE submissions may import them). It gets every call's inputs from the parent as
raw bytes in the parent's memfd (`--inputs-fd`, harness.sandbox.transfer.read_inputs), never a
seed, and never holds the reference output or the store; it sends back raw bytes that the parent
checks. Everything here runs in the same process as the candidate, so none of it is trusted by the
parent; it only has to work for honest candidates.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib.util
import os
import select
import sys
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from time import perf_counter
from types import ModuleType

from harness.sandbox.protocol import (
    MAX_MESSAGE_BYTES,
    REQUEST,
    AutotunerInfo,
    CallDone,
    CallError,
    CallGo,
    CallInputs,
    CheckReply,
    CheckRequest,
    DataItem,
    FirstCallDone,
    Hello,
    ImportFailed,
    InitStatus,
    InputsReady,
    InputsWanted,
    IsolationPlan,
    IsolationReport,
    Message,
    Ready,
    Shutdown,
    Started,
    TimeReply,
    TimeRequest,
    encode,
)
from harness.timing import StoppingRule, time_calls

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24
PR_SET_DUMPABLE = 4
MOUNT_OPTION_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
    "strictatime": MS_STRICTATIME,
}
PRIVATE_TMPFS_MODE = "0755"

# Exception texts that mean "this machine has no CUDA", not "the candidate is wrong".
NO_CUDA_MESSAGES = (
    "Torch not compiled with CUDA enabled",
    "CUDA_HOME environment variable is not set",
    "No CUDA GPUs are available",
    "Found no NVIDIA driver",
    "no NVIDIA driver on your system",
)
COMPILE_ERROR_CLASSES = ("CompilationError", "CompileTimeAssertionFailure", "PTXASError")


class MissingEntryPoint(Exception):
    """The candidate imported, but has no callable under the task's entry point name."""


# --- namespaces and mounts ------------------------------------------------------------------


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mount(source: bytes | None, target: str, fstype: bytes | None, flags: int, data: bytes | None = None):
    if _libc().mount(source, target.encode(), fstype, ctypes.c_ulong(flags), data) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno), target)


def _mount_points() -> list[tuple[str, set[str]]]:
    """(mount point, per-mount options) from /proc/self/mountinfo, octal escapes decoded."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")
            points.append((point, set(fields[5].split(","))))
    return points


def _option_flags(options: set[str]) -> int:
    flags = 0
    for option in options:
        flags |= MOUNT_OPTION_FLAGS.get(option, 0)
    return flags


def _flags_of(path: Path, points: list[tuple[str, set[str]]]) -> int:
    """The per-mount flags (nosuid, nodev, ...) of the mount that holds `path`: a read-only
    remount in a user namespace must keep them."""
    holding = [(point, options) for point, options in points if _under(path, [Path(point)])]
    return _option_flags(max(holding, key=lambda item: len(item[0]))[1]) if holding else 0


def _under(path: Path, roots: list[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def _directory_contents(path: Path) -> dict[str, bytes | None]:
    """The files (name -> bytes) and subdirectories (name -> None) directly in `path`."""
    return {
        entry.name: None if entry.is_dir() else Path(entry.path).read_bytes() for entry in os.scandir(path)
    }


BASE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
GPU_DEVICE_PATTERNS = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/nvidia-uvm*", "/dev/dri")
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1"}
DEV_LINKS |= {"stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"}


def device_nodes(cuda: bool) -> list[str]:
    """What a candidate's private /dev holds from the host's: the base nodes, and on a GPU the
    driver's nodes and directories (those present here)."""
    import glob

    nodes = [node for node in BASE_DEVICES if os.path.exists(node)]
    if cuda:
        for pattern in GPU_DEVICE_PATTERNS:
            nodes += sorted(path for path in glob.glob(pattern) if path not in nodes)
    return nodes


def private_dev(nodes: list[str], tmpfs_bytes: int) -> None:
    """Mount a tmpfs on /dev holding only `nodes` (each bound from the host's node or directory),
    the usual links to /proc/self/fd, a fresh /dev/shm tmpfs and, where the kernel allows one here,
    a devpts instance of its own (no host terminal, no console); then make /dev read-only. Raises
    OSError (with /dev back as it was) when any of it fails."""
    handles = {node: os.open(node, os.O_PATH | os.O_NOFOLLOW) for node in nodes}
    try:
        _mount(b"tmpfs", "/dev", b"tmpfs", MS_NOSUID | MS_NOEXEC, b"size=1m,mode=0755")
        try:
            for node, handle in handles.items():
                target = Path(node)
                target.parent.mkdir(parents=True, exist_ok=True)
                if Path(f"/proc/self/fd/{handle}").is_dir():
                    target.mkdir(exist_ok=True)
                else:
                    target.touch()
                _mount(f"/proc/self/fd/{handle}".encode(), node, None, MS_BIND | MS_REC)
            for name, destination in DEV_LINKS.items():
                os.symlink(destination, f"/dev/{name}")
            for name in ("shm", "pts", "mqueue"):
                os.mkdir(f"/dev/{name}")
            _mount(
                b"tmpfs", "/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, f"size={tmpfs_bytes},mode=1777".encode()
            )
            try:
                _mount(
                    b"devpts",
                    "/dev/pts",
                    b"devpts",
                    MS_NOSUID | MS_NOEXEC,
                    b"newinstance,ptmxmode=0666,mode=620",
                )
            except OSError:
                pass  # no terminals at all then
            try:
                _mount(
                    b"mqueue", "/dev/mqueue", b"mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC
                )  # this IPC namespace's
            except OSError:
                pass
            _mount(None, "/dev", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC)
        except OSError:
            _libc().umount2(b"/dev", 2)  # MNT_DETACH: the host's /dev again
            raise
    finally:
        for handle in handles.values():
            os.close(handle)


def isolate_filesystem(
    hidden: list[str],
    writable: list[str],
    private: Sequence[str] = (),
    tmpfs_bytes: int = 256 * 1024**2,
    devices: list[str] | None = None,
    visible: Sequence[str] = (),
) -> IsolationReport:
    """In a private mount namespace: give /dev only `devices` (`private_dev`; None keeps the
    host's, read-only), hide `hidden` under empty private tmpfs mounts, keep each `writable`
    directory writable (re-bound into a hiding tmpfs or the fresh /dev/shm where it lies under
    one), move each `private` directory's files (not its subdirectories' files) into a fresh tmpfs
    at its place, and remount every other mount read-only, keeping its nosuid/nodev/noexec/atime
    flags. Each `visible` directory under a hidden one (what the child needs beside a store) is
    bound back read-only. Each tmpfs holds at most `tmpfs_bytes`: writing more fails with ENOSPC.
    Failing to make the private /dev is reported (`problems`, after the rest is done), not fatal."""
    report = IsolationReport()
    tmpfs_options = f"size={tmpfs_bytes},mode={PRIVATE_TMPFS_MODE}".encode()
    contents = {Path(path): _directory_contents(Path(path)) for path in private}
    keep = [Path(path) for path in writable]
    handles = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in keep}
    shown = {Path(path): os.open(path, os.O_PATH | os.O_DIRECTORY) for path in visible}
    mounts_before = _mount_points()
    dev_problems = []
    fresh = []  # mounts made here that shadow the host's (their old contents out of sight)
    if devices is not None:
        try:
            private_dev(devices, tmpfs_bytes)
            report.private_dev = True
            fresh.append(Path("/dev"))
        except OSError as exc:
            dev_problems.append(f"could not make a private /dev ({exc.filename}: {exc.strerror})")
    existing = [Path(path) for path in hidden if Path(path).is_dir() and not _under(Path(path), fresh)]
    hidden_roots = [
        root for root in existing if not _under(root, [other for other in existing if other != root])
    ]
    for root in hidden_roots:
        try:
            _mount(b"tmpfs", str(root), b"tmpfs", MS_NOSUID | MS_NODEV, tmpfs_options)
            report.hidden.append(str(root))
        except OSError as exc:
            report.problems.append(f"could not hide {root}: {exc.strerror}")
    shown_again = []
    for path, handle in shown.items():
        try:
            if _under(path, hidden_roots):
                path.mkdir(parents=True, exist_ok=True)
                source = Path(os.readlink(f"/proc/self/fd/{handle}"))
                _mount(f"/proc/self/fd/{handle}".encode(), str(path), None, MS_BIND)
                _mount(
                    None, str(path), None, MS_REMOUNT | MS_BIND | MS_RDONLY | _flags_of(source, mounts_before)
                )
                shown_again.append(path)
        except OSError as exc:
            report.problems.append(f"could not show {path} read-only: {exc.strerror}")
        finally:
            os.close(handle)
    # A hidden directory inside a directory just shown again (the checkout's db/ when the temporary
    # root above the checkout is hidden: a clone under /tmp) is hidden again on top of it, outer
    # ones first: one inside a directory hidden again here is out of sight already (a cache folder
    # inside the store's folder, both below a folder on sys.path under /tmp: mounting on it failed,
    # and that failure skipped the read-only remount below, 2026-12-07).
    hidden_again: list[Path] = []
    for path in sorted(existing, key=lambda path: len(path.parts)):
        if path in hidden_roots or _under(path, hidden_again) or not _under(path.parent, shown_again):
            continue
        try:
            _mount(b"tmpfs", str(path), b"tmpfs", MS_NOSUID | MS_NODEV, tmpfs_options)
            report.hidden.append(str(path))
            hidden_roots.append(path)
            hidden_again.append(path)
        except OSError as exc:
            report.problems.append(f"could not hide {path}: {exc.strerror}")
    for path, handle in handles.items():
        try:
            if _under(path, hidden_roots + fresh):
                path.mkdir(parents=True, exist_ok=True)
            _mount(f"/proc/self/fd/{handle}".encode(), str(path), None, MS_BIND)
        except OSError as exc:
            report.problems.append(f"could not keep {path} writable: {exc.strerror}")
        finally:
            os.close(handle)
    for path, files in contents.items():
        try:
            if _under(path, hidden_roots):
                path.mkdir(parents=True, exist_ok=True)
            _mount(b"tmpfs", str(path), b"tmpfs", MS_NOSUID | MS_NODEV, tmpfs_options)
            for name, data in files.items():
                if data is None:
                    (path / name).mkdir()
                else:
                    (path / name).write_bytes(data)
        except OSError as exc:
            report.problems.append(f"could not make {path} private: {exc.strerror}")
    # Whatever failed above, everything else is made read-only: a problem is reported, never a
    # reason to leave the host's file systems writable to the candidate.
    skip = {str(path) for path in keep + hidden_roots + list(contents)}
    remount_problems = []
    for point, options in _mount_points():
        if point in skip or _under(Path(point), [Path("/proc"), *hidden_roots, *fresh]):
            continue  # ours, /proc (the pid namespace's own), or out of sight under a hiding mount
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | _option_flags(options)
        try:
            _mount(None, point, None, flags)
        except OSError as exc:
            remount_problems.append(f"could not remount {point} read-only: {exc.strerror}")
    report.read_only = not remount_problems
    report.problems += remount_problems + dev_problems
    return report


def lock_namespaces() -> None:
    """Enter a nested user and mount namespace. Mounts inherited into a namespace owned by a
    less privileged user namespace are locked: the candidate, although root in its namespace,
    can neither unmount the hiding tmpfs nor remount anything read-write. Needs a
    single-threaded process, so it runs before torch is imported."""
    uid, gid = os.getuid(), os.getgid()
    if _libc().unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno), "unshare")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
    Path("/proc/self/gid_map").write_text(f"0 {gid} 1")


PARENT_CHECK_S = 0.25


def become_init(status_fd: int, worker_fds: list[int]) -> None:
    """Fork: the worker returns from this call; this process stays as pid 1, reaps every child
    and, once the worker ends, writes its exit on the status pipe and exits (which makes the
    kernel kill everything left in the pid namespace). It also exits when the status pipe's other
    end closes (the parent was killed): a worker busy in a call would not notice that until the
    call returned. Init is made non-dumpable so that the candidate cannot reach its status pipe
    through /proc."""
    worker = os.fork()
    if worker == 0:
        os.close(status_fd)
        return
    for fd in worker_fds:
        os.close(fd)
    _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    parent = select.poll()
    parent.register(status_fd, 0)  # a pipe's write end reports POLLERR once its reader is gone
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            os._exit(0)
        if pid == 0:
            if parent.poll(PARENT_CHECK_S * 1000):
                os._exit(0)
            continue
        if pid == worker:
            message = (
                InitStatus(signal=os.WTERMSIG(status))
                if os.WIFSIGNALED(status)
                else InitStatus(exit_code=os.waitstatus_to_exitcode(status))
            )
            os.write(status_fd, encode(message))
            os._exit(0)


def apply_isolation(plan: IsolationPlan, status_fd: int | None, worker_fds: list[int]) -> IsolationReport:
    report = IsolationReport()
    if plan.mount:
        report = isolate_filesystem(
            plan.hidden, plan.writable, plan.private, plan.tmpfs_bytes, plan.devices, plan.visible
        )
        report.namespaces.append("mount")
    if plan.pid_init and status_fd is not None:
        become_init(status_fd, worker_fds)
        report.namespaces.append("pid")
    if plan.lock:
        try:
            lock_namespaces()
            report.locked = True
        except OSError as exc:
            report.problems.append(f"could not lock the mounts: {exc.strerror}")
    return report


# --- the channel ----------------------------------------------------------------------------


class Channel:
    """Line-delimited JSON on the two private pipes."""

    def __init__(self, request_fd: int, reply_fd: int) -> None:
        self.requests = os.fdopen(request_fd, "rb", buffering=0)
        self.reply_fd = reply_fd
        self.buffer = b""

    def receive_line(self) -> bytes | None:
        while b"\n" not in self.buffer:
            chunk = self.requests.read(65536)
            if not chunk:
                return None
            self.buffer += chunk
            if len(self.buffer) > MAX_MESSAGE_BYTES:
                raise ValueError("request too long")
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def send(self, message: Message) -> None:
        data = memoryview(encode(message))
        while data:
            written = os.write(self.reply_fd, data)
            data = data[written:]


# --- errors and autotuners ------------------------------------------------------------------


def one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if len(lines) <= 1 else f"{lines[0]} ... {lines[-1]}"
    return f"{type(exc).__name__}: {text}"[:400] if lines else type(exc).__name__


def classify(exc: BaseException, device: str) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if any(message in text for message in NO_CUDA_MESSAGES):
        return "unsupported"
    if "nvcc" in text and ("not found" in text or "No such file" in text):
        return "unsupported"
    if device == "cpu" and isinstance(exc, AssertionError) and "cuda" in text.lower():
        return "unsupported"
    if any(cls.__name__ in COMPILE_ERROR_CLASSES for cls in type(exc).__mro__):
        return "compile_error"
    return "runtime_error"


def _config_kwargs(config: object) -> dict[str, str]:
    kwargs = config.all_kwargs() if hasattr(config, "all_kwargs") else dict(config.kwargs)
    return {key: str(value) for key, value in kwargs.items()}


def _is_autotuner(obj: object, autotuner: type) -> bool:
    """Whether a live object is a Triton Autotuner, by its real type: `isinstance` asks the
    object for `__class__`, which a weak proxy whose referent is gone answers with
    ReferenceError (torch.compile keeps such proxies) and any object may answer with an
    exception of its own. An object that raises on inspection is not a tuner."""
    try:
        return issubclass(type(obj), autotuner)
    except Exception:  # noqa: BLE001 - a type with a hostile or broken __subclasscheck__
        return False


class Autotuners:
    """Every `triton.runtime.autotuner.Autotuner` alive in the process, found through the garbage
    collector (kernels may be module globals, class attributes or closures), with their
    original configs, so that a request can force each one to a single config."""

    def __init__(self) -> None:
        self.originals: dict[int, list[object]] = {}
        self.tuners: list[object] = []

    def scan(self) -> None:
        module = sys.modules.get("triton.runtime.autotuner")
        if module is None:
            return
        with warnings.catch_warnings():  # inspecting some lazy objects warns (deprecations)
            warnings.simplefilter("ignore")
            found = [obj for obj in gc.get_objects() if _is_autotuner(obj, module.Autotuner)]
        for obj in found:
            if id(obj) not in self.originals:
                try:
                    configs = list(obj.configs)
                except Exception:  # noqa: BLE001, S112 - not a tuner this can force
                    continue
                self.originals[id(obj)] = configs
                self.tuners.append(obj)

    @staticmethod
    def _base_name(tuner: object) -> str:
        fn = getattr(tuner, "base_fn", None) or getattr(tuner, "fn", None)
        return getattr(fn, "__name__", type(tuner).__name__)

    def names(self) -> list[str]:
        """One name per tuner (its kernel's name; repeated names get #2, #3 ...)."""
        names, seen = [], {}
        for tuner in self.tuners:
            base = self._base_name(tuner)
            seen[base] = seen.get(base, 0) + 1
            names.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
        return names

    def describe(self) -> list[AutotunerInfo]:
        return [
            AutotunerInfo(name=name, configs=[_config_kwargs(c) for c in self.originals[id(tuner)]])
            for name, tuner in zip(self.names(), self.tuners)
        ]

    def forget(self) -> None:
        """Every tuner forgets the config it chose per key (Triton's `Autotuner.cache`), so that
        the next call on a key tunes afresh, as in a fresh process."""
        for tuner in self.tuners:
            cache = getattr(tuner, "cache", None)
            if isinstance(cache, dict):
                cache.clear()

    def force(self, index: int | None) -> None:
        """Index None restores every tuner's configs; otherwise each tuner keeps only its
        config number `index` modulo its count (one config: Triton runs it without benchmarking)."""
        for tuner in self.tuners:
            configs = self.originals[id(tuner)]
            tuner.configs = list(configs) if index is None or not configs else [configs[index % len(configs)]]

    def chosen(self) -> dict[str, dict[str, str]]:
        chosen = {}
        for name, tuner in zip(self.names(), self.tuners):
            config = getattr(tuner, "best_config", None)
            if config is not None:
                chosen[name] = _config_kwargs(config)
        return chosen


# --- the worker -----------------------------------------------------------------------------


def _load_module(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# free blocks of the CUDA caching allocator a child keeps between requests (Worker.release_cached_memory)
CACHED_BYTES_KEPT = 1024**3


class Worker:
    def __init__(
        self,
        hello: Hello,
        channel: Channel,
        isolation: IsolationReport,
        output_fd: int | None = None,
        inputs_fd: int | None = None,
        fd_socket: int | None = None,
    ) -> None:
        self.hello = hello
        self.channel = channel
        self.isolation = isolation
        self.io_dir = Path(hello.io_dir)
        self.output_fd = output_fd
        self.shared_output = None  # transfer.SharedBuffer over output_fd, made on the first timing
        self.inputs_fd = inputs_fd
        self.inputs = None  # transfer.SharedBuffer over inputs_fd, made at the start
        # where the parent sends device windows' descriptors (harness.sandbox.device_memory);
        # a window replaces the inputs memory or the shared output buffer when a message says so
        self.fd_socket = fd_socket
        self.output_window = None
        self.output_keys: tuple[int | str, ...] = ()  # the output buffers' places in the data handed over
        self.autotuners = Autotuners()
        self.called = False
        self.handlers = {CheckRequest: self.check, TimeRequest: self.time}

    def synchronize(self) -> None:
        if self.hello.device == "cuda":
            self.torch.cuda.synchronize()

    def start(self) -> bool:
        """Import torch and the candidate; answer Ready or ImportFailed."""
        import torch

        from harness.sandbox import transfer

        self.torch = torch
        self.transfer = transfer
        self.export_tensor = transfer.export_tensor
        self.export_output = transfer.export_output
        self.changed_elements = transfer.changed_elements
        self.describe = transfer.describe
        if self.inputs_fd is not None:
            self.inputs = transfer.SharedBuffer(self.inputs_fd, cuda=self.hello.device == "cuda")
        workdir = self.hello.workdir
        sys.path.insert(0, workdir)  # a submission may import task, utils or reference from it
        self.channel.send(Started(token=self.hello.token))
        started = perf_counter()
        try:
            module = _load_module("submission", os.path.join(workdir, "submission.py"))
            self.entry = self.find_entry_point(module)
        except Exception as exc:  # noqa: BLE001 - whatever the candidate raises is its result
            traceback.print_exc()
            kind = classify(exc, self.hello.device)
            if kind == "runtime_error":
                kind = "compile_error"
            self.channel.send(
                ImportFailed(
                    token=self.hello.token, kind=kind, error=one_line(exc), import_s=perf_counter() - started
                )
            )
            return False
        import_s = perf_counter() - started
        self.autotuners.scan()
        self.init_cuda()
        self.channel.send(
            Ready(
                token=self.hello.token,
                import_s=import_s,
                autotuners=self.autotuners.describe(),
                isolation=self.isolation,
            )
        )
        return True

    def init_cuda(self) -> None:
        """Make the CUDA context now, after the candidate's import (so that its module code still
        runs before any CUDA initialization, as it would have) and before `Ready`: the children of
        a group start together, so their contexts are made at the same time instead of one by one
        in the first calls' input generation. A failure is left for that first call to meet
        (torch raises it again there), as before."""
        if self.hello.device != "cuda":
            return
        try:
            self.torch.cuda.synchronize()
            self.warm_check_path()
        except Exception:  # noqa: BLE001, S110 - the first call reports it
            pass

    def warm_check_path(self) -> None:
        """Run the harness's own per-check steps once on a tiny tensor (a copy from the host, NaN
        fill, copy, comparison, pinned export): CUDA loads each kernel and the host allocator its
        first pinned block on first use, tens of ms each, which would otherwise fall in the first
        check, one child after another; here the children of a group pay it side by side."""
        torch = self.torch
        value = torch.arange(4096, dtype=torch.float32).to("cuda")
        before = value.clone()
        value.fill_(float("nan"))
        self.changed_elements(before, value)
        path = self.io_dir / "warm-up.bin"
        self.export_tensor(before, path)
        path.unlink()
        torch.cuda.synchronize()

    def find_entry_point(self, module: object):
        """A callable taking the data tuple: the entry point, or the first unpacked alternative."""
        entry = getattr(module, self.hello.entry_point, None)
        if callable(entry):
            return entry
        for name in self.hello.unpacked_entry_points:
            unpacked = getattr(module, name, None)
            if callable(unpacked):
                return lambda data: unpacked(*data)
        names = " or ".join([self.hello.entry_point, *self.hello.unpacked_entry_points])
        raise MissingEntryPoint(f"submission.py defines no function {names}")

    def serve(self) -> None:
        while True:
            line = self.channel.receive_line()
            if line is None:
                return
            request = REQUEST.validate_json(line)
            if isinstance(request, Shutdown):
                return
            reply = self.handlers[type(request)](request)
            self.release_cached_memory()
            self.channel.send(reply)

    def release_cached_memory(self) -> None:
        """After a request, before its reply (this child's turn, nothing timed): give the CUDA
        caching allocator's free blocks back when they add up to more than
        `CACHED_BYTES_KEPT`. A child waits between its shapes while the others of its group check
        and time theirs, and each kept what its largest call had reserved: with large shapes
        (pmpp's grayscale at 16384^2, 4 GiB of inputs and output a call) the children's cached
        blocks, not their answers, filled the GPU. Small shapes keep theirs (no allocations again
        in the next call's warm-up); what the candidate itself holds stays held."""
        if self.hello.device != "cuda":
            return
        cuda = self.torch.cuda
        try:
            if cuda.memory_reserved() - cuda.memory_allocated() > CACHED_BYTES_KEPT:
                cuda.empty_cache()
        except Exception:  # noqa: BLE001, S110 - a GPU that fails here fails the next call, as before
            pass

    def adopt_window(self, purpose: str, size: int | None) -> None:
        """Take the device window a message announced (`size`; None: none), whose descriptor the
        parent sent over the fd socket just before, in place of the inputs memory or the output
        buffer."""
        if size is None:
            return
        import socket

        from harness.sandbox.device_memory import DeviceWindow

        if self.fd_socket is None:
            raise ValueError("a device window was announced, but there is no fd socket")
        with socket.socket(fileno=os.dup(self.fd_socket)) as channel:
            tag, fds, _flags, _address = socket.recv_fds(channel, 64, 1)
        if tag != purpose.encode() or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise ValueError(f"expected the {purpose} window's descriptor, got {tag!r}")
        window = DeviceWindow.open(fds[0], size)
        old = self.inputs if purpose == "inputs" else self.output_window
        if purpose == "inputs":
            self.inputs = window
        else:
            self.output_window = window
        if old is not None:
            old.close()

    def make_inputs(self, items: list[DataItem]) -> tuple:
        """The data tuple the parent handed over in the inputs memory, on this child's device
        (a GPU's copy from the host here, outside any timed region)."""
        data = self.transfer.read_inputs(items, self.inputs, self.hello.device)
        self.output_keys = self.transfer.output_keys(items)
        self.synchronize()
        return data

    def fill_output_buffer(self, data: object) -> None:
        """Each output buffer emptied before a call: NaN for a floating dtype, zeros otherwise (as
        `transfer.read_inputs` makes them), so that no call finds an answer left in one."""
        if not isinstance(data, tuple | list | dict):
            return
        for key in self.output_keys:
            buffer = data[key]
            if buffer.is_floating_point():
                buffer.fill_(float("nan"))
            else:
                buffer.zero_()

    def check(self, request: CheckRequest) -> CheckReply:
        """One call on the parent's inputs. The output buffers are NaN before the call; afterwards
        the returned object goes to a file for the parent, every input tensor is described and
        compared bit for bit with a copy taken before the call, then the returned tensor and the
        buffers are overwritten with NaN so that no later call finds this answer in memory."""
        reply = CheckReply(token=self.hello.token, id=request.id)
        if request.forget_tuning:
            self.autotuners.scan()
            self.autotuners.forget()
        self.adopt_window("output", request.output_memory)
        self.adopt_window("inputs", request.inputs_memory)
        data = self.make_inputs(request.data)
        self.fill_output_buffer(data)
        counted = self.transfer.tensor_inputs(data, self.output_keys)
        item = self.transfer.data_item
        before = [item(data, index).detach().clone() for index in counted]
        self.autotuners.force(request.autotune_config)
        self.synchronize()
        started = perf_counter()
        try:
            result = self.entry(data)
            self.synchronize()
        except Exception as exc:  # noqa: BLE001 - whatever the candidate raises is its result
            traceback.print_exc()
            reply.error = CallError(kind=classify(exc, self.hello.device), error=one_line(exc))
            return reply
        reply.seconds = perf_counter() - started
        if not self.called:  # kernels made in the first call (scanning costs ~0.1 s, so only then)
            self.autotuners.scan()
            self.called = True
        reply.autotuners = self.autotuners.describe()
        reply.autotune_config = self.autotuners.chosen()
        reply.output = self.export_checked(self.resolved(result), request)
        reply.inputs = [self.describe(item(data, index)) for index in counted]
        reply.inputs_changed = [
            self.changed_elements(copy, item(data, index))
            for copy, index in zip(before, counted, strict=True)
        ]
        del before
        reply.output_aliases_input = self.aliases_input(result, data)
        self.transfer.fill_output_nan(result, self.inputs_of(data))
        self.fill_output_buffer(data)
        self.synchronize()
        return reply

    def resolved(self, result: object) -> object:
        """The returned tensor with its lazy negation and conjugation applied (`torch._neg_view`,
        `conj()`: a view whose bytes are not its values), so that its bytes can be exported;
        anything else as it is. A new tensor only for such a view (the NaN fill afterwards still
        reaches the returned one's storage)."""
        if type(result) is self.torch.Tensor and (result.is_neg() or result.is_conj()):
            return result.resolve_neg().resolve_conj()
        if isinstance(result, tuple | list) and any(
            type(part) is self.torch.Tensor and (part.is_neg() or part.is_conj()) for part in result
        ):
            return (list if isinstance(result, list) else tuple)(self.resolved(part) for part in result)
        return result

    def aliases_input(self, result: object, data: tuple) -> bool:
        """Whether the returned tensor (or a tensor of a returned tuple, list or dict) shares its
        storage with an input."""
        torch = self.torch
        returned = {
            t.untyped_storage().data_ptr()
            for t in self.transfer.output_tensors(result)
            if type(t) is torch.Tensor
        }
        return any(
            type(t) is torch.Tensor and t.untyped_storage().data_ptr() in returned
            for t in self.inputs_of(data)
        )

    def inputs_of(self, data: object) -> list[object]:
        """The data's inputs: every item of a tuple, list or dict but the output buffers; other data
        (one tensor) is one input."""
        if isinstance(data, tuple | list):
            return [item for index, item in enumerate(data) if index not in self.output_keys]
        if isinstance(data, dict):
            return [item for key, item in data.items() if key not in self.output_keys]
        return [data]

    def time(self, request: TimeRequest) -> TimeReply:
        """Warm up and time the entry point on one shape (harness.timing.time_calls).

        The shared output buffer is mapped (and registered with CUDA) first, and the warm-up
        calls run on the inputs handed over with the request, without a message each. Before each
        timed call the child asks the parent for that call's inputs and rebuilds them on its
        device, outside the timed region (the parent draws a fresh seed for every timed call, in
        every mode; were it to say they are the call before's, the same tensors would serve
        again). The output buffers are NaN
        before each call; where the parent asks for it (`wait_for_go`: on a GPU), once the inputs
        are made and the buffers emptied the child says so (`InputsReady`) and calls only when the
        parent says go (`CallGo`: the parent clocks this prelude and flushes the L2 cache from its
        own process first); every timed call's output goes to the shared buffer or a file for the
        parent to check and is then overwritten with NaN, and a `CallDone` tells the parent that
        the call is over (its deadline is per call, and its clock brackets each call from handing
        over its inputs to this message)."""
        reply = TimeReply(token=self.hello.token, id=request.id)
        if request.autotune_config is not None:
            # only to force a config: tuners made since the first call must be found (a scan of
            # every live object, tenths of a second with torch and Triton loaded)
            self.autotuners.scan()
        self.autotuners.force(request.autotune_config)
        try:
            self.adopt_window("output", request.output_memory)
            self.adopt_window("inputs", request.inputs_memory)
            self.shared_output_buffer(request.shared_output_bytes)
            current = [self.make_inputs(request.warmup_data)]
        except Exception as exc:  # noqa: BLE001 - a GPU that fails here fails the shape
            traceback.print_exc()
            reply.error = CallError(kind=classify(exc, self.hello.device), error=one_line(exc))
            return reply

        def warmup_inputs(index: int) -> tuple:
            if index == 1:  # the first call is over and the warm-up goes on
                self.channel.send(FirstCallDone(token=self.hello.token, id=request.id))
            self.fill_output_buffer(current[0])
            return current[0]

        def make_inputs(index: int) -> tuple:
            self.channel.send(InputsWanted(token=self.hello.token, id=request.id, index=index))
            message = self.receive_for_call(CallInputs, request.id, index)
            self.adopt_window("inputs", message.inputs_memory)
            if message.data is not None:
                current[0] = self.make_inputs(message.data)
            self.fill_output_buffer(current[0])
            if request.wait_for_go:
                # the prelude ends here: the parent clocks it, flushes the GPU's L2 from its own
                # process and says go
                self.synchronize()
                self.channel.send(InputsReady(token=self.hello.token, id=request.id, index=index))
                self.receive_call_go(request.id, index)
            return current[0]

        def after_call(index: int, data: tuple, result: object) -> None:
            done = CallDone(token=self.hello.token, id=request.id, index=index)
            done.output = self.export_timed(self.resolved(result), request, index)
            done.output_aliases_input = self.aliases_input(result, data)
            if not done.output_aliases_input:
                self.transfer.fill_output_nan(result, self.inputs_of(data))
                self.synchronize()
            self.channel.send(done)

        rule = StoppingRule(
            min_runs=request.min_runs,
            max_runs=request.max_runs,
            max_rel_err=request.max_rel_err,
            budget_s=request.budget_s,
            slower_than_ms=request.slower_than_ms,
        )
        try:
            stats = time_calls(
                self.entry,
                make_inputs,
                device=self.hello.device,
                rule=rule,
                warmup_calls=request.warmup_calls,
                warmup_s=request.warmup_s,
                warmup_inputs=warmup_inputs,
                after_call=after_call,
            )
        except Exception as exc:  # noqa: BLE001 - whatever the candidate raises is a result
            traceback.print_exc()
            reply.error = CallError(kind=classify(exc, self.hello.device), error=one_line(exc))
            return reply
        reply.times_ms, reply.compile_s, reply.flags = stats.times_ms, stats.compile_s, stats.flags
        return reply

    def shared_output_buffer(self, capacity: int):
        """The shared output buffer, mapped (and registered with CUDA) to `capacity` bytes: at the
        start of a timing, so that neither costs the first timed call; None without one."""
        if not capacity:
            return None
        if self.output_window is not None:  # a device window: the parent sized it
            self.output_window.ensure(capacity)
            return self.output_window
        if self.output_fd is None:
            return None
        if self.shared_output is None:
            self.shared_output = self.transfer.SharedBuffer(self.output_fd, cuda=self.hello.device == "cuda")
        self.shared_output.ensure(capacity)
        return self.shared_output

    def export_checked(self, result: object, request: CheckRequest):
        """A checked call's output into the shared output buffer (the device window, else the
        memfd) when the parent offered one and it fits, else into its file."""
        shared = self.shared_output_buffer(request.shared_output_bytes)
        if shared is not None and type(result) is self.torch.Tensor:
            info = self.transfer.export_shared(result, shared, request.shared_output_bytes)
            if info.written:
                return info
        return self.export_output(result, self.io_dir / f"output-{request.id}.bin")

    def export_timed(self, result: object, request: TimeRequest, index: int):
        """A timed call's output into the shared buffer when it fits, else into a file."""
        shared = self.shared_output_buffer(request.shared_output_bytes)
        if isinstance(result, tuple | list | dict):  # an output of several parts: its file
            return self.export_output(result, self.io_dir / f"timed-{request.id}-{index}.bin")
        if shared is not None:
            info = self.transfer.export_shared(result, shared, request.shared_output_bytes)
            if info.written or not info.exact_tensor:
                return info
        return self.export_tensor(result, self.io_dir / f"timed-{request.id}-{index}.bin")

    def receive_call_go(self, request_id: int, index: int) -> None:
        self.receive_for_call(CallGo, request_id, index)

    def receive_for_call(self, kind: type, request_id: int, index: int):
        """The parent's next message, which must be a `kind` for call `index` of `request_id`."""
        line = self.channel.receive_line()
        if line is None:
            raise EOFError("the parent closed the request pipe")
        message = REQUEST.validate_json(line)
        if not isinstance(message, kind) or (message.id, message.index) != (request_id, index):
            raise ValueError(
                f"expected {kind.__name__} for call {index} of request {request_id}, got {message.type}"
            )
        return message


# --- entry points ---------------------------------------------------------------------------


def probe(scratch: str, cuda: bool, host_ipc: int | None = None) -> int:
    """Try the full isolation inside the namespaces the caller made: hide one directory, keep one
    writable, remount the rest read-only, fork an init, lock, and with `cuda` run a CUDA kernel.
    Prints "ok" when all of it works."""
    hidden, writable = Path(scratch, "hidden"), Path(scratch, "writable")
    report = isolate_filesystem([str(hidden)], [str(writable)], devices=device_nodes(cuda))
    _status_read, status_write = os.pipe()
    become_init(status_write, [])
    lock_namespaces()
    (writable / "probe").write_text("ok")
    # A mount that cannot be made read-only is reported with each run, not a reason to give up
    # the namespaces; failing to hide, to keep writable or to lock is.
    problems = [
        problem for problem in report.problems if "read-only" not in problem and "/dev" not in problem
    ]
    if any(hidden.iterdir()):
        problems.append("hidden directory still visible")
    if _libc().umount2(str(hidden).encode(), 0) == 0:
        problems.append("hiding mount could be undone")
    if host_ipc is not None and os.stat("/proc/self/ns/ipc").st_ino == host_ipc:
        problems.append("the IPC namespace is the parent's")
    if cuda:
        try:
            import torch

            torch.ones(1, device="cuda").add_(1)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - any failure means: not this level
            problems.append(f"CUDA does not work here: {one_line(exc)}")
    print("ok" if not problems else "; ".join(problems), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harness.sandbox.child")
    parser.add_argument("--request-fd", type=int)
    parser.add_argument("--reply-fd", type=int)
    parser.add_argument("--status-fd", type=int)
    parser.add_argument("--output-fd", type=int)  # the shared output buffer (transfer.py)
    parser.add_argument("--inputs-fd", type=int)  # the parent's memfd the inputs come in (transfer.py)
    parser.add_argument("--fd-socket", type=int)  # device windows' descriptors (device_memory.py)
    parser.add_argument("--probe", metavar="SCRATCH_DIR")
    parser.add_argument("--probe-cuda", action="store_true")
    parser.add_argument("--probe-ipc", type=int)  # the parent's IPC namespace (inode)
    args = parser.parse_args(argv)
    if args.probe:
        return probe(args.probe, args.probe_cuda, args.probe_ipc)
    shared_fds = [fd for fd in (args.output_fd, args.inputs_fd, args.fd_socket) if fd is not None]
    worker_fds = [args.request_fd, args.reply_fd, *shared_fds]
    for fd in worker_fds + ([args.status_fd] if args.status_fd is not None else []):
        os.set_inheritable(fd, False)
    channel = Channel(args.request_fd, args.reply_fd)
    line = channel.receive_line()
    if line is None:
        return 0
    hello = Hello.model_validate_json(line)
    isolation = apply_isolation(hello.isolation, args.status_fd, worker_fds)
    os.chdir(hello.workdir)
    worker = Worker(hello, channel, isolation, args.output_fd, args.inputs_fd, args.fd_socket)
    if worker.start():
        worker.serve()
    exit_now()


def exit_now() -> None:
    """Exit at once when the work is done: flush Python's and C's output buffers (the parent keeps
    the log's tail), then skip the interpreter's teardown of torch, Triton and the CUDA context
    (most of a second per child; the kernel frees it all the same)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    _libc().fflush(None)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
