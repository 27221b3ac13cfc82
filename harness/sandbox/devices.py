"""Devices, modes and shape sets, without importing torch: the parent of a tournament claims its
runs and starts its sandboxed children before it imports torch (seconds on some machines), so
that the import overlaps the children's own start."""

from __future__ import annotations

from harness.errors import HarnessError

MODES = ("test", "leaderboard")
INTERLEAVE_GROUP = 16  # children alive at once in evaluate_interleaved


def resolve_device(device: str | None) -> str:
    """`device`, or cuda when torch sees a GPU and cpu otherwise; HarnessError when unusable.
    Without importing torch where it can: a CPU-only build of torch sees no GPU, and a GPU whose
    name is kept for the current fingerprint (harness.environment: seen by torch on this boot,
    driver and device selection) counts as seen; the parent confirms it with torch once CUDA
    starts (`confirm_device_name`), before anything is written."""
    if device not in (None, "cpu", "cuda"):
        raise HarnessError(f"unknown device {device!r}: use cpu or cuda")
    if device == "cpu":
        return device
    from harness.environment import kept_cuda_device_name, torch_build_without_gpu

    if torch_build_without_gpu():
        if device == "cuda":
            raise HarnessError("--device cuda, but torch sees no CUDA GPU here (a CPU-only build of torch)")
        return "cpu"
    if kept_cuda_device_name() is not None:
        return "cuda"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        raise HarnessError("--device cuda, but torch sees no CUDA GPU here")
    return "cpu"


def default_shape_set(device: str, timed: bool = False) -> str:
    if device == "cpu":
        return "smoke"
    return "benchmarks" if timed else "tests"


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
    each; at least 1). It starts CUDA in this process: ask once the children are spawned."""
    import torch

    free, _ = torch.cuda.mem_get_info()
    return max(1, free // CHECK_CHILD_GPU_BYTES)


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
