"""The harness's own cost of a timed call, per shape, measured where no candidate can touch it.

The parent brackets every timed call on its own clock (harness.timing, step 6): from starting to
hand over the call's inputs to hearing that its output is in the shared buffer or its file. Part
of that bracket is the harness's own work (the parent writing the inputs into the child's inputs
memory, the child rebuilding them on its device, the NaN fill, the L2 flush, the export, the
messages). A `Calibrator` measures that part per shape in a sandboxed child of its own whose
candidate is the harness's: on a GPU the task's own reference, its answer returned in the output
buffer (`noop_candidate`: so that what an honest call leaves behind is in the calibration too;
not yet run on a GPU; with several buffers, as the reference returns it), on the CPU a bare
no-op (`bare_noop_candidate`; issue 28: with the reference there, the calibration's harness
share ran longer than that of a candidate hiding the convolution in the NaN fill, and let it
through on a smoke shape; with the bare no-op an honest CPU candidate's brackets run 0.3-0.6 ms
longer than the calibration's, which its score then carries). It runs only harness code (and the task's reference), so a candidate cannot make it
slower to hide work in the difference, and its own clock of each call is trusted; it is timed like any candidate (every other child stopped), on inputs of the shape
made as the candidate's are (the task's generate_input, in the parent: warm-up on one seed, then
a fresh seed per timed call), and the least of its timed calls' brackets less the call as its
child clocked it is the shape's harness cost.

The export and the NaN fill of the returned tensor grow with its bytes. A candidate whose timed
outputs are not the buffer's dtype and shape (GPU MODE's prefix sum reference answers in float64
where the buffer is float32: twice the bytes, which flagged it on the H200) is calibrated by a
no-op that returns a tensor of its outputs' dtype and shape (`returning_candidate`, a child per
such kind), the smallest kind among its timed outputs, so that a candidate cannot buy itself
slack with one large output.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Iterable

from typing_extensions import Self

from harness.checking import data_layout, says_out_of_memory
from harness.errors import HarnessError
from harness.sandbox.limits import SandboxLimits
from harness.sandbox.protocol import CallDone, Ready
from harness.sandbox.supervisor import ChildFailure, ChildProcess
from harness.tasks import Shape, TaskSpec, load_reference
from harness.tasks.layout import Key
from harness.tasks.spec import generate_inputs
from harness.timing import StoppingRule, parent_l2_flush
from harness.wire import TensorInfo

# its least bracket less its call: thirty calls on the CPU; on a GPU, on a long shape (the task's reference as
# the calibration candidate: 43-75 ms a call on conv2d's largest), as many as 0.25 s holds, five
# at least (issue 28: the calibration was 5.1 s of the seed tournament's 28.7 s of overhead on
# the H200, most of it the reference's own calls on the three largest shapes). Not on the CPU,
# whose bare no-op's calls are short but whose loop a loaded host slows: fewer calls there let a
# load burst inflate the least bracket (a 10 ms hidden kernel then showed 8.8 ms in CI, 349f69e);
# thirty there: beside a second test suite the fill cheat's hidden work (a 3 ms convolution in
# every bracket) read as none in two runs with ten (and ten more at the second pass), which only
# a least calibrated bracket that long explains (2026-12-03, while the CPU still had the go's
# round trip; none in seven runs since, with ten or thirty; a bare no-op's call takes about a
# millisecond, so thirty cost little)
CALIBRATION_RULE = StoppingRule(min_runs=30, max_runs=30)
CUDA_CALIBRATION_RULE = StoppingRule(min_runs=5, max_runs=10, max_rel_err=0.0, budget_s=0.25)
CALIBRATION_WARMUP_CALLS = 2  # the first export allocates its pinned buffer


def _returned_code(outputs: tuple[Key, ...]) -> str:
    """The no-op's returned item as code: the output buffer (at its key in the data), a tuple of
    the output buffers where there are several (helion's fp8_quant returns its two), or for data
    without one its first item; data that is not a tuple (one tensor, a dict) whole."""
    if len(outputs) > 1:
        return "(" + ", ".join(_returned_code((output,)) for output in outputs) + ")"
    if outputs and isinstance(outputs[0], int):  # or the last where a shape's tuple is shorter (a loop's)
        return f"(data[{outputs[0]}] if len(data) > {outputs[0]} else data[-1])"
    if outputs:
        return f"data[{outputs[0]!r}]"
    return "(data[0] if isinstance(data, (tuple, list)) else data)"


def noop_candidate(task: TaskSpec, outputs: tuple[Key, ...]) -> bytes:
    """The harness's calibration candidate for `task`: it runs the task's own reference
    (`ref_kernel`, from the reference.py beside every submission) and returns its answer in the
    output buffer (a copy) when it has the buffer's shape, else as it is (with several buffers,
    which the reference writes into, always as it is). So the calibrated calls do what an honest
    candidate's do around the call (thread pools woken, caches churned, an output of the buffer's
    kind exported and NaN-filled) on harness code only, and the child's own clock of each call is
    trusted: the harness's cost is each bracket less that clock."""
    code = f"from reference import ref_kernel\ndef {task.entry_point}(data):\n    result = ref_kernel(data)\n"
    if len(outputs) == 1:
        code += (
            f"    buffer = {_returned_code(outputs)}\n"
            "    if getattr(result, 'shape', None) == buffer.shape and result.dtype == buffer.dtype:\n"
            "        return buffer.copy_(result)\n"
        )
    return (code + "    return result\n").encode()


def bare_noop_candidate(task: TaskSpec, outputs: tuple[Key, ...]) -> bytes:
    """The fallback when the task's reference cannot serve as the calibration candidate (it fails
    to import or to run in a child): returns the output buffer, or a tuple of the buffers (or,
    for a task without one, its first input) as it finds it."""
    return f"def {task.entry_point}(data):\n    return {_returned_code(outputs)}\n".encode()


def returning_candidate(task: TaskSpec, returns: Returned, outputs: tuple[Key, ...]) -> bytes:
    """A no-op for `task` that returns a tensor of `returns` (dtype, shape), made at its first
    call on the device of the data, and the same tensor at every later call. Only a dtype of
    harness.sandbox.transfer and whole numbers go into the code."""
    from harness.sandbox.transfer import DTYPES

    dtype, shape = returns
    if dtype not in DTYPES or not all(type(size) is int and size >= 0 for size in shape):
        raise HarnessError(f"cannot calibrate an output of dtype {dtype!r} and shape {shape!r}")
    return (
        "import torch\n"
        "_made = []\n"
        f"def {task.entry_point}(data):\n"
        "    if not _made:\n"
        f"        returned = {_returned_code(outputs[:1])}\n"
        "        device = returned.device if isinstance(returned, torch.Tensor) else 'cpu'\n"
        f"        _made.append(torch.empty({tuple(shape)!r}, dtype={dtype}, device=device))\n"
        "    return _made[0]\n"
    ).encode()


Returned = tuple[str, tuple[int, ...]]  # a timed output's dtype (as str(torch.dtype)) and shape


def calibrated_kind(buffers: tuple[Key, ...], data: object, outputs: Iterable[TensorInfo]) -> Returned | None:
    """The kind of output the no-op returns when calibrating a shape whose timed outputs were
    `outputs` (what the child said of each): the smallest of their kinds, or None (what
    `noop_candidate` returns, the output buffer at `buffers` of `data`) when that is the buffer's
    kind (with several buffers the no-op returns them together: outputs of several parts have no
    kind, and so are None too).
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
    if len(buffers) > 1:
        returned = None
    elif buffers:
        returned = data[buffers[0]] if isinstance(data, tuple | list | dict) else None
    else:
        returned = data[0] if isinstance(data, tuple | list) and data else None
    if isinstance(returned, torch.Tensor) and smallest == (str(returned.dtype), tuple(returned.shape)):
        return None
    return smallest


class CalibrationOutOfMemory(HarnessError):
    """The calibration child ran out of memory (its reason or log says so): on a GPU shared with
    the candidates' children, likely a neighbour's doing (a candidate that holds the GPU's
    memory). The evaluator makes it the timed revision's shape result, which is retried without
    those neighbours (harness.sandbox.evaluation.retry_out_of_memory), never an error out of the run."""


def calibration_failed(reason: str, child: ChildProcess) -> HarnessError:
    """The error for a calibration child that failed with `reason`: CalibrationOutOfMemory when
    it or the end of the child's log says that memory ran out."""
    message = f"the harness's calibration child failed: {reason}"
    if says_out_of_memory(f"{reason}\n{child.log_tail(4000)}"):
        return CalibrationOutOfMemory(message)
    return HarnessError(message)


class Calibrator:
    """One child running `noop_candidate`, started on first use (or with `spawn`, so that it
    starts beside the candidates' children), and one per other kind of output asked for
    (`returning_candidate`); `harness_ms` is kept per shape and kind of output."""

    def __init__(self, task: TaskSpec, *, device: str, limits: SandboxLimits) -> None:
        self.task, self.device, self.limits = task, device, limits
        # on the CPU the bare no-op: with the reference as the calibration candidate, its child's
        # harness share ran longer than a candidate's that hides the convolution in the NaN fill,
        # and let that work through on a smoke shape in both modes (issue 28); with the bare
        # no-op an honest CPU candidate pays the 0.3-0.6 ms its own threads add around a call
        self.bare = device == "cpu"  # else the task's reference; bare again if that fails
        self.child: ChildProcess | None = None  # made when first spawned (`_noop_child`)
        self.children: dict[Returned, ChildProcess] = {}  # the others, by kind of output
        self.spawned = False
        self.ready: dict[int, Ready] = {}  # by id() of the child
        # per shape and kind of output: the least bracket less the call, and the least prelude
        self.cost_by_shape: dict[tuple[str, Returned | None], tuple[float, float]] = {}

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

    def _outputs(self) -> tuple[Key, ...]:
        """The output buffers' keys in the task's data on its first smoke shape: learned by running
        the task's code in the parent the first time (harness.checking.data_layout). A task whose
        data is laid out otherwise on another shape (a tuple built in a loop) is calibrated with
        the no-op returning that item or the last (`_returned_code`): the cost measured is the
        harness's all the same."""
        return data_layout(self.task, self.device).outputs

    def _noop_child(self) -> ChildProcess:
        if self.child is None:
            candidate = bare_noop_candidate if self.bare else noop_candidate
            self.child = self._child(candidate(self.task, self._outputs()))
        return self.child

    def spawn(self) -> None:
        if not self.spawned:
            try:
                child = self._noop_child()
            except HarnessError:  # the task's code fails or cannot run here: its evaluations say so
                return
            self.spawned = True
            child.spawn()

    def harness_ms(self, shape: Shape, output_bytes: int = 0, returns: Returned | None = None) -> float:
        """The least parent's bracket, less the call, of a calibration call of `shape` (the
        task's reference, `noop_candidate`; with `returns` a no-op returning a tensor of that
        dtype and shape), with a fresh seed per call as the candidate's calls have. On the CPU
        every timed block asks again, and each time the shape is measured once more and the least
        is kept (`_cost`)."""
        return self._cost(shape, output_bytes, returns, again=self.device == "cpu")[0]

    def prelude_ms(self, shape: Shape, output_bytes: int = 0, returns: Returned | None = None) -> float:
        """The least prelude of a calibration call of `shape` (`TimedShape.prelude_ms`: from
        handing over the inputs to the parent's go, harness code only), measured with
        `harness_ms` (asked for first)."""
        return self._cost(shape, output_bytes, returns, again=False)[1]

    def _cost(
        self, shape: Shape, output_bytes: int, returns: Returned | None, again: bool
    ) -> tuple[float, float]:
        key = (shape.key(), returns)
        if key not in self.cost_by_shape:
            self.cost_by_shape[key] = self._measure(shape, output_bytes, returns)
        elif again:
            # on the CPU every timed block of the shape (each revision's, each pass) measures once
            # more, at its own moment, and the least is kept, so that the calibration's moments
            # are spread over the run as the candidates' calls are. Its 30 calls take about 30 ms
            # on a quiet machine: beside a second test suite a load burst covered all of them
            # (4.6 ms calibrated against 0.2-0.4 ms), and with two such moments (the first pass
            # and one later one, before 2026-12-05) a burst over both read the fill cheat's
            # hidden convolution as none. Not on a GPU, where the calls are timed with every
            # other child stopped on a host of many cores, and where the second measure of every
            # shape was half of the calibration's 4.1 s in the seed tournament's 28.5 s of
            # overhead (H200, 5310a67)
            again_ms = self._measure(shape, output_bytes, returns)
            self.cost_by_shape[key] = tuple(map(min, self.cost_by_shape[key], again_ms))
        return self.cost_by_shape[key]

    def _inputs(self, shape: Shape, seed: int) -> tuple:
        """The task's inputs of `shape` for `seed`, made as the candidates' are (no reference)."""
        return generate_inputs(load_reference(self.task), shape.parameters, seed, self.device)

    def _measure(self, shape: Shape, output_bytes: int, returns: Returned | None) -> tuple[float, float]:
        try:
            return self._measure_once(shape, output_bytes, returns)
        except CalibrationOutOfMemory:
            # the GPU's memory held elsewhere (a candidate's child beside it): not the task's
            # reference's fault; a fresh child next time, the same candidate
            self._forget_child(returns)
            raise
        except HarnessError:
            if returns is not None or self.bare:
                self._forget_child(returns)
                raise
        # the task's reference did not run in the calibration child: a bare no-op instead
        if self.child is not None:
            self.child.close()
        self.bare, self.spawned = True, False
        self.child = self._child(bare_noop_candidate(self.task, self._outputs()))
        return self._measure_once(shape, output_bytes, returns)

    def _forget_child(self, returns: Returned | None) -> None:
        """Close the child that calibrates `returns` (None: the no-op's); the next measure of it
        starts a fresh one."""
        child = self.children.pop(returns, None) if returns is not None else self.child
        if child is not None:
            self.ready.pop(id(child), None)
            child.close()
        if returns is None:
            self.child, self.spawned = None, False

    def _measure_once(self, shape: Shape, output_bytes: int, returns: Returned | None) -> tuple[float, float]:
        if returns is None:
            child = self._noop_child()
            self.spawn()
        else:
            if returns not in self.children:
                self.children[returns] = self._child(returning_candidate(self.task, returns, self._outputs()))
                self.children[returns].spawn()
            child = self.children[returns]

        def discard(done: CallDone) -> None:
            child.discard_files()

        try:
            if id(child) not in self.ready:
                ready = child.wait_ready()
                if not isinstance(ready, Ready):
                    raise calibration_failed(f"it did not import: {ready.error}", child)
                self.ready[id(child)] = ready
            timed = child.time(
                warmup_data=self._inputs(shape, secrets.randbits(63)),
                inputs_for=lambda index: self._inputs(shape, secrets.randbits(63)),
                rule=CUDA_CALIBRATION_RULE if self.device == "cuda" else CALIBRATION_RULE,
                warmup_calls=CALIBRATION_WARMUP_CALLS,
                warmup_s=0.0,
                autotune_config=None,
                on_output=discard,
                phase=f"calibration of {shape.parameters}",
                output_bytes=output_bytes,  # the same transfer as the candidate's calls
                before_call=parent_l2_flush(self.device),  # and the same go
            )
        except ChildFailure as failure:
            raise calibration_failed(failure.reason, child) from None
        except BaseException:  # the parent's own work failed (its L2 flush out of memory, say)
            self._forget_child(returns)  # the child is mid-protocol: no use any more
            raise
        if timed.reply.error is not None or not timed.call_wall_ms:
            raise calibration_failed(str(timed.reply.error), child)
        # the bracket less the call as the calibration child clocked it (harness code only), and
        # the prelude (harness code only)
        return (
            min(
                max(bracket - reported, 0.0)
                for bracket, reported in zip(timed.call_wall_ms.values(), timed.reply.times_ms)
            ),
            min(timed.prelude_ms.values(), default=0.0),
        )

    def close(self) -> None:
        for child in [*([self.child] if self.child is not None else []), *self.children.values()]:
            child.close()
