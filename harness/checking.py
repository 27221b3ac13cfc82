"""Trusted checking, in the parent only: the reference, the comparison, the verdict per call.

The parent regenerates each shape's inputs with the task's own generator and seed, computes the
reference from them, and compares what the child sent back:

- the returned object must be an exact `torch.Tensor` (not a subclass) with the reference's
  shape, dtype and device type, and must not share memory with an input;
- the inputs, as the child holds them after the call, must still be plain tensors of their shape
  and dtype and equal bit for bit to the child's own copy from before the call (compared in the
  child on the device, so that large inputs never travel; like every report of the child, a
  candidate that rewrites the harness in its process can fake it, see docs/threat-model.md);
- every element must be finite (the output buffer is NaN before the call, so an element the
  candidate did not write stays NaN) and within `atol + rtol * |expected|` of the fp32
  reference, as GPU MODE's `verbose_allclose` has it.

Alongside the verdict: the count of mismatched elements with the first few (position, received,
expected), the largest absolute error, and the relative L2 error against a float64 reference
(computed on the CPU for small shapes and on the device for large ones; skipped, and said so,
only when it would take too long on a CPU).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from types import ModuleType

import torch
from pydantic import BaseModel

from harness.sandbox.protocol import CheckReply, TensorInfo
from harness.sandbox.transfer import bit_sum
from harness.tasks import Shape, TaskSpec

MAX_PRINT = 5
SMALL_FOR_CPU_FLOAT64 = 1 << 22  # elements of all data together: float64 reference on the CPU
MAX_CPU_FLOAT64_FLOPS = 5e10  # above this the float64 reference is not computed on the CPU
SCAN_CHUNK = 1 << 20


@dataclass
class ReferenceCase:
    """One shape's inputs and expected outputs, computed in the parent."""

    data: tuple
    expected: torch.Tensor
    expected64: torch.Tensor | None
    note: str | None = None
    _bit_sums: dict = field(default_factory=dict, repr=False)

    def bit_sum(self, index: int) -> int:
        """Input `index`'s bit sum (harness.sandbox.transfer.bit_sum), computed once per case."""
        if index not in self._bit_sums:
            self._bit_sums[index] = bit_sum(self.data[index])
        return self._bit_sums[index]


class Mismatch(BaseModel):
    """A mismatching element; NaN and infinities are kept as the strings "nan", "inf", "-inf"
    so that the JSON column stays standard JSON."""

    index: list[int]
    received: float | str
    expected: float | str


class OutputCheck(BaseModel):
    passed: bool
    reason: str = ""
    mismatches: int = 0
    not_finite: int = 0
    first_mismatches: list[Mismatch] = []
    max_abs_err: float | None = None
    rel_l2: float | None = None
    reference_rel_l2: float | None = None
    # When some elements mismatch: at how many of them the float64 answer itself is off the
    # reference by more than the tolerance (the reference's own rounding, not the candidate's),
    # and whether the output is within the tolerance of the float64 answer everywhere.
    mismatches_where_reference_is_off: int | None = None
    within_tolerance_of_float64: bool | None = None
    note: str | None = None


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


_last_case: list[tuple[tuple, ReferenceCase]] = []  # the most recent case, for the next evaluator
_last_case_lock = threading.Lock()


def reference_case(
    task: TaskSpec, reference: ModuleType, shape: Shape, seed: int, device: str
) -> ReferenceCase:
    """Inputs from the task's generator, the reference in the task's dtype, and the float64
    reference (the same reference function on the inputs cast to float64).

    The last case is kept: a tournament checks shape k of every revision in turn with the same
    seed, and computing a large float64 reference once instead of once per revision is most of
    the parent's work on big shapes. Nobody writes into a case, so sharing it is safe."""
    key = (task.name, reference.__name__, tuple(sorted(shape.parameters.items())), seed, device)
    with _last_case_lock:  # evaluations may run in threads (tests do)
        if _last_case and _last_case[0][0] == key:
            return _last_case[0][1]
        _last_case.clear()  # free the previous case's device memory before making the next
        case = _make_reference_case(reference, shape, seed, device)
        _last_case.append((key, case))
        return case


def _make_reference_case(reference: ModuleType, shape: Shape, seed: int, device: str) -> ReferenceCase:
    data = reference.generate_input(**shape.parameters, seed=seed, device=device)
    expected = reference.ref_kernel(data)
    _synchronize(device)
    numel = sum(t.numel() for t in data if isinstance(t, torch.Tensor))
    device64 = "cpu" if numel <= SMALL_FOR_CPU_FLOAT64 else device
    # Decided by the shape's arithmetic (the task's `flops`, when its reference module has one),
    # not by a measured time, so that the same shape always gets the same measures.
    flops = reference.flops(**shape.parameters) if hasattr(reference, "flops") else None
    if device64 == "cpu" and flops is not None and flops > MAX_CPU_FLOAT64_FLOPS:
        note = f"rel_l2 skipped: a float64 reference of {flops:.3g} FLOPs is too slow on the CPU"
        return ReferenceCase(data=data, expected=expected, expected64=None, note=note)
    data64 = tuple(
        t.to(device=device64, dtype=torch.float64)
        if isinstance(t, torch.Tensor) and t.is_floating_point()
        else t
        for t in data
    )
    expected64 = reference.ref_kernel(data64)
    _synchronize(device64)
    return ReferenceCase(data=data, expected=expected, expected64=expected64)


def output_problem(info: TensorInfo | None, expected: torch.Tensor, aliases_input: bool) -> str | None:
    """Why the returned object cannot be the answer, or None."""
    if info is None:
        return "nothing was returned"
    if not info.exact_tensor:
        return f"returned a {info.type_name}, not a torch.Tensor"
    if info.shape != list(expected.shape):
        return f"returned shape {tuple(info.shape)}, expected {tuple(expected.shape)}"
    if info.dtype != str(expected.dtype):
        return f"returned dtype {info.dtype}, expected {expected.dtype}"
    if info.device != expected.device.type:
        return f"returned a tensor on {info.device}, expected {expected.device.type}"
    if aliases_input:
        return "returned tensor shares memory with an input"
    if not info.written:
        return "returned tensor could not be exported"
    return None


def inputs_problem(task: TaskSpec, case: ReferenceCase, reply: CheckReply) -> str | None:
    """The first input that the child did not make as the parent did or no longer holds as made,
    or None. The reply carries each input's bit sum before the call, its description after it, and
    the count of its elements that differ bit for bit from the child's copy taken before the call
    (harness.sandbox.transfer)."""
    count = len(task.input_indices)
    if not len(reply.inputs) == len(reply.inputs_changed) == len(reply.inputs_bit_sums) == count:
        return "the inputs were not reported after the call"
    for position, index in enumerate(task.input_indices):
        info, changed = reply.inputs[position], reply.inputs_changed[position]
        before = case.data[index]
        name = task.data[index]
        if reply.inputs_bit_sums[position] != case.bit_sum(index):
            return f"input {name!r} in the child is not the parent's (is generate_input deterministic?)"
        if not info.exact_tensor:
            return f"input {name!r} is no longer a plain tensor after the call"
        if info.shape != list(before.shape) or info.dtype != str(before.dtype):
            return f"input {name!r} changed shape or dtype during the call"
        if changed is None:
            return f"input {name!r} could not be compared with its copy from before the call"
        if changed:
            return f"input {name!r} was modified ({changed} elements differ)"
    return None


def _first_positions(mask: torch.Tensor, count: int) -> list[list[int]]:
    """Positions of the first `count` True elements, scanning in chunks (no full nonzero())."""
    flat = mask.reshape(-1)
    found: list[int] = []
    for start in range(0, flat.numel(), SCAN_CHUNK):
        chunk = flat[start : start + SCAN_CHUNK]
        if bool(chunk.any()):
            found.extend((torch.nonzero(chunk).flatten()[: count - len(found)] + start).tolist())
            if len(found) >= count:
                break
    return [_unravel(i, tuple(mask.shape)) for i in found]


def _unravel(flat_index: int, shape: tuple[int, ...]) -> list[int]:
    """The position of element `flat_index` of a C-ordered tensor of `shape` (plain arithmetic:
    torch.unravel_index costs half a second on its first call in a process)."""
    position = []
    for size in reversed(shape):
        flat_index, rest = divmod(flat_index, size) if size else (flat_index, 0)
        position.append(rest)
    return position[::-1]


@torch.no_grad()
def compare_output(received: torch.Tensor, case: ReferenceCase, *, rtol: float, atol: float) -> OutputCheck:
    """The tolerance check and the error measures for one output (received may be on the CPU)."""
    expected = case.expected
    received = received.to(expected.device)
    finite = torch.isfinite(received)
    not_finite = int((~finite).sum())
    diff = (received.to(torch.float64) - expected.to(torch.float64)).abs()
    tolerance = atol + rtol * expected.to(torch.float64).abs()
    mismatched = ~finite | ~(diff <= tolerance)
    mismatches = int(mismatched.sum())
    check = OutputCheck(passed=mismatches == 0, mismatches=mismatches, not_finite=not_finite, note=case.note)
    finite_diff = diff[finite]
    check.max_abs_err = float(finite_diff.max()) if finite_diff.numel() else None
    if case.expected64 is not None:
        reference64 = case.expected64
        norm = float(torch.linalg.vector_norm(reference64))
        if not_finite == 0 and norm > 0:
            error = received.to(device=reference64.device, dtype=torch.float64) - reference64
            check.rel_l2 = float(torch.linalg.vector_norm(error)) / norm
        if norm > 0:
            ref_error = expected.to(device=reference64.device, dtype=torch.float64) - reference64
            check.reference_rel_l2 = float(torch.linalg.vector_norm(ref_error)) / norm
    if mismatches and case.expected64 is not None and not_finite == 0:
        reference64 = case.expected64
        on64 = mismatched.to(reference64.device)
        reference_off = (expected.to(reference64.device, torch.float64) - reference64).abs() > (
            atol + rtol * reference64.abs()
        )
        check.mismatches_where_reference_is_off = int((on64 & reference_off).sum())
        received64 = received.to(device=reference64.device, dtype=torch.float64)
        check.within_tolerance_of_float64 = bool(((received64 - reference64).abs() <= atol + rtol * reference64.abs()).all())
    if mismatches:
        for position in _first_positions(mismatched, MAX_PRINT):
            index = tuple(position)
            check.first_mismatches.append(
                Mismatch(
                    index=position,
                    received=_json_number(received[index]),
                    expected=_json_number(expected[index]),
                )
            )
        check.reason = describe_mismatches(check, received.numel())
    return check


def describe_mismatches(check: OutputCheck, numel: int) -> str:
    """One line, like GPU MODE's "mismatch found!" message."""
    parts = [f"{check.mismatches} of {numel} elements mismatch"]
    if check.not_finite:
        parts.append(f"{check.not_finite} NaN/Inf (unwritten elements stay NaN)")
    if check.mismatches_where_reference_is_off:
        parts.append(
            f"the float64 answer is itself off the reference at {check.mismatches_where_reference_is_off} of them"
        )
    if check.within_tolerance_of_float64:
        parts.append("the output is within tolerance of the float64 answer everywhere")
    shown = ", ".join(
        f"at {tuple(m.index)}: {_number(m.received)} vs {_number(m.expected)}"
        for m in check.first_mismatches[:3]
    )
    if shown:
        parts.append(f"first {shown}")
    return "; ".join(parts)


def _json_number(value: torch.Tensor) -> float | str:
    number = float(value)
    return number if math.isfinite(number) else str(number)


def _number(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:.6g}"
