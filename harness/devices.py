"""Which device a command runs on and which shapes it uses there, without importing torch at
module level: the CLI and the plan resolve `--device` before anything runs, and torch is
imported (seconds on some machines) only where the device must ask it; the parent of a tournament
claims its runs and starts its sandboxed children before it imports torch, so that the import
overlaps the children's own start. A leaf: it imports only the shared leaves (errors,
environment); tests/test_layering.py guards it."""

from __future__ import annotations

from harness.errors import HarnessError


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
    """The shapes a run on `device` uses unless told: the smoke shapes on the CPU, the benchmark
    shapes for a timed run on a GPU, the test shapes for a checked one."""
    if device == "cpu":
        return "smoke"
    return "benchmarks" if timed else "tests"
