"""Limits of one sandboxed evaluation (`SandboxLimits`), and the resource limits they set on the
child between fork and exec (`resource_limits`, which also places the child in its cgroups: harness.sandbox.cgroups). Time
limits come from the settings; the kernel enforces memory and tasks where cgroups can be made, and
the parent watches the rest, and everything where they cannot (harness.sandbox.resources)."""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel

from harness.config import get_settings
from harness.errors import HarnessError


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
    max_tasks: int = 4096  # the child's processes and threads: its pids cgroup (pids.max)
    # per-child cgroups (memory, pids, CPU weight, freezer) where they can be made; "none": the
    # parent's watch and signals only
    cgroups: Literal["auto", "none"] = "auto"
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
            "startup_timeout_s",
            "import_timeout_s",
            "call_timeout_s",
            "evaluation_timeout_s",
            "max_checked_autotune_configs",
            "memory_bytes",
            "max_processes",
            "max_tasks",
            "cgroups",
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


def resource_limits(limits: SandboxLimits, device: str, place: Callable[[], None] | None = None):
    """The preexec_fn: resource limits for the child, set between fork and exec, after `place`
    (`ChildCgroups.place`: into the child's cgroups before it runs anything). The address space is
    limited on the CPU only: CUDA reserves terabytes of it (the memory cgroup, or else the
    parent's `ResourceWatch`, bounds memory on every device)."""
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
        if place is not None:
            place()
        _first_for_the_oom_killer()
        _soft, hard = resource.getrlimit(resource.RLIMIT_DATA)  # the parent's own bound is not the child's
        resource.setrlimit(resource.RLIMIT_DATA, (hard, hard))
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


def _first_for_the_oom_killer() -> None:
    """The child is the first process the kernel's OOM killer takes when the machine's memory runs
    out (oom_score_adj 1000, which any process may raise for itself): a shape whose inputs, the
    parent's reference and the children checked at once overfill the host ends a child, recorded
    as its result, never the harness (GPU MODE's amd mla-decode on the 2-core CPU machine, made to
    run there: the global OOM killer took the tournament's own process, 2026-12-07)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as adj:
            adj.write("1000")
    except OSError:
        pass


def bound_parent_memory(device: str) -> None:
    """On the CPU device, bound the harness's own process's private memory (RLIMIT_DATA: its heap
    and private mappings, what torch's CPU allocator takes) to `parent_memory_bytes` (0: three
    quarters of the host's memory): a task's reference or check too large for the machine then
    fails an allocation, which is recorded as the shape's result (harness.checking.out_of_memory,
    `larger_than_memory`), where the kernel's OOM killer would end the run. GPU MODE's amd
    mla-decode made to run on the 2-core CPU machine: its reference's intermediates grew the
    tournament's process to 22.8 GB of 24 and the OOM killer ended it (2026-12-07). Children reset
    it between fork and exec (`resource_limits`). Not on CUDA: the parent's large work is in the
    GPU's memory there, and CUDA's own host mappings are not this limit's business. Idempotent;
    never raises a limit already lower."""
    if device != "cpu":
        return
    limit = (
        get_settings().parent_memory_bytes
        or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft == resource.RLIM_INFINITY or soft > limit:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
