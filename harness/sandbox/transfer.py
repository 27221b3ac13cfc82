"""Tensors between parent and child as raw bytes, never as pickles: outputs child -> parent in
files or a shared buffer, inputs parent -> child in a memfd of the parent's.

Outputs. The parent creates a private directory (under /dev/shm where it exists, so the bytes stay
in memory) and names the files; the child writes a tensor's bytes (C order) into a file, a GPU
tensor through a pinned host buffer (one DMA copy, then one write), and reports shape, dtype and
device in a `TensorInfo`. The parent reads the file with `read` calls (never a mapping the child
could truncate under it) into a fresh tensor, pinned when it goes on to a GPU, after checking that
the file holds exactly the bytes the reported shape and dtype need, so nothing the child writes is
ever interpreted as anything but numbers. The child can replace the file by anything (a symbolic
link to a file hidden from it, a FIFO, a directory): the parent opens it by name in a directory it
holds open, never following a link and never blocking, and reads only a regular file of its own
(`open_exported`). An output that fits (a plain tensor, timed or checked: up to tens of MB per
call) takes a faster road: a sealed memfd of the parent's that both sides map (`SharedBuffer`,
below), sized by the parent to the reference's output before the call; the files are for the rest
(outputs of several parts, or larger than the reference's).

Inputs. The parent alone runs the task's generate_input (harness.checking, for its own reference
of every call); the child never imports the task's reference module. `InputsWriter` copies the
data tuple's tensors (C order) into a memfd the parent created, sized and grown by the parent,
and describes the tuple in typed items (`harness.sandbox.protocol.DataItem`: dtype, shape, stride
and place of each tensor; numbers, strings and None by value; tuples, lists and dicts of those);
`read_inputs` in the child rebuilds the tuple from them, each tensor a fresh one on the child's
device (a GPU tensor by one DMA from the registered mapping). The output buffers' bytes never
travel: the reference may have written its answer into the parent's, so the child makes each
empty (NaN for floats, as before every call, zeros otherwise). The child's mapping is writable, and
nothing depends on it not being: the parent never reads this memory back, it judges every output
against its own copy of the inputs and its own reference; a child that scribbles there only
changes its own next inputs, and answers them wrongly. The parent writes a call's inputs there only
once its clock runs for that call (harness.sandbox.supervisor), so that no thread of the candidate
can start on them earlier.

Device windows. With `HARNESS_DEVICE_WINDOWS=auto` on a GPU, the inputs memory and the shared
output buffer are device memory of the parent's instead (harness.sandbox.device_memory.DeviceWindow,
with the same `ensure`, `capacity` and `close` as `SharedBuffer`): every copy above is then one
within the GPU, synchronized before the other side is told.

Inputs the candidate changes. The child copies its inputs before a call and counts afterwards,
bit for bit, the elements that changed (`changed_elements`); the parent judges the counts. The
parent could instead compare its own copy with the inputs read back after the call, but that
would cost a transfer of every input per call and prove no more: the inputs would come back
through the candidate's process, which can restore them before the export as easily as it can
fake a count (docs/threat-model.md). Counting on the child's device keeps large inputs where
they are. Only the tuple's top-level tensors are counted (`tensor_inputs`): a tensor inside a
tuple, list or dict of the data is not.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from harness.bits import bit_patterns
from harness.errors import TaskUnsupported
from harness.sandbox.files import open_exported
from harness.sandbox.protocol import (
    DataItem,
    DtypeItem,
    MappingItem,
    ObjectItem,
    OutputBufferItem,
    SequenceItem,
    TensorItem,
    ValueItem,
    WholeItem,
)
from harness.tasks.spec import REFERENCE_MODULE_PREFIX, TASK_LOCAL_MODULES
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
        *(
            getattr(torch, name)
            for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
            if hasattr(torch, name)
        ),
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


def _transfer(fd: int, view: memoryview, write: bool, base: int = 0) -> None:
    """Write `view` to the file at offset `base`, or fill `view` from there; a large one in
    IO_THREADS slices at once (one thread copies 4-5 GB/s between memory and a file in /dev/shm).
    Raises ValueError when the file ends early."""

    def one(start: int, stop: int) -> None:
        while start < stop:
            part = view[start:stop]
            count = os.pwrite(fd, part, base + start) if write else os.preadv(fd, [part], base + start)
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


# --- outputs of several parts ----------------------------------------------------------------
OUTPUT_ALIGNMENT = 64  # each part's bytes start at a multiple of this in the output's file
MAX_OUTPUT_PARTS = 256  # parts (tensors, numbers, containers) of one output, all levels together
MAX_OUTPUT_DEPTH = 4
VALUE_TYPES = tuple(f"builtins.{kind}" for kind in ("NoneType", "bool", "int", "float", "str"))


def _is_container(value: object) -> bool:
    return isinstance(value, tuple | list) or (
        isinstance(value, dict) and all(isinstance(key, str) for key in value)
    )


def describe_output(value: object, depth: int = 0) -> TensorInfo:
    """`describe` of a returned object; a tuple, list or dict (string keys) with its parts
    described in `parts` (nested up to MAX_OUTPUT_DEPTH), a number, string or None by value."""
    if _is_container(value) and depth < MAX_OUTPUT_DEPTH:
        kind = type(value)
        items = list(value.values()) if isinstance(value, dict) else list(value)
        return TensorInfo(
            type_name=f"{kind.__module__}.{kind.__qualname__}",
            exact_tensor=False,
            parts=[describe_output(item, depth + 1) for item in items[:MAX_OUTPUT_PARTS]],
            keys=list(value) if isinstance(value, dict) else None,
        )
    info = describe(value)
    if value is None or type(value) in (bool, int, float, str):
        info.value = value
    return info


def output_tensors(value: object, depth: int = 0) -> list[object]:
    """The tensor leaves of a returned object in `describe_output`'s order (anything that is
    neither a container nor a plain value counts as a leaf: its description says what it is)."""
    if _is_container(value) and depth < MAX_OUTPUT_DEPTH:
        items = list(value.values()) if isinstance(value, dict) else list(value)
        return [leaf for item in items[:MAX_OUTPUT_PARTS] for leaf in output_tensors(item, depth + 1)]
    return [] if value is None or type(value) in (bool, int, float, str) else [value]


def output_leaves(info: TensorInfo) -> list[TensorInfo]:
    """The descriptions of the tensor leaves (and of anything that is not a plain value) of an
    output of several parts, in order."""
    if info.parts is not None:
        return [leaf for part in info.parts for leaf in output_leaves(part)]
    return [] if info.type_name in VALUE_TYPES else [info]


def packed_layout(info: TensorInfo) -> tuple[list[tuple[int, torch.dtype, int, int]], int]:
    """Where each tensor leaf of an output of several parts lies in its file: (offset, dtype,
    element count, bytes) per leaf, and the file's size; computed by each side from the leaves'
    dtypes and shapes alone. Raises ValueError for an output that is not all tensors and values,
    or has too many parts."""
    leaves = output_leaves(info)
    if len(leaves) > MAX_OUTPUT_PARTS:
        raise ValueError(f"an output of more than {MAX_OUTPUT_PARTS} parts")
    layout, end = [], 0
    for leaf in leaves:
        dtype, numel, nbytes = _described(leaf)
        offset = -(-end // OUTPUT_ALIGNMENT) * OUTPUT_ALIGNMENT
        layout.append((offset, dtype, numel, nbytes))
        end = offset + nbytes
    return layout, end


def export_output(value: object, path: Path) -> TensorInfo:
    """`export_tensor` of a returned tensor; of a tuple, list or dict of tensors and values, its
    description (`describe_output`) with every tensor's bytes in one file, one after another
    (`packed_layout`), `written` when every leaf is a tensor the parent can read."""
    info = describe_output(value)
    if info.parts is None:
        return export_tensor(value, path)
    leaves, tensors = output_leaves(info), output_tensors(value)
    if len(leaves) != len(tensors) or not all(
        leaf.exact_tensor and leaf.dtype in DTYPES and leaf.device in ("cpu", "cuda") for leaf in leaves
    ):
        return info
    for leaf in leaves:
        leaf.written = True
    layout, end = packed_layout(info)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.ftruncate(fd, end)
        for (offset, _dtype, numel, _nbytes), tensor in zip(layout, tensors, strict=True):
            if numel:
                _transfer(fd, memoryview(_bytes_of(tensor).numpy()).cast("B"), write=True, base=offset)
    finally:
        os.close(fd)
    info.written = True
    return info


def fill_output_nan(value: object, inputs: list[object]) -> None:
    """Overwrite every floating tensor of a returned object with NaN (no later call finds this
    answer in memory), but for those that share storage with one of `inputs`."""
    kept = {t.untyped_storage().data_ptr() for t in inputs if type(t) is torch.Tensor}
    for tensor in output_tensors(value):
        if (
            type(tensor) is torch.Tensor
            and tensor.is_floating_point()
            and tensor.untyped_storage().data_ptr() not in kept
        ):
            tensor.fill_(float("nan"))


def read_output(directory_fd: int, name: str, info: TensorInfo, device: str = "cpu") -> object:
    """The output the child exported to `name` (`export_output`): a tensor (`read_tensor`), or the
    tuple, list or dict it described, each tensor a fresh one on `device` and each value as
    described. Raises ValueError as `read_tensor` does."""
    if info.parts is None:
        return read_tensor(directory_fd, name, info, device)
    if not info.written:
        raise ValueError("no tensor was exported")
    layout, expected_bytes = packed_layout(info)
    fd = open_exported(directory_fd, name)
    try:
        actual_bytes = os.fstat(fd).st_size
        if actual_bytes != expected_bytes:
            raise ValueError(f"exported file holds {actual_bytes} bytes, its parts need {expected_bytes}")
        buffer = torch.empty(expected_bytes, dtype=torch.uint8)
        if expected_bytes:
            _transfer(fd, memoryview(buffer.numpy()).cast("B"), write=False)
    finally:
        os.close(fd)
    places = iter(layout)

    def build(part: TensorInfo) -> object:
        if part.parts is not None:
            values = [build(item) for item in part.parts]
            if part.keys is not None:
                if len(part.keys) != len(values):
                    raise ValueError("a dict's keys and parts differ in number")
                return dict(zip(part.keys, values, strict=True))
            return values if part.type_name == "builtins.list" else tuple(values)
        if id(part) not in leaves:
            return part.value
        offset, dtype, _numel, nbytes = next(places)
        return buffer[offset : offset + nbytes].view(dtype).view(part.shape).to(device)

    leaves = {id(leaf) for leaf in output_leaves(info)}
    return build(info)


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
# memfd per child (harness.sandbox.workspace.create_shared_memory), sealed against shrinking (a
# mapping of it can never lose its pages under the parent, which is why files are read with
# `read` calls), and grows it to the output's size
# before each timing phase; the child copies the output into its mapping (registered with CUDA,
# so the copy from the GPU is one DMA), and the parent copies it from its own mapping straight to
# its GPU. The parent reads only after the child's `CallDone` and before it hands over the
# next call's inputs, when the child's protocol leaves the buffer alone; a child that writes there at
# other times (a thread) can only make its own output wrong, as with a file it rewrites.


def _clear_cuda_error() -> None:
    """Take the CUDA runtime's last error away after a call that failed without harm (a refused
    `cudaHostRegister`: the mapping then copies unpinned), so that torch's next kernel launch does
    not report it as its own: torch binds no `cudaGetLastError`, but every launch of its kernels
    reads and clears the last error (C10_CUDA_KERNEL_LAUNCH_CHECK), so one tiny launch, whose
    report is dropped here, clears it."""
    try:
        torch.zeros(1, device="cuda").add_(1)
    except RuntimeError:
        pass


class SharedBuffer:
    """One side's mapping of a shared memfd (timed outputs, or inputs), as a flat uint8 tensor,
    registered with CUDA (pinned) where `cuda`; remapped when the memfd has grown."""

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
                if not self.registered:
                    _clear_cuda_error()
        return self.tensor

    def capacity(self) -> int:
        """The memfd's size now (as the parent grew it)."""
        return os.fstat(self.fd).st_size

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
        if target.is_cuda:  # a device window (harness.sandbox.device_memory): done before CallDone
            torch.cuda.synchronize(target.device)
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
    if not source.is_cuda:
        return source.to(device) if device != "cpu" else source.clone()
    # a device window: a copy within the GPU, finished before the child hears of the next call
    copy = source.clone() if device != "cpu" else source.cpu()
    torch.cuda.current_stream(source.device).synchronize()
    return copy


# --- inputs, parent -> child ------------------------------------------------------------------
INPUT_ALIGNMENT = 256  # each tensor's bytes start at a multiple of this in the inputs memory


def tensor_inputs(data: object, output_keys: Collection[int | str]) -> list[int | str | None]:
    """The keys of the data's inputs that are tensors, whose changes a check counts: every item of
    a tuple, list or dict but the output buffers (at `output_keys`); data that is one tensor is
    key None (`data_item`). The parent computes the same list on its data
    (harness.tasks.layout.DataLayout.tensor_inputs)."""
    if isinstance(data, torch.Tensor):
        return [None]
    keys = (
        range(len(data)) if isinstance(data, tuple | list) else list(data) if isinstance(data, dict) else []
    )
    return [key for key in keys if key not in output_keys and isinstance(data[key], torch.Tensor)]


def output_keys(items: list[DataItem]) -> tuple[int | str, ...]:
    """Where the output buffers are in the data these items describe (`lay_out_inputs`): tuple
    positions or dict keys, none for data without one. The child learns them from the items, so
    that the parent decides them when it first hands data over (harness.checking.data_layout)."""
    if len(items) == 1 and isinstance(items[0], WholeItem):
        whole = items[0].item
        parts = whole.items.items() if isinstance(whole, MappingItem) else []
        return tuple(key for key, part in parts if isinstance(part, OutputBufferItem))
    return tuple(index for index, item in enumerate(items) if isinstance(item, OutputBufferItem))


def data_item(data: object, key: int | str | None) -> object:
    """The item of the data at a key of `tensor_inputs`."""
    return data if key is None else data[key]


def _stride_kept(value: torch.Tensor) -> list[int] | None:
    """The tensor's stride, for a tensor that is dense but not contiguous (a transposed matrix):
    the child makes its copy with it. None for a contiguous tensor, and for one with gaps or
    overlaps (a slice, an expanded view), which the child gets contiguous."""
    if value.is_contiguous():
        return None
    dense = torch.empty_like(value, device="meta").stride()
    return list(value.stride()) if tuple(dense) == tuple(value.stride()) else None


def _tensor_facts(value: torch.Tensor, where: str) -> tuple[str, list[int], int]:
    dtype = str(value.dtype)
    if dtype not in DTYPES:
        raise TaskUnsupported(
            f"generate_input's {where} is a tensor of {dtype}, which the child cannot be handed: "
            "unsupported here"
        )
    if value.device.type not in ("cpu", "cuda"):
        raise TaskUnsupported(
            f"generate_input's {where} is a tensor on {value.device.type}: unsupported here"
        )
    return dtype, list(value.shape), value.numel() * value.element_size()


def object_class(value: object) -> tuple[str, str] | None:
    """(module, qualname) by which the child finds `value`'s class (`ObjectItem`): a class defined
    at the top of the task's reference.py (`reference` in the child), task.py or utils.py, or one
    of torch.nn's; None for any other (a class of the harness's, a local class, a builtin)."""
    cls = type(value)
    module, qualname = getattr(cls, "__module__", "") or "", getattr(cls, "__qualname__", "")
    if module.startswith(REFERENCE_MODULE_PREFIX):
        module = "reference"
    if not (module in ("reference", *TASK_LOCAL_MODULES) or module.startswith("torch.nn.")):
        return None
    named_tuple = isinstance(value, tuple) and hasattr(cls, "_fields")
    if not qualname or "<" in qualname or not (named_tuple or hasattr(value, "__dict__")):
        return None
    return module, qualname


@functools.cache
def _module_bookkeeping() -> frozenset[str]:
    """The instance attributes every nn.Module has from nn.Module.__init__ (its hooks, its
    registries, `training`): an object's others are its own and travel."""
    return frozenset(vars(torch.nn.Module()))


def object_item(value: object, where: str, item: Callable[[object, str], DataItem]) -> ObjectItem | None:
    """`value` as an `ObjectItem` whose attributes are made by `item`, or None when its class is
    not one the child can find (`object_class`). An nn.Module's parameters, buffers and submodules
    travel as such; its hooks must be empty (they are functions); every other instance attribute
    of an object travels whole."""
    found = object_class(value)
    if found is None:
        return None
    module, qualname = found
    if isinstance(value, tuple):  # a named tuple (`object_class`)
        fields = type(value)._fields
        return ObjectItem(
            module=module,
            qualname=qualname,
            state={name: item(v, f"{where}.{name}") for name, v in zip(fields, value, strict=True)},
            fields=True,
        )
    attributes = dict(vars(value))
    if not isinstance(value, torch.nn.Module):
        return ObjectItem(
            module=module,
            qualname=qualname,
            state={name: item(v, f"{where}.{name}") for name, v in attributes.items()},
        )
    registered = {"_parameters": {}, "_buffers": {}, "_modules": {}}
    for name in list(attributes):
        if name in registered:
            registered[name] = attributes.pop(name)
        elif name in _module_bookkeeping() and name.endswith("hooks"):
            if attributes.pop(name):
                raise TaskUnsupported(
                    f"generate_input's {where} is an nn.Module with hooks: unsupported here"
                )
        elif name in _module_bookkeeping():
            attributes.pop(name)  # nn.Module's own: the child's nn.Module.__init__ makes it afresh
    return ObjectItem(
        module=module,
        qualname=qualname,
        state={name: item(v, f"{where}.{name}") for name, v in attributes.items()},
        parameters={
            name: item(p.detach() if p is not None else None, f"{where}.{name}")
            for name, p in registered["_parameters"].items()
        },
        buffers={name: item(b, f"{where}.{name}") for name, b in registered["_buffers"].items()},
        modules={name: item(m, f"{where}.{name}") for name, m in registered["_modules"].items()},
        training=bool(value.training),
    )


def lay_out_inputs(
    data: object, output_keys: Collection[int | str]
) -> tuple[list[DataItem], list[tuple[int, torch.Tensor]], int]:
    """`data` as typed items, with each tensor's place in the inputs memory: (items, every
    (offset, tensor) to copy, the bytes needed). The tensors at `output_keys` (tuple positions or
    dict keys) are output buffers, whose bytes do not travel. Raises `TaskUnsupported`
    (the task cannot run here: a result of every evaluation, never an error of the run) for an
    item that is neither a tensor, a number, a string, None, nor a tuple, list or dict (string
    keys) of those (an object of the task's own class: amd's mla-decode hands a Config dataclass
    and a KVCache module), or a tensor of a dtype or on a device the child cannot be handed."""
    placed: list[tuple[int, torch.Tensor]] = []
    end = 0

    def item(value: object, where: str) -> DataItem:
        nonlocal end
        if isinstance(value, torch.Tensor):
            dtype, shape, nbytes = _tensor_facts(value, where)
            offset = -(-end // INPUT_ALIGNMENT) * INPUT_ALIGNMENT
            end = offset + nbytes
            placed.append((offset, value))
            return TensorItem(
                dtype=dtype,
                shape=shape,
                stride=_stride_kept(value),
                offset=offset,
                nbytes=nbytes,
                on_cpu=value.device.type == "cpu",
            )
        if value is None or isinstance(value, bool | int | float | str):
            return ValueItem(value=value)
        if isinstance(value, torch.dtype) and str(value) in DTYPES:
            return DtypeItem(name=str(value))
        named_tuple = isinstance(value, tuple) and hasattr(type(value), "_fields")
        if named_tuple and (made := object_item(value, where, item)) is not None:
            return made
        if isinstance(value, tuple | list):
            kind = "tuple" if isinstance(value, tuple) else "list"
            return SequenceItem(kind=kind, items=[item(v, f"{where}[{i}]") for i, v in enumerate(value)])
        if isinstance(value, dict) and all(isinstance(key, str) for key in value):
            return MappingItem(items={key: item(v, f"{where}[{key!r}]") for key, v in value.items()})
        if (made := object_item(value, where, item)) is not None:
            return made
        raise TaskUnsupported(
            f"generate_input's {where} is a {type(value).__name__}: only tensors, numbers, strings, "
            "None, dtypes, tuples, lists and dicts of them, and objects of the task's own classes "
            "(or torch.nn's) with such attributes can be handed to the child: unsupported here"
        )

    def top(key: int | str, value: object, where: str) -> DataItem:
        if key in output_keys and isinstance(value, torch.Tensor):
            dtype, shape, _nbytes = _tensor_facts(value, f"output buffer ({where})")
            return OutputBufferItem(
                dtype=dtype, shape=shape, stride=_stride_kept(value), on_cpu=value.device.type == "cpu"
            )
        return item(value, where)

    if isinstance(data, dict) and all(isinstance(key, str) for key in data):
        mapping = MappingItem(items={key: top(key, v, f"data[{key!r}]") for key, v in data.items()})
        return [WholeItem(item=mapping)], placed, end
    if not isinstance(data, tuple | list):  # one tensor: GPU MODE's protocol allows it
        return [WholeItem(item=item(data, "data"))], placed, end
    items = [top(index, value, f"item {index}") for index, value in enumerate(data)]
    return items, placed, end


class InputsWriter:
    """The parent's side of a child's inputs memfd: `write` grows it when a data tuple needs
    more (never shrinks it, so the child's mapping never loses pages), copies the tuple's tensors
    into it and returns the items that describe them. The mapping is registered with CUDA where
    `cuda`, so that a GPU tensor's copy is one DMA."""

    def __init__(self, fd: int, *, cuda: bool) -> None:
        self.fd = fd
        self.size = 0
        # the memfd's mapping, or a device window (harness.sandbox.device_memory) that
        # ChildProcess replaces by a larger one before a copy needs it
        self.buffer = SharedBuffer(fd, cuda=cuda)

    def write(self, data: object, output_keys: Collection[int | str]) -> list[DataItem]:
        laid_out = lay_out_inputs(data, output_keys)
        self.copy(laid_out)
        return laid_out[0]

    def copy(self, laid_out: tuple[list[DataItem], list[tuple[int, torch.Tensor]], int]) -> None:
        """Copy the tensors of a tuple laid out by `lay_out_inputs` into the memfd (grown first):
        the part of `write` that a timed call's bracket must hold (the layout can come before)."""
        _items, placed, needed = laid_out
        if needed > self.size:  # ChildProcess.copy_inputs grows it first, checking the child left it alone
            if not isinstance(self.buffer, SharedBuffer):
                raise ValueError(f"{needed} bytes of inputs do not fit the device window of {self.size}")
            os.ftruncate(self.fd, needed)
            self.size = needed
        if needed:
            memory = self.buffer.ensure(self.size)
            for offset, value in placed:
                if value.numel():
                    nbytes = value.numel() * value.element_size()
                    memory[offset : offset + nbytes].view(value.dtype).view(value.shape).copy_(value.detach())
            if memory.is_cuda:  # copies within the GPU: done before the child is told
                torch.cuda.current_stream(memory.device).synchronize()

    def close(self) -> None:
        self.buffer.close()


def make_object(item: ObjectItem, make: Callable[[DataItem], object]) -> object:
    """The child's object of `item` (`ObjectItem`), its parts made by `make`. Raises ValueError
    when the class is not there or not what the item says."""
    import importlib

    if not (item.module in ("reference", *TASK_LOCAL_MODULES) or item.module.startswith("torch.nn.")):
        raise ValueError(f"an object of module {item.module!r}, which is not the task's nor torch.nn's")
    try:
        cls: object = importlib.import_module(item.module)
        for part in item.qualname.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"no class {item.module}.{item.qualname} here: {exc}") from None
    if not isinstance(cls, type):
        raise ValueError(f"{item.module}.{item.qualname} is not a class")  # noqa: TRY004 - read_inputs raises ValueError
    if item.fields:
        if not (issubclass(cls, tuple) and hasattr(cls, "_fields")):
            raise ValueError(f"{item.module}.{item.qualname} is not a named tuple")
        return cls(**{name: make(part) for name, part in item.state.items()})
    module = issubclass(cls, torch.nn.Module)
    if module != (item.training is not None):
        raise ValueError(f"{item.module}.{item.qualname}: an nn.Module only where the item says so")
    made = cls.__new__(cls)
    if module:
        torch.nn.Module.__init__(made)
        for name, part in item.parameters.items():
            value = make(part)
            made.register_parameter(name, None if value is None else torch.nn.Parameter(value))
        for name, part in item.buffers.items():
            made.register_buffer(name, make(part))
        for name, part in item.modules.items():
            made.add_module(name, make(part))
        made.training = item.training
    made.__dict__.update({name: make(part) for name, part in item.state.items()})
    return made


def read_inputs(items: list[DataItem], buffer: SharedBuffer, device: str) -> tuple:
    """The data tuple `items` describe, every tensor a fresh one on `device` (on the CPU where the
    item says so: data made on CUDA may hold CPU tensors) (the child's side of
    `InputsWriter`). Raises ValueError when an item does not describe a tensor that fits."""
    torch_device = torch.device(device)
    memory: torch.Tensor | None = None

    def needed(item: DataItem) -> int:
        if isinstance(item, TensorItem):
            return item.offset + item.nbytes
        if isinstance(item, WholeItem):
            return needed(item.item)
        if isinstance(item, SequenceItem | MappingItem):
            parts = item.items if isinstance(item, SequenceItem) else list(item.items.values())
            return max((needed(part) for part in parts), default=0)
        if isinstance(item, ObjectItem):
            parts = [*item.state.values(), *item.parameters.values(), *item.buffers.values()]
            return max((needed(part) for part in [*parts, *item.modules.values()]), default=0)
        return 0

    def empty(dtype_name: str, shape: list[int], stride: list[int] | None, on_cpu: bool) -> torch.Tensor:
        if dtype_name not in DTYPES:
            raise ValueError(f"unknown dtype {dtype_name}")
        dtype = DTYPES[dtype_name]
        where = torch.device("cpu") if on_cpu else torch_device
        if stride is not None and len(stride) == len(shape):
            return torch.empty_strided(shape, stride, dtype=dtype, device=where)
        return torch.empty(shape, dtype=dtype, device=where)

    def make(item: DataItem) -> object:
        if isinstance(item, ValueItem):
            return item.value
        if isinstance(item, DtypeItem):
            if item.name not in DTYPES:
                raise ValueError(f"unknown dtype {item.name}")
            return DTYPES[item.name]
        if isinstance(item, SequenceItem):
            values = [make(part) for part in item.items]
            return tuple(values) if item.kind == "tuple" else values
        if isinstance(item, MappingItem):
            return {key: make(part) for key, part in item.items.items()}
        if isinstance(item, ObjectItem):
            return make_object(item, make)
        if isinstance(item, WholeItem):
            raise ValueError("a whole-data item inside the data")  # noqa: TRY004 - read_inputs raises ValueError
        target = empty(item.dtype, item.shape, item.stride, item.on_cpu)
        if isinstance(item, OutputBufferItem):
            return target.fill_(float("nan")) if target.is_floating_point() else target.zero_()
        if target.numel() * target.element_size() != item.nbytes:
            raise ValueError(f"shape {item.shape} of {item.dtype} does not need {item.nbytes} bytes")
        if item.nbytes:
            target.copy_(memory[item.offset : item.offset + item.nbytes].view(target.dtype).view(item.shape))
        return target

    size = max((needed(item) for item in items), default=0)
    if size:  # the whole memfd as the parent sized it: it grows rarely, and each mapping is registered
        memory = buffer.ensure(max(size, buffer.capacity()))
    if len(items) == 1 and isinstance(items[0], WholeItem):
        return make(items[0].item)
    return tuple(make(item) for item in items)
