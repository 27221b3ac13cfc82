"""The parent side of the sandbox: start a child per evaluation, talk to it, enforce limits.

`ChildProcess` is one sandboxed child serving a sequence of requests; `evaluate` uses one to
check a candidate on a shape set. Its limits are harness.sandbox.limits, its namespaces
harness.sandbox.isolation, its directories and environment harness.sandbox.workspace, and the
process's other children harness.sandbox.pool. How it defends itself (docs/runner.md has the full
account):

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

import hmac
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from time import monotonic
from typing import Literal

from pydantic import ValidationError
from typing_extensions import Self

from harness.config import get_settings
from harness.errors import HarnessError
from harness.sandbox.cgroups import ChildCgroups, make_child_cgroups
from harness.sandbox.child import device_nodes
from harness.sandbox.devices import cublas_needs_workspace_config
from harness.sandbox.isolation import NO_ISOLATION, detect_isolation, forget_kept_isolation, level_was_kept
from harness.sandbox.limits import SandboxLimits, resource_limits
from harness.sandbox.placement import placed_apart
from harness.sandbox.pool import CHILD_POOL, ChildPool
from harness.sandbox.protocol import (
    MAX_MESSAGE_BYTES,
    REPLY,
    CallDone,
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
    Message,
    Ready,
    Shutdown,
    Started,
    TimeReply,
    TimeRequest,
    encode,
)
from harness.sandbox.resources import (
    ResourceWatch,
    WatchedDirectories,
    child_processes,
    direct_children,
    tree_bytes,
)
from harness.sandbox.workspace import (
    WORKDIR_PREFIX,
    code_cache_dirs,
    create_shared_memory,
    hidden_directories,
    make_io_dir,
    python_environment,
    remove_files_of_dead_parents,
    remove_tree,
    visible_paths,
    warm_bytecode,
    work_root,
)
from harness.tasks import TaskSpec
from harness.tasks.spec import deterministic_environment
from harness.timing import StoppingRule

LOG_TAIL_BYTES = 64 * 1024
REASON_LOG_TAIL_CHARS = 300
SHUTDOWN_GRACE_S = 5.0
DISCARD_LIMIT_S = 10.0  # per name left in the io directory (`discard_files`), while the child runs
# The child ends a timing's warm-up and its timed calls by its own clock, which the candidate can
# replace (tests/adversarial/patches_timers.py); the parent bounds both by its own clock, with
# these seconds to spare over what an honest child takes (`ChildProcess.time`)
WARMUP_SPARE_S = 10.0
TIMED_CALLS_SPARE_S = 5.0


class ChildFailure(Exception):
    """The child timed out, died, or broke the protocol; it is gone when this is raised."""

    def __init__(self, status: Literal["timeout", "crashed"], reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class TimedShape:
    """What `ChildProcess.time` returns: the child's reply, and per timed call the parent's own
    time (ms) from starting to hand over its inputs to hearing that its output is ready; the call,
    and everything the child did for it (inputs, NaN fill, flush, export), lies in between. Of
    that, `prelude_ms` (with a `before_call`: on a GPU): from the same start to the parent's go
    (the child's rebuild of the inputs on its device and its NaN fill, the parent's L2 flush):
    harness work only, no call."""

    reply: TimeReply
    call_wall_ms: dict[int, float]
    prelude_ms: dict[int, float] = field(default_factory=dict)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class ChildProcess:
    """One sandboxed child running one candidate; it serves requests until `close()`.

    Use it as a context manager: `start()` (import phase; or `spawn()` now and `wait_ready()`
    later, so that several children import at once), then any number of `check()` calls
    (a timing request fits the same way: send, wait with a deadline, validate the reply).
    Every method that waits raises `ChildFailure` when the child times out, dies or breaks the
    protocol; the child is killed by then.
    """

    def __init__(
        self,
        code: bytes,
        task: TaskSpec,
        *,
        device: str,
        limits: SandboxLimits,
        code_sha256: str,
        pool: ChildPool | None = None,
    ):
        self.pool = pool or CHILD_POOL  # where it is live while it runs (ChildPool.others_stopped)
        self.task = task
        self.device = device
        self.limits = limits
        self.token = secrets.token_hex(16)
        self.level = NO_ISOLATION if limits.isolation == "none" else detect_isolation(device)
        self.level_was_kept = limits.isolation != "none" and level_was_kept(device)
        self.next_id = 0
        self.log = bytearray()
        self.log_total = 0
        self.proc: subprocess.Popen | None = None
        self.buffer = b""
        self.status_fd: int | None = None
        # the shared output buffer of timed and checked outputs (create_shared_output), its size as this parent set
        # it, and the parent's mapping of it (a transfer.SharedBuffer, made by whoever reads first)
        self.output_fd: int | None = None
        self.shared_bytes = 0
        self.shared_reader = None
        # the memfd the parent hands the inputs over in (create_shared_memory), its writer
        # (transfer.InputsWriter, made on the first write), and the data tuple written last with
        # its items (written again only when another tuple comes)
        self.inputs_fd: int | None = None
        self.inputs_writer = None
        self.inputs_written: tuple[object, list[DataItem]] | None = None
        # On a GPU that can (harness.sandbox.device_memory): device windows instead of the two
        # memfds, their descriptors sent over `fd_socket` (a Unix socket whose other end the
        # child holds); `device_windows`, set below from the settings, is None until the first
        # one is needed and False where they are off or cannot be made.
        self.fd_socket: socket.socket | None = None
        self.output_window = None  # the outputs' window (device_memory.DeviceWindow)
        self.shutdown_requested = False
        self.startup_s: float | None = None
        self.ready: Ready | ImportFailed | None = None
        # The parent's time waiting on this child in the current evaluation (`_receive`), against
        # limits.evaluation_timeout_s; an evaluation that adopts a kept child sets it to 0.
        self.spent_s = 0.0
        self.watch: ResourceWatch | None = None
        self.cgroups = ChildCgroups("none")  # made at the spawn (harness.sandbox.cgroups)
        self.caches_trimmed: str | None = None  # why `trim_caches` removed the per-code caches
        self.stopped_pids: list[int] = []  # stopped by another child's timing phase (`stop`)
        self.pauses: list[tuple[float, float]] = []  # (from, to) on the parent's clock, ended pauses
        self.paused_at: float | None = None
        self._stop_exempt: set[int] | None = None  # between `stop_begin` and `stop_finish`
        settings = get_settings()
        self.device_windows: bool | None = (
            None if device == "cuda" and settings.device_windows == "auto" else False
        )
        self.caches = code_cache_dirs(code_sha256)
        self.triton_cache, self.extensions_cache, self.inductor_cache = self.caches
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
        self.io_fd: int | None = os.open(
            self.io_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        )

    # lifecycle

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def environment(self) -> dict[str, str]:
        env = python_environment()
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
        # the reference candidate runs ref_kernel, under deterministic algorithms: cuBLAS's
        # workspace limited only where this torch refuses a product without (GPU MODE's runner
        # sets no such variable; on an H100 pmpp's matmul took 0.377 ms here, 0.245 ms there)
        deterministic = deterministic_environment(self.task)
        if self.device == "cuda" and deterministic and cublas_needs_workspace_config():
            env.update(deterministic)
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
        # what the child must not see, first: a store that cannot be hidden ends the command here
        hidden = hidden_directories(self.limits) if self.level.full else []
        request_read, self.request_fd = os.pipe()
        self.reply_fd, reply_write = os.pipe()
        self.output_fd = create_shared_memory("harness-timed-output")
        self.inputs_fd = create_shared_memory("harness-inputs")
        output_for_child, inputs_for_child = os.dup(self.output_fd), os.dup(self.inputs_fd)
        child_fds = [request_read, reply_write, output_for_child, inputs_for_child]
        arguments = [
            "--request-fd",
            str(request_read),
            "--reply-fd",
            str(reply_write),
            "--output-fd",
            str(output_for_child),
            "--inputs-fd",
            str(inputs_for_child),
        ]
        if self.device_windows is None:  # device windows' descriptors go this way (send_window)
            self.fd_socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.fd_socket.shutdown(socket.SHUT_RD)  # nothing the child sends is ever read
            self.fd_socket.setblocking(False)  # a child that never reads cannot stall the parent
            child_fds.append(theirs.detach())
            arguments += ["--fd-socket", str(child_fds[-1])]
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
        if self.limits.cgroups == "auto":
            self.cgroups = make_child_cgroups(
                memory_bytes=self.limits.memory_bytes, max_tasks=self.limits.max_tasks
            )
        self.started = monotonic()
        try:
            self.proc = self._popen(command, child_fds)
        except OSError as exc:
            self.cgroups.drop_all()
            self._blame_kept_isolation(str(exc))
            raise HarnessError(f"could not start a sandboxed child: {exc}") from None
        finally:
            for fd in child_fds:
                os.close(fd)
        self.cgroups.keep_placed(self.proc.pid)  # a group it is not in: the watch and signals apply
        self.pool.live.add(self)
        self.log_thread = threading.Thread(target=self._drain_log, daemon=True)
        self.log_thread.start()
        self.watch = ResourceWatch(
            self.proc.pid,
            whole_session=not self.level.full,
            max_processes=self.limits.max_processes,
            memory_bytes=self.limits.memory_bytes,
            directories=[
                WatchedDirectories(
                    (self.workdir, self.io_dir),
                    self.limits.disk_bytes,
                    "disk_bytes",
                    "the working directories",
                ),
                WatchedDirectories(
                    self.caches, self.limits.code_cache_bytes, "code_cache_bytes", "the per-code caches"
                ),
            ],
            kernel_problem=self.cgroups.memory_problem,
        )
        self.watch.start()
        plan = IsolationPlan()
        if self.level.full:
            plan = IsolationPlan(
                mount=True,
                pid_init=True,
                lock=True,
                hidden=hidden,
                visible=visible_paths(hidden),
                private=[str(self.workdir)],
                tmpfs_bytes=self.limits.disk_bytes,
                devices=device_nodes(self.device == "cuda"),
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
            # Only cgroup writes and setrlimit calls run between fork and exec (no locks, no
            # allocation to speak of).
            preexec_fn=resource_limits(self.limits, self.device, self.cgroups.place),  # noqa: PLW1509
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
            # Only a child that died before its first message (unshare refused, the init failed)
            # says the kept level no longer holds: one that is slow to start was held back by the
            # load of the machine (the candidates beside it), which is no fault of the level.
            if failure.status == "crashed":
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
        the sandbox: orphans are reparented to its init), and without one every process of its
        session too (`resources.child_processes`: a new process group does not leave the tree, an
        orphan in the child's session does not leave the session)."""
        if self.proc is None:
            return []
        return child_processes(self.proc.pid, whole_session=not self.level.full)

    def _init_pids(self) -> list[int]:
        """`unshare` and the init it forked (the pid namespace's pid 1): the first two levels of
        the child's tree under full isolation."""
        if self.proc is None:
            return []
        return [self.proc.pid, *(direct_children(self.proc.pid) or [])]

    def stop(self) -> None:
        """SIGSTOP every process of the child (its threads with it), again until no new one
        appears: while another child is timed, this one runs nothing on the CPU and launches
        nothing on the GPU. Its deadlines stand still meanwhile (`_paused_s`). In two halves
        (`stop_begin`, `stop_finish`), so that several children are stopped at once."""
        self.stop_begin()
        self.stop_finish()

    def stop_begin(self) -> None:
        """The first half of `stop`: the freezer asked to freeze the child's tree."""
        if self.proc is None or self.proc.poll() is not None or self.paused_at is not None:
            return
        self.paused_at = monotonic()
        if self.watch is not None:
            self.watch.paused = True
        # Under full isolation the first process is `unshare` and its child the init of the pid
        # namespace, both harness code: they are left running, so that a parent killed meanwhile
        # is still seen by the init (its status pipe closes), which ends the namespace and with it
        # every stopped process. Stopped, they would wait for a SIGCONT that never comes.
        self._stop_exempt = set(self._init_pids()) if self.level.full else set()
        # The freezer stops the whole tree at once; signals stop what it does not hold (all of it
        # without one, or a worker forked before the init was moved out: `ChildCgroups.freeze`).
        self.cgroups.freeze(sorted(self._stop_exempt), wait=False)

    def stop_finish(self) -> None:
        """The second half of `stop`: the freeze waited for, and whatever it does not hold
        stopped by signals."""
        if self.paused_at is None or self._stop_exempt is None:
            return
        exempt, self._stop_exempt = self._stop_exempt, None
        if self.cgroups.frozen:  # the freezer holds the tree (`freeze` said so)
            self.cgroups.wait_frozen()
            exempt |= self.cgroups.frozen_pids()
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
        self.cgroups.thaw()
        for pid in self.stopped_pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass
        self.pauses.append((self.paused_at, monotonic()))
        self.paused_at, self.stopped_pids, self._stop_exempt = None, [], None
        if self.watch is not None:
            self.watch.paused = False

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

    def allow_output(self, nbytes: int) -> None:
        """Room in the working directories for the harness's exported outputs of `nbytes` (a
        checked call's output goes to a file there, as may a timed one that misses the shared
        buffer) on top of `disk_bytes`, which stays the candidate's own room whatever the task's
        outputs weigh (GPU MODE's prefixsum has 1 GiB outputs)."""
        if self.watch is None:
            return
        wanted = self.limits.disk_bytes + 2 * nbytes
        self.watch.directories = [
            replace(group, limit=max(group.limit, wanted)) if group.setting == "disk_bytes" else group
            for group in self.watch.directories
        ]

    def write_inputs(self, data: tuple, phase: str = "a call") -> tuple[list[DataItem], int | None]:
        """Copy the data tuple's tensors into the child's inputs memory (harness.sandbox.transfer,
        `InputsWriter`) and return the items that describe it, with the size of a new device
        window the message must announce (`reserve_inputs`); the tuple written last is not
        written again (the parent never reads that memory back: a child that wrote there has
        only changed its own inputs)."""
        if self.holds_inputs(data):
            return self.inputs_written[1], None
        laid_out = self.lay_out_inputs(data)
        announced = self.reserve_inputs(laid_out, phase)
        self.copy_inputs(data, laid_out, phase)
        return laid_out[0], announced

    def holds_inputs(self, data: tuple) -> bool:
        """Whether `data` is the tuple written last into the child's inputs memory."""
        return self.inputs_written is not None and self.inputs_written[0] is data

    def lay_out_inputs(self, data: tuple):
        """`transfer.lay_out_inputs` for this task: the items, and where each tensor goes (the output
        buffers where the task's data layout puts them: harness.checking.data_layout)."""
        from harness.checking import data_layout  # torch: not before the spawn
        from harness.sandbox.transfer import lay_out_inputs

        return lay_out_inputs(data, data_layout(self.task, self.device, data).outputs)

    def uses_device_windows(self) -> bool:
        """Whether this child's inputs and timed outputs go through device windows (decided at
        the first need: whether this process can make them, harness.sandbox.device_memory)."""
        if self.device_windows is None:
            from harness.sandbox import device_memory

            self.device_windows = self.fd_socket is not None and device_memory.supported()
        return self.device_windows

    def send_window(self, purpose: str, size: int, phase: str):
        """A new device window of at least `size` bytes, its descriptor sent to the child (tagged
        with `purpose`); the message that names its size must follow. A full socket (a child
        that never takes them) or any error of the driver's is the child's failure."""
        from harness.sandbox.device_memory import DeviceMemoryError, DeviceWindow

        size = 1 << max(size - 1, 1).bit_length()  # powers of two: few windows, few descriptors
        try:
            window = DeviceWindow.create(size)
        except DeviceMemoryError as exc:
            raise self._fail("crashed", f"no device window of {size} bytes during {phase}: {exc}") from None
        try:
            socket.send_fds(self.fd_socket, [purpose.encode()], [window.fd])
        except OSError as exc:
            window.close()
            raise self._fail(
                "crashed", f"the harness's {purpose} window could not be handed over during {phase}: {exc}"
            ) from None
        window.close_fd()
        return window

    def reserve_inputs(self, laid_out, phase: str) -> int | None:
        """Room for a laid-out data tuple in the child's inputs memory, made before the message
        that hands it over: with device windows, a larger window when it does not fit (its size,
        for the message's `inputs_memory`); None otherwise (a memfd grows in `copy_inputs`)."""
        writer = self._inputs_writer()
        needed = laid_out[2]
        if not self.uses_device_windows() or needed <= writer.size:
            return None
        window = self.send_window("inputs", needed, phase)
        old, writer.buffer, writer.size = writer.buffer, window, window.size
        old.close()
        return window.size

    def _inputs_writer(self):
        if self.inputs_writer is None:
            from harness.sandbox.transfer import InputsWriter

            self.inputs_writer = InputsWriter(self.inputs_fd, cuda=self.device == "cuda")
        return self.inputs_writer

    def copy_inputs(self, data: tuple, laid_out, phase: str = "a call") -> None:
        """The bytes of a laid-out data tuple into the child's inputs memory (grown first by
        `grow_memfd`, or a window made by `reserve_inputs`; a mapping that fails is the child's
        failure too, as what it did to the memfd may be the cause)."""
        writer = self._inputs_writer()
        self.inputs_written = None
        needed = laid_out[2]
        if needed > writer.size and not self.uses_device_windows():
            self.grow_memfd(self.inputs_fd, writer.size, needed, "inputs memory", phase)
            writer.size = needed
        try:
            writer.copy(laid_out)
        except (OSError, ValueError, BufferError) as exc:
            raise self._fail(
                "crashed", f"the inputs memory could not be mapped during {phase}: {exc}"
            ) from None
        self.inputs_written = (data, laid_out[0])

    def grow_memfd(self, fd: int, current: int, wanted: int, what: str, phase: str) -> None:
        """Grow a memfd shared with the child (workspace.create_shared_memory) from `current`
        bytes, the size this parent gave it, to `wanted`. The child holds the memfd too: one it
        resized (grown: the parent's grow would be a sealed shrink, EPERM), or any error of the
        parent's own calls on it, is the child's failure (`crashed`, killed), never an error out
        of the run; the next child gets memfds of its own."""
        try:
            size = os.fstat(fd).st_size
            if size != current:
                raise self._fail(
                    "crashed",
                    f"protocol violation during {phase}: the child resized the harness's {what} "
                    f"(to {size} bytes; the parent had made it {current})",
                )
            os.ftruncate(fd, wanted)
        except OSError as exc:
            reason = (
                f"the harness's {what} could not be grown to {wanted} bytes during {phase} ({exc.strerror})"
            )
            raise self._fail("crashed", f"{reason}: the child changed it") from None

    def check(
        self,
        data: tuple,
        *,
        autotune_config: int | None,
        phase: str,
        forget_tuning: bool = False,
        output_bytes: int = 0,
    ) -> CheckReply:
        """One call of the entry point on `data` (the parent's inputs, handed over as bytes:
        `write_inputs`), limited to call_timeout_s (with `forget_tuning`, the autotuners forget
        their choices first: CheckRequest). An output of up to `output_bytes` comes back in the
        shared output buffer (the device window, else the memfd, grown to it first), as a timed
        call's does; one that does not fit, or of several parts, in a file."""
        output_memory = self.prepare_shared_output(output_bytes, phase)
        items, inputs_memory = self.write_inputs(data, phase)
        request = CheckRequest(
            id=self.new_request_id(),
            data=items,
            inputs_memory=inputs_memory,
            output_memory=output_memory,
            shared_output_bytes=self.shared_bytes,
            autotune_config=autotune_config,
            forget_tuning=forget_tuning,
        )
        return self.ask(request, CheckReply, timeout_s=self.limits.call_timeout_s, phase=phase)

    def prepare_shared_output(self, output_bytes: int, phase: str) -> int | None:
        """The shared output buffer made to hold `output_bytes`: with device windows a window
        (`reserve_output`: its size for the next message's `output_memory`, or None), else the
        memfd grown (`grow_memfd`; None)."""
        if self.uses_device_windows():
            return self.reserve_output(output_bytes, phase)
        if self.output_fd is not None and output_bytes > self.shared_bytes:
            self.grow_memfd(self.output_fd, self.shared_bytes, output_bytes, "shared output buffer", phase)
            self.shared_bytes = output_bytes
        return None

    def reserve_output(self, output_bytes: int, phase: str) -> int | None:
        """With device windows, an output window of at least `output_bytes` (a new one, sent to
        the child, when the last is smaller): its size for the next message's `output_memory`,
        or None when the last one does."""
        if output_bytes <= self.shared_bytes:
            return None
        window = self.send_window("output", output_bytes, phase)
        if self.output_window is not None:
            self.output_window.close()
        self.output_window, self.shared_bytes = window, output_bytes
        return window.size

    def time(
        self,
        *,
        warmup_data: tuple,
        inputs_for: Callable[[int], tuple],
        rule: StoppingRule,
        warmup_calls: int,
        warmup_s: float,
        autotune_config: int | None,
        on_output: Callable[[CallDone], None],
        phase: str,
        output_bytes: int = 0,
        before_call: Callable[[], None] | None = None,
    ) -> TimedShape:
        """Warm up and time the entry point on one shape (harness.timing in the child), while every
        other child of this process is stopped (`ChildPool.others_stopped`).

        The warm-up runs on `warmup_data`, handed over with the request (no message per warm-up
        call; its outputs are not checked). Before each timed call (indices k grow; the warm-up's
        calls count too) the child asks for its inputs, and gets `inputs_for(k)`: the parent's
        clock for the call starts, then the inputs are written into the child's inputs memory
        (`write_inputs`; the same tuple as the call before is not handed over again, benchmark
        mode), then the child is told. So no thread of the candidate can start on a call's inputs
        before its bracket opens; `inputs_for` itself (the parent's inputs and reference for the
        call), their layout and the message run before. Every timed call's output is exported to
        the shared buffer (grown to `output_bytes` first; harness.sandbox.transfer) or, when it
        does not fit, to
        `timed_output_name(id, k)`, and handed to `on_output` as soon as the call is over, before
        the next call's inputs are asked for. With `before_call` (on a GPU: the parent's own flush
        of the L2 cache, which no code in the child can skip), between the two, once the child
        says the call's inputs are on its device (`InputsReady`), the parent runs it and says go
        (`CallGo`); the time to there is the call's prelude (`TimedShape.prelude_ms`), in which an
        honest child runs only harness code. (Without it, no such round trip: on the CPU there is no
        flush to do.) Every message is due within call_timeout_s of the
        one before it, so a hanging call is killed like one in `check`; the first, which ends the
        warm-up, within call_timeout_s per warm-up call asked for plus `warmup_s` (an honest
        warm-up's calls fit, one call past `warmup_s` included; a clock the candidate slowed down
        cannot stretch it). Returns the child's reply with the parent's own clock of each call
        (`TimedShape.call_wall_ms`)."""
        with (
            self.pool.timing_lock,
            self.pool.others_stopped(self),
            placed_apart(self.processes() if self.device == "cpu" else ()),
        ):
            call_wall_ms: dict[int, float] = {}
            prelude_ms: dict[int, float] = {}
            inputs_sent_at: dict[int, float] = {}
            output_memory = self.prepare_shared_output(output_bytes, phase)
            warmup_items, inputs_memory = self.write_inputs(warmup_data, phase)
            request = TimeRequest(
                id=self.new_request_id(),
                warmup_data=warmup_items,
                output_memory=output_memory,
                inputs_memory=inputs_memory,
                shared_output_bytes=self.shared_bytes,
                warmup_calls=warmup_calls,
                warmup_s=warmup_s,
                min_runs=rule.min_runs,
                max_runs=rule.max_runs,
                max_rel_err=rule.max_rel_err,
                budget_s=rule.budget_s,
                slower_than_ms=rule.slower_than_ms,
                autotune_config=autotune_config,
                wait_for_go=before_call is not None,
            )
            self._send(request, phase)
            sent_at = monotonic()
            # The child decides when warm-up and timing end by its own clock, which the candidate can
            # replace: the parent bounds each by its own (`_warmup_limit_s`, `_timed_calls_limit_s`),
            # and the whole phase has a deadline on the parent's clock too, generous enough for any
            # honest run (warm-up and budget, four times over, and two whole calls), moved by the
            # time the parent spends on its own work (inputs, references, checks of the outputs).
            phase_limit_s = 4 * (warmup_s + rule.budget_s) + 2 * self.limits.call_timeout_s
            last_index = -1
            phase_timeout = f"{phase} ran past the phase's limit of {phase_limit_s:g} s on the parent's clock"
            # the warm-up's calls send no message but the first's end (`FirstCallDone`, when the
            # warm-up goes on): the first message is due after the first call (or the whole warm-up)
            warmup_limit_s = max(1, warmup_calls) * self.limits.call_timeout_s + warmup_s
            warmup_deadline = sent_at + warmup_limit_s
            warmup_why = "call_timeout_s per warm-up call, plus warmup_s"
            warming_up, first_call_over = True, False
            timed_calls = 0
            timed_started = parent_work_s = 0.0  # the timed calls' start, the parent's work since
            while True:
                now = monotonic()
                phase_deadline = sent_at + phase_limit_s + parent_work_s
                if now >= phase_deadline:
                    raise self._fail("timeout", phase_timeout)
                wait_s = min(
                    warmup_deadline - now if warming_up else self.limits.call_timeout_s, phase_deadline - now
                )
                try:
                    message = self._receive(
                        now,
                        max(wait_s, 0.0),
                        phase,
                        (FirstCallDone, InputsWanted, InputsReady, CallDone, TimeReply),
                        request.id,
                    )
                except ChildFailure as failure:
                    if failure.status == "timeout" and monotonic() >= phase_deadline:
                        raise ChildFailure("timeout", phase_timeout) from None
                    if failure.status == "timeout" and warming_up and monotonic() >= warmup_deadline:
                        raise ChildFailure(
                            "timeout",
                            f"the warm-up of {phase} ran past its limit of {warmup_limit_s:.3g} s on the "
                            f"parent's clock ({warmup_why})",
                        ) from None
                    raise
                if isinstance(message, FirstCallDone):
                    if not warming_up or first_call_over:
                        raise self._fail("crashed", f"protocol violation during {phase}: a second first call")
                    first_call_over = True
                    first_call_s = monotonic() - sent_at
                    rest_s = _warmup_limit_s(first_call_s, warmup_calls, warmup_s)
                    if monotonic() + rest_s < warmup_deadline:
                        warmup_limit_s, warmup_deadline = rest_s, monotonic() + rest_s
                        warmup_why = f"after its first call of {first_call_s:.3g} s: {_WARMUP_LIMIT_RULE}"
                    continue
                warming_up = False
                if isinstance(message, TimeReply):
                    return TimedShape(message, call_wall_ms, prelude_ms)
                if isinstance(message, InputsWanted):
                    if message.index <= last_index:
                        raise self._fail("crashed", f"protocol violation during {phase}: calls out of order")
                    last_index = message.index
                    work_started = monotonic()
                    if not timed_calls:
                        timed_started = work_started
                    timed_calls += 1
                    if timed_calls > rule.max_runs:
                        raise self._fail(
                            "crashed",
                            f"protocol violation during {phase}: more than the {rule.max_runs} timed calls "
                            "its rule allows",
                        )
                    limit_s = _timed_calls_limit_s(rule, call_wall_ms.values())
                    if timed_calls > rule.min_runs and work_started - timed_started - parent_work_s > limit_s:
                        raise self._fail(
                            "timeout",
                            f"{phase}: the timed calls went on past their limit of {limit_s:.3g} s on the "
                            f"parent's clock ({_TIMED_CALLS_LIMIT_RULE}; the child ends them by its own "
                            "clock, which the candidate can replace)",
                        )
                    data = inputs_for(message.index)
                    # made before the clock starts: the layout and the message; within it: the bytes
                    laid_out = None if self.holds_inputs(data) else self.lay_out_inputs(data)
                    items = None if laid_out is None else laid_out[0]
                    inputs_memory = None if laid_out is None else self.reserve_inputs(laid_out, phase)
                    encoded = encode(
                        CallInputs(
                            id=request.id, index=message.index, data=items, inputs_memory=inputs_memory
                        )
                    )
                    inputs_sent_at[message.index] = monotonic()
                    # the parent's own work (the call's inputs and reference) is not the child's time
                    parent_work_s += inputs_sent_at[message.index] - work_started
                    if laid_out is not None:
                        self.copy_inputs(data, laid_out, phase)
                    self._send_encoded(encoded, phase)
                elif isinstance(message, InputsReady):
                    if (
                        before_call is None
                        or message.index not in inputs_sent_at
                        or message.index in prelude_ms
                    ):
                        raise self._fail(
                            "crashed", f"protocol violation during {phase}: inputs ready for no call"
                        )
                    before_call()
                    prelude_ms[message.index] = (monotonic() - inputs_sent_at[message.index]) * 1e3
                    self._send(CallGo(id=request.id, index=message.index), phase)
                else:
                    went = prelude_ms if before_call is not None else inputs_sent_at
                    if message.index not in went or message.index in call_wall_ms:
                        raise self._fail(
                            "crashed", f"protocol violation during {phase}: an output for no call"
                        )
                    work_started = monotonic()
                    call_wall_ms[message.index] = (work_started - inputs_sent_at[message.index]) * 1e3
                    on_output(message)
                    parent_work_s += monotonic() - work_started  # the parent's check of the output

    def read_shared_output(self, info, device: str):
        """An output the child put in the shared output buffer (`info` says so), as a fresh
        tensor on `device`: from the device window where there is one (a copy within the GPU),
        else from the parent's mapping of the memfd (made on the first read)."""
        from harness.sandbox.transfer import SharedBuffer, read_shared

        buffer = self.output_window
        if buffer is None:
            if self.shared_reader is None:
                self.shared_reader = SharedBuffer(self.output_fd, cuda=device == "cuda")
            buffer = self.shared_reader
        return read_shared(buffer, self.shared_bytes, info, device)

    def output_name(self, request_id: int) -> str:
        """The name (in `io_fd`'s directory) of the file the child exports a checked call's output to."""
        return f"output-{request_id}.bin"

    def timed_output_name(self, request_id: int, index: int) -> str:
        return f"timed-{request_id}-{index}.bin"

    def discard_files(self) -> None:
        """Remove whatever the child left in its io directory (a directory it made included),
        through `io_fd`: nothing outside it, whatever the child replaced."""
        for name in os.listdir(self.io_fd):
            # never raises, never runs on: what stays is counted by the watch, and removed by `close`
            remove_tree(name, dir_fd=self.io_fd, give_up_after_s=DISCARD_LIMIT_S)

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
        # the mappings of the shared memory (memfds or device windows) and the descriptors' socket
        for name in ("shared_reader", "inputs_writer", "output_window", "fd_socket"):
            closable = getattr(self, name)
            if closable is not None:
                closable.close()
                setattr(self, name, None)
        self.inputs_written = None
        fds = (getattr(self, "request_fd", None), getattr(self, "reply_fd", None), self.status_fd, self.io_fd)
        for fd in (*fds, self.output_fd, self.inputs_fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.request_fd = self.reply_fd = self.status_fd = self.io_fd = self.output_fd = self.inputs_fd = None
        for directory in (self.workdir, self.io_dir):
            problem = remove_tree(directory)
            if problem is not None:  # the next command's remove_files_of_dead_parents tries again
                print(f"warning: could not remove a sandboxed child's files: {problem}", file=sys.stderr)
        self.trim_caches()

    def trim_caches(self) -> str | None:
        """Remove this code's per-code caches when they hold more than limits.code_cache_bytes
        (what an earlier run or this one left, between the watch's looks or after it); returns
        (and keeps in `caches_trimmed`) why, or None."""
        limit = self.limits.code_cache_bytes
        if self.caches_trimmed is None and tree_bytes(self.caches, stop_above=limit) > limit:
            for cache_dir in self.caches:
                remove_tree(cache_dir)
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
        self.pool.live.discard(self)
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
        self.cgroups.kill()  # whatever left the tree and the group (a frozen one thawed to die)
        self.proc.wait()
        self.cgroups.remove()
        if self.watch is not None:
            self.watch.stop()
        self.log_thread.join(timeout=5)

    def abandon(self, reason: str) -> ChildFailure:
        """Kill the child because of something the parent met with its work (`crashed`, with
        `reason`): one left in the middle of a request cannot serve another."""
        return self._fail("crashed", reason)

    def _fail(self, status: Literal["timeout", "crashed"], reason: str) -> ChildFailure:
        self._kill()
        tail = self.log_tail(REASON_LOG_TAIL_CHARS).strip().splitlines()
        if status == "crashed" and tail:
            reason = f"{reason}; last output: {tail[-1][:200]}"
        return ChildFailure(status, reason)

    def _send(self, message: Message, phase: str) -> None:
        self._send_encoded(encode(message), phase)

    def _send_encoded(self, encoded: bytes, phase: str) -> None:
        data = memoryview(encoded)
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
        if self.cgroups.read_problem() is not None:
            return f"killed by the kernel during {phase}: {self.cgroups.problem}"
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
        answering `request_id`. The wait counts against the evaluation's deadline (`spent_s`),
        which may end it first: from `since`, or from now when the parent comes to wait later
        (it was busy with other children meanwhile: a calibration child spawned beside the
        candidates is first waited on at the first timing)."""
        waited_from = max(since, monotonic())
        try:
            return self._receive_within(since, limit_s, phase, expected, request_id)
        finally:
            # stopped time is not its own
            self.spent_s += monotonic() - waited_from - self._paused_s(waited_from)

    def _read_waiting(self, phase: str) -> bool:
        """Read what the child has already written to its reply pipe, without waiting; whether a
        whole message is in the buffer now. A parent that waits for a reply reads it as soon as it
        comes, so this matters only to one that came to wait after the deadline had passed."""
        while b"\n" not in self.buffer and select.select([self.reply_fd], [], [], 0)[0]:
            chunk = os.read(self.reply_fd, 65536)
            if not chunk:
                break
            self.buffer += chunk
            if len(self.buffer) > MAX_MESSAGE_BYTES:
                raise self._fail(
                    "crashed", f"protocol violation during {phase}: a message over {MAX_MESSAGE_BYTES} bytes"
                )
        return b"\n" in self.buffer

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
            if remaining <= 0 and self._read_waiting(phase):
                continue  # it came while the parent was busy elsewhere: the parent's lateness is not the child's
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


_WARMUP_LIMIT_RULE = f"four times warmup_s and its calls at the first's length, plus {WARMUP_SPARE_S:g} s"
_TIMED_CALLS_LIMIT_RULE = (
    f"twice the rule's budget and two of its longest calls, plus {TIMED_CALLS_SPARE_S:g} s"
)


def _warmup_limit_s(first_call_s: float, warmup_calls: int, warmup_s: float) -> float:
    """How long the rest of a warm-up may take on the parent's clock once its first call (which
    compiles, autotunes and loads lazily) took `first_call_s`: an honest child ends it after
    `warmup_calls` calls and `warmup_s` seconds on its own clock, later calls no longer than the
    first; four times that and `WARMUP_SPARE_S` to spare."""
    return 4 * (warmup_s + max(1, warmup_calls) * first_call_s) + WARMUP_SPARE_S


def _timed_calls_limit_s(rule: StoppingRule, call_wall_ms) -> float:
    """How long a timing's calls may go on on the parent's clock, less its own work: an honest child
    asks for no call's inputs once `rule.budget_s` has passed on its own clock (which runs through
    the parent's work too), so twice the budget, two of its longest calls and
    `TIMED_CALLS_SPARE_S` to spare."""
    longest_s = max(call_wall_ms, default=0.0) / 1e3
    return 2 * rule.budget_s + 2 * longest_s + TIMED_CALLS_SPARE_S
