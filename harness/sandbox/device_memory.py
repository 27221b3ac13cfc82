"""GPU memory the parent allocates and shares with one sandboxed child, through a file descriptor.

On a GPU the timed calls' inputs and outputs used to travel through host memory: the parent copied
each call's inputs from its GPU into a pinned memfd, the child copied them onto its GPU, and each
output went the same way back, two DMA copies over the bus each way (about 2.5 ms per 128 MiB on
an H200, per copy: most of the timing loop's overhead on conv2d's benchmark shapes). A
`DeviceWindow` is device memory instead: made by the parent with CUDA's virtual memory management
(`cuMemCreate` with a POSIX file descriptor as its shareable handle), exported as a file
descriptor that goes to the child over a Unix socket (`SCM_RIGHTS`), imported and mapped there.
A copy into it or out of it is a copy within the GPU (about 0.07 ms per 128 MiB).

Why a file descriptor and not `cudaIpcGetMemHandle`: a legacy IPC handle names the exporting
process, which a child in a pid namespace of its own cannot see; a descriptor needs no name, and
works across the sandbox's pid, user, IPC and network namespaces (tried on the H200: it does).

What the child can do with it is what it could do with the memfd: write into the window at any
time, which only changes its own next inputs (the parent judges every output against its own copy
of the inputs) or its own output (read by the parent after `CallDone`, checked like any output). It
cannot grow, shrink or free the parent's memory: the parent holds its own handle and mapping.

Only the CUDA driver's library is used (ctypes), in the process's current CUDA context, which
torch has made current by then. `supported()` says whether this machine can: where it cannot (no
driver, a GPU or driver without POSIX handles), the memfd road stays.
"""

from __future__ import annotations

import ctypes
import functools
import os

import torch

_HANDLE_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_ALLOCATION_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
_LOCATION_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
_ACCESS_READ_WRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _Properties(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class _AccessDescription(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class DeviceMemoryError(RuntimeError):
    """A CUDA driver call on a window failed."""


@functools.cache
def _driver() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def _call(name: str, *arguments) -> None:
    result = getattr(_driver(), name)(*arguments)
    if result != 0:
        text = ctypes.c_char_p()
        _driver().cuGetErrorName(result, ctypes.byref(text))
        # the error's name, so that an out-of-memory one reads as such (harness.checking.MEMORY_WORDS):
        # beside a child that holds the GPU's memory, a retry's business, not this child's fault
        word = text.value.decode() if text.value else f"CUresult {result}"
        raise DeviceMemoryError(f"{name} failed: {word}")


def _make_current(device: int) -> None:
    """The device's primary context (torch's) current on this thread: the driver's calls need
    one, and a thread of the parent that has run no CUDA work of torch's yet has none."""
    context = ctypes.c_void_p()
    _call("cuCtxGetCurrent", ctypes.byref(context))
    if context.value:
        return
    handle = ctypes.c_int()
    _call("cuDeviceGet", ctypes.byref(handle), device)
    _call("cuDevicePrimaryCtxRetain", ctypes.byref(context), handle)
    _call("cuCtxSetCurrent", context)  # retained for good: torch's own, alive with the process


def _properties(device: int) -> _Properties:
    properties = _Properties()
    properties.type = _ALLOCATION_PINNED
    properties.requestedHandleTypes = _HANDLE_POSIX_FD
    properties.location.type = _LOCATION_DEVICE
    properties.location.id = device
    return properties


def granularity(device: int) -> int:
    value = ctypes.c_size_t()
    _call("cuMemGetAllocationGranularity", ctypes.byref(value), ctypes.byref(_properties(device)), 0)
    return value.value


class _ArrayInterface:
    """A device pointer as torch can see it (`torch.as_tensor` reads `__cuda_array_interface__`)."""

    def __init__(self, pointer: int, size: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (size,),
            "typestr": "|u1",
            "data": (pointer, False),
            "version": 2,
        }


class DeviceWindow:
    """Device memory shared by a parent and one child: a flat uint8 tensor over a mapping of it.
    `create` (the parent: it owns the memory, exports `fd`) or `open` (the child: imports `fd`)."""

    def __init__(self, handle: int, size: int, device: int, fd: int | None) -> None:
        self.handle, self.size, self.device, self.fd = handle, size, device, fd
        self.pointer = 0
        self.tensor: torch.Tensor | None = None
        try:
            self._map()
        except BaseException:
            self.close()
            raise

    @classmethod
    def create(cls, size: int) -> DeviceWindow:
        """At least `size` bytes on the current GPU, with a descriptor to hand over (`fd`)."""
        device = torch.cuda.current_device()
        _make_current(device)
        step = granularity(device)
        size = max(step, -(-size // step) * step)
        handle = ctypes.c_uint64()
        _call(
            "cuMemCreate",
            ctypes.byref(handle),
            ctypes.c_size_t(size),
            ctypes.byref(_properties(device)),
            ctypes.c_uint64(0),
        )
        fd = ctypes.c_int(-1)
        try:
            _call(
                "cuMemExportToShareableHandle",
                ctypes.byref(fd),
                ctypes.c_uint64(handle.value),
                _HANDLE_POSIX_FD,
                ctypes.c_uint64(0),
            )
        except DeviceMemoryError:
            _call("cuMemRelease", ctypes.c_uint64(handle.value))
            raise
        return cls(handle.value, size, device, fd.value)

    @classmethod
    def open(cls, fd: int, size: int) -> DeviceWindow:
        """The window the parent made, from its descriptor (closed here: the handle keeps the
        memory); `size` is the parent's word for its size, checked against nothing the child
        controls but the mapping itself (a smaller allocation fails to map)."""
        device = torch.cuda.current_device()
        handle = ctypes.c_uint64()
        try:
            _make_current(device)
            _call(
                "cuMemImportFromShareableHandle",
                ctypes.byref(handle),
                ctypes.c_void_p(fd),
                _HANDLE_POSIX_FD,
            )
        finally:
            os.close(fd)
        return cls(handle.value, size, device, None)

    def _map(self) -> None:
        pointer = ctypes.c_uint64()
        size = ctypes.c_size_t(self.size)
        _call(
            "cuMemAddressReserve",
            ctypes.byref(pointer),
            size,
            ctypes.c_size_t(0),
            ctypes.c_uint64(0),
            ctypes.c_uint64(0),
        )
        self.pointer = pointer.value
        _call(
            "cuMemMap",
            ctypes.c_uint64(self.pointer),
            size,
            ctypes.c_size_t(0),
            ctypes.c_uint64(self.handle),
            ctypes.c_uint64(0),
        )
        access = _AccessDescription()
        access.location.type = _LOCATION_DEVICE
        access.location.id = self.device
        access.flags = _ACCESS_READ_WRITE
        _call("cuMemSetAccess", ctypes.c_uint64(self.pointer), size, ctypes.byref(access), ctypes.c_size_t(1))
        self.tensor = torch.as_tensor(_ArrayInterface(self.pointer, self.size), device=f"cuda:{self.device}")

    def ensure(self, size: int) -> torch.Tensor:
        """The window as a tensor; `size` bytes must fit (a larger one needs a new window)."""
        if self.tensor is None or size > self.size:
            raise ValueError(f"{size} bytes do not fit the device window of {self.size}")
        return self.tensor

    def capacity(self) -> int:
        return self.size

    def close_fd(self) -> None:
        """The parent's copy of the descriptor, once handed over."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def close(self) -> None:
        """Unmap and release this side's handle (the memory goes when the other side's goes too).
        Waits for the GPU first: a copy still queued on the mapping must not fault."""
        self.close_fd()
        if self.tensor is not None:
            self.tensor = None
            try:
                torch.cuda.synchronize(self.device)
            except RuntimeError:  # a GPU in an error state: nothing more is queued that will run
                pass
        try:
            if self.pointer or self.handle:
                try:
                    _make_current(self.device)
                except DeviceMemoryError:  # the calls below fail quietly: the process's end frees it
                    pass
            if self.pointer:
                size = ctypes.c_size_t(self.size)
                _driver().cuMemUnmap(ctypes.c_uint64(self.pointer), size)
                _driver().cuMemAddressFree(ctypes.c_uint64(self.pointer), size)
            if self.handle:
                _driver().cuMemRelease(ctypes.c_uint64(self.handle))
        finally:
            self.pointer = self.handle = 0


@functools.cache
def supported() -> bool:
    """Whether this process can share device memory by descriptor (a small window made, mapped,
    exported and released); needs a CUDA GPU and torch's context on it."""
    if not torch.cuda.is_available():
        return False
    try:
        torch.cuda.init()
        window = DeviceWindow.create(1)
    except (OSError, AttributeError, DeviceMemoryError, RuntimeError):
        return False
    window.close()
    return True
