"""A task's data layout: which items of generate_input's data are output buffers, learned by
calling the task's code in the parent (trusted side), not by reading its source.

GPU MODE's protocol lets generate_input return one tensor, or a tuple, list or dict of tensors
and values, some of them possibly preallocated output buffers (made by torch.empty and the like)
that a submission may write its answer into and return (helion's fp8_quant hands over two: the
values and the scales). The buffers' bytes are never handed to the child (it gets them
NaN-filled), and every other item is an input that must come back unchanged. `learn_layout` finds
the buffers by running generate_input on one shape and the reference on a copy of that data:
every item the reference returns (the same storage) or writes into (seen writing, or its bits
changed) is a buffer; failing any, the item generate_input made with
torch.empty/empty_like/empty_strided/new_empty and never wrote (a reference that computes its
answer afresh and ignores the buffer, as pmpp's matmul does). task.yml's `harness: data` and
`output_buffer` name the layout instead (harness.checking.data_layout).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

from harness.tasks.spec import generate_inputs, tensors_in

Key = int | str  # a tuple's or list's position, or a dict's key
EMPTY_FACTORIES = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided")


@dataclass(frozen=True)
class DataLayout:
    """Where the output buffers are in the data (none: every item is an input), and the names of
    a tuple's items when task.yml gives them (messages fall back to positions: `data[2]`)."""

    outputs: tuple[Key, ...] = ()
    names: tuple[str, ...] = ()
    structure: tuple = ()  # `structure(data)` of the data it was learned on

    def tensor_inputs(self, data: object) -> list[Key | None]:
        """The keys of the data's inputs that are tensors, whose changes a check counts: every
        item of a tuple, list or dict but the output buffers; data that is one tensor is key None
        (harness.sandbox.transfer.tensor_inputs computes the same list in the child)."""
        import torch

        if isinstance(data, torch.Tensor):
            return [None]
        keys = _keys(data)
        return [key for key in keys if key not in self.outputs and isinstance(data[key], torch.Tensor)]

    def describe(self, key: Key | None) -> str:
        """An item as messages name it: 'kernel', data[2], data['out'], or 'data' for the whole."""
        if key is None:
            return "'data'"
        if isinstance(key, int) and key < len(self.names):
            return repr(self.names[key])
        return f"data[{key!r}]"

    def describe_outputs(self) -> str:
        """The output buffers as messages name them: 'no output buffer', 'output buffer data[2]',
        'output buffers data[1], data[2]'."""
        if not self.outputs:
            return "no output buffer"
        plural = "s" if len(self.outputs) > 1 else ""
        return f"output buffer{plural} " + ", ".join(self.describe(key) for key in self.outputs)


def structure(data: object) -> tuple:
    """What a layout holds for: a tuple's or list's length, a dict's keys (a generate_input that
    builds its tuple in a loop may make a longer one for another shape)."""
    if isinstance(data, tuple | list):
        return (type(data).__name__, len(data))
    if isinstance(data, dict):
        return ("dict", *data)
    return (type(data).__name__,)


def _keys(data: object) -> list[Key]:
    if isinstance(data, tuple | list):
        return list(range(len(data)))
    if isinstance(data, dict):
        return list(data)
    return []


def learn_layout(reference: ModuleType, parameters: dict[str, Any], seed: int, device: str) -> DataLayout:
    """The layout of the data generate_input makes for one shape (module docstring). Raises what
    generate_input and ref_kernel raise (the caller says it is the task's)."""
    import torch

    data, made = _watched(lambda: generate_inputs(reference, parameters, seed, device))
    keys = _keys(data)
    if not keys:
        return DataLayout(structure=structure(data))
    copies = []

    def run_reference() -> object:
        copies.append(copied(data))  # a fresh copy for each try
        with torch.no_grad():  # as every run of the reference in the parent (harness.checking)
            return reference.ref_kernel(copies[-1])

    result, reference_run = _watched(run_reference)
    copy = copies[-1]
    returned = {_storage(t) for t in tensors_in(result)}
    written = reference_run.written if reference_run is not None else set()
    tensors = [key for key in keys if isinstance(data[key], torch.Tensor)]
    answered = [key for key in tensors if _answered_in(copy[key], data[key], returned | written)]
    if answered:
        return DataLayout(outputs=tuple(answered), structure=structure(data))
    empties = made.unwritten_empties() if made is not None else set()
    unwritten = [key for key in tensors if _storage(data[key]) in empties]
    return DataLayout(outputs=tuple(unwritten[-1:]), structure=structure(data))


def _answered_in(after, before, storages: set[int]) -> bool:
    """Whether the reference answered in this item of its copy: returned or wrote into its storage
    (an item without elements has none to match), or changed its bits."""
    storage = _storage(after)
    return bool(storage and storage in storages) or not _same_bits(after, before)


def _watched(call: Callable[[], Any]) -> tuple[Any, Any]:
    """call() with its writes recorded (`_writes_mode`), and the recorder; where the task's code
    fails under torch's dispatch mode (a compiled function may refuse it), call() once more
    without it and no recorder (what it raises then is the task's error)."""
    recorder = _writes_mode()()
    try:
        with recorder:
            return call(), recorder
    except Exception:  # noqa: BLE001 - the plain call below raises the task's own error
        return call(), None


def copied(data: object) -> object:
    """A copy of the data: every tensor of it cloned, tuples, lists and dicts included, and every
    object in it (a Config dataclass, a KVCache nn.Module: amd's mla-decode, whose reference
    writes into its cache and counts it up) copied whole with its tensors (`copy.deepcopy`; an
    object that cannot be copied is handed on as it is). GPU MODE's eval.py hands the problem's
    reference and check a clone, modules included."""
    import copy

    import torch

    if isinstance(data, torch.Tensor):
        return data.clone()
    if isinstance(data, tuple) and hasattr(type(data), "_fields"):  # a named tuple
        return type(data)(*(copied(item) for item in data))
    if isinstance(data, tuple | list):
        return type(data)(copied(item) for item in data)
    if isinstance(data, dict):
        return {key: copied(item) for key, item in data.items()}
    if hasattr(data, "__dict__") and not isinstance(data, type):
        try:
            return copy.deepcopy(data)
        except Exception:  # noqa: BLE001 - the task's object, as it is
            return data
    return data


def _storage(tensor) -> int:
    """The tensor's storage, by address (0 for one without elements, which nothing matches)."""
    return tensor.untyped_storage().data_ptr()


def _same_bits(after, before) -> bool:
    import torch

    if after.shape != before.shape or after.dtype != before.dtype:
        return False
    return torch.equal(
        after.detach().flatten().view(torch.uint8).cpu(), before.detach().flatten().view(torch.uint8).cpu()
    )


@cache
def _writes_mode():
    """torch's dispatch mode that sees every operator call (imported with torch, when first used)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Writes(TorchDispatchMode):
        """Every storage an operator writes into, and every fresh storage with whether an empty
        factory made it, recorded by address while the mode is on."""

        def __init__(self) -> None:
            super().__init__()
            self.written: set[int] = set()
            self.made_empty: dict[int, bool] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            for index, argument in enumerate(func._schema.arguments):
                if argument.alias_info is not None and argument.alias_info.is_write:
                    value = args[index] if index < len(args) else kwargs.get(argument.name)
                    self.written.update(_storage(t) for t in tensors_in(value, objects=False))
            given = {_storage(t) for t in tensors_in([list(args), list(kwargs.values())], objects=False)}
            result = func(*args, **kwargs)
            for tensor in tensors_in(result, objects=False):
                storage = _storage(tensor)
                if storage and storage not in given:  # a fresh allocation, perhaps at a freed address
                    self.made_empty[storage] = func.overloadpacket.__name__ in EMPTY_FACTORIES
                    self.written.discard(storage)
            return result

        def unwritten_empties(self) -> set[int]:
            return {s for s, empty in self.made_empty.items() if empty and s not in self.written}

    return Writes


def _watching():
    """A fresh recorder of writes (`_writes_mode`), to use as a context manager."""
    return _writes_mode()()
