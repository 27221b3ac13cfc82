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
