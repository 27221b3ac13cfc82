"""Modes and how many children check at once, without importing torch at module level: the
parent of a tournament claims its runs and starts its sandboxed children before it imports torch
(seconds on some machines), so that the import overlaps the children's own start. Which device
and which shapes: harness.devices."""

from __future__ import annotations

from harness.errors import HarnessError

MODES = ("test", "leaderboard")
INTERLEAVE_GROUP = 16  # children alive at once in evaluate_interleaved
CHECK_CHILD_GPU_BYTES = 3 * 1024**3  # a checking child's CUDA context, inputs, outputs and workspaces
CHECK_CHILD_HOST_BYTES = 1024**3  # a child's torch, Triton and candidate in host memory


def check_parallelism(setting: int | None = None) -> int:
    """How many untimed evaluations run at once (settings.check_parallelism; `setting` overrides
    it), as far as this host goes: a positive setting as it is; 0 as many as this process may use
    cores and as fit in the available host memory at CHECK_CHILD_HOST_BYTES each. Never more than
    INTERLEAVE_GROUP, never fewer than 1. Without torch: a CUDA run also takes the GPU's bound
    (`gpu_check_parallelism`) once its children are spawned."""
    if setting is None:
        from harness.config import get_settings

        setting = get_settings().check_parallelism
    if setting < 0:
        raise HarnessError(f"check_parallelism must be 0 (automatic) or a count, got {setting}")
    if setting:
        return min(setting, INTERLEAVE_GROUP)
    import os

    bounds = [INTERLEAVE_GROUP, len(os.sched_getaffinity(0))]
    available = _available_host_bytes()
    if available is not None:
        bounds.append(available // CHECK_CHILD_HOST_BYTES)
    return max(1, min(bounds))


def gpu_check_parallelism() -> int:
    """How many checking children fit in the current GPU's free memory (CHECK_CHILD_GPU_BYTES
    each; at least 1). It starts CUDA in this process: ask once the children are spawned. A GPU
    whose memory a child holds (the runtime cannot answer) gives 1: the check runs one at a time,
    and whatever runs out of memory is retried alone (harness.sandbox.evaluation)."""
    import torch

    try:
        free, _ = torch.cuda.mem_get_info()
    except RuntimeError:  # torch.AcceleratorError, torch.OutOfMemoryError: memory held elsewhere
        return 1
    return max(1, free // CHECK_CHILD_GPU_BYTES)


def hold_cuda_context() -> None:
    """Make this process's CUDA context now, before a child of a CUDA job starts: a child may take
    the GPU's memory at its import (tests/adversarial/holds_device_memory.py holds all but 256 MiB),
    and a parent that came to make its context after that could not make one at all (on an H100,
    2026-12-06: a tournament ended with a traceback, "CUDA error: out of memory" in
    cudaMemGetInfo). Costs the overlap of this process's torch import with the first children's
    start on CUDA only. A context that cannot be made here is left to the first use to report."""
    import torch

    try:
        torch.cuda.init()
        torch.cuda.mem_get_info()  # the runtime makes the device's primary context here
    except RuntimeError:
        pass


_CUBLAS_NEEDS_CONFIG: list[bool] = []  # the answer of `cublas_needs_workspace_config`, once asked


def cublas_needs_workspace_config() -> bool:
    """Whether this torch refuses a cuBLAS product under `torch.use_deterministic_algorithms(True)`
    unless CUBLAS_WORKSPACE_CONFIG is set (torch before pytorch/pytorch#161749 did; GPU MODE's
    references compute under it). Asked on CUDA once per process, by one tiny product with the
    variable out of this process's environment for the moment; CUDA made here if not yet. The
    child gets the variable only then: it limits cuBLAS's workspace (4 MiB, 8 of them), which
    GPU MODE's runner does not do, and a candidate's products may take slower kernels under it."""
    if not _CUBLAS_NEEDS_CONFIG:
        import os

        import torch

        saved = os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        deterministic = torch.are_deterministic_algorithms_enabled()
        try:
            torch.use_deterministic_algorithms(True)
            ones = torch.ones(2, 2, device="cuda")
            torch.mm(ones, ones)
            _CUBLAS_NEEDS_CONFIG.append(False)
        except RuntimeError as exc:
            if "CUBLAS_WORKSPACE_CONFIG" not in str(exc):
                return False  # no answer (the GPU's memory held elsewhere): asked again next time
            _CUBLAS_NEEDS_CONFIG.append(True)
        finally:
            torch.use_deterministic_algorithms(deterministic)
            if saved is not None:
                os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved
    return _CUBLAS_NEEDS_CONFIG[0]


def _available_host_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (free memory and what the page cache would give back)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
