"""The harness's own cost of a timed call, per shape, measured where no candidate can touch it.

The parent brackets every timed call on its own clock (harness.timing, step 5): from starting to
hand over the call's inputs to hearing that its output is in the shared buffer or its file. Part
of that bracket is the harness's own work (the parent writing the inputs into the child's inputs
memory, the child rebuilding them on its device, the NaN fill, the L2 flush, the export, the
messages). A `Calibrator` measures that part per shape and mode in a sandboxed child of its own
whose candidate is the harness's: a no-op that returns its output buffer untouched. It runs only
harness code, so a candidate cannot make it slower to hide work in the difference; it is timed
like any candidate (every other child stopped), on inputs of the shape made as the candidate's
are (the task's generate_input, in the parent: warm-up on one seed, then a fresh seed per timed
call), and the shortest bracket of its timed calls is the shape's harness cost.

The export and the NaN fill of the returned tensor grow with its bytes. A candidate whose timed
outputs are not the buffer's dtype and shape (GPU MODE's prefix sum reference answers in float64
where the buffer is float32: twice the bytes, which flagged it on the H200) is calibrated by a
no-op that returns a tensor of its outputs' dtype and shape (`returning_candidate`, a child per
such kind), the smallest kind among its timed outputs, so that a candidate cannot buy itself
slack with one large output.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from collections.abc import Iterable

from typing_extensions import Self

from harness.errors import HarnessError
from harness.sandbox.limits import SandboxLimits
from harness.sandbox.protocol import CallDone, Ready
from harness.sandbox.supervisor import ChildFailure, ChildProcess
from harness.tasks import Shape, TaskSpec, load_reference
from harness.tasks.spec import generate_inputs
from harness.timing import StoppingRule
from harness.wire import TensorInfo

CALIBRATION_RULE = StoppingRule(min_runs=5, max_runs=5)
CALIBRATION_WARMUP_CALLS = 2  # the first export allocates its pinned buffer


def _returned_index(task: TaskSpec) -> int:
    """The item of the data the no-op returns: the output buffer, or for a task without one its
    first input."""
    return task.output_index if task.output_index is not None else task.input_indices[0]


def noop_candidate(task: TaskSpec) -> bytes:
    """The harness's no-op candidate for `task`: it returns the output buffer (or, for a task
    without one, its first input) as it finds it."""
    return f"def {task.entry_point}(data):\n    return data[{_returned_index(task)}]\n".encode()


def returning_candidate(task: TaskSpec, returns: Returned) -> bytes:
    """A no-op for `task` that returns a tensor of `returns` (dtype, shape), made at its first
    call on the device of the data, and the same tensor at every later call. Only a dtype of
    harness.sandbox.transfer and whole numbers go into the code."""
    from harness.sandbox.transfer import DTYPES

    dtype, shape = returns
    if dtype not in DTYPES or not all(type(size) is int and size >= 0 for size in shape):
        raise HarnessError(f"cannot calibrate an output of dtype {dtype!r} and shape {shape!r}")
    index = _returned_index(task)
    return (
        "import torch\n"
        "_made = []\n"
        f"def {task.entry_point}(data):\n"
        "    if not _made:\n"
        f"        _made.append(torch.empty({tuple(shape)!r}, dtype={dtype}, device=data[{index}].device))\n"
        "    return _made[0]\n"
    ).encode()


Returned = tuple[str, tuple[int, ...]]  # a timed output's dtype (as str(torch.dtype)) and shape


def calibrated_kind(task: TaskSpec, data: tuple, outputs: Iterable[TensorInfo]) -> Returned | None:
    """The kind of output the no-op returns when calibrating a shape whose timed outputs were
    `outputs` (what the child said of each): the smallest of their kinds, or None (what
    `noop_candidate` returns, the output buffer of `data`) when that is the buffer's kind.
    Only outputs the child wrote, of a dtype the parent reads, count; their sizes are worked out
    from dtype and shape, not taken from the child's word."""
    import torch

    from harness.sandbox.transfer import DTYPES

    kinds = {
        (info.dtype, tuple(info.shape))
        for info in outputs
        if info is not None and info.written and info.dtype in DTYPES and info.shape is not None
    }
    if not kinds:
        return None
    smallest = min(kinds, key=lambda kind: (DTYPES[kind[0]].itemsize * math.prod(kind[1]), kind))
    index = _returned_index(task)
    returned = data[index] if index < len(data) else None
    if isinstance(returned, torch.Tensor) and smallest == (str(returned.dtype), tuple(returned.shape)):
        return None
    return smallest


class Calibrator:
    """One child running `noop_candidate`, started on first use (or with `spawn`, so that it
    starts beside the candidates' children), and one per other kind of output asked for
    (`returning_candidate`); `harness_ms` is kept per shape and kind of output."""

    def __init__(self, task: TaskSpec, *, device: str, limits: SandboxLimits) -> None:
        self.task, self.device, self.limits = task, device, limits
        self.child = self._child(noop_candidate(task))
        self.children: dict[Returned, ChildProcess] = {}  # the others, by kind of output
        self.spawned = False
        self.ready: dict[int, Ready] = {}  # by id() of the child
        self.harness_ms_by_shape: dict[tuple[str, Returned | None], float] = {}

    def _child(self, code: bytes) -> ChildProcess:
        return ChildProcess(
            code,
            self.task,
            device=self.device,
            limits=self.limits,
            code_sha256=hashlib.sha256(code).hexdigest(),
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def spawn(self) -> None:
        if not self.spawned:
            self.spawned = True
            self.child.spawn()

    def harness_ms(self, shape: Shape, output_bytes: int = 0, returns: Returned | None = None) -> float:
        """The shortest parent's bracket of a no-op timed call of `shape`, with a fresh seed per
        call as the candidate's calls have; the no-op returns the output buffer, or with
        `returns` a tensor of that dtype and shape."""
        key = (json.dumps(shape.parameters, sort_keys=True), returns)
        if key not in self.harness_ms_by_shape:
            self.harness_ms_by_shape[key] = self._measure(shape, output_bytes, returns)
        return self.harness_ms_by_shape[key]

    def _inputs(self, shape: Shape, seed: int) -> tuple:
        """The task's inputs of `shape` for `seed`, made as the candidates' are (no reference)."""
        return generate_inputs(load_reference(self.task), shape.parameters, seed, self.device)

    def _measure(self, shape: Shape, output_bytes: int, returns: Returned | None) -> float:
        if returns is None:
            self.spawn()
            child = self.child
        else:
            if returns not in self.children:
                self.children[returns] = self._child(returning_candidate(self.task, returns))
                self.children[returns].spawn()
            child = self.children[returns]

        def discard(done: CallDone) -> None:
            child.discard_files()

        try:
            if id(child) not in self.ready:
                ready = child.wait_ready()
                if not isinstance(ready, Ready):
                    raise HarnessError(f"the harness's calibration child did not import: {ready.error}")
                self.ready[id(child)] = ready
            timed = child.time(
                warmup_data=self._inputs(shape, secrets.randbits(63)),
                inputs_for=lambda index: self._inputs(shape, secrets.randbits(63)),
                rule=CALIBRATION_RULE,
                warmup_calls=CALIBRATION_WARMUP_CALLS,
                warmup_s=0.0,
                autotune_config=None,
                on_output=discard,
                phase=f"calibration of {shape.parameters}",
                output_bytes=output_bytes,  # the same transfer as the candidate's calls
            )
        except ChildFailure as failure:
            raise HarnessError(f"the harness's calibration child failed: {failure.reason}") from None
        if timed.reply.error is not None or not timed.call_wall_ms:
            raise HarnessError(f"the harness's calibration child failed: {timed.reply.error}")
        return min(timed.call_wall_ms.values())

    def close(self) -> None:
        for child in [self.child, *self.children.values()]:
            child.close()
