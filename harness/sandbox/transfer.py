"""Tensors from the child to the parent as raw bytes in files, never as pickles.

The parent creates a private directory (under /dev/shm where it exists, so the bytes stay in
memory) and names the files; the child writes a tensor's bytes (C order) into a file, a GPU tensor
through a pinned host buffer (one DMA copy, then one write), and reports shape, dtype and device in
a `TensorInfo`. The parent reads the file with `read` calls (never a mapping the child could
truncate under it) into a fresh tensor, pinned when it goes on to a GPU, after checking that the
file holds exactly the bytes the reported shape and dtype need, so nothing the child writes is ever
interpreted as anything but numbers. The child can replace the file by anything (a symbolic link
to a file hidden from it, a FIFO, a directory): the parent opens it by name in a directory it holds
open, never following a link and never blocking, and reads only a regular file of its own
(`open_exported`).

Timed outputs (every one is checked, up to tens of MB per call) take a faster road: a sealed
memfd of the parent's that both sides map (`SharedBuffer`, below).

The inputs never travel: the child copies them before a call and counts afterwards, bit for bit,
the elements that changed (`changed_elements`); the parent judges the counts.
"""

from __future__ import annotations

import errno
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from harness.bits import bit_patterns
from harness.wire import TensorInfo

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


def _bytes_of(value: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes in C order, as a flat uint8 tensor on the CPU (pinned for a GPU tensor:
    the caching host allocator keeps the buffer for the next call, so the copy is one DMA)."""
    value = value.detach()
    if value.device.type == "cpu":
        return value.contiguous().reshape(-1).view(torch.uint8)
    staging = torch.empty(value.numel() * value.element_size(), dtype=torch.uint8, pin_memory=True)
    staging.view(value.dtype).view(value.shape).copy_(value)
    return staging


PARALLEL_IO_BYTES = 16 * 1024**2  # above this, a file is written or read by IO_THREADS at once
IO_THREADS = 4


def _transfer(fd: int, view: memoryview, write: bool) -> None:
    """Write `view` to the file at offset 0, or fill `view` from it; a large one in IO_THREADS
    slices at once (one thread copies 4-5 GB/s between memory and a file in /dev/shm). Raises
    ValueError when the file ends early."""

    def one(start: int, stop: int) -> None:
        while start < stop:
            part = view[start:stop]
            count = os.pwrite(fd, part, start) if write else os.preadv(fd, [part], start)
            if count <= 0:
                raise ValueError(f"exported file ended after {start} of {len(view)} bytes")
            start += count

    size = len(view)
    if size <= PARALLEL_IO_BYTES:
        one(0, size)
        return
    step = -(-size // IO_THREADS)
    bounds = [(start, min(start + step, size)) for start in range(0, size, step)]
    with ThreadPoolExecutor(len(bounds)) as pool:
        for future in [pool.submit(one, start, stop) for start, stop in bounds]:
            future.result()


def export_tensor(value: object, path: Path) -> TensorInfo:
    """Describe `value` and, when it is an exact torch.Tensor, write its bytes (in C order) to `path`."""
    info = describe(value)
    if not info.exact_tensor or info.dtype not in DTYPES or info.device not in ("cpu", "cuda"):
        return info  # a meta tensor has no bytes; the parent names the device
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        if value.numel():
            _transfer(fd, memoryview(_bytes_of(value).numpy()).cast("B"), write=True)
    finally:
        os.close(fd)
    info.written = True
    return info


def changed_elements(before: torch.Tensor, after: object) -> int | None:
    """How many elements of `after` differ bit for bit from `before` (a copy taken before the call),
    on their own device; None when `after` is no longer a plain tensor of the same shape, dtype and
    device."""
    if (
        type(after) is not torch.Tensor
        or after.shape != before.shape
        or after.dtype != before.dtype
        or after.device != before.device
    ):
        return None
    return int((bit_patterns(after) != bit_patterns(before)).sum())


_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def open_exported(directory_fd: int, name: str) -> int:
    """A read-only descriptor of the file `name` in the directory open as `directory_fd`, which the
    child may have replaced. The open never follows a symbolic link (O_NOFOLLOW) and never waits
    (O_NONBLOCK: a FIFO opens at once, a file lease fails instead of holding the parent); the file
    must then be a regular file with one link, owned by the parent's user. Raises ValueError with a
    reason that says only what the child did: nothing of any file but its own."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory_fd)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise ValueError("the output file is missing") from None
        if exc.errno == errno.ELOOP:
            raise ValueError("the output file was replaced by a symbolic link") from None
        raise ValueError(
            f"the output file could not be opened ({errno.errorcode.get(exc.errno, exc.errno)})"
        ) from None
    facts = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(facts.st_mode):
        problem = (
            f"the output file was replaced by {_KINDS.get(stat.S_IFMT(facts.st_mode), 'a special file')}"
        )
    elif facts.st_nlink != 1:
        problem = "the output file was replaced by a hard link"
    elif facts.st_uid != os.geteuid():
        problem = "the output file was replaced by a file of another user"
    if problem is not None:
        os.close(fd)
        raise ValueError(problem)
    return fd


def _described(info: TensorInfo) -> tuple[torch.dtype, int, int]:
    """(dtype, element count, bytes) of the tensor `info` describes; ValueError when it describes
    none that was exported."""
    if not info.written or info.dtype not in DTYPES or info.shape is None:
        raise ValueError("no tensor was exported")
    dtype = DTYPES[info.dtype]
    numel = 1
    for size in info.shape:
        if size < 0:
            raise ValueError(f"negative size in shape {info.shape}")
        numel *= size
    return dtype, numel, numel * torch.empty((), dtype=dtype).element_size()


def read_tensor(directory_fd: int, name: str, info: TensorInfo, device: str = "cpu") -> torch.Tensor:
    """The tensor the child exported to the file `name` in the directory open as `directory_fd`, on
    `device`. Raises ValueError when the file is not a plain file of the child's (`open_exported`)
    or does not hold exactly what `info` describes."""
    dtype, numel, expected_bytes = _described(info)
    fd = open_exported(directory_fd, name)
    try:
        actual_bytes = os.fstat(fd).st_size
        if actual_bytes != expected_bytes:
            raise ValueError(
                f"exported file holds {actual_bytes} bytes, shape {info.shape} needs {expected_bytes}"
            )
        if numel == 0:
            return torch.empty(info.shape, dtype=dtype, device=device)
        pinned = device != "cpu" and torch.cuda.is_available()
        buffer = torch.empty(expected_bytes, dtype=torch.uint8, pin_memory=pinned)
        _transfer(fd, memoryview(buffer.numpy()).cast("B"), write=False)
    finally:
        os.close(fd)
    return buffer.view(dtype).view(info.shape).to(device)


# --- timed outputs through a shared buffer ---------------------------------------------------
# A timed call's output (every one is checked, up to tens of MB a call) would cost two copies
# through a file in /dev/shm and a page allocation per call. Instead the parent creates one
# memfd per child (harness.sandbox.supervisor.create_shared_output), sealed against shrinking (a mapping of it can never lose its pages under the
# parent, which is why files are read with `read` calls), and grows it to the output's size
# before each timing phase; the child copies the output into its mapping (registered with CUDA,
# so the copy from the GPU is one DMA), and the parent copies it from its own mapping straight to
# its GPU. The parent reads only after the child's `CallDone` and before it sends the next
# call's seed, when the child's protocol leaves the buffer alone; a child that writes there at
# other times (a thread) can only make its own output wrong, as with a file it rewrites.


class SharedBuffer:
    """One side's mapping of the shared output memfd, as a flat uint8 tensor, registered with CUDA
    (pinned) where `cuda`; remapped when the memfd has grown."""

    def __init__(self, fd: int, *, cuda: bool) -> None:
        self.fd, self.cuda = fd, cuda
        self.mapping = None
        self.tensor: torch.Tensor | None = None
        self.registered = False

    @property
    def size(self) -> int:
        return 0 if self.mapping is None else len(self.mapping)

    def ensure(self, size: int) -> torch.Tensor:
        """The mapping as a tensor of at least `size` bytes (the file must be that large)."""
        import mmap

        if self.tensor is None or self.size < size:
            self.close()
            self.mapping = mmap.mmap(self.fd, max(size, 1), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self.tensor = torch.frombuffer(self.mapping, dtype=torch.uint8)
            if self.cuda:
                # int(): cudart returns a pybind enum, which never equals 0 itself (as in
                # torch.cuda._pin_memory_utils); a failed registration only means a slower copy,
                # and its error is cleared so that no later torch call reports it
                cudart = torch.cuda.cudart()
                self.registered = (
                    int(cudart.cudaHostRegister(self.tensor.data_ptr(), len(self.mapping), 0)) == 0
                )
                if not self.registered and hasattr(cudart, "cudaGetLastError"):
                    cudart.cudaGetLastError()
        return self.tensor

    def close(self) -> None:
        if self.registered:  # before the unmap: a later mapping at the same address is not this one
            torch.cuda.cudart().cudaHostUnregister(self.tensor.data_ptr())
            self.registered = False
        self.tensor = None
        if self.mapping is not None:
            try:
                self.mapping.close()
            except BufferError:  # a view of it is still alive somewhere: the pages go with the process
                pass
            self.mapping = None


def export_shared(value: object, buffer: SharedBuffer, capacity: int) -> TensorInfo:
    """Describe `value` and, when it is an exact tensor that fits in `capacity` bytes, copy its
    bytes (C order) into the shared buffer (`shared` set); otherwise only describe it."""
    info = describe(value)
    if not info.exact_tensor or info.dtype not in DTYPES or info.device not in ("cpu", "cuda"):
        return info
    if info.nbytes > capacity:
        return info
    if info.nbytes:
        target = buffer.ensure(capacity)[: info.nbytes].view(value.dtype).view(value.shape)
        target.copy_(value.detach())  # from the GPU: one DMA into the registered mapping (blocking)
    info.written = info.shared = True
    return info


def read_shared(buffer: SharedBuffer, capacity: int, info: TensorInfo, device: str = "cpu") -> torch.Tensor:
    """The tensor the child put in the shared buffer (`capacity` bytes, as the parent sized it:
    never the file's own size, which the child can grow), as a fresh tensor on `device`. Raises
    ValueError when `info` does not describe a tensor that fits."""
    if not info.shared:
        raise ValueError("no tensor was exported")
    dtype, _numel, nbytes = _described(info)
    if nbytes > capacity:
        raise ValueError(f"shape {info.shape} needs {nbytes} bytes, the shared buffer holds {capacity}")
    source = buffer.ensure(capacity)[:nbytes].view(dtype).view(info.shape)
    return source.to(device) if device != "cpu" else source.clone()
