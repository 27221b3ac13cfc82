"""Tensors from the child to the parent as raw bytes in files, never as pickles.

The parent creates a private directory (under /dev/shm where it exists, so the bytes stay in
memory) and names the files; the child copies a tensor straight into a file mapped with
`torch.from_file(shared=True)` (one device-to-host copy for a GPU tensor, no extra buffer) and
reports shape, dtype and device in a `TensorInfo`. The parent maps the file back read-only after
checking that its size is exactly what the reported shape and dtype need, so nothing the child
writes is ever interpreted as anything but numbers.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from harness.sandbox.protocol import TensorInfo

DTYPES: dict[str, torch.dtype] = {
    str(dtype): dtype
    for dtype in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    )
}


MIN_SHM_FREE_BYTES = 2 * 1024**3


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
    return Path(tempfile.mkdtemp(prefix="harness-io-", dir=root))


def describe(value: object) -> TensorInfo:
    """Facts about any object, read without calling into a subclass or a foreign type."""
    kind = type(value)
    info = TensorInfo(type_name=f"{kind.__module__}.{kind.__qualname__}", exact_tensor=kind is torch.Tensor)
    if info.exact_tensor:
        info.shape = list(value.shape)
        info.dtype = str(value.dtype)
        info.device = value.device.type
        info.contiguous = value.is_contiguous()
        info.nbytes = value.numel() * value.element_size()
    return info


def export_tensor(value: object, path: Path) -> TensorInfo:
    """Describe `value` and, when it is an exact torch.Tensor, copy its bytes (in C order) to `path`."""
    info = describe(value)
    if not info.exact_tensor or info.dtype not in DTYPES or info.device not in ("cpu", "cuda"):
        return info  # a meta tensor has no bytes; the parent names the device
    if value.numel() == 0:
        path.write_bytes(b"")
    else:
        target = torch.from_file(str(path), shared=True, size=value.numel(), dtype=value.dtype)
        target.view(value.shape).copy_(value.detach())
        del target
    info.written = True
    return info


def read_tensor(path: Path, info: TensorInfo) -> torch.Tensor:
    """The tensor the child exported to `path` (on the CPU). Raises ValueError when the file does
    not hold exactly what `info` describes."""
    if not info.written or info.dtype not in DTYPES or info.shape is None:
        raise ValueError("no tensor was exported")
    dtype = DTYPES[info.dtype]
    numel = 1
    for size in info.shape:
        if size < 0:
            raise ValueError(f"negative size in shape {info.shape}")
        numel *= size
    expected_bytes = numel * torch.empty((), dtype=dtype).element_size()
    actual_bytes = path.stat().st_size
    if actual_bytes != expected_bytes:
        raise ValueError(
            f"exported file holds {actual_bytes} bytes, shape {info.shape} needs {expected_bytes}"
        )
    if numel == 0:
        return torch.empty(info.shape, dtype=dtype)
    return torch.from_file(str(path), shared=False, size=numel, dtype=dtype).view(info.shape)
